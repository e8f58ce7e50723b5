"""Valkey KNN pre-filter: when the search module parses ``HYBRID_POLICY ADHOC_BF``
(RediSearch, the test module) searches ask for it, so the module scores exactly the user's
rows (the per-user cost figure is in ``benchmarks/stores.py --flat``); a module that refuses
it gets the module-planned query; the setting turns it off."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from memory_core.config import MemoryStoreSettings, ValkeySettings
from memory_core.stores.factory import make_store
from memory_core.stores.valkey import ValkeyStore
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


async def test_prefilter_is_used_and_scores_exactly_the_users_rows(valkey_server):
    rng = np.random.default_rng(3)
    store = await open_store(valkey_server)
    try:
        assert store.knn_prefilter  # RediSearch parses it
        stored = await fill(store, rng)
        spy = QuerySpy(store._conn)
        for query in unit(rng, 20):
            got = await store.retrieve(
                RetrieveOptions(user_id="alice", embedding=query.tolist(), limit=8, threshold=-1.0), touch=False
            )
            assert {r.memory.user_id for r in got} == {"alice"}
            # brute force over the user's rows: the exact top-k (HNSW is only approximate)
            assert [r.memory.id for r in got] == exact_top(stored["alice"], query, 8)
        assert spy.queries and all("HYBRID_POLICY ADHOC_BF" in q and "EF_RUNTIME" not in q for q in spy.queries)
    finally:
        await store.close()


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
        assert "EF_RUNTIME" in spy.queries[-1] and "HYBRID_POLICY" not in spy.queries[-1]
    finally:
        await store.close()


@pytest.mark.parametrize("wanted", [True, False])
async def test_the_setting_reaches_the_store(valkey_server, wanted):
    name = f"pf_{uuid.uuid4().hex[:8]}"
    settings = MemoryStoreSettings(
        backend="valkey",
        valkey=ValkeySettings(url=valkey_server.url_db(0), prefix=f"{name}:", index=name, knn_prefilter=wanted),
    )
    store = make_store(settings, embed=None, dimension=DIM, identity=None)
    inner = store
    while not isinstance(inner, ValkeyStore):  # curation and hybrid layers wrap the backend
        inner = inner.inner
    await store.open()
    try:
        assert inner.knn_prefilter is wanted
    finally:
        await store.close()
