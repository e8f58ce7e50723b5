"""The async store contract shared by every backend.

``MemoryStore`` implements every rule that does not depend on the backend, once:
validation and sanitizing, embedding when a vector is absent, refusing vectors of another
model identity, per-user write serialization, the closed state (and draining in-flight
operations on ``close``), access tracking after retrieval. Backends implement the
underscore methods, which receive validated input and never see a closed store.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import math
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import (
    DuplicateMemory,
    EmbeddingIdentityMismatch,
    InvalidInput,
    MemoryNotFound,
    StoreClosed,
    StoreUnavailable,
)
from ..sanitize import (
    INSTANT_FIELDS,
    check_conversation_id,
    check_instants,
    check_json_value,
    check_label,
    check_project_id,
    clean_content,
    is_memory_id,
    require_memory_id,
    require_user_id,
)
from ..types import (
    EVERYONE,
    LIFECYCLE_IDS,
    Everyone,
    ListQuery,
    ListResult,
    Memory,
    MemoryChanges,
    MemoryCounts,
    MemoryScope,
    MemoryState,
    MemoryType,
    RetrieveOptions,
    ScoredMemory,
    WriteOutcome,
    WriteResult,
    as_float32,
    check_lifecycle,
    passes_floor,
    to_millis,
    utcnow,
)
from ..types import MAX_LIST_LIMIT as MAX_LIST_LIMIT  # re-exported: the decorators page by it

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[str]], Awaitable[list[list[float]]]]
"""Async text→vector function: ``list[str]`` of n texts → n L2-normalised vectors."""

MAX_RETRIEVE_LIMIT = 1000
MAX_BATCH = 1000
"""Most memories one ``store_many`` call accepts."""
MAX_TOTALS_OWNERS = 1000
"""The most owners one ``totals`` call counts (the admin users page asks for at most 500)."""
TOTALS_CONCURRENCY = 8
"""Owners the default ``_totals`` counts at once (a backend that counts one owner a query)."""


def distinct_owners(owners: Sequence[str]) -> builtins.list[str]:
    """``owners`` (a sequence of user ids, not one string) without repeats, in their order,
    for ``Store.totals``. Raises ``InvalidInput``: a string in place of the sequence, an owner
    that is not a user id, more than ``MAX_TOTALS_OWNERS``."""
    if isinstance(owners, (str, bytes)):
        raise InvalidInput("owners must be a list of user ids, not one string")
    distinct = builtins.list(dict.fromkeys(owners))
    if len(distinct) > MAX_TOTALS_OWNERS:
        raise InvalidInput(f"at most {MAX_TOTALS_OWNERS} owners in one totals call, got {len(distinct)}")
    for owner in distinct:
        require_user_id(owner)
    return distinct


@runtime_checkable
class Store(Protocol):
    """The store contract, the one shape every store has: the backends (``MemoryStore``), the
    decorators (``StoreDecorator``: hybrid index, hot cache) and the store pool's client in the
    ingress (``deployments.store_pool.StorePoolClient``). Semantics are those of
    ``MemoryStore``'s methods of the same names; every method raises memory_core errors only
    (``memory_core.errors``)."""

    async def store(self, memory: Memory) -> Memory: ...

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]: ...

    async def write(self, memories: Sequence[Memory]) -> list[WriteResult]: ...

    async def retrieve(self, options: RetrieveOptions) -> list[ScoredMemory]: ...

    async def record_access(self, memory_ids: Iterable[str], user_id: str) -> datetime: ...

    async def get(self, memory_id: str, user_id: str) -> Memory: ...

    async def get_many(self, memory_ids: Iterable[str], user_id: str) -> list[Memory]: ...

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory: ...

    async def list(self, query: ListQuery) -> ListResult: ...

    async def forget(self, memory_id: str, user_id: str) -> None: ...

    async def forget_by_scope(self, scope: MemoryScope) -> int: ...

    async def counts(self, owner: str | Everyone) -> MemoryCounts: ...

    async def totals(self, owners: Sequence[str]) -> dict[str, int]: ...

    async def check_connection(self) -> bool: ...

    async def close(self) -> None: ...


class MemoryStore(ABC):
    """Async memory store. See the module docstring for which rules live here.

    Args:
        embed: async text→vector function used when a memory or query has no vector;
            ``None`` means vectors must always be supplied.
        embed_query: the function used for query texts instead of ``embed`` (e.g. an
            in-process copy of the model); ``None``: ``embed``. It must produce vectors of
            the same model identity as ``embed``: the store checks only their dimension, so
            the caller checks the identity (``StoreShard`` does, at start).
        dimension: vector dimension; vectors of another length raise ``InvalidInput``.
        identity: embedding model identity digest of the vectors this store holds; a
            vector tagged with another identity raises ``EmbeddingIdentityMismatch``.
        represents: whether the embedding model can represent a text
            (``embedding.TokenizerCoverage.represents``); ``None``: every text. A query it
            cannot represent finds nothing by vector, and a memory it cannot represent is
            never returned by vector search (its cosine means nothing): hybrid retrieval
            ranks such text lexically.
    """

    name = "abstract"
    unavailable_errors: tuple[type[BaseException], ...] = ()
    """Backend exception types that mean "the backend is unreachable or timed out"; raised
    inside any data operation they become ``StoreUnavailable`` (HTTP 503), never a 500."""

    def __init__(
        self,
        *,
        embed: EmbedFn | None,
        dimension: int,
        identity: str | None = None,
        access_flush_s: float = 5.0,
        embed_query: EmbedFn | None = None,
        represents: Callable[[str], bool] | None = None,
    ):
        if dimension <= 0:
            raise InvalidInput("dimension must be positive")
        self._embed = embed
        self._embed_query = embed_query
        self._represents = represents
        self.dimension = dimension
        self.identity = identity
        self._closed = False
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._user_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._id_locks: dict[str, list] = {}
        # write-behind access log: user → memory id → [pending increments, latest access]
        self._access_pending: dict[str, dict[str, list]] = {}
        self._access_flushers: dict[str, asyncio.Task] = {}
        self._access_flush_s = max(0.0, float(access_flush_s))
        self._flush_access_now = asyncio.Event()
        self._opened = False
        self._open_lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    @contextlib.asynccontextmanager
    async def _op(self):
        """Guard of every data operation: refuses after close, counts in-flight work."""
        if self._closed:
            raise StoreClosed(f"{self.name} store is closed")
        self._inflight += 1
        self._drained.clear()
        try:
            if not self._opened:
                await self._ensure_open()
            yield
        except self.unavailable_errors as e:
            raise StoreUnavailable(f"{self.name} store unavailable: {e!r}") from e
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    async def _ensure_open(self) -> None:
        async with self._open_lock:
            if not self._opened:
                self._still_open()
                await self._open()
                self._opened = True

    async def open(self) -> MemoryStore:
        """Connect and create or check the collection/index now (otherwise the first
        operation does it). Idempotent; returns the store. Raises ``ConfigError`` (e.g. an
        existing collection of another vector dimension), ``StoreUnavailable``,
        ``StoreClosed``."""
        async with self._op():
            return self

    def _still_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"{self.name} store is closed")

    async def close(self) -> None:
        """Refuse new operations, wait for in-flight ones to finish, release the backend.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._flush_access_now.set()  # pending access counts are written before close returns
        await self._drained.wait()
        async with self._open_lock:  # never release while a (failed) open is running
            await self._close()

    def represents(self, text: str) -> bool:
        """Whether the embedding model can represent ``text`` (see ``represents`` in the class
        docstring); True when no check is configured."""
        return self._represents is None or self._represents(text)

    async def check_connection(self) -> bool:
        """True when the backend answers. Raises ``StoreClosed`` after close."""
        async with self._op():
            return await self._check_connection()

    # ------------------------------------------------------------------ helpers
    async def _vectors(self, texts: list[str], *, query: bool = False) -> list[list[float]]:
        """One checked vector per text from the store's embedder (the query embedder with
        ``query``). Raises ``InvalidInput`` (no embedder, another number of vectors than texts,
        a bad vector), ``StoreClosed``."""
        embed = (self._embed_query or self._embed) if query else self._embed
        if embed is None:
            raise InvalidInput("no embedding supplied and this store has no embedder")
        vectors = await embed(texts)
        self._still_open()  # no data work after close, even if embedding was slow
        if len(vectors) != len(texts):
            raise InvalidInput(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        return [self._check_vector(v) for v in vectors]

    def _check_vector(self, vector: Sequence[float], identity: str | None = None) -> list[float]:
        if identity is not None and self.identity is not None and identity != self.identity:
            raise EmbeddingIdentityMismatch(
                f"vector of model identity {identity!r} offered to a store of identity {self.identity!r}"
            )
        try:
            arr = np.asarray(vector, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidInput("vector must be a list of numbers") from None
        if arr.ndim != 1 or len(arr) != self.dimension:
            raise InvalidInput(f"vector has {arr.size} dimensions; the store expects {self.dimension}")
        norm = float(np.sqrt(np.dot(arr, arr)))
        if not math.isfinite(norm) or norm == 0.0:
            raise InvalidInput("vector must be finite and non-zero")
        if abs(norm - 1.0) > 1e-3:
            arr = arr / norm
        return arr.tolist()

    def _lock(self, user_id: str) -> asyncio.Lock:
        return self._user_locks[user_id]

    @contextlib.asynccontextmanager
    async def _id_lock(self, memory_id: str):
        """Exclusive section for one memory id (entries are dropped when unused)."""
        entry = self._id_locks.get(memory_id)
        if entry is None:
            entry = self._id_locks[memory_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._id_locks.pop(memory_id, None)

    # ------------------------------------------------------------------ contract
    def validate(self, memory: Memory) -> Memory:
        """``memory`` as this store would insert it (``_normalise``: ids, content, metadata,
        timestamps, the vector when given), without writing anything. Raises
        ``InvalidInput``, ``EmbeddingIdentityMismatch``."""
        return self._normalise(memory)

    def _normalise(self, memory: Memory) -> Memory:
        """The rules every inserted record passes, in one place (``store`` and ``store_many``):
        a copy of ``memory`` with the user/project ids checked, content cleaned, timestamps
        converted to UTC (``sanitize.check_instant``: refused when out of range) and
        truncated to milliseconds (``created_at`` defaults to now, ``updated_at`` to
        ``created_at``) and, when a vector is given, the vector checked/normalised and tagged
        with this store's identity. A memory without a vector keeps ``embedding=None``
        (``_embed_missing`` fills it). Raises ``InvalidInput``, ``EmbeddingIdentityMismatch``."""
        require_user_id(memory.user_id)
        require_memory_id(memory.id)
        check_project_id(memory.project_id)
        check_conversation_id(memory.conversation_id)
        check_label(memory.source, "source")
        check_label(memory.created_via, "created_via")
        check_json_value(memory.metadata)
        check_lifecycle(memory.model_dump(include=set(LIFECYCLE_IDS)))
        content = clean_content(memory.content)
        times = {k: to_millis(v) for k, v in check_instants(memory.model_dump(include=set(INSTANT_FIELDS))).items()}
        created = times.get("created_at") or utcnow()
        update: dict[str, Any] = {
            "content": content,
            "created_at": created,
            "updated_at": times.get("updated_at") or created,
            "last_accessed": times.get("last_accessed"),
            "valid_from": times.get("valid_from") or created,
            "valid_to": times.get("valid_to"),
            "expires_at": times.get("expires_at"),
        }
        if memory.embedding is not None:
            update["embedding"] = self._check_vector(memory.embedding, memory.embedding_identity)
            update["embedding_identity"] = self.identity
        return memory.model_copy(update=update)

    async def _embed_missing(self, memories: list[Memory]) -> list[Memory]:
        """``memories`` (normalised) with the absent vectors filled by ONE embed call over
        their contents (none when every memory has a vector). Raises ``InvalidInput`` (no
        embedder, bad vectors), ``StoreClosed`` (closed while embedding)."""
        missing = [i for i, m in enumerate(memories) if m.embedding is None]
        if not missing:
            return memories
        vectors = await self._vectors([memories[i].content for i in missing])
        out = list(memories)
        for i, vector in zip(missing, vectors, strict=True):
            out[i] = out[i].model_copy(update={"embedding": vector, "embedding_identity": self.identity})
        return out

    async def store(self, memory: Memory) -> Memory:
        """Insert ``memory``; returns the stored record (with content cleaned, timestamps and
        embedding set).

        Raises ``InvalidInput`` (missing id/content/user_id, oversized content, wrong vector
        size), ``DuplicateMemory`` (id exists; the original is kept), ``EmbeddingIdentityMismatch``,
        ``StoreClosed``.
        """
        async with self._op():
            (memory,) = await self._embed_missing([self._normalise(memory)])
            # the user lock orders a user's writes; the id lock stops two users racing to
            # insert the same id (both would see "absent" and the second would overwrite)
            async with self._lock(memory.user_id), self._id_lock(memory.id):
                self._still_open()
                if await self._exists(memory.id):
                    raise DuplicateMemory(f"memory {memory.id!r} already exists")
                await self._insert(memory)
            return memory

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """Insert a batch of one user's memories, all or nothing; returns the stored records in
        the order given (each as ``store`` would return it). ``[]`` for an empty batch.

        Each memory passes the rules of ``store``; the vectors that are absent are computed
        in one embed call. Then, under the user's lock and the ids' locks (taken in sorted
        order), one lookup checks that none of the ids exists, and ``_insert_many`` writes
        them.

        Raises ``InvalidInput`` (more than ``MAX_BATCH`` memories, memories of different
        users, any memory ``store`` would refuse: nothing is written),
        ``DuplicateMemory`` (an id repeated in the batch, or already stored for any user; the
        message names the ids; nothing is written), ``EmbeddingIdentityMismatch``,
        ``StoreClosed``.
        """
        async with self._op():
            batch = list(memories)
            if not batch:
                return []
            if len(batch) > MAX_BATCH:
                raise InvalidInput(f"at most {MAX_BATCH} memories per batch (got {len(batch)})")
            batch = [self._normalise(m) for m in batch]
            user_id = batch[0].user_id
            if any(m.user_id != user_id for m in batch):
                raise InvalidInput("all memories of a batch must belong to the same user_id")
            ids = [m.id for m in batch]
            repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
            if repeated:
                raise DuplicateMemory(f"ids repeated within the batch: {repeated}")
            batch = await self._embed_missing(batch)
            async with self._lock(user_id), contextlib.AsyncExitStack() as held:
                for memory_id in sorted(ids):  # one global order: two batches never deadlock
                    await held.enter_async_context(self._id_lock(memory_id))
                self._still_open()
                existing = sorted(m.id for m in await self._get_many(ids))
                if existing:
                    raise DuplicateMemory(f"memories already exist: {existing}")
                await self._insert_many(batch)
            return batch

    async def write(self, memories: Sequence[Memory]) -> builtins.list[WriteResult]:
        """Write ``memories`` (one user's) as the service writes: here, ``store_many`` (every
        memory ``created``). ``memory_core.stores.curating.CuratingStore`` adds screening,
        one record per fact and supersession. Raises what ``store_many`` raises."""
        return [WriteResult(memory=m, outcome=WriteOutcome.CREATED) for m in await self.store_many(memories)]

    async def retrieve(self, options: RetrieveOptions, *, touch: bool = True) -> list[ScoredMemory]:
        """Top ``limit`` memories of ``options.user_id`` with cosine similarity ≥ ``threshold``
        (the threshold is always a cosine floor, also for hybrid retrieval, which only changes
        the ranking ``score``), sorted by score descending (ties by id), filtered by ``project_id``/``types`` when given. Updates
        ``access_count``/``last_accessed`` of the returned memories (never re-creating one
        deleted meanwhile). Returned memories carry no ``embedding`` (results cross process
        boundaries; ``get``/``get_many`` return vectors). ``touch=False`` leaves access counts alone (for decorators that
        re-rank a larger candidate set and then ``record_access`` only what they return).
        Raises ``InvalidInput`` (empty user id, limit ≤ 0), ``StoreClosed``.
        """
        async with self._op():
            check_retrieve_options(options)
            if options.query and not self.represents(options.query):
                return []  # its vector means nothing: no vector search on it
            vector = await self._query_vector(options)
            results = await self._search(options, vector)
            now = utcnow()
            results = [
                r
                for r in results
                if r.memory.state in options.states  # the backends filter too; legacy rows read as active
                and not r.memory.expired(now)
                and (self._represents is None or self._represents(r.memory.content))
            ]  # a memory the model cannot represent has a meaningless cosine
            results = [
                r.model_copy(update={"similarity": as_float32(r.similarity), "score": as_float32(r.score)})
                for r in results
                if passes_floor(r.similarity, options.threshold)
            ]
            results.sort(key=lambda r: (-r.score, r.memory.id))
            results = results[: options.limit]
            if results and touch:
                self._log_access(options.user_id, [r.memory.id for r in results], now)
            results = [
                r.model_copy(update={"memory": r.memory.model_copy(update={"embedding": None})}) for r in results
            ]
            self._overlay_access(options.user_id, [r.memory for r in results])
            return results

    def diversify(self, results: Sequence[ScoredMemory], options: RetrieveOptions) -> builtins.list[ScoredMemory]:
        """``results`` (one user's, best first) cut to ``options.limit`` in the order of maximal
        marginal relevance with weight ``options.diversity`` (``retrieval.diversity``), where
        the store holds the memories' vectors at hand. A store that does not (this base) keeps
        the order: the first ``options.limit``. ``HybridStore`` reorders; a decorator asks its
        inner store. No I/O."""
        return builtins.list(results[: options.limit])

    async def _query_vector(self, options: RetrieveOptions) -> list[float]:
        if options.embedding is None:
            if not options.query.strip():
                raise InvalidInput("query text or embedding is required")
            (vector,) = await self._vectors([options.query], query=True)
            return vector
        return self._check_vector(options.embedding, options.embedding_identity)

    async def embed_documents(self, texts: Sequence[str]) -> builtins.list[builtins.list[float]]:
        """Vectors of ``texts`` as this store embeds the memories it stores (the document
        embedder), n texts → n unit vectors; ``[]`` for none. Raises ``InvalidInput`` (no
        embedder, or it answered another number of vectors than texts), ``StoreClosed``."""
        if not texts:
            return []
        async with self._op():
            return await self._vectors(builtins.list(texts))

    async def same_content(
        self,
        user_id: str,
        content: str,
        *,
        project_id: str | None,
        types: tuple[MemoryType, ...],
        states: tuple[MemoryState, ...],
    ) -> builtins.list[Memory] | None:
        """The memories of ``user_id`` whose content is exactly ``content``, of ``project_id``
        exactly (None: of no project), one of ``types`` and in one of ``states``, found
        without ranking (curation's test for an identical event: ``CuratingStore``); None when
        this store keeps no index of contents, as here: the caller ranks instead
        (``HybridStore`` keeps one). A backend never splices ``content`` into a query."""
        return None

    async def embed_query(self, options: RetrieveOptions) -> list[float]:
        """The query vector ``retrieve`` would search with: ``options.embedding`` checked
        (dimension, identity, normalised) or ``options.query`` embedded. Raises
        ``InvalidInput`` (neither given, bad vector), ``EmbeddingIdentityMismatch``,
        ``StoreClosed``."""
        async with self._op():
            return await self._query_vector(options)

    async def record_access(self, memory_ids: Iterable[str], user_id: str) -> datetime:
        """Count one access (``access_count`` + 1, ``last_accessed`` = the returned time, UTC)
        of those of ``memory_ids`` that exist and belong to ``user_id`` — what ``retrieve``
        does for the memories it returns (through the same write-behind log, see
        ``_log_access``). Never re-creates a deleted memory. Raises ``StoreClosed``."""
        async with self._op():
            require_user_id(user_id)
            now = utcnow()
            ids = list(dict.fromkeys(memory_ids))
            if ids:
                self._log_access(user_id, ids, now)
            return now

    # -------------------------------------------------------- write-behind access log
    def _log_access(self, user_id: str, memory_ids: list[str], when: datetime) -> None:
        """Record accesses without a backend write on the read path.

        Retrieval must update ``access_count``/``last_accessed``; doing it inline cost two
        Milvus round trips per retrieve and its tiny upserts slowed later searches
        (measured on LoCoMo conversation 1: hybrid retrieve p50 36 ms with inline updates vs
        19 ms without). Accesses are therefore logged in memory and written in one
        ``_touch`` per user at most every ``access_flush_s`` seconds (and on ``close``),
        under the user's write lock, only for memories that still exist and belong to the
        user (never re-creating a deleted one). Every read of this store overlays the
        pending counts (``_overlay_access``), so callers always see their accesses; the
        backend itself lags by at most ``access_flush_s``. ``last_accessed`` written for a
        batch is its latest access time.
        """
        pending = self._access_pending.setdefault(user_id, {})
        for memory_id in memory_ids:
            entry = pending.get(memory_id)
            if entry is None:
                pending[memory_id] = [1, when]
            else:
                entry[0] += 1
                entry[1] = max(entry[1], when)
        if user_id not in self._access_flushers:
            self._inflight += 1  # close() waits for the write
            self._drained.clear()
            task = asyncio.get_running_loop().create_task(self._write_access(user_id))
            self._access_flushers[user_id] = task

    async def _write_access(self, user_id: str) -> None:
        """Background: after ``access_flush_s`` (or at once when closing), write the user's
        pending accesses. Failures are logged, never raised (the reads already succeeded)."""
        try:
            if not self._flush_access_now.is_set() and self._access_flush_s > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._flush_access_now.wait(), timeout=self._access_flush_s)
            async with self._lock(user_id):
                pending = self._access_pending.get(user_id, {})
                if pending:
                    owned = {m.id for m in await self._get_many(list(pending), user_id) if m.user_id == user_id}
                    increments = {i: e[0] for i, e in pending.items() if i in owned}
                    latest = max(e[1] for e in pending.values())
                    if increments:
                        await self._touch(increments, latest)
                self._access_pending.pop(user_id, None)
        except Exception as e:
            self._access_pending.pop(user_id, None)
            log.warning("%s: writing access counts of one user failed: %r", self.name, e)
        finally:
            self._access_flushers.pop(user_id, None)
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    def _overlay_access(self, user_id: str, memories: Iterable[Memory]) -> None:
        """Add the user's pending (not yet written) accesses to ``memories`` in place."""
        pending = self._access_pending.get(user_id)
        if not pending:
            return
        for m in memories:
            entry = pending.get(m.id)
            if entry is not None:
                m.access_count += entry[0]
                m.last_accessed = entry[1] if m.last_accessed is None else max(m.last_accessed, entry[1])

    async def get(self, memory_id: str, user_id: str) -> Memory:
        """The memory ``memory_id`` of ``user_id``. Raises ``MemoryNotFound`` when absent or
        owned by another user (indistinguishable on purpose), ``StoreClosed``."""
        async with self._op():
            require_user_id(user_id)
            if not is_memory_id(memory_id):  # never sent to a backend
                raise MemoryNotFound("memory not found")
            found = await self._get_many([memory_id], user_id)
            if not found or found[0].user_id != user_id:
                raise MemoryNotFound(f"memory {memory_id!r} not found")
            self._overlay_access(user_id, found[:1])
            return found[0]

    async def get_many(self, memory_ids: Iterable[str], user_id: str) -> list[Memory]:
        """The memories among ``memory_ids`` that exist and belong to ``user_id`` (any order)."""
        async with self._op():
            require_user_id(user_id)
            ids = [i for i in dict.fromkeys(memory_ids) if is_memory_id(i)]  # others cannot exist
            if not ids:
                return []
            owned = [m for m in await self._get_many(ids, user_id) if m.user_id == user_id]
            self._overlay_access(user_id, owned)
            return owned

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        """Apply ``changes`` (validated by ``MemoryChanges``: the fields given) to a memory of
        ``user_id``; re-embeds when ``content`` changes; keeps ``created_at``; sets
        ``updated_at``. Raises ``InvalidInput`` (bad user id), ``MemoryNotFound``,
        ``StoreClosed``."""
        async with self._op():
            require_user_id(user_id)
            fields = changes.as_dict()
            vector = None
            if "content" in fields:
                (vector,) = await self._vectors([fields["content"]])
            if not is_memory_id(memory_id):
                raise MemoryNotFound("memory not found")
            async with self._lock(user_id):
                self._still_open()
                found = await self._get_many([memory_id], user_id)
                if not found or found[0].user_id != user_id:
                    raise MemoryNotFound(f"memory {memory_id!r} not found")
                current = found[0]
                updated = Memory.model_validate(
                    {**current.model_dump(), **fields, "created_at": current.created_at, "updated_at": utcnow()}
                )
                updated.embedding = vector if vector is not None else current.embedding
                updated.embedding_identity = self.identity
                await self._replace(updated)
                return updated

    async def list(self, query: ListQuery) -> ListResult:
        """One page of ``query.user_id``'s memories (``ListQuery``: scope, lifecycle states,
        paging; validated there), newest first (``created_at`` desc, then ``id`` desc as
        tie-break), with the exact ``total``. Raises ``StoreClosed``."""
        async with self._op():
            page = await self._list(
                query.user_id, query.types, query.project_id, query.limit, query.offset, query.states
            )
            self._overlay_access(query.user_id, page.memories)
            return page

    async def forget(self, memory_id: str, user_id: str) -> None:
        """Delete one memory of ``user_id``. Raises ``MemoryNotFound`` (absent or another
        user's), ``StoreClosed``."""
        async with self._op():
            require_user_id(user_id)
            if not is_memory_id(memory_id):
                raise MemoryNotFound("memory not found")
            async with self._lock(user_id):
                self._still_open()
                # ownership from the stored owner field alone: a record that cannot be read
                # (``_records.decode_rows``) is still deletable
                if memory_id not in await self._owned_ids([memory_id], user_id):
                    raise MemoryNotFound(f"memory {memory_id!r} not found")
                await self._delete([memory_id], user_id)

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        """Delete every memory in ``scope`` (``MemoryScope``: one user's, optionally of one
        project and of some types); returns how many were deleted (0 is fine). Other users
        are untouched. Raises ``StoreClosed``."""
        async with self._op():
            user_id = scope.user_id
            async with self._lock(user_id):
                self._still_open()
                ids = await self._scope_ids(user_id, scope.types, scope.project_id)
                if ids:
                    await self._delete(ids, user_id)
                return len(ids)

    async def counts(self, owner: str | Everyone) -> MemoryCounts:
        """How many memories ``owner`` holds, by lifecycle state and by type (every state):
        ``owner`` a user id (the owner id rule), or ``EVERYONE`` for every user's memories in
        the store (the admin views: numbers only). A bounded number of backend queries
        whatever the number of users (``_counts``). Raises ``InvalidInput`` (a bad owner),
        ``StoreClosed``."""
        async with self._op():
            if owner is not EVERYONE:
                require_user_id(owner)  # anything but EVERYONE must be a user id
            return await self._counts(None if owner is EVERYONE else str(owner))

    async def totals(self, owners: Sequence[str]) -> dict[str, int]:
        """How many memories (every state) each of ``owners`` holds: ``{owner: n}`` for each
        distinct owner, 0 for one with none (``GET /v1/admin/users`` counts a page of users in
        one call). One backend pass for all of them where the backend counts by owner in one
        (``_totals``; Milvus Lite's engine), else one ``counts`` query per owner. Raises
        ``InvalidInput`` (an owner that is not a user id, more than ``MAX_TOTALS_OWNERS``),
        ``StoreClosed``."""
        async with self._op():
            distinct = distinct_owners(owners)
            if not distinct:
                return {}
            return await self._totals(distinct)

    # ------------------------------------------------------------------ backend hooks
    @abstractmethod
    async def _exists(self, memory_id: str) -> bool: ...

    async def _totals(self, user_ids: builtins.list[str]) -> dict[str, int]:
        """``totals`` of distinct, valid ``user_ids``. Default: ``_counts`` of each (a bounded
        number of backend queries each), ``TOTALS_CONCURRENCY`` at once."""
        gate = asyncio.Semaphore(TOTALS_CONCURRENCY)

        async def total(user_id: str) -> int:
            async with gate:
                return (await self._counts(user_id)).total

        return dict(zip(user_ids, await asyncio.gather(*(total(u) for u in user_ids)), strict=True))

    @abstractmethod
    async def _counts(self, user_id: str | None) -> MemoryCounts:
        """``counts`` of ``user_id``'s records, or of every record when ``None``: at most one
        backend query per state and per type (a count with a filter), never one per user."""

    @abstractmethod
    async def _insert(self, memory: Memory) -> None:
        """Write a new record (embedding set, id known not to exist)."""

    async def _insert_many(self, memories: builtins.list[Memory]) -> None:
        """Write new records of one user (embeddings set, ids unique and known not to exist;
        at most ``MAX_BATCH``). Default: ``_insert`` each; backends override it with one
        bulk write."""
        for memory in memories:
            await self._insert(memory)

    @abstractmethod
    async def _replace(self, memory: Memory) -> None:
        """Overwrite an existing record (embedding set)."""

    @abstractmethod
    async def _get_many(self, memory_ids: builtins.list[str], user_id: str | None = None) -> builtins.list[Memory]:
        """Records for the ids that exist, with embeddings: of ``user_id`` only when given (the
        backend filters by the owner too), of any user when ``None`` (existence checks).
        Ids from a listing may predate the id format: adapters pass every id as data or
        escape it, whatever it holds."""

    @abstractmethod
    async def _owned_ids(self, memory_ids: builtins.list[str], user_id: str) -> builtins.list[str]:
        """The ids among ``memory_ids`` of records that exist and belong to ``user_id``, read
        from the stored id and owner fields only (no record is decoded, so a record that cannot
        be read is found too)."""

    @abstractmethod
    async def _search(self, options: RetrieveOptions, vector: builtins.list[float]) -> builtins.list[ScoredMemory]:
        """Candidates of ``options.user_id`` (filters applied) with ``similarity`` = cosine;
        may return more than ``limit``; the base class thresholds, sorts and cuts."""

    @abstractmethod
    async def _touch(self, increments: dict[str, int], when: datetime) -> None:
        """Add ``increments[id]`` to ``access_count`` and set ``last_accessed`` = ``when`` of
        the ids that still exist; must never create a record."""

    @abstractmethod
    async def _list(
        self,
        user_id: str,
        types: tuple[MemoryType, ...] | None,
        project_id: str | None,
        limit: int,
        offset: int,
        states: tuple[MemoryState, ...] | None,
    ) -> ListResult:
        """One page of ``user_id``'s records matching the filters (``states`` None: any)."""

    @abstractmethod
    async def _scope_ids(
        self, user_id: str, types: tuple[MemoryType, ...] | None, project_id: str | None
    ) -> builtins.list[str]: ...

    @abstractmethod
    async def _delete(self, memory_ids: builtins.list[str], user_id: str) -> None:
        """Delete the records of ``memory_ids`` that belong to ``user_id`` (the backend filters
        by the owner as well: a record of another user is never deleted)."""

    async def _open(self) -> None:
        """Connect; create the collection/index when absent, else check it (dimension).
        Called once, before the first operation; called again later if it raised."""
        return None

    async def _page(self, ordered_ids: builtins.list[str], offset: int, limit: int, user_id: str) -> ListResult:
        """One ``list`` page of ``user_id`` from the full newest-first id list: the records of
        ``ordered_ids[offset:offset + limit]`` in that order, ``total`` = all ids (for
        backends that sort ids client-side)."""
        return await self._page_records(ordered_ids[offset : offset + limit], len(ordered_ids), user_id)

    async def _page_records(self, page: builtins.list[str], total: int, user_id: str) -> ListResult:
        """The ``ListResult`` of the ids ``page`` (in that order) of ``user_id``, of ``total``
        records: the records read by ``_get_many``; an id it did not return that
        ``_owned_ids`` still finds is a record that cannot be read (``unreadable``); one
        deleted meanwhile is neither."""
        if not page:
            return ListResult(memories=[], total=total)
        by_id = {m.id: m for m in await self._get_many(page, user_id)}
        missing = [i for i in page if i not in by_id]
        unreadable = await self._owned_ids(missing, user_id) if missing else []
        return ListResult(memories=[by_id[i] for i in page if i in by_id], total=total, unreadable=unreadable)

    async def _check_connection(self) -> bool:
        return True

    async def _close(self) -> None:
        """Release the backend; called once, after in-flight operations drained (also
        when ``_open`` never ran or failed)."""
        return None


def check_retrieve_options(options: RetrieveOptions) -> None:
    """The rules of a retrieve's options, for every store and decorator that answers one:
    a non-empty user id, a valid ``project_id``, ``limit`` in 1..``MAX_RETRIEVE_LIMIT``, a
    finite ``threshold``, ``diversity`` in [0, 1]. Raises ``InvalidInput`` naming the rule."""
    require_user_id(options.user_id)
    check_project_id(options.project_id)
    if not (0 < options.limit <= MAX_RETRIEVE_LIMIT):
        raise InvalidInput(f"limit must be in 1..{MAX_RETRIEVE_LIMIT}")
    if not math.isfinite(options.threshold):
        raise InvalidInput("threshold must be a finite number")
    if not 0.0 <= options.diversity <= 1.0:  # NaN fails too
        raise InvalidInput("diversity must be in [0, 1]")


async def list_pages(
    store: Any, query: ListQuery, step_back: Callable[[], int] | None = None
) -> AsyncIterator[ListResult]:
    """Every page of ``store.list`` for ``query`` from ``query.offset`` on, in order: the one
    page loop of the project. Each next offset is this page's plus ``ListResult.rows`` (the
    rows it read, unreadable ones included, so a page of undecodable rows still moves on);
    stops after an empty page or once the offset reaches the page's ``total``. Concurrent
    writes may shift the pages: a caller that must not see a memory twice keeps the ids
    it saw; a caller that must not miss one passes ``step_back``, asked once the caller is
    done with a page: how many rows to go back before the next one (deletions meanwhile
    shift the later rows up; a large number goes back to ``query.offset``). Raises what
    ``store.list`` raises."""
    offset = query.offset
    while True:
        page = await store.list(query.model_copy(update={"offset": offset}))
        yield page
        offset += page.rows
        if not page.rows or offset >= page.total:
            return
        if step_back is not None:
            offset = max(query.offset, offset - step_back())


def candidate_count(options: RetrieveOptions, cap: int) -> int:
    """How many nearest neighbours a backend's ``_search`` should fetch: ``limit`` for plain
    vector retrieval (the base keeps the top ``limit`` by cosine anyway), a wider pool
    (4×limit, at least 50) when hybrid ranking may reorder candidates; at most ``cap``."""
    wanted = max(options.limit * 4, 50) if options.hybrid else options.limit
    return max(1, min(wanted, cap))


def list_order_key(memory: Memory) -> tuple:
    """Sort key for newest-first listing with a deterministic tie-break (used by backends that
    sort client-side)."""
    created = memory.created_at
    return (created.timestamp() if isinstance(created, datetime) else 0.0, str(memory.id))


WRITE_METHODS = ("store", "store_many", "update", "forget", "forget_by_scope")
"""Public contract methods that change which memories exist or what they contain. Every
``StoreDecorator`` subclass must override each of them (see ``StoreDecorator``).
``record_access`` is not among them: it only bumps access statistics, which neither the
lexical index nor the hot cache keys on."""


class StoreDecorator:
    """Base of decorators that wrap any store and keep its contract (hot cache, hybrid
    lexical index). Delegates every public method to ``inner``; subclasses override what
    they change. Exposes ``dimension``/``identity``/``closed`` of the wrapped store.

    A decorator that holds state derived from the store (an index, a cache) must see every
    write, so a subclass must override each of ``WRITE_METHODS``: defining one that inherits
    a delegating write raises ``TypeError`` at class creation. A decorator whose state does
    not depend on writes opts out with ``class D(StoreDecorator, passthrough_writes=True)``.
    """

    def __init_subclass__(cls, passthrough_writes: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        if passthrough_writes:
            return
        inherited = [name for name in WRITE_METHODS if getattr(cls, name) is getattr(StoreDecorator, name)]
        if inherited:
            raise TypeError(
                f"{cls.__name__} must override the write methods {inherited} of StoreDecorator (or declare "
                "passthrough_writes=True): a silently delegated write would desynchronise its state"
            )

    def __init__(self, inner: MemoryStore | StoreDecorator):
        self.inner = inner

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def identity(self) -> str | None:
        return self.inner.identity

    @property
    def closed(self) -> bool:
        return self.inner.closed

    @property
    def name(self) -> str:
        return f"{type(self).__name__}({self.inner.name})"

    async def store(self, memory: Memory) -> Memory:
        return await self.inner.store(memory)

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """See ``MemoryStore.store_many``."""
        return await self.inner.store_many(memories)

    async def write(self, memories: Sequence[Memory]) -> list[WriteResult]:
        """See ``MemoryStore.write``: this decorator's ``store_many``, every memory ``created``
        (``CuratingStore`` overrides it)."""
        return [WriteResult(memory=m, outcome=WriteOutcome.CREATED) for m in await self.store_many(memories)]

    async def retrieve(self, options: RetrieveOptions, *, touch: bool = True) -> list[ScoredMemory]:
        return await self.inner.retrieve(options, touch=touch)

    def diversify(self, results: Sequence[ScoredMemory], options: RetrieveOptions) -> list[ScoredMemory]:
        """See ``MemoryStore.diversify``."""
        return self.inner.diversify(results, options)

    async def embed_query(self, options: RetrieveOptions) -> list[float]:
        return await self.inner.embed_query(options)

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """See ``MemoryStore.embed_documents``."""
        return await self.inner.embed_documents(texts)

    async def same_content(
        self,
        user_id: str,
        content: str,
        *,
        project_id: str | None,
        types: tuple[MemoryType, ...],
        states: tuple[MemoryState, ...],
    ) -> list[Memory] | None:
        """See ``MemoryStore.same_content``."""
        return await self.inner.same_content(user_id, content, project_id=project_id, types=types, states=states)

    def validate(self, memory: Memory) -> Memory:
        """See ``MemoryStore.validate``."""
        return self.inner.validate(memory)

    def represents(self, text: str) -> bool:
        """See ``MemoryStore.represents``."""
        return self.inner.represents(text)

    async def record_access(self, memory_ids, user_id: str) -> datetime:
        return await self.inner.record_access(memory_ids, user_id)

    async def get(self, memory_id: str, user_id: str) -> Memory:
        return await self.inner.get(memory_id, user_id)

    async def get_many(self, memory_ids, user_id: str) -> list[Memory]:
        return await self.inner.get_many(memory_ids, user_id)

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        return await self.inner.update(memory_id, user_id, changes)

    async def list(self, query: ListQuery) -> ListResult:
        return await self.inner.list(query)

    async def forget(self, memory_id: str, user_id: str) -> None:
        await self.inner.forget(memory_id, user_id)

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        return await self.inner.forget_by_scope(scope)

    async def counts(self, owner: str | Everyone) -> MemoryCounts:
        """``MemoryStore.counts`` of the wrapped store (a decorator holds no record of its own
        that the backend lacks: counts pass through)."""
        return await self.inner.counts(owner)

    async def totals(self, owners: Sequence[str]) -> dict[str, int]:
        """``MemoryStore.totals`` of the wrapped store (passes through, as ``counts``)."""
        return await self.inner.totals(owners)

    async def check_connection(self) -> bool:
        return await self.inner.check_connection()

    async def open(self):
        """Open the wrapped store (see ``MemoryStore.open``); returns this decorator."""
        await self.inner.open()
        return self

    async def close(self) -> None:
        await self.inner.close()
