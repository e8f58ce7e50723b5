"""One store contract, proven on every backend.

Every test runs on InMemory, Milvus Lite (tmp file), Qdrant local (tmp path) and Valkey (real
server with the search module), each bare and behind the hot cache; on InMemory and Milvus
Lite (bare and cached) behind ``HybridStore`` (``retrieval.hybrid=true``), where every
retrieve of the suite is a hybrid one (``Q`` builds the options) — as the service issues
them; and on a Milvus server (``milvus_server``, bare: the standalone server of the
``milvus`` package with authorization on, the password read from the environment; marked
``milvus_server``, skipped when the package is absent); and bare on Milvus Lite in its own
process (``milvus_lp``: ``milvus.lite_process``). Stores are built by ``make_store``
from settings, so the factory is exercised too.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import (
    CacheSettings,
    CurationSettings,
    MemoryStoreSettings,
    MilvusSettings,
    QdrantSettings,
    RetrievalSettings,
    ValkeySettings,
)
from memory_core.errors import (
    ConfigError,
    DuplicateMemory,
    InvalidInput,
    MemoryNotFound,
    StoreClosed,
)
from memory_core.sanitize import MAX_CONTENT_BYTES
from memory_core.stores import make_store
from memory_core.stores.base import StoreDecorator
from memory_core.testing.fake_embed import DIM, CountingEmbed, fake_vector
from memory_core.types import (
    EVERYONE,
    ListQuery,
    Memory,
    MemoryChanges,
    MemoryScope,
    MemoryState,
    MemoryType,
    RetrieveOptions,
)
from tests.conftest import MILVUS_PASSWORD_ENV
from tests.ids import tid, tname, tnames

BACKENDS = ["inmemory", "milvus", "qdrant", "valkey"]
PERSISTENT = {"milvus", "qdrant", "valkey", "milvus_server", "milvus_lp"}
HYBRID_RIGS = [("inmemory", False), ("inmemory", True), ("milvus", False), ("milvus", True)]
# the Milvus server bare only: the cache and the hybrid index are backend-independent layers
# (proven on the other backends), and every call to this server costs ~0.1-0.3 s (Strong
# consistency waits for its time tick): the 35 tests take ~6 min on the 2-core machine
RIGS = [(b, c, False) for b in BACKENDS for c in (False, True)] + [(b, c, True) for b, c in HYBRID_RIGS]
RIGS += [pytest.param(("milvus_server", False, False), marks=pytest.mark.milvus_server)]
# Milvus Lite in its own process (milvus.lite_process), bare: the same engine as "milvus"
# behind a child process and loopback gRPC (memory_core/stores/lite_process.py)
RIGS += [("milvus_lp", False, False)]
_counter = itertools.count()
_hybrid_retrieve = False  # set per test by the ``rig`` fixture


def Q(**kw) -> RetrieveOptions:
    """``RetrieveOptions`` of the suite: ``hybrid=True`` on hybrid rigs unless given."""
    return RetrieveOptions(**{"hybrid": _hybrid_retrieve, **kw})


def rig_id(p) -> str:
    kind, cached, hybrid = p
    return kind + ("+cache" if cached else "") + ("+hybrid" if hybrid else "")


@dataclass
class Rig:
    """Builds stores of one backend configuration and closes them at teardown."""

    kind: str
    cached: bool
    hybrid: bool
    tmp: Path
    server: Any
    name: str
    milvus_uri: str | None = None  # the Milvus server of the milvus_server rigs
    embed: CountingEmbed = field(default_factory=CountingEmbed)
    opened: list = field(default_factory=list)

    @property
    def persistent(self) -> bool:
        return self.kind in PERSISTENT

    def settings(self, cache_url: str | None = None) -> MemoryStoreSettings:
        cache = CacheSettings(enabled=False)
        if self.cached:
            cache = CacheSettings(
                enabled=True, url=cache_url or self.server.url_db(1), ttl_s=60, prefix=f"c_{self.name}:"
            )
        milvus = MilvusSettings(
            uri=str(self.tmp / "milvus.db"), collection=self.name, lite_process=self.kind == "milvus_lp"
        )
        if self.milvus_uri:
            milvus = MilvusSettings(
                uri=self.milvus_uri, collection=self.name, user="root", password_env=MILVUS_PASSWORD_ENV
            )
        return MemoryStoreSettings(
            backend="milvus" if self.kind in ("milvus_server", "milvus_lp") else self.kind,
            milvus=milvus,
            qdrant=QdrantSettings(path=str(self.tmp / "qdrant"), collection=self.name),
            valkey=ValkeySettings(
                url=self.server.url_db(0) if self.server else "valkey://127.0.0.1:1/0",
                prefix=f"m_{self.name}:",
                index=self.name,
            ),
            cache=cache,
            # the stores and the cache, and HybridStore on the rigs that ask for it
            retrieval=RetrievalSettings(hybrid=self.hybrid),
            # the contract of the stores beneath curation (tests/memory_core/stores/test_curating.py
            # covers what curation adds)
            curation=CurationSettings(enabled=False),
        )

    def open(self, *, dimension: int = DIM, cache_url: str | None = None, embed=None):
        store = make_store(
            self.settings(cache_url), embed=embed or self.embed, dimension=dimension, identity="fake-bow-32"
        )
        self.opened.append(store)
        return store


@pytest.fixture(params=RIGS, ids=rig_id)
async def rig(request, tmp_path):
    global _hybrid_retrieve
    kind, cached, hybrid = request.param
    server = request.getfixturevalue("valkey_server") if (kind == "valkey" or cached) else None
    milvus = request.getfixturevalue("milvus_server") if kind == "milvus_server" else None
    r = Rig(
        kind=kind,
        cached=cached,
        hybrid=hybrid,
        tmp=tmp_path,
        server=server,
        name=f"t{next(_counter)}_{uuid.uuid4().hex[:6]}",
        milvus_uri=milvus.uri if milvus else None,
    )
    _hybrid_retrieve = hybrid
    try:
        yield r
    finally:
        _hybrid_retrieve = False
        for s in r.opened:
            await s.close()


@pytest.fixture
async def store(rig):
    return rig.open()


def raw(store):
    """The backend under any decorators."""
    while isinstance(store, StoreDecorator):
        store = store.inner
    return store


def mem(user: str, content: str, **kw) -> Memory:
    """A memory of ``user``; ``id`` (when given) is a test name, stored as ``tid(id)``."""
    if "id" in kw:
        kw["id"] = tid(kw["id"])
    return Memory(user_id=user, content=content, **kw)


def unit(i: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


# ---------------------------------------------------------------------- store / get


async def test_store_get_roundtrip(store, rig):
    m = await store.store(
        mem(
            "alice",
            "my locker code is 4817",
            project_id="p1",
            type=MemoryType.PROCEDURAL,
            metadata={"k": [1, "x"], "n": None},
            importance=0.7,
            source="conversation",
            conversation_id="c1",
            created_by_user_id="op",
        )
    )
    assert m.created_at is not None and m.created_at.tzinfo is not None
    assert m.embedding is not None and len(m.embedding) == DIM
    assert rig.embed.calls == 1
    got = await store.get(m.id, "alice")
    assert got.content == m.content and got.user_id == "alice" and got.project_id == "p1"
    assert got.type == MemoryType.PROCEDURAL and got.metadata == {"k": [1, "x"], "n": None}
    assert got.importance == pytest.approx(0.7) and got.source == "conversation"
    assert got.conversation_id == "c1" and got.created_by_user_id == "op"
    assert got.created_at == m.created_at and got.updated_at == m.updated_at
    assert got.embedding == pytest.approx(m.embedding, abs=1e-6)
    assert got.embedding_identity == "fake-bow-32"
    many = await store.get_many([m.id, "nope", tid("nope"), m.id], "alice")  # malformed / absent
    assert [x.id for x in many] == [m.id]


async def test_given_created_at_and_embedding_are_kept(store, rig):
    when = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    m = await store.store(mem("alice", "hello", created_at=when, embedding=unit(3)))
    assert rig.embed.calls == 0
    got = await store.get(m.id, "alice")
    assert got.created_at == when
    assert got.embedding == pytest.approx(unit(3), abs=1e-6)


async def test_created_before_1970_roundtrips(store):
    when = datetime(1969, 7, 20, 20, 17, 40, 123000, tzinfo=UTC)
    m = await store.store(mem("alice", "one small step", created_at=when, embedding=unit(2)))
    assert m.created_at == when
    got = await store.get(m.id, "alice")
    assert got.created_at == when and got.updated_at == when
    assert [x.created_at for x in (await store.list(ListQuery(user_id="alice"))).memories] == [when]


async def test_required_fields(store):
    with pytest.raises(InvalidInput):
        await store.store(mem("", "content"))
    with pytest.raises(InvalidInput):
        await store.store(mem("   ", "content"))
    with pytest.raises(InvalidInput):
        await store.store(mem("alice", "   "))
    with pytest.raises(InvalidInput):  # invisible-only content is refused like whitespace-only
        await store.store(mem("alice", "\u200b\u200c\u200d"))
    with pytest.raises(InvalidInput):
        await store.store(Memory.model_construct(**{**mem("alice", "x").model_dump(), "id": ""}))
    # the one id format (32 lowercase hex): any other id is refused, alone or in a batch
    for bad_id in ("dup-1", tid("dup-1").upper(), tid("dup-1") + "0", tid("dup-1")[:-1], " " + tid("dup-1")[1:]):
        with pytest.raises(InvalidInput):
            await store.store(Memory(id=bad_id, user_id="alice", content="x", embedding=unit(0)))
        with pytest.raises(InvalidInput):
            await store.store_many([mem("alice", "fine", id="ok-1"), Memory(id=bad_id, user_id="alice", content="x")])
    with pytest.raises(InvalidInput):
        await store.store(mem("alice", "x", embedding=[1.0, 0.0]))  # wrong dimension
    assert (await store.list(ListQuery(user_id="alice"))).total == 0


async def test_duplicate_id_keeps_original(store):
    m = await store.store(mem("alice", "original", id="dup-1"))
    with pytest.raises(DuplicateMemory):
        await store.store(mem("alice", "replacement", id="dup-1"))
    with pytest.raises(DuplicateMemory):
        await store.store(mem("bob", "other user same id", id="dup-1"))
    assert (await store.get(tid("dup-1"), "alice")).content == "original"
    with pytest.raises(MemoryNotFound):
        await store.get(tid("dup-1"), "bob")
    assert m.content == "original"


async def test_concurrent_same_id_two_users_one_wins(store):
    results = await asyncio.gather(
        *[store.store(mem(u, f"race {u}", id="race-id")) for u in ("alice", "bob", "carol")],
        return_exceptions=True,
    )
    ok = [r for r in results if isinstance(r, Memory)]
    assert len(ok) == 1
    assert all(isinstance(r, DuplicateMemory) for r in results if not isinstance(r, Memory))
    assert (await store.get(tid("race-id"), ok[0].user_id)).content == ok[0].content


# ---------------------------------------------------------------------- retrieve


async def test_retrieve_requires_user_and_positive_limit(store):
    await store.store(mem("alice", "coffee preferences: flat white"))
    for bad in ("", "  "):
        with pytest.raises(InvalidInput):
            await store.retrieve(Q(user_id=bad, query="coffee"))
    with pytest.raises(InvalidInput):
        await store.retrieve(Q(user_id="alice", query="coffee", limit=0))
    with pytest.raises(InvalidInput):
        await store.retrieve(Q(user_id="alice", query="coffee", limit=-1))


async def test_retrieve_cosine_scale_sorted_threshold_inclusive(store):
    # query = e0; memories at exactly known cosines
    s = math.sqrt(0.5)
    vecs = {
        "same": unit(0),
        "close": [0.8, 0.6] + [0.0] * (DIM - 2),
        "diag": [s, s] + [0.0] * (DIM - 2),
        "orth": unit(1),
        "opp": [-1.0] + [0.0] * (DIM - 1),
    }
    expected = {"same": 1.0, "close": 0.8, "diag": s, "orth": 0.0, "opp": -1.0}
    for k, v in vecs.items():
        await store.store(mem("alice", f"memory {k}", id=f"cos-{k}", embedding=v))
    opts = Q(user_id="alice", embedding=unit(0), limit=10, threshold=-1.0)
    res = await store.retrieve(opts)
    got = {tname(r.memory.id).removeprefix("cos-"): r for r in res}
    assert set(got) == set(expected)
    # hybrid, without query text (no lexical side): score = (1 - lexical_weight) · cosine
    scale = (1 - opts.lexical_weight) if opts.hybrid else 1.0
    for k, want in expected.items():
        assert got[k].similarity == pytest.approx(want, abs=1e-4), k
        assert got[k].score == pytest.approx(scale * want, abs=1e-4), k
    scores = [r.score for r in res]
    assert scores == sorted(scores, reverse=True)
    # threshold is inclusive: use the exact similarity the backend reported
    edge = got["diag"].similarity
    res2 = await store.retrieve(Q(user_id="alice", embedding=unit(0), limit=10, threshold=edge))
    assert set(tnames(r.memory.id for r in res2)) == {"cos-same", "cos-close", "cos-diag"}
    res3 = await store.retrieve(Q(user_id="alice", embedding=unit(0), limit=2, threshold=-1.0))
    assert tnames(r.memory.id for r in res3) == ["cos-same", "cos-close"]


async def test_retrieve_filters_project_and_types(store):
    await store.store(mem("alice", "deploy steps for atlas", project_id="atlas", type=MemoryType.PROCEDURAL))
    await store.store(mem("alice", "deploy notes for atlas", project_id="atlas", type=MemoryType.EPISODIC))
    await store.store(mem("alice", "deploy steps for zephyr", project_id="zephyr", type=MemoryType.PROCEDURAL))
    await store.store(mem("alice", "deploy steps no project", type=MemoryType.PROCEDURAL))
    q = dict(user_id="alice", query="deploy steps", limit=10, threshold=-1.0)
    allr = await store.retrieve(Q(**q))
    assert len(allr) == 4
    atlas = await store.retrieve(Q(**q, project_id="atlas"))
    assert {r.memory.content for r in atlas} == {"deploy steps for atlas", "deploy notes for atlas"}
    proc = await store.retrieve(Q(**q, types=(MemoryType.PROCEDURAL,)))
    assert len(proc) == 3 and all(r.memory.type == MemoryType.PROCEDURAL for r in proc)
    both = await store.retrieve(Q(**q, project_id="atlas", types=(MemoryType.EPISODIC,)))
    assert [r.memory.content for r in both] == ["deploy notes for atlas"]
    none = await store.retrieve(Q(**q, project_id="nope"))
    assert none == []


async def test_retrieve_updates_access_tracking(store):
    m = await store.store(mem("alice", "favourite colour is teal"))
    r1 = await store.retrieve(Q(user_id="alice", query="favourite colour", threshold=-1))
    assert r1[0].memory.access_count == 1 and r1[0].memory.last_accessed is not None
    r2 = await store.retrieve(Q(user_id="alice", query="colour teal", threshold=-1))
    assert r2[0].memory.access_count == 2
    got = await store.get(m.id, "alice")
    assert got.access_count == 2 and got.last_accessed == r2[0].memory.last_accessed
    assert got.content == m.content and got.created_at == m.created_at


async def test_access_counts_reach_the_backend(store):
    """Accesses are written behind (one write per user per ``access_flush_s``): the backend
    itself has them after the flush interval, reads overlay them before; a memory deleted
    while its access was pending is not re-created."""
    keep = await store.store(mem("alice", "favourite tea is genmaicha"))
    gone = await store.store(mem("alice", "favourite tea was sencha"))
    hits = await store.retrieve(Q(user_id="alice", query="favourite tea", threshold=-1, limit=5))
    assert {h.memory.id for h in hits} == {keep.id, gone.id}
    await store.forget(gone.id, "alice")
    backend = raw(store)
    backend._flush_access_now.set()  # don't wait out access_flush_s
    deadline = asyncio.get_running_loop().time() + 10
    while backend._access_pending and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    stored = await backend._get_many([keep.id, gone.id])
    assert [(m.id, m.access_count) for m in stored] == [(keep.id, 1)]
    assert stored[0].last_accessed is not None


async def test_touch_never_recreates_deleted(store):
    m = await store.store(mem("alice", "soon gone"))
    await store.forget(m.id, "alice")
    await raw(store)._touch({m.id: 1}, datetime.now(UTC))
    assert await store.get_many([m.id], "alice") == []
    assert (await store.list(ListQuery(user_id="alice"))).total == 0
    assert await store.retrieve(Q(user_id="alice", query="soon gone", threshold=-1)) == []


async def test_retrieve_racing_delete_never_recreates(store):
    ms = [await store.store(mem("alice", f"racing memory {i}")) for i in range(10)]
    tasks = [store.retrieve(Q(user_id="alice", query=f"racing memory {i}", limit=10, threshold=-1)) for i in range(5)]
    tasks += [store.forget(m.id, "alice") for m in ms]
    await asyncio.gather(*tasks)
    assert (await store.list(ListQuery(user_id="alice"))).total == 0
    assert await store.get_many([m.id for m in ms], "alice") == []


# ---------------------------------------------------------------------- update


async def test_update_reembeds_and_keeps_created_at(store, rig):
    m = await store.store(mem("alice", "I live in Lisbon", project_id="p"))
    await asyncio.sleep(0.005)
    u = await store.update(m.id, "alice", MemoryChanges(content="I moved to Osaka", importance=0.9))
    assert u.created_at == m.created_at and u.updated_at > m.updated_at
    assert u.embedding == pytest.approx(fake_vector("I moved to Osaka"), abs=1e-6)
    got = await store.get(m.id, "alice")
    assert got.content == "I moved to Osaka" and got.importance == pytest.approx(0.9)
    assert got.created_at == m.created_at and got.updated_at == u.updated_at and got.project_id == "p"
    res = await store.retrieve(Q(user_id="alice", query="I moved to Osaka", limit=1, threshold=0.99))
    assert [r.memory.id for r in res] == [m.id]
    calls = rig.embed.calls
    u2 = await store.update(m.id, "alice", MemoryChanges(type="episodic", project_id=None))
    assert rig.embed.calls == calls  # no re-embedding without a content change
    assert u2.type == MemoryType.EPISODIC and u2.embedding == pytest.approx(u.embedding, abs=1e-6)
    assert (await store.get(m.id, "alice")).project_id is None


async def test_update_errors(store):
    m = await store.store(mem("alice", "x"))
    with pytest.raises(MemoryNotFound):
        await store.update(m.id, "bob", MemoryChanges(content="hijack"))
    with pytest.raises(MemoryNotFound):
        await store.update(tid("missing"), "alice", MemoryChanges(content="y"))
    with pytest.raises(MemoryNotFound):
        await store.update("missing", "alice", MemoryChanges(content="y"))  # malformed: never found
    with pytest.raises(InvalidInput):
        await store.update(m.id, "alice", MemoryChanges(user_id="bob"))
    assert (await store.get(m.id, "alice")).content == "x"


# ---------------------------------------------------------------------- list


async def test_list_newest_first_tiebreak_exact_total(store):
    base = datetime(2025, 5, 1, tzinfo=UTC)
    ids = []
    for i in range(12):
        when = base + timedelta(seconds=i // 3)  # groups of 3 share created_at
        mid = f"L{i:02d}"
        ids.append((when, mid))
        await store.store(
            mem(
                "alice",
                f"item {i}",
                id=mid,
                created_at=when,
                embedding=unit(i % DIM),
                project_id="p" if i % 2 else None,
                type=MemoryType.EPISODIC if i % 3 == 0 else MemoryType.SEMANTIC,
            )
        )
    expected = [mid for _, mid in sorted(ids, reverse=True)]
    page1 = await store.list(ListQuery(user_id="alice", limit=5))
    page2 = await store.list(ListQuery(user_id="alice", limit=5, offset=5))
    page3 = await store.list(ListQuery(user_id="alice", limit=5, offset=10))
    assert page1.total == page2.total == page3.total == 12
    assert tnames(m.id for m in page1.memories + page2.memories + page3.memories) == expected
    beyond = await store.list(ListQuery(user_id="alice", limit=5, offset=50))
    assert beyond.memories == [] and beyond.total == 12
    proj = await store.list(ListQuery(user_id="alice", project_id="p", limit=100))
    assert proj.total == 6 and tnames(m.id for m in proj.memories) == [i for i in expected if int(i[1:]) % 2]
    epi = await store.list(ListQuery(user_id="alice", types=[MemoryType.EPISODIC], limit=100))
    assert epi.total == 4 and all(m.type == MemoryType.EPISODIC for m in epi.memories)
    both = await store.list(ListQuery(user_id="alice", types=[MemoryType.EPISODIC], project_id="p", limit=100))
    assert tnames(m.id for m in both.memories) == [i for i in expected if int(i[1:]) % 6 == 3]
    with pytest.raises(InvalidInput):
        await store.list(ListQuery(user_id="alice", limit=0))
    with pytest.raises(InvalidInput):
        await store.list(ListQuery(user_id="alice", offset=-1))
    with pytest.raises(InvalidInput):
        await store.list(ListQuery(user_id=""))


# ---------------------------------------------------------------------- forget


async def test_forget(store):
    a = await store.store(mem("alice", "delete me"))
    b = await store.store(mem("bob", "keep me"))
    with pytest.raises(MemoryNotFound):
        await store.forget(b.id, "alice")  # someone else's
    await store.forget(a.id, "alice")
    with pytest.raises(MemoryNotFound):
        await store.get(a.id, "alice")
    with pytest.raises(MemoryNotFound):
        await store.forget(a.id, "alice")
    for malformed in ("dup-1", b.id.upper(), b.id + "0"):  # never found, never sent to a backend
        with pytest.raises(MemoryNotFound):
            await store.get(malformed, "bob")
        with pytest.raises(MemoryNotFound):
            await store.forget(malformed, "bob")
    assert (await store.get(b.id, "bob")).content == "keep me"


async def test_forget_by_scope(store):
    for i in range(3):
        await store.store(mem("alice", f"atlas proc {i}", project_id="atlas", type=MemoryType.PROCEDURAL))
        await store.store(mem("alice", f"atlas epi {i}", project_id="atlas", type=MemoryType.EPISODIC))
        await store.store(mem("alice", f"free {i}"))
        await store.store(mem("bob", f"bob atlas {i}", project_id="atlas", type=MemoryType.PROCEDURAL))
    assert await store.forget_by_scope(MemoryScope(user_id="alice", project_id="nope")) == 0
    assert (
        await store.forget_by_scope(MemoryScope(user_id="alice", project_id="atlas", types=[MemoryType.EPISODIC])) == 3
    )
    assert (await store.list(ListQuery(user_id="alice", limit=100))).total == 6
    assert await store.forget_by_scope(MemoryScope(user_id="alice", project_id="atlas")) == 3
    assert await store.forget_by_scope(MemoryScope(user_id="alice", types=[MemoryType.SEMANTIC])) == 3
    assert (await store.list(ListQuery(user_id="alice"))).total == 0
    assert (await store.list(ListQuery(user_id="bob"))).total == 3
    assert await store.forget_by_scope(MemoryScope(user_id="alice")) == 0
    with pytest.raises(InvalidInput):
        await store.forget_by_scope(MemoryScope(user_id=""))
    assert (await store.list(ListQuery(user_id="bob"))).total == 3


async def test_counts_by_state_and_type_for_one_user_and_for_everyone(store):
    """``counts``: a user's memories (or ``EVERYONE``'s) by lifecycle state and by type, in a
    bounded number of backend queries (the admin views)."""
    empty = await store.counts(EVERYONE)
    assert empty.total == 0 and set(empty.by_state) == set(MemoryState) and set(empty.by_type) == set(MemoryType)
    new = await store.store(mem("alice", "my locker code is 4817"))
    old = await store.store(mem("alice", "my locker code was 1234", type=MemoryType.PROCEDURAL, project_id="gym"))
    await store.update(old.id, "alice", MemoryChanges(state=MemoryState.SUPERSEDED, superseded_by=new.id))
    for i in range(3):
        await store.store(mem("bob", f"bob went hiking on day {i}", type=MemoryType.EPISODIC))
    await store.store(mem('user with spaces, and "quotes"', "a tricky owner id's memory"))
    alice = await store.counts("alice")
    assert alice.total == 2
    assert alice.by_state == {
        MemoryState.ACTIVE: 1,
        MemoryState.SUPERSEDED: 1,
        MemoryState.CONSOLIDATED: 0,
        MemoryState.QUARANTINED: 0,
    }
    assert alice.by_type == {MemoryType.SEMANTIC: 1, MemoryType.PROCEDURAL: 1, MemoryType.EPISODIC: 0}
    bob = await store.counts("bob")
    assert (bob.total, bob.by_type[MemoryType.EPISODIC], bob.by_state[MemoryState.ACTIVE]) == (3, 3, 3)
    assert (await store.counts('user with spaces, and "quotes"')).total == 1
    assert (await store.counts("nobody")).total == 0
    everyone = await store.counts(EVERYONE)
    assert everyone.total == 6 == sum(everyone.by_type.values())
    assert everyone.by_state[MemoryState.ACTIVE] == 5 and everyone.by_state[MemoryState.SUPERSEDED] == 1
    assert everyone.by_type == {MemoryType.SEMANTIC: 2, MemoryType.PROCEDURAL: 1, MemoryType.EPISODIC: 3}
    await store.forget(new.id, "alice")
    assert (await store.counts("alice")).total == 1 and (await store.counts(EVERYONE)).total == 5
    for bad in ("", None, " alice"):
        with pytest.raises(InvalidInput):
            await store.counts(bad)


async def test_totals_count_each_owner_as_counts_does(store):
    """``totals``: every state of each distinct owner asked for, 0 for an owner with none, an
    owner id with quotes and commas counted as itself (never read as a list of owners), and
    bad owners or too many refused before any backend query."""
    from memory_core.stores.base import MAX_TOTALS_OWNERS

    new = await store.store(mem("alice", "my locker code is 4817"))
    old = await store.store(mem("alice", "my locker code was 1234", type=MemoryType.PROCEDURAL))
    await store.update(old.id, "alice", MemoryChanges(state=MemoryState.SUPERSEDED, superseded_by=new.id))
    for i in range(3):
        await store.store(mem("bob", f"bob went hiking on day {i}", type=MemoryType.EPISODIC))
    tricky = 'carol", "bob'
    await store.store(mem(tricky, "a tricky owner id's memory"))
    owners = ["alice", "bob", tricky, "nobody", "alice"]
    totals = await store.totals(owners)
    assert totals == {"alice": 2, "bob": 3, tricky: 1, "nobody": 0}
    assert totals == {u: (await store.counts(u)).total for u in dict.fromkeys(owners)}
    assert await store.totals([]) == {}
    await store.forget(new.id, "alice")
    assert (await store.totals(["alice"]))["alice"] == 1
    for bad in ("alice", [""], [None], [" alice"], [f"user-{i}" for i in range(MAX_TOTALS_OWNERS + 1)]):
        with pytest.raises(InvalidInput):
            await store.totals(bad)


# ---------------------------------------------------------------------- isolation


async def test_two_users_never_cross(store):
    a = await store.store(mem("alice", "shared words apple banana", project_id="p"))
    b = await store.store(mem("bob", "shared words apple banana", project_id="p"))
    for user, mine, theirs in (("alice", a, b), ("bob", b, a)):
        res = await store.retrieve(Q(user_id=user, query="apple banana", limit=10, threshold=-1))
        assert [r.memory.id for r in res] == [mine.id]
        lst = await store.list(ListQuery(user_id=user, project_id="p"))
        assert [m.id for m in lst.memories] == [mine.id] and lst.total == 1
        with pytest.raises(MemoryNotFound):
            await store.get(theirs.id, user)
        assert await store.get_many([mine.id, theirs.id], user) == [await store.get(mine.id, user)]
        with pytest.raises(MemoryNotFound):
            await store.forget(theirs.id, user)
    # case variants are other users; whitespace variants are refused (never aliased)
    for other in ("Alice", "ALICE"):
        assert await store.retrieve(Q(user_id=other, query="apple", threshold=-1)) == []
        assert (await store.list(ListQuery(user_id=other))).total == 0
    for padded in (" alice", "alice "):
        with pytest.raises(InvalidInput):
            await store.list(ListQuery(user_id=padded))


async def test_concurrent_interleaved_writes_land_with_owners(store):
    users = ("alice", "bob")
    jobs = [store.store(mem(users[i % 2], f"note {i} from {users[i % 2]}", id=f"cw{i:03d}")) for i in range(100)]
    await asyncio.gather(*jobs)
    for u in users:
        lst = await store.list(ListQuery(user_id=u, limit=1000))
        assert lst.total == 50
        assert all(m.user_id == u and m.content.endswith(f"from {u}") for m in lst.memories)
        assert set(tnames(m.id for m in lst.memories)) == {f"cw{i:03d}" for i in range(100) if users[i % 2] == u}


INJECTION_IDS = [
    'x" || user_id != "y',
    "x' || user_id != 'y",
    "a} | @user_id:{b",
    "victim} | @user_id:{*",
    "*",
    "a,b",
    "victim,attacker",
    "@user_id:{victim}",
    "\\",
    'a\\" or 1==1',
    "' OR 1=1 --",
    "v*",
    "victim|x",
    "(victim)",
    "victim x",
    "用户 🔑",
]


async def test_padded_or_invisible_user_ids_are_refused(store):
    """Ids that would look like another user's are refused, never stored or stripped."""
    for uid in ("victim\t", " victim", "victim\u00a0", "vic\u200btim", "victim\n"):
        with pytest.raises(InvalidInput):
            await store.store(mem(uid, "x"))
        with pytest.raises(InvalidInput):
            await store.list(ListQuery(user_id=uid))


async def test_injection_looking_user_ids_are_literal(store):
    victim = await store.store(mem("victim", "victim secret alpha", project_id="proj"))
    victim2 = await store.store(mem("a", "victim a secret alpha", project_id="proj"))
    own = {}
    for uid in INJECTION_IDS:
        own[uid] = await store.store(mem(uid, f"own alpha of {uid}", project_id=uid))
    for uid in INJECTION_IDS:
        res = await store.retrieve(Q(user_id=uid, query="secret alpha", limit=50, threshold=-1))
        assert [r.memory.id for r in res] == [own[uid].id], uid
        res = await store.retrieve(Q(user_id="victim", query="secret alpha", project_id=uid, limit=50, threshold=-1))
        assert res == [], uid
        lst = await store.list(ListQuery(user_id=uid, limit=100))
        assert [m.id for m in lst.memories] == [own[uid].id] and lst.total == 1, uid
        assert (await store.list(ListQuery(user_id="victim", project_id=uid))).total == 0
        with pytest.raises(MemoryNotFound):
            await store.get(victim.id, uid)
        assert await store.forget_by_scope(MemoryScope(user_id=uid, project_id="proj")) == 0
        assert await store.forget_by_scope(MemoryScope(user_id="victim", project_id=uid)) == 0
    for uid in INJECTION_IDS:
        assert await store.forget_by_scope(MemoryScope(user_id=uid)) == 1, uid
    assert (await store.get(victim.id, "victim")).content == "victim secret alpha"
    assert (await store.get(victim2.id, "a")).content == "victim a secret alpha"
    assert (await store.list(ListQuery(user_id="victim"))).total == 1 and (
        await store.list(ListQuery(user_id="a"))
    ).total == 1


# ---------------------------------------------------------------------- store_many


async def test_store_many_happy_path(store, rig):
    given = unit(5)
    batch = [
        mem("alice", "  batch one: otters hold hands  ", id="b1", project_id="p", type=MemoryType.EPISODIC),
        mem("alice", "batch two: walrus tusks", id="b2", embedding=given),
        mem("alice", "batch three: puffin beaks", id="b3", created_at=datetime(2024, 3, 1, tzinfo=UTC)),
    ]
    out = await store.store_many(batch)
    assert rig.embed.calls == 1  # one embed call for the two memories without a vector
    assert tnames(m.id for m in out) == ["b1", "b2", "b3"]
    assert out[0].content == "batch one: otters hold hands"  # cleaned as by store()
    assert all(m.user_id == "alice" and m.embedding_identity == "fake-bow-32" for m in out)
    assert all(m.created_at is not None and m.updated_at is not None for m in out)
    assert out[2].created_at == datetime(2024, 3, 1, tzinfo=UTC)
    assert out[0].embedding == pytest.approx(fake_vector(out[0].content), abs=1e-6)
    assert out[1].embedding == pytest.approx(given, abs=1e-6)
    assert out[2].embedding == pytest.approx(fake_vector(out[2].content), abs=1e-6)
    for m in out:
        got = await store.get(m.id, "alice")
        assert got.content == m.content and got.created_at == m.created_at and got.project_id == m.project_id
        assert got.embedding == pytest.approx(m.embedding, abs=1e-6)
    lst = await store.list(ListQuery(user_id="alice", limit=100))
    assert lst.total == 3 and set(tnames(m.id for m in lst.memories)) == {"b1", "b2", "b3"}
    assert tnames(m.id for m in (await store.list(ListQuery(user_id="alice", project_id="p"))).memories) == ["b1"]
    res = await store.retrieve(Q(user_id="alice", query="walrus tusks", limit=10, threshold=-1))
    assert set(tnames(r.memory.id for r in res)) == {"b1", "b2", "b3"}
    res = await store.retrieve(Q(user_id="alice", query="batch three: puffin beaks", limit=1, threshold=0.99))
    assert tnames(r.memory.id for r in res) == ["b3"]
    hyb = await store.retrieve(
        Q(user_id="alice", query="batch one: otters hold hands", limit=1, threshold=0.99, hybrid=True)
    )
    assert tnames(r.memory.id for r in hyb) == ["b1"]
    assert await store.store_many([]) == []
    assert (await store.list(ListQuery(user_id="alice", limit=100))).total == 3


async def test_store_many_duplicate_inside_batch(store, rig):
    batch = [mem("alice", "first", id="same"), mem("alice", "second", id="other"), mem("alice", "third", id="same")]
    with pytest.raises(DuplicateMemory, match=tid("same")):
        await store.store_many(batch)
    assert rig.embed.calls == 0  # refused before any embedding work
    assert (await store.list(ListQuery(user_id="alice"))).total == 0
    assert await store.get_many([tid("same"), tid("other")], "alice") == []


async def test_store_many_duplicate_of_existing_writes_nothing(store):
    await store.store(mem("alice", "original alice", id="taken-a"))
    await store.store(mem("bob", "original bob", id="taken-b"))
    q = Q(user_id="alice", query="fresh", limit=10, threshold=-1)
    before = await store.retrieve(q)  # (cached rigs: an entry that must not survive)
    assert tnames(r.memory.id for r in before) == ["taken-a"]
    for taken in ("taken-a", "taken-b"):  # an id of the same user, or of another user
        batch = [
            mem("alice", "fresh one", id="fresh-1"),
            mem("alice", "fresh dup", id=taken),
            mem("alice", "fresh two", id="fresh-2"),
        ]
        with pytest.raises(DuplicateMemory, match=tid(taken)):
            await store.store_many(batch)
        assert await store.get_many([tid("fresh-1"), tid("fresh-2")], "alice") == []
        assert (await store.list(ListQuery(user_id="alice", limit=100))).total == 1
    assert (await store.get(tid("taken-a"), "alice")).content == "original alice"
    assert (await store.get(tid("taken-b"), "bob")).content == "original bob"
    with pytest.raises(MemoryNotFound):
        await store.get(tid("taken-b"), "alice")
    assert tnames(r.memory.id for r in await store.retrieve(q)) == ["taken-a"]
    assert tnames(r.memory.id for r in await store.retrieve(q.model_copy(update={"hybrid": True}))) == ["taken-a"]


async def test_store_many_rejects_mixed_and_invalid(store, rig):
    with pytest.raises(InvalidInput, match="same user"):
        await store.store_many([mem("alice", "mine", id="mx1"), mem("bob", "his", id="mx2")])
    with pytest.raises(InvalidInput):
        await store.store_many([mem("alice", "mine", id="mx1"), mem("", "nobody's", id="mx2")])
    with pytest.raises(InvalidInput):  # one bad memory refuses the whole batch
        await store.store_many([mem("alice", "fine", id="mx1"), mem("alice", "   ", id="mx2")])
    with pytest.raises(InvalidInput):
        await store.store_many([mem("alice", "fine", id="mx1"), mem("alice", "bad vector", embedding=[1.0, 0.0])])
    with pytest.raises(InvalidInput, match="at most 1000"):
        await store.store_many([mem("alice", f"n{i}", embedding=unit(0)) for i in range(1001)])
    assert rig.embed.calls == 0
    assert (await store.list(ListQuery(user_id="alice"))).total == 0 and (
        await store.list(ListQuery(user_id="bob"))
    ).total == 0


async def test_store_many_concurrent_batches_sharing_an_id(store):
    """Two users' batches and a single store race for one id: exactly one write wins and
    each losing batch wrote nothing."""
    batches = [
        [mem(u, f"{u} {i}", id=f"{u}-{i}", embedding=unit(i)) for i in range(5)] + [mem(u, f"{u} shared", id="shared")]
        for u in ("alice", "bob")
    ]
    results = await asyncio.gather(
        *[store.store_many(b) for b in batches],
        store.store(mem("carol", "carol shared", id="shared")),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1, results
    assert all(isinstance(r, DuplicateMemory) for r in results if isinstance(r, BaseException))
    for u, result in zip(("alice", "bob", "carol"), results, strict=True):
        total = (await store.list(ListQuery(user_id=u, limit=100))).total
        assert total == (0 if isinstance(result, BaseException) else (1 if u == "carol" else 6)), u


async def test_store_many_large_batch(store, rig):
    batch = [mem("alice", f"bulk memory number {i}", id=f"bulk-{i:04d}") for i in range(300)]
    out = await store.store_many(batch)
    assert len(out) == 300 and rig.embed.calls == 1
    lst = await store.list(ListQuery(user_id="alice", limit=1000))
    assert lst.total == 300 and {m.id for m in lst.memories} == {m.id for m in batch}
    res = await store.retrieve(Q(user_id="alice", query="bulk memory number 123", limit=300, threshold=0.99))
    assert "bulk-0123" in tnames(r.memory.id for r in res)  # (32-d hashed test vectors collide)


# ---------------------------------------------------------------------- hybrid retrieval follows writes


async def test_hybrid_retrieve_follows_writes(store, rig):
    """Hybrid retrieval (on every rig; lexical ranking asserted where HybridStore is on)
    reflects store, store_many, forget and forget_by_scope, and never crosses users.
    Stored vectors are e0 and queries e1, so every cosine is 0 and only the lexical side
    can rank."""

    def q(user, text, limit=1):
        return Q(user_id=user, query=text, embedding=unit(1), limit=limit, threshold=-1, hybrid=True)

    await store.store(mem("alice", "alpha zebra notes", id="h-a", embedding=unit(0)))
    await store.store(mem("alice", "beta notes", id="h-b", embedding=unit(0)))
    await store.store(mem("bob", "bob zebra walrus notes", id="h-bob", embedding=unit(0)))
    got = await store.retrieve(q("alice", "zebra"))  # builds alice's index
    if rig.hybrid:
        assert tnames(r.memory.id for r in got) == ["h-a"] and got[0].score > got[0].similarity
    await store.store_many(
        [
            mem("alice", "gamma walrus", id="h-c", embedding=unit(0)),
            mem("alice", "delta walrus notes", id="h-d", project_id="p2", embedding=unit(0)),
        ]
    )
    got = await store.retrieve(q("alice", "walrus", limit=2))
    if rig.hybrid:
        assert set(tnames(r.memory.id for r in got)) == {"h-c", "h-d"}
    assert all(r.memory.user_id == "alice" for r in got)
    await store.forget(tid("h-a"), "alice")
    got = await store.retrieve(q("alice", "zebra", limit=10))
    assert set(tnames(r.memory.id for r in got)) == {"h-b", "h-c", "h-d"}
    assert await store.forget_by_scope(MemoryScope(user_id="alice", project_id="p2")) == 1
    got = await store.retrieve(q("alice", "walrus", limit=10))
    assert set(tnames(r.memory.id for r in got)) == {"h-b", "h-c"}
    if rig.hybrid:
        assert tname(got[0].memory.id) == "h-c"
    got = await store.retrieve(q("bob", "zebra walrus", limit=10))
    assert tnames(r.memory.id for r in got) == ["h-bob"]
    got = await store.retrieve(q("Alice", "zebra walrus", limit=10))
    assert got == []


# ---------------------------------------------------------------------- unicode


UNICODE = [
    "我的储物柜密码是4817",
    "東京の天気は晴れ 🌤️ です",
    "emoji 👩‍👩‍👧‍👦 family, flags 🇵🇹🇯🇵, skin 👍🏽",
    "combining: e\u0301 vs é, ﬁ ligature, Ω Å",
    "rtl: שלום עולם مرحبا",
    "quotes \" ' ` and backslash \\ and braces {} | @user_id:{x}",
]


async def test_unicode_roundtrip_byte_exact(store):
    ids = []
    for text in UNICODE:
        ids.append((await store.store(mem("ユーザー🙂", text))).id)
    for mid, text in zip(ids, UNICODE, strict=True):
        got = await store.get(mid, "ユーザー🙂")
        assert got.content.encode("utf-8") == text.encode("utf-8")
        assert got.user_id == "ユーザー🙂"
    lst = await store.list(ListQuery(user_id="ユーザー🙂", limit=100))
    assert sorted(m.content for m in lst.memories) == sorted(UNICODE)
    res = await store.retrieve(Q(user_id="ユーザー🙂", query=UNICODE[1], limit=1, threshold=0.99))
    assert res[0].memory.content == UNICODE[1]


async def test_content_size_limit(store):
    big = "😀" * (MAX_CONTENT_BYTES // 4)  # exactly the limit in UTF-8 bytes
    m = await store.store(mem("alice", big))
    assert (await store.get(m.id, "alice")).content == big
    with pytest.raises(InvalidInput):
        await store.store(mem("alice", big + "a"))
    with pytest.raises(InvalidInput):
        await store.update(m.id, "alice", MemoryChanges(content=big + "é"))
    assert (await store.get(m.id, "alice")).content == big
    assert (await store.list(ListQuery(user_id="alice"))).total == 1


# ---------------------------------------------------------------------- lifecycle


async def test_check_connection(store):
    assert await store.check_connection() is True


async def test_closed_store_refuses_everything(rig):
    store = rig.open()
    m = await store.store(mem("alice", "before close"))
    await store.close()
    await store.close()  # twice is fine
    assert store.closed
    calls = rig.embed.calls
    ops = [
        lambda: store.store(mem("alice", "after close")),
        lambda: store.retrieve(Q(user_id="alice", query="before")),
        lambda: store.get(m.id, "alice"),
        lambda: store.get_many([m.id], "alice"),
        lambda: store.get_many([], "alice"),
        lambda: store.update(m.id, "alice", MemoryChanges(content="changed")),
        lambda: store.list(ListQuery(user_id="alice")),
        lambda: store.forget(m.id, "alice"),
        lambda: store.forget_by_scope(MemoryScope(user_id="alice")),
        lambda: store.check_connection(),
        lambda: store.store_many([mem("alice", "after close, batched")]),
        lambda: store.store_many([]),
        lambda: store.retrieve(Q(user_id="alice", query="before", hybrid=True)),
        lambda: store.retrieve(Q(user_id="", query="before")),  # closed wins over invalid input
        lambda: store.retrieve(Q(user_id="", query="before", hybrid=True)),
    ]
    for op in ops:
        with pytest.raises(StoreClosed):
            await op()
    assert rig.embed.calls == calls  # no embedding work after close


async def test_store_racing_close_never_writes_after_close(rig):
    release = asyncio.Event()
    gate_embed = CountingEmbed()

    async def slow_embed(texts):
        await release.wait()
        return await gate_embed(texts)

    store = rig.open(embed=slow_embed)
    backend = raw(store)
    close_returned = False
    late_writes = []
    original = backend._insert

    async def watched_insert(memory):
        if close_returned:
            late_writes.append(memory.id)
        await original(memory)

    backend._insert = watched_insert
    # some writes already past embedding (vector given), some waiting on the embedder
    fast = [
        asyncio.create_task(store.store(mem("alice", f"fast {i}", id=f"f{i}", embedding=unit(i)))) for i in range(5)
    ]
    slow = [asyncio.create_task(store.store(mem("alice", f"slow {i}", id=f"s{i}"))) for i in range(5)]
    await asyncio.sleep(0)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.01)
    release.set()
    await closing
    close_returned = True
    results = await asyncio.gather(*fast, *slow, return_exceptions=True)
    await asyncio.sleep(0.05)
    assert late_writes == []
    stored = {r.id for r in results if isinstance(r, Memory)}
    failed = [r for r in results if not isinstance(r, Memory)]
    assert all(isinstance(e, StoreClosed) for e in failed), failed
    assert all(isinstance(r, StoreClosed) for r in results[5:])  # embedding finished after close began
    assert gate_embed.calls >= 0
    if rig.persistent:
        reopened = rig.open()
        lst = await reopened.list(ListQuery(user_id="alice", limit=100))
        assert {m.id for m in lst.memories} == stored
    else:
        assert set(backend._rows) == stored


async def test_restart_persistence(rig):
    if not rig.persistent:
        pytest.skip("in-memory store does not persist")
    store = rig.open()
    m = await store.store(mem("alice", "persist me 永続", project_id="p"))
    await store.retrieve(Q(user_id="alice", query="persist me", threshold=-1))
    await store.close()
    again = rig.open()
    got = await again.get(m.id, "alice")
    assert got.content == "persist me 永続" and got.access_count == 1 and got.created_at == m.created_at
    res = await again.retrieve(Q(user_id="alice", query="persist me", threshold=0.5))
    assert [r.memory.id for r in res] == [m.id]
    assert (await again.list(ListQuery(user_id="alice", project_id="p"))).total == 1
    await again.close()
    wrong = rig.open(dimension=DIM * 2)
    with pytest.raises(ConfigError, match="dimension|dimensional"):
        await wrong.open()
    with pytest.raises(ConfigError):
        await wrong.store(mem("alice", "never written", embedding=[1.0] + [0.0] * (DIM * 2 - 1)))


# ---------------------------------------------------------------------- hot cache


async def test_cache_hit_counts_as_an_access(rig):
    if not rig.cached:
        pytest.skip("cache only")
    store = rig.open()
    m = await store.store(mem("alice", "cached fact about otters"))
    q = Q(user_id="alice", query="otters", threshold=-1)
    await store.retrieve(q)
    hits = store.counters["hits"]
    await store.retrieve(q)
    assert store.counters["hits"] == hits + 1
    assert (await store.get(m.id, "alice")).access_count == 2


async def test_delete_after_cached_read(rig):
    if not rig.cached:
        pytest.skip("cache only")
    store = rig.open()
    m = await store.store(mem("alice", "cached fact about llamas"))
    other = await store.store(mem("bob", "bob fact about llamas"))
    q = Q(user_id="alice", query="llamas", threshold=-1)
    first = await store.retrieve(q)
    hits = store.counters["hits"]
    second = await store.retrieve(q)
    assert store.counters["hits"] == hits + 1
    assert [r.memory.id for r in first] == [r.memory.id for r in second] == [m.id]
    qb = Q(user_id="bob", query="llamas", threshold=-1)
    await store.retrieve(qb)
    await store.forget(m.id, "alice")
    assert await store.retrieve(q) == []
    # bob's entries survive alice's invalidation
    hits = store.counters["hits"]
    assert [r.memory.id for r in await store.retrieve(qb)] == [other.id]
    assert store.counters["hits"] == hits + 1
    # update and forget_by_scope invalidate too
    n = await store.store(mem("alice", "llamas are great"))
    assert [r.memory.id for r in await store.retrieve(q)] == [n.id]
    await store.update(n.id, "alice", MemoryChanges(content="alpacas are greater"))
    assert [r.memory.content for r in await store.retrieve(q)] == ["alpacas are greater"]
    await store.forget_by_scope(MemoryScope(user_id="alice"))
    assert await store.retrieve(q) == []


async def test_cache_key_covers_every_option(rig):
    if not rig.cached:
        pytest.skip("cache only")
    store = rig.open()
    await store.store(mem("alice", "yaks in project one", project_id="one"))
    await store.store(mem("alice", "yaks in project two", project_id="two", type=MemoryType.EPISODIC))
    base = dict(user_id="alice", query="yaks", threshold=-1, limit=5)
    assert len(await store.retrieve(RetrieveOptions(**base))) == 2
    assert len(await store.retrieve(RetrieveOptions(**base, project_id="one"))) == 1
    assert len(await store.retrieve(RetrieveOptions(**base, types=(MemoryType.EPISODIC,)))) == 1
    assert len(await store.retrieve(RetrieveOptions(**base | {"limit": 1}))) == 1
    assert len(await store.retrieve(RetrieveOptions(**base | {"threshold": 0.999}))) == 0
    misses = store.counters["misses"]
    await store.retrieve(RetrieveOptions(**base, hybrid=True))
    await store.retrieve(RetrieveOptions(**base, temporal_boost=True))
    await store.retrieve(RetrieveOptions(**base, hybrid=True, lexical_weight=0.9))
    assert store.counters["misses"] == misses + 3


async def test_cache_never_stores_result_of_retrieve_that_raced_a_delete(rig):
    if not rig.cached:
        pytest.skip("cache only")
    store = rig.open()
    m = await store.store(mem("alice", "ephemeral otter fact"))
    q = Q(user_id="alice", query="otter", threshold=-1)
    inner = store.inner
    searched = asyncio.Event()
    proceed = asyncio.Event()
    original = inner.retrieve

    async def slow_retrieve(options):
        result = await original(options)  # reads the memory before the delete
        searched.set()
        await proceed.wait()
        return result

    inner.retrieve = slow_retrieve
    pending = asyncio.create_task(store.retrieve(q))
    await searched.wait()
    inner.retrieve = original
    await store.forget(m.id, "alice")
    proceed.set()
    stale = await pending
    assert [r.memory.id for r in stale] == [m.id]  # that caller saw the pre-delete state
    assert store.counters["stale_skipped"] >= 1
    assert await store.retrieve(q) == []  # but it was never cached


async def test_cache_fail_open(rig):
    if not rig.cached:
        pytest.skip("cache only")
    from memory_core.testing.net import free_port

    events: list[str] = []
    dead = f"valkey://127.0.0.1:{free_port()}/0"
    store = rig.open(cache_url=dead)
    store.on_event = events.append
    m = await store.store(mem("alice", "works without cache"))
    res = await store.retrieve(Q(user_id="alice", query="works without cache", threshold=-1))
    assert [r.memory.id for r in res] == [m.id]
    res = await store.retrieve(Q(user_id="alice", query="works without cache", threshold=-1))
    assert [r.memory.id for r in res] == [m.id]
    assert store.counters["errors"] >= 2 and store.counters["hits"] == 0
    assert "cache_error" in events
    await store.forget(m.id, "alice")
    assert await store.retrieve(Q(user_id="alice", query="works", threshold=-1)) == []
