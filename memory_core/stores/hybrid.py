"""Hybrid (lexical + vector) retrieval as a store decorator.

``HybridStore`` wraps any ``MemoryStore`` (or another ``StoreDecorator``) and keeps a
service-side BM25 index (``memory_core.retrieval.lexical``) per user in step with it. With
``RetrieveOptions.hybrid`` it ranks a candidate set drawn from both sides; without, it is a
plain pass-through.

Keeping the index in step
    ``store``/``store_many``/``update`` (every write of ``stores.base.WRITE_METHODS`` is
    overridden) index the record(s) the inner store returned, after the inner call succeeded
    (a refused batch indexes nothing). ``forget``/``forget_by_scope`` remove from the index
    whatever the outcome of the inner call (a delete never leaves an entry behind). Every
    memory returned comes from the inner store — the vector search's own records, or read with
    ``get_many`` just before it is returned — so a memory deleted or changed behind this
    decorator's back is dropped from (or re-indexed in) the index rather than returned stale
    (a dropped winner gives its place to the next ranked candidate). A user's index is built lazily on that user's first hybrid retrieve, from
    ``inner.list`` (pages of 1000), and kept thereafter; writes that complete while it is being
    built are replayed onto it. **Writes must go through this decorator** for the index to stay
    complete (the store actor pool pins each user to one shard, so one decorator instance sees
    all of a user's writes). Memory is bounded by an LRU of ``max_users`` user indexes; an
    evicted user is rebuilt on their next hybrid retrieve.

Ranking: ``memory_core.retrieval.fusion`` (pure functions: weighted score fusion of the cosine
and max-normalised BM25, or RRF; a temporal bonus for "when" questions; the best adjacent
turn's score; a speaker bonus). ``prev``/``next`` are the memories adjacent in time
(``created_at``, then id) within the same conversation — same ``conversation_id`` and same
``metadata["session"]``, at most ``neighbor_max_gap_s`` apart; memories with neither have no
neighbours. The lexical side indexes the content without a leading ``"<speaker>: "`` when
``metadata["speaker"]`` is set (that name would otherwise match every turn of the speaker);
the speaker is matched against the query separately. ``similarity`` of every result is its
cosine (for text the embedding model cannot represent: the lexical coverage, see
``_Similarity``), and ``threshold`` is a floor on it for every candidate whichever side
found it.

Candidates: the vector top ``candidate_pool`` (≥ ``limit``), the lexical top
``candidate_pool`` (honouring ``project_id``/``types``), and the neighbours of the
``2 · limit`` best of those. With ``cache_vectors`` (default) the index holds each memory's
vector (``memory_core.retrieval.held_vectors``), so lexical and neighbour candidates are scored without a
store round trip, and for a user with at most ``held_search_max`` memories the vector top is
an exact cosine search of the held vectors here (one matrix-vector product) instead of the
inner store's search. A search then costs the inner store one ``get_many`` of the winners
(one more round per time a winner turns out deleted or changed behind this decorator, see
``_winners``; when a held-vector winner turns out deleted, the ranking is redone without it,
at most ``_PRUNED_RERANKS`` times, so that it does not keep a place in the candidate pool; a
deleted candidate that never reaches the top is not detected and costs a pool place, never a
result). Memories written behind this decorator are not seen by the held search at all until
the user's index is rebuilt (restart, LRU eviction), where a store search would find them: the
decorator must see every write (it does in the service: a user is pinned to one shard). A read
of the store that overlapped a write through this decorator for the same user answers but does
not re-index (it may be older than that write).
Milvus Lite, LoCoMo, query vector given: hybrid retrieve p50 32 ms (everything loaded) → 13 ms
(held vectors, store vector search) → 8 ms (held search). Larger users: the inner store's
vector search plus one ``get_many`` of the winners it did not return. Without
``cache_vectors`` every candidate is loaded (one ``get_many`` for the lexical side,
overlapping the query embedding, one for the neighbours). Only the returned memories get their access counts bumped: the
vector pool is read with ``inner.retrieve(..., touch=False)`` and the final top ``limit`` go
through ``inner.record_access`` (hooks of ``MemoryStore``/``StoreDecorator``). Compose a hot
cache (``CachingStore``) *outside* this decorator — it caches final answers; an inner decorator
whose ``retrieve`` lacks ``touch`` still works, but then the whole vector pool is counted as
accessed.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import RetrievalSettings
from ..errors import InvalidInput, StoreClosed
from ..retrieval.fusion import Fusion, FusionWeights, Signals, base_score, final_score
from ..retrieval.held_vectors import HeldVectors, cosine, unit_vector
from ..retrieval.lexical import BM25Corpus, LexicalIndex, tokenize
from ..retrieval.timeparse import has_time_expression, temporal_intent
from ..sanitize import require_user_id
from ..types import (
    ListQuery,
    Memory,
    MemoryChanges,
    MemoryScope,
    MemoryType,
    RetrieveOptions,
    ScoredMemory,
    as_float32,
    passes_floor,
    utcnow,
)
from .base import MAX_LIST_LIMIT, MAX_RETRIEVE_LIMIT, StoreDecorator

_D = RetrievalSettings()  # constructor defaults = the configuration defaults
_PRUNED_RERANKS = 2
"""Most extra rankings of one retrieve after finding held-vector candidates deleted behind
the decorator (each ranking prunes what it found)."""


def _content_key(content: str) -> str:
    return hashlib.blake2b(content.encode("utf-8"), digest_size=8).hexdigest()


def split_speaker(memory: Memory) -> tuple[str, str | None]:
    """(body, speaker): ``memory.content`` without a leading ``"<speaker>:"`` where
    ``metadata["speaker"]`` names the speaker, else the content unchanged."""
    speaker = memory.metadata.get("speaker") if isinstance(memory.metadata, dict) else None
    content = memory.content
    if isinstance(speaker, str) and speaker.strip():
        prefix = speaker.strip() + ":"
        if content.startswith(prefix):
            return content[len(prefix) :].lstrip(), speaker.strip()
        return content, speaker.strip()
    return content, None


def _types_or_none(types) -> tuple[MemoryType, ...] | None:
    """``types`` as ``MemoryType``s; ``None`` when none were given, ``()`` when none of those
    given is a known type (then nothing matched, so nothing is removed)."""
    if not types:
        return None
    out = []
    for t in types:
        try:
            out.append(MemoryType(t))
        except ValueError:
            continue
    return tuple(out)


def _group_of(memory: Memory) -> tuple | None:
    session = memory.metadata.get("session") if isinstance(memory.metadata, dict) else None
    if memory.conversation_id is None and session is None:
        return None
    return (memory.conversation_id, str(session) if session is not None else None)


@dataclass
class _Timeline:
    """One user's memories ordered by time within each conversation group."""

    groups: dict[tuple, list[tuple[float, str]]] = field(default_factory=dict)

    def add(self, group: tuple | None, ts: float, memory_id: str) -> None:
        if group is not None:
            bisect.insort(self.groups.setdefault(group, []), (ts, memory_id))

    def remove(self, group: tuple | None, ts: float, memory_id: str) -> None:
        if group is None:
            return
        seq = self.groups.get(group)
        if not seq:
            return
        i = bisect.bisect_left(seq, (ts, memory_id))
        if i < len(seq) and seq[i] == (ts, memory_id):
            del seq[i]
        if not seq:
            del self.groups[group]

    def neighbours(self, group: tuple | None, ts: float, memory_id: str, max_gap_s: float) -> list[str]:
        if group is None:
            return []
        seq = self.groups.get(group, [])
        i = bisect.bisect_left(seq, (ts, memory_id))
        if i >= len(seq) or seq[i] != (ts, memory_id):
            return []
        out = []
        if i > 0 and ts - seq[i - 1][0] <= max_gap_s:
            out.append(seq[i - 1][1])
        if i + 1 < len(seq) and seq[i + 1][0] - ts <= max_gap_s:
            out.append(seq[i + 1][1])
        return out


@dataclass
class _Similarity:
    """The similarity of the query with each candidate, for one ranking: the cosine of the
    two vectors (``held_vectors.cosine``), except for a pair where either text is
    unrepresentable by the embedding model (``q`` is None, or the memory's index entry says
    ``represented: False``), whose cosine means nothing: then the lexical coverage
    (``BM25Corpus.coverage``: the IDF-weighted share of the query's terms in the memory)."""

    q: np.ndarray | None
    terms: list[str]
    corpus: BM25Corpus

    def lexical_only(self, memory_id: str) -> bool:
        attrs = self.corpus.attrs(memory_id)
        return self.q is None or (attrs is not None and attrs.get("represented") is False)

    def of(self, memory_id: str, vec: np.ndarray | None) -> float | None:
        if self.lexical_only(memory_id):
            return as_float32(self.corpus.coverage(self.terms, memory_id))
        assert self.q is not None  # lexical_only is True without a query vector
        return cosine(vec, self.q)


class HybridStore(StoreDecorator):
    """Lexical + vector retrieval over any store. See the module docstring.

    Args:
        inner: the wrapped store.
        candidate_pool: candidates taken from each side (≥ 1; the vector side takes at least
            ``limit``).
        fusion: ``"score"`` (weighted sum of cosine and max-normalised BM25) or ``"rrf"``.
        rrf_k: the RRF constant k (≥ 1).
        neighbor_weight: weight of the best adjacent memory's base score (≥ 0; 0 disables).
        neighbor_max_gap_s: most seconds between adjacent memories of one conversation.
        speaker_weight: bonus when ``metadata["speaker"]`` is named in the query (≥ 0).
        temporal_weight: bonus, for queries asking when, to memories mentioning a time (≥ 0;
            applied when ``RetrieveOptions.temporal_boost``).
        k1, b: BM25 parameters. max_users: most user indexes held (LRU).
        cache_vectors: hold each indexed memory's vector (float32, 4 bytes × dimension) with
            its index entry, so lexical and neighbour candidates are scored without a store
            round trip; off: they are loaded from the inner store (two more round trips).
        held_search_max: users with at most this many indexed memories get the vector side
            from an exact search of their held vectors, not from the inner store (needs
            ``cache_vectors``; 0: always the inner store).
        Defaults are those of ``RetrievalSettings``.
    Raises ``ValueError`` for parameters out of range.
    """

    def __init__(
        self,
        inner,
        *,
        candidate_pool: int = _D.candidate_pool,
        fusion: Fusion = _D.fusion,
        rrf_k: int = _D.rrf_k,
        neighbor_weight: float = _D.neighbor_weight,
        neighbor_max_gap_s: float = _D.neighbor_max_gap_s,
        speaker_weight: float = _D.speaker_weight,
        temporal_weight: float = _D.temporal_weight,
        k1: float = _D.bm25_k1,
        b: float = _D.bm25_b,
        max_users: int = _D.max_index_users,
        cache_vectors: bool = _D.cache_vectors,
        held_search_max: int = _D.held_search_max,
    ):
        super().__init__(inner)
        if candidate_pool < 1 or rrf_k < 1:
            raise ValueError("candidate_pool and rrf_k must be ≥ 1")
        if fusion not in ("score", "rrf"):
            raise ValueError(f"unknown fusion {fusion!r}")
        if min(neighbor_weight, speaker_weight, temporal_weight, neighbor_max_gap_s) < 0:
            raise ValueError("weights and gaps must be ≥ 0")
        if held_search_max < 0:
            raise ValueError("held_search_max must be ≥ 0")
        self.candidate_pool = candidate_pool
        self.fusion = fusion
        self.rrf_k = rrf_k
        self.neighbor_weight = neighbor_weight
        self.neighbor_max_gap_s = neighbor_max_gap_s
        self.speaker_weight = speaker_weight
        self.temporal_weight = temporal_weight
        self.cache_vectors = cache_vectors
        self.held_search_max = held_search_max
        self.index = LexicalIndex(max_users=max_users, k1=k1, b=b, on_evict=self._evicted)
        self._timelines: dict[str, _Timeline] = {}
        self._held: dict[str, HeldVectors] = {}
        # write generation of each loaded user (a fresh value of one counter per write through
        # this decorator): a read that overlapped a write must not re-index what it read
        self._seq = itertools.count(1)
        self._gen: dict[str, int] = {}
        self._building: dict[str, list[tuple[str, Any]]] = {}
        self._build_tasks: dict[str, asyncio.Future] = {}
        try:
            self._inner_touch_kw = "touch" in inspect.signature(inner.retrieve).parameters
        except (TypeError, ValueError):
            self._inner_touch_kw = False

    @classmethod
    def from_settings(cls, inner, settings) -> HybridStore:
        """Build from ``memory_core.config.RetrievalSettings``."""
        return cls(
            inner,
            candidate_pool=settings.candidate_pool,
            fusion=settings.fusion,
            rrf_k=settings.rrf_k,
            neighbor_weight=settings.neighbor_weight,
            neighbor_max_gap_s=settings.neighbor_max_gap_s,
            speaker_weight=settings.speaker_weight,
            temporal_weight=settings.temporal_weight,
            k1=settings.bm25_k1,
            b=settings.bm25_b,
            max_users=settings.max_index_users,
            cache_vectors=settings.cache_vectors,
            held_search_max=settings.held_search_max,
        )

    # ------------------------------------------------------------------ index upkeep
    def _weights(self, lexical_weight: float) -> FusionWeights:
        return FusionWeights(
            fusion=self.fusion,
            lexical_weight=lexical_weight,
            rrf_k=self.rrf_k,
            neighbor_weight=self.neighbor_weight,
            speaker_weight=self.speaker_weight,
            temporal_weight=self.temporal_weight,
        )

    def _represents(self, text: str) -> bool:
        check = getattr(self.inner, "represents", None)
        return True if check is None else bool(check(text))

    def _evicted(self, user_id: str) -> None:
        self._timelines.pop(user_id, None)
        self._held.pop(user_id, None)
        self._gen.pop(user_id, None)

    def held_vector(self, user_id: str, memory_id: str) -> np.ndarray | None:
        """A copy of the unit vector held for ``memory_id`` of a loaded user, else None."""
        held = self._held.get(user_id)
        return held.get(memory_id) if held is not None else None

    def _index_memory(self, corpus: BM25Corpus, timeline: _Timeline, held: HeldVectors, memory: Memory) -> None:
        old = corpus.attrs(memory.id)
        if old:
            timeline.remove(old.get("group"), old.get("ts", 0.0), memory.id)
        body, speaker = split_speaker(memory)
        ts = memory.created_at.timestamp() if memory.created_at else 0.0
        group = _group_of(memory)
        key = _content_key(memory.content)
        attrs = {
            "key": key,
            "speaker_terms": frozenset(tokenize(speaker)) if speaker else frozenset(),
            "temporal": has_time_expression(body),
            "group": group,
            "ts": ts,
            # the embedding model can represent the content (else its cosine means nothing)
            "represented": self._represents(memory.content),
        }
        corpus.add(memory.id, body, project_id=memory.project_id, type=memory.type, attrs=attrs, state=memory.state)
        timeline.add(group, ts, memory.id)
        if not self.cache_vectors:
            return
        if memory.embedding is not None:
            held.put(memory.id, memory.embedding)  # an unusable vector drops the held one
        elif not (old and old.get("key") == key):
            held.remove(memory.id)  # same content keeps the vector held; new content has none yet

    def _unindex(self, user_id: str, memory_id: str) -> None:
        corpus = self.index.corpus(user_id)
        if corpus is None:
            return
        old = corpus.attrs(memory_id)
        if old and user_id in self._timelines:
            self._timelines[user_id].remove(old.get("group"), old.get("ts", 0.0), memory_id)
        corpus.remove(memory_id)
        if user_id in self._held:
            self._held[user_id].remove(memory_id)

    def _apply(self, user_id: str, op: str, arg: Any) -> None:
        """Apply a write to a loaded index, queue it for an index being built, or drop it
        (an unloaded user's index is built from the store later)."""
        if user_id in self._building:
            self._building[user_id].append((op, arg))
        corpus = self.index.corpus(user_id)
        if corpus is None:
            return
        self._gen[user_id] = next(self._seq)
        if op == "add":
            self._index_memory(corpus, self._timelines[user_id], self._held[user_id], arg)
        elif op == "remove":
            self._unindex(user_id, arg)
        elif op == "scope":
            if arg[1] == ():
                return
            for memory_id in corpus.remove_where(*arg):
                self._held[user_id].remove(memory_id)
            self._rebuild_timeline(user_id, corpus)

    def _rebuild_timeline(self, user_id: str, corpus: BM25Corpus) -> None:
        tl = _Timeline()
        for memory_id in corpus.ids():
            a = corpus.attrs(memory_id)
            assert a is not None  # an id from corpus.ids() is indexed
            tl.add(a.get("group"), a.get("ts", 0.0), memory_id)
        self._timelines[user_id] = tl

    async def _ensure_index(self, user_id: str) -> BM25Corpus:
        """The user's corpus, built from ``inner.list`` on first use (one build at a time)."""
        corpus = self.index.corpus(user_id)
        if corpus is not None:
            return corpus
        task = self._build_tasks.get(user_id)
        if task is None:
            task = asyncio.ensure_future(self._build(user_id))
            self._build_tasks[user_id] = task
            task.add_done_callback(lambda _t: self._build_tasks.pop(user_id, None))
        return await asyncio.shield(task)

    async def _build(self, user_id: str) -> BM25Corpus:
        self._building[user_id] = []
        try:
            corpus = BM25Corpus(self.index.k1, self.index.b)
            timeline = _Timeline()
            held = HeldVectors()
            offset = 0
            while True:
                page = await self.inner.list(ListQuery(user_id=user_id, limit=MAX_LIST_LIMIT, offset=offset))
                for m in page.memories:
                    if m.user_id == user_id:
                        self._index_memory(corpus, timeline, held, m)
                offset += page.rows
                if not page.rows or offset >= page.total:
                    break
            for op, arg in self._building[user_id]:
                if op == "add":
                    self._index_memory(corpus, timeline, held, arg)
                elif op == "remove":
                    old = corpus.attrs(arg)
                    if old:
                        timeline.remove(old.get("group"), old.get("ts", 0.0), arg)
                    corpus.remove(arg)
                    held.remove(arg)
                elif op == "scope" and arg[1] != ():
                    for memory_id in corpus.remove_where(*arg):
                        held.remove(memory_id)
            self._timelines[user_id] = timeline
            self._held[user_id] = held
            self._gen[user_id] = next(self._seq)
            self.index.load_user(user_id, corpus)
            if any(op == "scope" for op, _ in self._building[user_id]):
                self._rebuild_timeline(user_id, corpus)
            return corpus
        finally:
            self._building.pop(user_id, None)

    # ------------------------------------------------------------------ writes
    async def store(self, memory: Memory) -> Memory:
        stored = await self.inner.store(memory)
        self._apply(stored.user_id, "add", stored)
        return stored

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """As ``MemoryStore.store_many`` (all or nothing); indexes every stored record."""
        stored = await self.inner.store_many(memories)
        for memory in stored:
            self._apply(memory.user_id, "add", memory)
        return stored

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        updated = await self.inner.update(memory_id, user_id, changes)
        self._apply(user_id, "add", updated)
        return updated

    async def forget(self, memory_id: str, user_id: str) -> None:
        try:
            await self.inner.forget(memory_id, user_id)
        finally:
            self._apply(user_id, "remove", memory_id)

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        try:
            return await self.inner.forget_by_scope(scope)
        finally:
            self._apply(scope.user_id, "scope", (scope.project_id, _types_or_none(scope.types)))

    # ------------------------------------------------------------------ retrieve
    async def retrieve(self, options: RetrieveOptions, *, touch: bool = True) -> list[ScoredMemory]:
        """Hybrid top ``limit`` when ``options.hybrid`` (see the module docstring), else the
        inner store's retrieve. ``similarity`` is cosine; ``threshold`` is a cosine floor.
        Raises what ``MemoryStore.retrieve`` raises (``StoreClosed`` first, before any
        validation)."""
        if not options.hybrid:
            return await self.inner.retrieve(options, touch=touch)
        if self.closed:  # as MemoryStore.retrieve: a closed store refuses before validating
            raise StoreClosed(f"{self.name} store is closed")
        require_user_id(options.user_id)
        if not (0 < options.limit <= MAX_RETRIEVE_LIMIT):
            raise InvalidInput(f"limit must be in 1..{MAX_RETRIEVE_LIMIT}")
        if not math.isfinite(options.threshold):
            raise InvalidInput("threshold must be a finite number")
        user_id = options.user_id
        for _ in range(_PRUNED_RERANKS + 1):
            results, rank_again, vector = await self._ranked(options)
            if not rank_again:
                break
            # Held-vector candidates turned out deleted (or moved) behind this decorator while
            # they held places in the candidate pool: rank again without them (as a store
            # search would have), reusing the query vector.
            options = options.model_copy(update={"embedding": vector, "embedding_identity": None})
        if results and touch:
            now = await self.inner.record_access([r.memory.id for r in results], user_id)
            results = [
                r.model_copy(
                    update={
                        "memory": r.memory.model_copy(
                            update={"access_count": r.memory.access_count + 1, "last_accessed": now, "embedding": None}
                        )
                    }
                )
                for r in results
            ]
        return results

    async def _ranked(self, options: RetrieveOptions) -> tuple[list[ScoredMemory], bool, list[float] | None]:
        """(the hybrid top ``limit``, access counts untouched; whether to rank again: the held
        vectors were searched and a candidate read for the top turned out gone; the query
        vector, None when the query has none: not representable by the model, so ranked
        lexically only)."""
        user_id = options.user_id
        if not self.index.has_user(user_id):
            await self._ensure_index(user_id)  # before the vector search: its hits are then current
        pool = max(self.candidate_pool, options.limit)
        corpus = self.index.corpus(user_id)
        if corpus is None:  # evicted since the check above
            corpus = await self._ensure_index(user_id)
        # this user's index objects as of now: an eviction while this ranking awaits must not
        # take the held vectors or the timeline from under it
        held = self._held.get(user_id)
        timeline = self._timelines.get(user_id)
        if held is None or timeline is None:  # pragma: no cover - set with every loaded corpus
            held, timeline = HeldVectors(), _Timeline()
        gen = self._gen.get(user_id)
        # small enough to search the held vectors exactly, here, instead of the inner store
        held_search = self.cache_vectors and 0 < self.held_search_max and len(corpus) <= self.held_search_max
        # The vector side (embedding the query when no vector was given, then, unless the held
        # vectors are searched, the inner store's search) runs concurrently with the lexical
        # side (BM25 scoring here, then loading the candidates whose vector is not held): the
        # round trips overlap.
        q_terms = tokenize(options.query)
        # a query the model cannot represent is ranked lexically only: no vector side at all
        q_represented = not options.query or self._represents(options.query)
        vector_side = (
            asyncio.ensure_future(self._vector_side(options, pool, search_store=not held_search))
            if q_represented
            else None
        )
        try:
            lex_all = dict(corpus.score_terms(q_terms, None, options.project_id, options.types, options.states))
            lex_top = sorted(lex_all.items(), key=lambda kv: (-kv[1], kv[0]))[:pool]
            uncached = [i for i, _ in lex_top if i not in held]
            lex_loaded = await self._load(uncached, user_id, corpus)
        except BaseException:
            if vector_side is not None:
                vector_side.cancel()
                await asyncio.wait({vector_side})  # never raises: a cancel of this caller still gets through
                if not vector_side.cancelled():
                    vector_side.exception()  # retrieved: its outcome is moot now
            raise
        vector, store_hits = (await vector_side) if vector_side is not None else (None, [])
        q_set = set(q_terms)
        max_bm25 = lex_top[0][1] if lex_top else 0.0

        q = None
        if vector is not None:
            q = unit_vector(vector)
            if q is None:
                raise InvalidInput("query vector must be finite and non-zero")
        sim = _Similarity(q, q_terms, corpus)
        vec_top: list[tuple[str, Memory | None, float]] | None = None
        if q is not None and held_search:
            vec_top = await self._held_side(user_id, corpus, held, q, pool, options)
        held_used = vec_top is not None
        if vec_top is None and q is not None:  # the inner store's vector search (asked for now if it was not)
            if held_search:
                assert vector is not None  # q was made from it
                store_hits = await self._store_search(options, vector, pool)
            vec_top = []
            unchanged = gen is not None and self._gen.get(user_id) == gen
            for hit in store_hits:
                if unchanged:  # else a write through this decorator may be newer than the hit
                    self._reconcile(user_id, corpus, hit.memory)
                if sim.lexical_only(hit.memory.id):
                    continue  # a meaningless cosine: found lexically or not at all
                vec_top.append(
                    (hit.memory.id, hit.memory, cosine(unit_vector(hit.memory.embedding), q) or hit.similarity)
                )
        vec_top = vec_top or []
        # id → (record, similarity); the record is None until loaded (candidates scored from a
        # held vector are loaded only if they make the final top ``limit``)
        cands: dict[str, tuple[Memory | None, float]] = {i: (m, cos) for i, m, cos in vec_top}
        await self._add_candidates(
            [i for i, _ in lex_top if i not in cands], options, sim, corpus, held, cands, loaded=lex_loaded
        )

        vec_rank = {i: r for r, (i, _, _) in enumerate(vec_top, 1)}
        lex_rank = {i: r for r, (i, _) in enumerate(lex_top, 1)}
        when_q = options.temporal_boost and self.temporal_weight > 0 and temporal_intent(options.query)
        weights = self._weights(options.lexical_weight)

        def signals(memory_id: str, similarity: float) -> Signals:
            a = corpus.attrs(memory_id) or {}
            return Signals(
                similarity=similarity,
                bm25=lex_all.get(memory_id, 0.0),
                vector_rank=vec_rank.get(memory_id),
                lexical_rank=lex_rank.get(memory_id),
                temporal_match=bool(when_q and a.get("temporal")),
                speaker_named=bool(self.speaker_weight > 0 and a.get("speaker_terms") and a["speaker_terms"] & q_set),
            )

        sig = {i: signals(i, cos) for i, (_, cos) in cands.items()}
        base = {i: base_score(s, weights, max_bm25) for i, s in sig.items()}

        def neighbours(memory_id: str) -> list[str]:
            a = corpus.attrs(memory_id)
            return (
                timeline.neighbours(a.get("group"), a.get("ts", 0.0), memory_id, self.neighbor_max_gap_s) if a else []
            )

        if self.neighbor_weight > 0 and base:
            top = sorted(base, key=lambda i: -base[i])[: 2 * options.limit]
            extra = list(dict.fromkeys(n for i in top for n in neighbours(i) if n not in cands))
            if extra:
                await self._add_candidates(extra, options, sim, corpus, held, cands)
                for i in extra:
                    if i in cands and i not in base:
                        sig[i] = signals(i, cands[i][1])
                        base[i] = base_score(sig[i], weights, max_bm25)

        def score_of(memory_id: str) -> float:
            nb = [base[n] for n in neighbours(memory_id) if n in base] if self.neighbor_weight > 0 else []
            return final_score(base[memory_id], nb, sig[memory_id], weights)

        def rescore(memory_id: str, cos: float) -> float:
            """The score of a candidate whose stored vector turned out to differ from the held one."""
            sig[memory_id] = signals(memory_id, cos)
            base[memory_id] = base_score(sig[memory_id], weights, max_bm25)
            return score_of(memory_id)

        ranked = sorted(
            ((score_of(i), i) for i, (_, cos) in cands.items() if passes_floor(cos, options.threshold)),
            key=lambda t: (-t[0], t[1]),
        )
        results, dropped = await self._winners(ranked, cands, options, sim, corpus, rescore)
        return results, held_used and dropped, vector

    def _reconcile(self, user_id: str, corpus: BM25Corpus, memory: Memory) -> None:
        """Re-index ``memory`` when the index holds another version of its content (the store's
        record is the truth), or no vector while ``memory`` carries one. A memory the index
        lacks is not added here: a read that raced a delete must not bring it back."""
        attrs = corpus.attrs(memory.id)
        timeline = self._timelines.get(user_id)
        held = self._held.get(user_id)
        if timeline is None or held is None or attrs is None:
            return
        if attrs.get("key") != _content_key(memory.content):
            self._index_memory(corpus, timeline, held, memory)
        elif self.cache_vectors and memory.embedding is not None:
            held.put(memory.id, memory.embedding)  # the stored vector is the truth

    async def _vector_side(
        self, options: RetrieveOptions, pool: int, *, search_store: bool
    ) -> tuple[list[float], list[ScoredMemory]]:
        """(query vector, the inner store's top ``pool`` by cosine when ``search_store``, else
        ``[]``)."""
        vector = await self.inner.embed_query(options)
        return vector, (await self._store_search(options, vector, pool) if search_store else [])

    async def _store_search(self, options: RetrieveOptions, vector: list[float], pool: int) -> list[ScoredMemory]:
        """The inner store's top ``pool`` by cosine to ``vector``, access counts untouched."""
        vec_opts = options.model_copy(
            update={"embedding": vector, "embedding_identity": None, "limit": min(pool, 1000), "hybrid": False}
        )
        if self._inner_touch_kw:
            return await self.inner.retrieve(vec_opts, touch=False)
        return await self.inner.retrieve(vec_opts)  # a decorator without the hook bumps the pool

    async def _held_side(
        self, user_id: str, corpus: BM25Corpus, held: HeldVectors, q: np.ndarray, pool: int, options: RetrieveOptions
    ) -> list[tuple[str, Memory | None, float]] | None:
        """The top ``pool`` of the user's held vectors by cosine with ``q`` (exact), honouring
        ``project_id``/``types``, as (id, None, cosine) best first; None when the inner
        store must be searched instead (the index was evicted meanwhile, or more than
        ``MAX_LIST_LIMIT`` memories lack a held vector). Indexed memories without a held
        vector are read from the inner store first (one ``get_many``), which holds theirs."""
        if self._held.get(user_id) is not held or self.index.corpus(user_id) is not corpus:
            return None  # evicted meanwhile: writes since then are not in these objects
        if len(held) < len(corpus):
            missing = [i for i in corpus.ids() if i not in held]
            if len(missing) > MAX_LIST_LIMIT:
                return None
            await self._load(missing, user_id, corpus)
            if self._held.get(user_id) is not held:
                return None
        wanted = corpus.matching(options.project_id, options.types, options.states)
        # memories the model cannot represent have meaningless cosines: never a vector candidate
        keep = {i for i in wanted if (corpus.attrs(i) or {}).get("represented") is not False}.__contains__
        return [(i, None, cos) for i, cos in held.top(q, pool, keep)]

    async def _load(self, ids: Sequence[str], user_id: str, corpus: BM25Corpus) -> dict[str, Memory]:
        """``ids`` loaded from the inner store (those that exist and belong to ``user_id``);
        prunes from the index the ids the store no longer has and re-indexes the ones whose
        content changed behind this decorator."""
        if not ids:
            return {}
        gen = self._gen.get(user_id)
        found = {m.id: m for m in await self.inner.get_many(ids, user_id)}
        # a write through this decorator while the read was out may be newer than what it
        # read: then the read only answers, it does not touch the index
        upkeep = gen is not None and self._gen.get(user_id) == gen
        out: dict[str, Memory] = {}
        for memory_id in ids:
            m = found.get(memory_id)
            if m is None:
                if upkeep:
                    self._unindex(user_id, memory_id)
                continue
            if m.user_id != user_id:
                continue
            if upkeep:
                self._reconcile(user_id, corpus, m)
            out[memory_id] = m
        return out

    @staticmethod
    def _admit(
        memories: Sequence[Memory],
        options: RetrieveOptions,
        sim: _Similarity,
        into: dict[str, tuple[Memory | None, float]],
    ) -> None:
        """Add to ``into`` as (memory, similarity with the query, ``sim``) those of ``memories``
        that lie in the caller's scope (``RetrieveOptions.admits``: user, ``project_id``,
        ``types``, ``states``, not expired) and carry a finite vector."""
        now = utcnow()
        for m in memories:
            if not options.admits(m, now):
                continue
            cos = sim.of(m.id, unit_vector(m.embedding))
            if cos is not None:
                into[m.id] = (m, cos)

    async def _add_candidates(
        self,
        ids: Sequence[str],
        options: RetrieveOptions,
        sim: _Similarity,
        corpus: BM25Corpus,
        held: HeldVectors,
        into: dict[str, tuple[Memory | None, float]],
        *,
        loaded: dict[str, Memory] | None = None,
    ) -> None:
        """Add ``ids`` to ``into`` as (record or None, cosine): from ``loaded`` records, else
        from the vector the index holds (record None: loaded later if it wins), else loaded
        from the inner store now. ``loaded`` is the result of an earlier ``_load`` of every
        id here without a held vector, so an id it lacks is gone and is not loaded again.
        Candidates failing the ``project_id``/``types`` filters are left out."""
        need = []
        for memory_id in ids:
            if memory_id in into:
                continue
            if loaded is not None and memory_id in loaded:
                self._admit([loaded[memory_id]], options, sim, into)
                continue
            vec = held.get(memory_id)
            if vec is None:
                if loaded is None:
                    need.append(memory_id)
                continue
            cos = sim.of(memory_id, vec)
            if cos is not None and corpus.passes(memory_id, options.project_id, options.types, options.states):
                into[memory_id] = (None, cos)
        if need:
            fetched = await self._load(need, options.user_id, corpus)
            self._admit([fetched[i] for i in need if i in fetched], options, sim, into)

    async def _winners(
        self,
        ranked: Sequence[tuple[float, str]],
        cands: dict[str, tuple[Memory | None, float]],
        options: RetrieveOptions,
        sim: _Similarity,
        corpus: BM25Corpus,
        rescore: Callable[[str, float], float],
    ) -> tuple[list[ScoredMemory], bool]:
        """(the top ``options.limit`` of ``ranked`` ((score, id), best first) as results,
        whether a candidate read for them was dropped).

        Candidates scored from a held vector are read from the inner store (one ``get_many``
        per round, for the leading ones) before they are returned. One the store no longer has
        (deleted behind this decorator), or that fails the filters now, is dropped and the next
        ranked candidate moves up; one whose stored vector differs from the held one (changed
        behind this decorator, then re-indexed by ``_load``) gets its cosine from the stored
        vector and its score from ``rescore``, and is ranked again."""
        pending = list(ranked)
        out: list[ScoredMemory] = []
        dropped = False
        while pending and len(out) < options.limit:
            while pending and len(out) < options.limit and cands[pending[0][1]][0] is not None:
                score, memory_id = pending.pop(0)
                memory, cos = cands[memory_id]
                assert memory is not None  # the loop condition checked it
                if passes_floor(cos, options.threshold):
                    out.append(ScoredMemory(memory=memory, score=score, similarity=cos))
            if not pending or len(out) >= options.limit:
                break
            need = [i for _, i in pending[: options.limit - len(out)] if cands[i][0] is None]
            loaded = await self._load(need, options.user_id, corpus)
            rescored: dict[str, float] = {}
            for memory_id in need:
                fresh: dict[str, tuple[Memory | None, float]] = {}
                if memory_id in loaded:
                    self._admit([loaded[memory_id]], options, sim, fresh)
                if memory_id not in fresh:
                    del cands[memory_id]
                    # pruned from the index (deleted behind this decorator): a new ranking
                    # fills its place in the pool; a memory still indexed would come back
                    dropped = dropped or memory_id not in corpus
                    continue
                held = cands[memory_id][1]
                cands[memory_id] = fresh[memory_id]
                if abs(fresh[memory_id][1] - held) > 1e-6:
                    rescored[memory_id] = rescore(memory_id, fresh[memory_id][1])
            pending = sorted(
                ((rescored.get(i, score), i) for score, i in pending if i in cands), key=lambda t: (-t[0], t[1])
            )
        return out, dropped
