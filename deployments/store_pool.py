"""``StorePool``: the store actor pool.

``StorePool`` (a Serve deployment) owns ``pool.shards`` ``StoreShard`` Ray actors; each shard
owns one store client (built by ``memory_core.stores.factory.make_store``). Every call for
a user goes to shard ``shard_for(user_id, shards)``: ``StorePoolClient`` (in the ingress) gets
the shard handles from ``StorePool.shard_handles`` once and calls the shard actor directly, so a user's writes are serialized by
one process (``MemoryStore`` holds a per-user lock). Embedded backends (Milvus Lite, Qdrant
local) allow a single writer process: config validation forces ``shards: 1`` for them.

Errors cross the actor/handle boundaries as ``{"code", "message"}`` dicts and are rebuilt
into memory_core errors by ``StorePoolClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from typing import Any

import ray
from ray import serve
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayError
from ray.util import metrics as ray_metrics

from memory_core.config import MemoryStoreSettings
from memory_core.embedding import CoalescingEmbedFn, OnnxEncoder, TokenizerCoverage, open_local_encoder
from memory_core.errors import (
    ConfigError,
    EmbeddingIdentityMismatch,
    EmbeddingUnavailable,
    MemoryError_,
    StoreUnavailable,
    error_from_wire,
    error_to_wire,
)
from memory_core.sharding import shard_for
from memory_core.types import ListResult, Memory, RetrieveOptions, ScoredMemory

log = logging.getLogger("ray.serve")

STORE_METHODS = frozenset(
    {
        "store",
        "store_many",
        "retrieve",
        "get",
        "get_many",
        "update",
        "list",
        "forget",
        "forget_by_scope",
        "check_connection",
    }
)
READ_METHODS = frozenset({"retrieve", "get", "get_many", "list", "check_connection"})


def _in_shard_query_embedder(settings: MemoryStoreSettings, identity: str | None) -> CoalescingEmbedFn:
    """``pool.query_embedding: in_shard``: an async ``EmbedFn`` (n texts → n unit vectors of
    the model's dimension) over this process's CPU copy of the local model, run by ONNX Runtime
    (``pool.in_shard_runtime: onnxruntime``, checked against the torch model on probe texts)
    or torch. One intra-op thread (torch's setting is process-wide); one forward pass runs at a
    time in a worker thread, and queries arriving meanwhile share the next one
    (``CoalescingEmbedFn``).
    Raises ``ConfigError`` (no application identity to check against, a remote model, a model
    that cannot be loaded, an ONNX copy that cannot be made or does not match) or ``EmbeddingIdentityMismatch`` (the files give another identity
    than the application's): the shard, and so the deployment, fails at start."""
    if identity is None:
        raise ConfigError("pool.query_embedding: in_shard needs the application's model identity to check against")
    embedding = settings.embedding.model_copy(update={"device": "cpu"})  # the device is not part of the identity
    encoder, _ = open_local_encoder(embedding, identity, who="store shard (pool.query_embedding: in_shard)", num_threads=1)
    if settings.pool.in_shard_runtime == "onnxruntime":
        # the torch model is only needed to export and check the ONNX copy
        return CoalescingEmbedFn(OnnxEncoder.from_local(encoder, num_threads=1), max_batch=64, wait_s=0.0)
    return CoalescingEmbedFn(encoder, max_batch=64, wait_s=0.0)


@ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=-1, max_task_retries=0)
class StoreShard:
    """One store client. ``call(method, *args)`` runs a store-contract method and returns
    ``("ok", result)`` or ``("error", {"code", "message"})``. Documents are embedded by the
    Embedder deployment (``embedder`` handle); query texts too, unless
    ``pool.query_embedding`` is ``in_shard`` (then by this shard's own copy of the model).

    Self-healing: a shard whose process dies is restarted by Ray (``max_restarts=-1``) with
    the same arguments and reopens its store (an acknowledged write was written to the
    backend before the call returned, so it is there after the restart). Calls are not
    retried by Ray (``max_task_retries=0``: a write must not run twice behind the caller's
    back); callers get ``StoreUnavailable`` (503 + ``Retry-After``) while it restarts."""

    def __init__(self, settings: dict, dimension: int, identity: str | None, collection_suffix: str | None, embedder):
        from memory_core.stores.factory import make_store

        parsed = MemoryStoreSettings.model_validate(settings)
        self._embedder = embedder
        self._identity = identity
        embed_query = None
        if parsed.pool.query_embedding == "in_shard":
            embed_query = _in_shard_query_embedder(parsed, identity)
        # the hot cache reports hits, misses and fail-open reads; exported as a Ray metric
        # (shards are plain actors, so ray.util.metrics rather than ray.serve.metrics)
        self._cache_events = ray_metrics.Counter(
            "memory_cache_events", description="Hot cache events (cache_hit, cache_miss, cache_error: fail-open read, ...)",
            tag_keys=("event",),
        )
        # text the model cannot represent (mostly [UNK]) is ranked lexically only
        coverage = TokenizerCoverage.from_settings(parsed.embedding)
        self.store = make_store(
            parsed,
            embed=self._embed,
            embed_query=embed_query,
            represents=coverage.represents if coverage is not None else None,
            dimension=dimension,
            identity=identity,
            collection_suffix=collection_suffix,
            on_event=lambda event: self._cache_events.inc(1, tags={"event": event}),
        )

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors for ``texts`` from the Embedder deployment; raises
        ``EmbeddingIdentityMismatch`` when it answers with another model identity than the
        one this store was deployed for."""
        try:
            result = await self._embedder.embed.remote(texts)
        except MemoryError_:
            raise
        except RayError as e:
            raise EmbeddingUnavailable(f"the embedder is unavailable ({type(e).__name__}); retry") from e
        if self._identity is not None and result.get("identity") != self._identity:
            raise EmbeddingIdentityMismatch(
                f"Embedder answered with model identity {result.get('identity')!r}; this store holds "
                f"vectors of {self._identity!r}"
            )
        return result["embeddings"]

    async def call(self, method: str, *args, **kwargs):
        if method not in STORE_METHODS:
            return ("error", {"code": "invalid_request", "message": f"unknown store method {method!r}"})
        try:
            return ("ok", await getattr(self.store, method)(*args, **kwargs))
        except MemoryError_ as e:
            return ("error", error_to_wire(e))

    async def open(self) -> None:
        """Connect and create or check the collection now, so a misconfiguration (e.g. an
        existing collection of another vector dimension) fails the deployment at start with
        the store's ``ConfigError`` message."""
        await self.store.open()

    async def close(self) -> None:
        await self.store.close()

    def ping(self) -> bool:
        """Liveness probe of ``StorePool.check_health`` (answers while the actor runs)."""
        return True


SHARD_PROBE_TIMEOUT_S = 10.0


@serve.deployment(ray_actor_options={"num_cpus": 0}, health_check_period_s=5, health_check_timeout_s=30)
class StorePool:
    """Routes store calls to the shard of the user. Args: ``settings`` (MemoryStoreSettings
    dump), ``dimension`` and ``identity`` of the embedding model, ``collection_suffix`` (the
    identity's short digest, so vectors of two models never share a collection), and the
    ``Embedder`` handle (used when a memory arrives without a vector)."""

    def __init__(self, settings: dict, dimension: int, identity: str | None, collection_suffix: str | None, embedder):
        parsed = MemoryStoreSettings.model_validate(settings)
        key = hashlib.sha256(
            json.dumps([settings, dimension, identity, collection_suffix], sort_keys=True, default=str).encode()
        ).hexdigest()[:12]
        self.shards = [
            StoreShard.options(name=f"memory-store-{key}-{i}", get_if_exists=True).remote(
                settings, dimension, identity, collection_suffix, embedder
            )
            for i in range(parsed.pool.shards)
        ]
        # fail the replica (and `serve run`) at start on a bad store configuration
        ray.get([s.open.remote() for s in self.shards])

    async def shard_handles(self) -> list:
        """The shard actor handles, in shard order; clients route by ``shard_for(user_id, n)``
        and call the shard directly (one hop less on the chat path)."""
        return list(self.shards)

    async def check_connection(self) -> bool:
        """True when every shard answers and its backend is reachable (False while a shard
        restarts)."""
        try:
            results = [await s.call.remote("check_connection") for s in self.shards]
        except RayError as e:
            log.warning("store shard unavailable: %r", e)
            return False
        return all(status == "ok" and value for status, value in results)

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
            except (ActorUnavailableError, GetTimeoutError, asyncio.TimeoutError):
                continue

    async def __del__(self):
        for s in self.shards:
            try:
                await s.close.remote()
            except Exception as e:  # replica is going away; log and continue
                log.warning("closing store shard failed: %r", e)


class StorePoolClient:
    """The store contract over a ``StorePool`` handle (used by the ingress). Raises the same
    memory_core errors as a local store."""

    def __init__(self, handle):
        self._handle = handle
        self._shards: list | None = None

    async def _shard(self, user_id: str, refresh: bool = False):
        if self._shards is None or refresh:
            self._shards = await self._handle.shard_handles.remote()
        return self._shards[shard_for(user_id, len(self._shards))]

    async def _call(self, user_id: str, method: str, *args, **kwargs) -> Any:
        """Call ``method`` on the shard of ``user_id`` directly.

        If the shard is unreachable (its process died and Ray is restarting it, or its
        StorePool replica was replaced), the shard handles are fetched again; a read is
        retried once, a write raises ``StoreUnavailable`` (503 + ``Retry-After``: it may or may
        not have landed, and a retried write must not run twice behind the caller's back).
        Any other Ray failure on the way is ``StoreUnavailable`` too, never a 500."""
        try:
            status, value = await (await self._shard(user_id)).call.remote(method, *args, **kwargs)
        except RayActorError as e:
            if method not in READ_METHODS:
                with contextlib.suppress(RayError):
                    await self._shard(user_id, refresh=True)
                raise StoreUnavailable(f"store shard unavailable during {method} ({type(e).__name__}); retry") from e
            try:
                shard = await self._shard(user_id, refresh=True)
                status, value = await shard.call.remote(method, *args, **kwargs)
            except RayError as again:
                raise StoreUnavailable(f"store shard unavailable ({type(again).__name__}); retry") from again
        except RayError as e:
            if isinstance(e, MemoryError_):
                raise
            raise StoreUnavailable(f"store unavailable ({type(e).__name__}); retry") from e
        if status == "error":
            raise error_from_wire(value)
        return value

    async def store(self, memory: Memory) -> Memory:
        return await self._call(memory.user_id, "store", memory)

    async def store_many(self, memories) -> list[Memory]:
        """``MemoryStore.store_many`` on the shard of ``memories[0].user_id`` (the store
        rejects a batch of several users with ``InvalidInput``); ``[]`` for an empty batch."""
        batch = list(memories)
        if not batch:
            return []
        return await self._call(batch[0].user_id, "store_many", batch)

    async def retrieve(self, options: RetrieveOptions) -> list[ScoredMemory]:
        return await self._call(options.user_id, "retrieve", options)

    async def get(self, memory_id: str, user_id: str) -> Memory:
        return await self._call(user_id, "get", memory_id, user_id)

    async def get_many(self, memory_ids, user_id: str) -> list[Memory]:
        return await self._call(user_id, "get_many", list(memory_ids), user_id)

    async def update(self, memory_id: str, user_id: str, changes: dict[str, Any]) -> Memory:
        return await self._call(user_id, "update", memory_id, user_id, changes)

    async def list(self, user_id: str, types=None, project_id=None, limit: int = 50, offset: int = 0) -> ListResult:
        return await self._call(user_id, "list", user_id, types=types, project_id=project_id, limit=limit, offset=offset)

    async def forget(self, memory_id: str, user_id: str) -> None:
        await self._call(user_id, "forget", memory_id, user_id)

    async def forget_by_scope(self, user_id: str, project_id=None, types=None) -> int:
        return await self._call(user_id, "forget_by_scope", user_id, project_id=project_id, types=types)

    async def check_connection(self) -> bool:
        return await self._handle.check_connection.remote()
