"""Valkey per-user search: a FLAT vector index by default (HNSW on request; an existing
index keeps its algorithm), and on FLAT the KNN pre-filter: when the search module parses
``HYBRID_POLICY ADHOC_BF`` (RediSearch, the test module) searches ask for it; a module that
refuses it gets the module-planned query; the setting turns it off. Results stay the user's
own rows. The per-user cost figure is ``benchmarks/stores.py --flat``'s."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from memory_core.config import MemoryStoreSettings, ValkeySettings
from memory_core.stores.factory import make_store
from memory_core.stores.valkey import ValkeyStore, _flatten
from memory_core.types import Memory, RetrieveOptions

DIM = 16


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class QuerySpy:
    """Wraps a client's ``execute_command``: records FT.SEARCH query strings; with
    ``refuse`` it answers a query naming HYBRID_POLICY the way a module that does not parse
    it does (a ResponseError)."""

    def __init__(self, client, refuse: bool = False):
        self.inner = client.execute_command
        self.queries: list[str] = []
        self.refuse = refuse
        client.execute_command = self

    async def __call__(self, *args, **kw):
        from valkey.exceptions import ResponseError

        if args and args[0] == "FT.SEARCH":
            query = str(args[2])
            self.queries.append(query)
            if self.refuse and "HYBRID_POLICY" in query:
                raise ResponseError("Unknown argument `HYBRID_POLICY` in KNN clause")
        return await self.inner(*args, **kw)


async def open_store(valkey_server, **kw) -> ValkeyStore:
    name = f"pf_{uuid.uuid4().hex[:8]}"
    store = ValkeyStore(url=valkey_server.url_db(0), prefix=f"{name}:", index=name, embed=None, dimension=DIM, **kw)
    await store.open()
    return store


async def fill(store: ValkeyStore, rng: np.random.Generator) -> dict[str, list[Memory]]:
    """Two users, 200 memories each, over the same region of the vector space."""
    out = {}
    for user in ("alice", "bob"):
        vecs = unit(rng, 200)
        out[user] = await store.store_many(
            [Memory(user_id=user, content=f"{user} note {i}", embedding=vecs[i].tolist()) for i in range(200)]
        )
    return out


def exact_top(memories: list[Memory], query: np.ndarray, k: int) -> list[str]:
    sims = np.array([np.dot(np.asarray(m.embedding, dtype=np.float32), query) for m in memories])
    return [memories[i].id for i in np.argsort(-sims, kind="stable")[:k]]


def index_algorithm(info) -> str:
    """The vector attribute's algorithm in an FT.INFO reply (RediSearch's flat list shape)."""
    flat = [x.decode() if isinstance(x, bytes) else x for x in _flatten(info)]
    at = [i for i, x in enumerate(flat) if isinstance(x, str) and x.lower() == "algorithm"]
    assert at, flat
    return str(flat[at[0] + 1]).upper()


async def search_alice(store: ValkeyStore, stored: dict[str, list[Memory]], rng, exact: bool) -> None:
    """20 searches of alice's: only her rows come back, in brute-force order when ``exact``."""
    for query in unit(rng, 20):
        got = await store.retrieve(
            RetrieveOptions(user_id="alice", embedding=query.tolist(), limit=8, threshold=-1.0), touch=False
        )
        assert {r.memory.user_id for r in got} == {"alice"} and len(got) == 8
        if exact:
            assert [r.memory.id for r in got] == exact_top(stored["alice"], query, 8)


async def test_a_flat_index_with_the_prefilter_by_default(valkey_server):
    rng = np.random.default_rng(3)
    store = await open_store(valkey_server)
    try:
        assert index_algorithm(await store._conn.execute_command("FT.INFO", store.index)) == "FLAT"
        assert store.knn_prefilter  # RediSearch parses it
        stored = await fill(store, rng)
        spy = QuerySpy(store._conn)
        await search_alice(store, stored, rng, exact=True)
        assert spy.queries and all("HYBRID_POLICY ADHOC_BF" in q and "EF_RUNTIME" not in q for q in spy.queries)
    finally:
        await store.close()


async def test_an_hnsw_index_is_planned_by_the_module(valkey_server):
    rng = np.random.default_rng(5)
    store = await open_store(valkey_server, vector_index="hnsw")
    try:
        assert index_algorithm(await store._conn.execute_command("FT.INFO", store.index)) == "HNSW"
        assert not store.knn_prefilter  # a brute-force pre-filter would bypass the graph
        stored = await fill(store, rng)
        spy = QuerySpy(store._conn)
        await search_alice(store, stored, rng, exact=False)  # HNSW is approximate
        assert spy.queries and all("EF_RUNTIME" in q and "HYBRID_POLICY" not in q for q in spy.queries)
    finally:
        await store.close()


async def test_an_existing_hnsw_index_keeps_its_algorithm_under_the_flat_default(valkey_server):
    rng = np.random.default_rng(6)
    first = await open_store(valkey_server, vector_index="hnsw")
    stored = await fill(first, rng)
    await first.close()
    # the same prefix and index, opened with the default configuration (vector_index flat)
    again = ValkeyStore(url=valkey_server.url_db(0), prefix=first.prefix, index=first.index, embed=None, dimension=DIM)
    await again.open()
    try:
        assert again.vector_index == "flat" and again._index_is_hnsw and not again.knn_prefilter
        spy = QuerySpy(again._conn)
        await search_alice(again, stored, rng, exact=False)
        assert all("EF_RUNTIME" in q and "HYBRID_POLICY" not in q for q in spy.queries)  # FLAT would refuse it
    finally:
        await again.close()


async def test_a_module_that_refuses_it_gets_the_planned_query(valkey_server):
    rng = np.random.default_rng(4)
    store = await open_store(valkey_server)
    try:
        await fill(store, rng)
        spy = QuerySpy(store._conn, refuse=True)
        assert await store._module_parses_prefilter() is False
        await store._open()  # the open hook probes again
        assert store.knn_prefilter is False
        got = await store.retrieve(
            RetrieveOptions(user_id="bob", embedding=unit(rng, 1)[0].tolist(), limit=5, threshold=-1.0), touch=False
        )
        assert len(got) == 5 and {r.memory.user_id for r in got} == {"bob"}
        assert "HYBRID_POLICY" not in spy.queries[-1] and "EF_RUNTIME" not in spy.queries[-1]  # FLAT
    finally:
        await store.close()


async def test_a_probe_failing_for_another_reason_is_raised(valkey_server):
    from valkey.exceptions import ResponseError

    store = await open_store(valkey_server)
    try:
        inner = store._conn.execute_command

        async def no_permission(*args, **kw):
            if args and args[0] == "FT.SEARCH":
                raise ResponseError("NOPERM this user has no permissions to run the 'FT.SEARCH' command")
            return await inner(*args, **kw)

        store._conn.execute_command = no_permission
        with pytest.raises(ResponseError, match="NOPERM"):
            await store._module_parses_prefilter()
    finally:
        store._conn.execute_command = inner
        await store.close()


@pytest.mark.parametrize(
    ("vector_index", "knn_prefilter", "prefiltered"),
    [("flat", True, True), ("flat", False, False), ("hnsw", True, False)],
)
async def test_the_settings_reach_the_store(valkey_server, vector_index, knn_prefilter, prefiltered):
    name = f"pf_{uuid.uuid4().hex[:8]}"
    settings = MemoryStoreSettings(
        backend="valkey",
        valkey=ValkeySettings(
            url=valkey_server.url_db(0),
            prefix=f"{name}:",
            index=name,
            knn_prefilter=knn_prefilter,
            vector_index=vector_index,
        ),
    )
    store = make_store(settings, embed=None, dimension=DIM, identity=None)
    inner = store
    while not isinstance(inner, ValkeyStore):  # curation and hybrid layers wrap the backend
        inner = inner.inner
    await store.open()
    try:
        assert inner.knn_prefilter is prefiltered
        assert inner.vector_index == vector_index
    finally:
        await store.close()


def test_an_unknown_vector_index_is_refused():
    from memory_core.errors import ConfigError

    with pytest.raises(ConfigError, match="vector_index"):
        ValkeyStore(url="valkey://127.0.0.1:1/0", prefix="x:", index="x", embed=None, dimension=DIM, vector_index="ivf")
