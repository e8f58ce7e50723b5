"""``LiteEngine``: the store's hot calls on Milvus Lite's engine read and write what the client
path reads and writes (JSON fields parsed, nulls, vectors), and the store uses it only where
the engine runs in this process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("milvus_lite")

from memory_core.config import MilvusSettings
from memory_core.errors import MemoryNotFound, StoreUnavailable
from memory_core.stores.lite_engine import LiteEngine
from memory_core.stores.milvus import _ALL_FIELDS, _SCALAR_FIELDS, _VECTOR_FIELD, MilvusStore, _filter, _ids_filter
from memory_core.types import ListQuery, Memory, MemoryChanges, MemoryState, MemoryType

DIM = 16


async def _embed(texts):
    return [list(np.random.default_rng(len(t)).random(DIM)) for t in texts]


def _store(path: Path, **settings) -> MilvusStore:
    return MilvusStore(
        MilvusSettings(uri=str(path / "m.db"), collection="c", **settings),
        embed=_embed,
        dimension=DIM,
        identity="fake-16",
    )


def _memories() -> list[Memory]:
    return [
        Memory(
            user_id="alice",
            content=f"fact number {i}",
            type=MemoryType.SEMANTIC if i % 2 else MemoryType.EPISODIC,
            metadata={"turn": i, "tags": ["a", "b"], "nested": {"x": None}} if i % 2 else {},
            project_id="p" if i % 3 else None,
            conversation_id=None if i % 2 else f"c{i}",
            importance=0.25 * (i % 4),
        )
        for i in range(6)
    ]


def _same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        if key == _VECTOR_FIELD:
            assert np.allclose(a[key], b[key]), key
        else:
            assert a[key] == b[key] and type(a[key]) is type(b[key]), (key, a[key], b[key])


async def _client_search(store: MilvusStore, query, expr: str, k: int, fields: list[str]) -> list:
    """The client's (gRPC) search as the store made it before the engine: ``ef`` max(64, k)."""
    return await _on_thread(
        store,
        lambda: store._conn.search(
            store.collection,
            data=[query],
            anns_field=_VECTOR_FIELD,
            filter=expr,
            limit=k,
            output_fields=fields,
            search_params={"metric_type": "COSINE", "params": {"ef": max(64, k)}},
        )[0],
    )


async def _on_thread(store: MilvusStore, fn, *args):
    import asyncio

    return await asyncio.get_running_loop().run_in_executor(store._executor, fn, *args)


async def test_engine_reads_the_rows_the_client_reads(tmp_path):
    store = _store(tmp_path)
    await store.open()
    try:
        assert store._engine is not None
        memories = _memories()
        await store.store_many(memories)
        ids = [m.id for m in memories]
        fields = [*_ALL_FIELDS, "user_id"]

        def both(expr: str):
            client = store._conn.query(store.collection, filter=expr, output_fields=fields, limit=100)
            return {r["id"]: dict(r) for r in client}

        by_client = await _on_thread(store, both, _ids_filter(ids, None))
        by_engine = {r["id"]: r for r in await _on_thread(store, store._engine.get, store.collection, ids, fields)}
        assert set(by_client) == set(by_engine) == set(ids)
        for i in ids:
            _same(by_client[i], by_engine[i])
        scoped = _filter("alice", (MemoryType.SEMANTIC,), "p")
        client_rows = await _on_thread(store, both, scoped)
        engine_rows = await _on_thread(store, store._engine.query, store.collection, scoped, fields)
        assert [r["id"] for r in engine_rows] == sorted(client_rows)  # primary-key order
        for row in engine_rows:
            _same(client_rows[row["id"]], row)
    finally:
        await store.close()


async def test_writes_by_the_engine_read_back_through_the_client_and_the_store(tmp_path):
    """Store, update, access counts and forget go through the engine; a store reopened with
    every call through the client reads what they left."""
    store = _store(tmp_path)
    await store.open()
    memories = _memories()
    try:
        assert store._engine is not None
        await store.store_many(memories)
        await store.update(memories[1].id, "alice", MemoryChanges(content="fact one, changed", importance=0.9))
        await store.update(memories[2].id, "alice", MemoryChanges(state=MemoryState.SUPERSEDED))
        await store.record_access([memories[3].id], "alice")
        await store.forget(memories[4].id, "alice")
        with pytest.raises(MemoryNotFound):
            await store.forget(memories[5].id, "bob")  # another owner: not found, nothing deleted
    finally:
        await store.close()
    reopened = _store(tmp_path, lite_engine_calls=False)
    await reopened.open()
    try:
        assert reopened._engine is None
        got = {m.id: m for m in await reopened.get_many([m.id for m in memories], "alice")}
        assert set(got) == {m.id for m in memories} - {memories[4].id}
        assert got[memories[1].id].content == "fact one, changed" and got[memories[1].id].importance == 0.9
        assert got[memories[2].id].state == MemoryState.SUPERSEDED
        assert got[memories[3].id].metadata == memories[3].metadata
        assert got[memories[0].id].metadata == {} and got[memories[0].id].conversation_id == "c0"
        assert await reopened.get_many([memories[0].id], "bob") == []
        page = await reopened.list(ListQuery(user_id="alice", limit=100))
        assert page.total == 5 and {m.id for m in page.memories} == set(got)
        assert (await reopened.counts("alice")).total == 5
    finally:
        await reopened.close()


async def test_only_an_in_process_milvus_lite_has_an_engine(tmp_path, monkeypatch):
    from milvus_lite.server_manager import server_manager_instance

    assert LiteEngine.attach(str(tmp_path / "nobody-opened-this.db")) is None
    # another milvus-lite's registry (2.x files a server object per path, not a tuple)
    monkeypatch.setitem(server_manager_instance._servers, str(tmp_path / "other.db"), object())
    assert LiteEngine.attach(str(tmp_path / "other.db")) is None
    store = _store(tmp_path, lite_engine_calls=False)
    await store.open()
    try:
        assert store._engine is None
        memories = _memories()
        await store.store_many(memories)  # every call through the client
        assert {m.id for m in await store.get_many([m.id for m in memories], "alice")} == {m.id for m in memories}
    finally:
        await store.close()


async def test_a_closed_engine_answers_unavailable_not_an_error(tmp_path):
    """The engine released under an open store (its server stopped): the store's calls raise
    ``StoreUnavailable`` (HTTP 503), as the client's calls to a stopped server did."""
    from memory_core.errors import StoreUnavailable

    class Closed:
        closed = True

    class ClosesDuringTheCall:
        closed = False

        def get_collection(self, name):
            self.closed = True
            raise RuntimeError("MilvusLite is closed")

    with pytest.raises(StoreUnavailable):
        LiteEngine(ClosesDuringTheCall()).get("c", ["x"], ["id"])

    class Failing:
        closed = False

        def __init__(self, error):
            self.error = error

        def get_collection(self, name):
            raise self.error

    with pytest.raises(StoreUnavailable):  # its files failing
        LiteEngine(Failing(PermissionError("wal"))).get("c", ["x"], ["id"])
    with pytest.raises(TimeoutError):  # left to the store's retries
        LiteEngine(Failing(TimeoutError())).get("c", ["x"], ["id"])
    with pytest.raises(ValueError):  # a bug stays a bug
        LiteEngine(Failing(ValueError("bad filter"))).get("c", ["x"], ["id"])

    engine = LiteEngine(Closed())
    for call in (
        lambda: engine.get("c", ["x"], ["id"]),
        lambda: engine.upsert("c", [{"id": "x"}]),
        lambda: engine.delete("c", ["x"]),
        lambda: engine.query("c", 'user_id == "a"', ["id"]),
        lambda: engine.search("c", [0.0] * DIM, 5, 'user_id == "a"', ["id"], _VECTOR_FIELD, 64),
    ):
        with pytest.raises(StoreUnavailable):
            call()


async def test_search_hands_the_index_its_ef_over_flushed_rows(tmp_path, monkeypatch):
    """Over sealed segments (the HNSW index built): the engine gets ``{"ef": ef}`` as the gRPC
    server hands it on, and answers what the client answers for a k above the default ef."""
    store = _store(tmp_path)
    await store.open()
    try:
        memories = [
            Memory(user_id="alice", content=f"note {i} " + "x" * i, type=MemoryType.SEMANTIC) for i in range(150)
        ]
        await store.store_many(memories)
        await store._flush()
        collection = store._engine._collection(store.collection)
        await _on_thread(store, collection._wait_for_bg)  # the sealed segments' index built
        seen: list[dict] = []
        search = collection.search

        def spy(*args, **kwargs):
            seen.append(kwargs.get("search_params"))
            return search(*args, **kwargs)

        monkeypatch.setattr(collection, "search", spy)
        expr = _filter("alice", None, None)
        (query,) = await _embed(["note 7"])
        engine_hits = await _on_thread(store, store._search_sync, expr, query, 100)
        assert seen == [{"ef": 100}]
        monkeypatch.setattr(collection, "search", search)
        client_hits = await _client_search(store, query, expr, 100, ["id"])
        assert [e["id"] for _, e in engine_hits] == [h["id"] for h in client_hits]
    finally:
        await store.close()


async def test_engine_search_finds_what_the_client_search_finds(tmp_path):
    store = _store(tmp_path)
    await store.open()
    try:
        memories = _memories()
        await store.store_many(memories)
        expr = _filter("alice", None, None)
        (query,) = await _embed(["fact number 3"])
        client_hits = await _client_search(store, query, expr, 4, list(_SCALAR_FIELDS))
        engine_hits = await _on_thread(
            store, store._engine.search, store.collection, query, 4, expr, _SCALAR_FIELDS, _VECTOR_FIELD, 64
        )
        assert [h["id"] for h in client_hits] == [e["id"] for _, e in engine_hits]
        for hit, (similarity, entity) in zip(client_hits, engine_hits, strict=True):
            assert similarity == pytest.approx(float(hit["distance"]), abs=1e-6)
            _same(dict(hit["entity"]), entity)
        assert [e["id"] for _, e in await _on_thread(store, store._search_sync, expr, query, 4)] == [
            h["id"] for h in client_hits
        ]
        assert not await _on_thread(
            store, store._engine.search, store.collection, query, 4, _filter("bob", None, None), _SCALAR_FIELDS,
            _VECTOR_FIELD, 64,
        )  # fmt: skip
    finally:
        await store.close()


async def test_tally_counts_what_the_rows_hold_across_segments_updates_and_deletes(tmp_path):
    """``tally`` reads the engine's columns: over flushed segments and the MemTable, rows
    written again (a newer version replaces the older) and deleted (before and after a flush),
    for every row and for one owner, it counts exactly what the engine's rows hold, and the
    store's ``counts`` (one user's and everyone's) equal the client path's. The public-query
    fallback counts the same."""
    from collections import Counter

    from memory_core.types import EVERYONE

    store = _store(tmp_path)
    await store.open()
    try:
        engine = store._engine
        assert engine is not None
        alice = _memories()
        bob = [Memory(user_id="bob", content=f"bob's {i}", type=MemoryType.PROCEDURAL) for i in range(4)]
        await store.store_many(alice)
        await store.store_many(bob)
        await store._flush()  # these rows in a segment, the next in the MemTable
        carol = [Memory(user_id="carol", content=f"carol's {i}") for i in range(3)]
        await store.store_many(carol)
        await store.update(alice[2].id, "alice", MemoryChanges(state=MemoryState.SUPERSEDED))  # flushed row
        await store.update(carol[0].id, "carol", MemoryChanges(state=MemoryState.CONSOLIDATED))  # MemTable row
        await store.update(bob[0].id, "bob", MemoryChanges(state=MemoryState.QUARANTINED))
        await store.forget(alice[4].id, "alice")  # deleted after its flush
        await store.forget(carol[1].id, "carol")  # deleted before any flush
        fields = ["state", "memory_type"]

        def rows_hold(expr: str) -> Counter:
            rows = engine._collection(store.collection).query(expr or None, output_fields=fields)
            return Counter(tuple(r.get(f) for f in fields) for r in rows)

        for flushed in (False, True):
            for expr in ("", _filter("alice", None, None), _filter("carol", None, None), _filter("nobody", None, None)):
                tallied = await _on_thread(store, engine.tally, store.collection, expr, fields)
                assert tallied == rows_hold(expr), (flushed, expr)
            on_engine = {who: await store.counts(who) for who in ("alice", "bob", "carol", EVERYONE)}
            engine_kept, store._engine = store._engine, None
            try:
                by_client = {who: await store.counts(who) for who in ("alice", "bob", "carol", EVERYONE)}
            finally:
                store._engine = engine_kept
            assert on_engine == by_client, flushed
            assert on_engine[EVERYONE].total == 11 and on_engine["carol"].total == 2
            assert on_engine[EVERYONE].by_state[MemoryState.SUPERSEDED] == 1
            assert on_engine["carol"].by_state[MemoryState.CONSOLIDATED] == 1
            assert on_engine[EVERYONE].by_type[MemoryType.PROCEDURAL] == 4
            await store._flush()
        engine._column_tally = False  # a milvus-lite without the internals: the public query
        assert await _on_thread(store, engine.tally, store.collection, "", fields) == rows_hold("")
    finally:
        await store.close()


def test_tally_falls_back_when_the_engine_lacks_its_internals():
    """A collection without the internals ``tally`` reads, or with one of another shape, is
    counted through its ``query``."""
    from memory_core.stores.lite_engine import _has_column_internals

    class Bare:
        def query(self, expr, output_fields):
            return [{"state": "active", "memory_type": "semantic"}] * 2 + [{"state": "archived"}]

    class Db:
        closed = False

        def get_collection(self, name):
            return Bare()

    assert not _has_column_internals(Bare())
    tallied = LiteEngine(Db()).tally("c", "", ["state", "memory_type"])
    assert tallied == {("active", "semantic"): 2, ("archived", None): 1}

    class Reshaped(Bare):
        """Every internal there, one of another shape (as a patch release might change it)."""

        _memtable = type("MemTable", (), {"to_search_snapshot": lambda self, **kw: ()})()

        def _require_loaded(self):
            return None

        def _compile_filter(self, expr):
            return None

        def _indexed_filter_plan(self, compiled):
            return None

        def _read_snapshot(self):
            return [], None  # then to_search_snapshot's answer does not unpack: ValueError

    class ReshapedDb(Db):
        def get_collection(self, name):
            return Reshaped()

    engine = LiteEngine(ReshapedDb())
    assert _has_column_internals(Reshaped())
    assert engine.tally("c", "", ["state", "memory_type"]) == tallied  # counted through query
    assert engine._column_tally is False  # and so from then on


async def test_owner_counts_are_kept_by_the_engines_writes_without_a_recount(tmp_path):
    """``owner_counts`` is built from the columns once, then kept by every write the store
    makes through the engine (new rows, rows written again in another state, an update that
    changes the state, deletes one by one and by scope, a delete of ids that do not exist):
    after each, the kept counts equal a fresh pass over the columns, and none is counted
    again. A flush moves no row. A write that did not go through the engine (the client's)
    is noticed and the counts built again; so is a write that raises. The store's ``counts``
    and ``totals`` read them."""
    import random
    from collections import Counter

    from memory_core.stores.lite_engine import OWNER_FIELDS
    from memory_core.types import EVERYONE, MemoryScope

    store = _store(tmp_path)
    await store.open()
    try:
        engine = store._engine
        assert engine is not None
        built = []
        real = engine._tally
        engine._tally = lambda *a: built.append(a[1]) or real(*a)  # type: ignore[method-assign]

        async def kept() -> dict:
            counts = await _on_thread(store, engine.owner_counts, store.collection)
            return {"by_owner": {u: dict(c) for u, c in counts.by_owner.items()}, "total": dict(counts.total)}

        def recount() -> dict:
            by_owner: dict = {}
            total: Counter = Counter()
            for (user, state, kind), n in real(engine._collection(store.collection), "", OWNER_FIELDS).items():
                by_owner.setdefault(user, {})[(state, kind)] = n
                total[(state, kind)] += n
            return {"by_owner": by_owner, "total": dict(total)}

        rng = random.Random(7)
        users = ["alice", "bob", "carol"]
        held: dict[str, list[str]] = {u: [] for u in users}
        assert await kept() == recount() == {"by_owner": {}, "total": {}} and len(built) == 1
        for step in range(40):
            user = rng.choice(users)
            action = rng.choice(["add", "add", "state", "forget", "flush", "scope", "absent"])
            if action == "add" or not held[user]:
                memories = [
                    Memory(user_id=user, content=f"{user} fact {step}.{i}", type=rng.choice(list(MemoryType)))
                    for i in range(rng.randint(1, 4))
                ]
                held[user] += [m.id for m in await store.store_many(memories)]
            elif action == "state":
                state = rng.choice([MemoryState.SUPERSEDED, MemoryState.QUARANTINED, MemoryState.ACTIVE])
                await store.update(rng.choice(held[user]), user, MemoryChanges(state=state))
            elif action == "forget":
                gone = held[user].pop(rng.randrange(len(held[user])))
                await store.forget(gone, user)
            elif action == "flush":
                await store._flush()
            elif action == "scope":
                kind = rng.choice(list(MemoryType))
                await store.forget_by_scope(MemoryScope(user_id=user, types=(kind,)))
                alive = {
                    r["id"]
                    for r in await _on_thread(store, engine.query, store.collection, _filter(user, None, None), ["id"])
                }
                held[user] = [i for i in held[user] if i in alive]
            else:
                await _on_thread(store, engine.delete, store.collection, ["no-such-id", "nor-this"])
            assert await kept() == recount(), (step, action)
        some_id = next(i for ids in held.values() for i in ids)
        owner = next(u for u, ids in held.items() if some_id in ids)
        await _on_thread(store, engine.delete, store.collection, [some_id, some_id])  # an id named twice
        held[owner].remove(some_id)
        assert await kept() == recount()
        assert len(built) == 1  # never counted again: every write kept them
        expected = {u: sum(n for (s, k), n in c.items()) for u, c in recount()["by_owner"].items()}
        assert await store.totals(users + ["nobody"]) == {**dict.fromkeys(users + ["nobody"], 0), **expected}
        assert (await store.counts(EVERYONE)).total == sum(expected.values())
        assert (await store.counts("alice")).total == expected.get("alice", 0)

        # a write the engine did not make: noticed (the sequence number moved), built again
        extra = Memory(user_id="dave", content="dave's one", type=MemoryType.PROCEDURAL)
        engine_kept, store._engine = store._engine, None
        try:
            await store.store(extra)
        finally:
            store._engine = engine_kept
        assert (await kept())["by_owner"]["dave"] == {("active", "procedural"): 1} and len(built) == 2

        # a row that leaves fields out keeps their stored values (the engine's upsert merges)
        await _on_thread(store, engine.upsert, store.collection, [{"id": extra.id, "state": "superseded"}])
        assert (await kept())["by_owner"]["dave"] == {("superseded", "procedural"): 1} and len(built) == 2
        assert await kept() == recount()

        # a row that moves to another owner, and a batch naming an id twice under two owners
        # (rows written bucket by bucket: which is kept is the engine's), counted as stored
        row = (await _on_thread(store, engine.get, store.collection, [extra.id], _ALL_FIELDS))[0]
        await _on_thread(store, engine.upsert, store.collection, [{**row, "user_id": "erin"}])
        assert await kept() == recount() and "dave" not in (await kept())["by_owner"] and len(built) == 2
        twice = [{**row, "user_id": owner, "content": owner} for owner in ("frank", "erin", "dave", "frank")]
        await _on_thread(store, engine.upsert, store.collection, twice)
        assert await kept() == recount() and len(built) == 3

        # a write from another thread between the engine's read before its write and the
        # write itself: the sequence number moved by more than the engine's own rows, dropped
        collection = engine._collection(store.collection)
        await kept()
        built_before = len(built)
        real_get = collection.get
        other = {**row, "id": "other-writer", "user_id": "gina"}

        def get_then_other_writer(*a, **kw):
            found = real_get(*a, **kw)
            collection.upsert([dict(other)], partition_name="_default")  # not through the engine
            return found

        collection.get = get_then_other_writer
        try:
            await _on_thread(store, engine.upsert, store.collection, [{**row, "state": "active"}])
        finally:
            del collection.get
        assert await kept() == recount() and (await kept())["by_owner"]["gina"] and len(built) == built_before + 1

        # a write that raises drops the counts: the next read counts again
        collection = engine._collection(store.collection)
        real_upsert = collection.upsert

        def failing(*a, **kw):
            real_upsert(*a, **kw)
            raise OSError("disk full after the write")

        collection.upsert = failing
        try:
            with pytest.raises(StoreUnavailable):
                await _on_thread(
                    store, engine.upsert, store.collection,
                    [{**(await _on_thread(store, engine.get, store.collection, [extra.id], _ALL_FIELDS))[0], "state": "quarantined"}],
                )  # fmt: skip
        finally:
            del collection.upsert
        assert await kept() == recount() and len(built) == built_before + 2
    finally:
        await store.close()
