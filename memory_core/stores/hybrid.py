"""Hybrid (lexical + vector) retrieval as a store decorator, and the read path of a loaded user.

``HybridStore`` wraps any ``MemoryStore`` (or another ``StoreDecorator``) and keeps one
``stores.user_index.UserIndex`` per loaded user in step with it: the BM25 corpus
(``memory_core.retrieval.lexical``), the conversation timeline, the held vectors, the held
records (each memory without its vector), the write generation and the build state, held in
one LRU (``UserIndexes``) of ``max_users`` users. With ``RetrieveOptions.hybrid`` it ranks a
candidate set drawn from both sides; without, it is a plain pass-through.

Keeping the index in step — the rule
    Every write goes to the inner store first and is acknowledged only once the inner store
    has it: ``store``/``store_many``/``update`` (every write of ``stores.base.WRITE_METHODS``
    is overridden) index the record(s) the inner store returned, after the inner call
    succeeded (a refused batch indexes nothing). ``forget``/``forget_by_scope`` remove from the
    index whatever the outcome of the inner call (a delete never leaves an entry behind). A
    user's index is built lazily on that user's first hybrid retrieve from ``inner.list``
    (pages of 1000: on Milvus Lite one walk of the collection per page, see README
    "Measured"), and kept thereafter; writes that complete while it is being built are
    replayed onto it. **Writes must go through this decorator**: the store actor pool pins
    each user to one shard, so one decorator instance sees all of a user's writes. A write
    behind this decorator's back (another process on the same collection, a migration) is
    not seen until the user's index is rebuilt (restart, LRU eviction): the index, not a
    re-read of the store, answers a loaded user's reads.

Reads of a loaded user (``cache_vectors`` on, the default: records are held with the vectors)
    A retrieve's winners are the held records (no ``get_many``); ``get``/``get_many`` answer
    from the held records (with the held vector as ``embedding``), and so does ``list``
    (newest first over the held records, unless the build met unreadable records: ``list``'s
    docstring); ``record_access`` counts on
    the held record as the inner store's write-behind log counts it. So with the held search
    (users of at most ``held_search_max`` memories) a hybrid retrieve — curation's candidate
    search on every write included — makes no backend call at all, and its cost follows the
    user's memory count, not the collection's. Memories the index holds without a vector are
    read once from the store (which holds theirs). Without ``cache_vectors`` neither vectors
    nor records are held and every candidate is read from the store (one ``get_many`` for the
    lexical side, overlapping the query embedding, one for the neighbours); such a read that
    overlapped a write through this decorator answers but does not re-index.

Ranking: ``memory_core.retrieval.fusion`` (pure functions: weighted score fusion of the cosine
and max-normalised BM25, or RRF; a temporal bonus for "when" questions; the best adjacent
turn's score; a speaker bonus; with ``RetrieveOptions.diversity``, maximal marginal relevance
over the best ``2 · limit``, ``memory_core.retrieval.diversity``). ``prev``/``next`` are the memories adjacent in time
(``created_at``, then write order, then id) within the same ``conversation_id`` (a memory
without one has no neighbours), at most ``neighbor_max_gap_s`` apart: sessions are told apart by
the time between them, from what a client sends (``user_index.group_of``). The speaker is
read by ``memory_core.retrieval.speaker`` (an optional ``metadata["speaker"]``, else a leading
``"Name: "`` of the content); the lexical side indexes the content without that prefix (the
name would otherwise match every turn of the speaker) and the speaker is matched against the
query separately. ``similarity`` of every result is its
cosine (for text the embedding model cannot represent: the lexical coverage, see
``_Similarity``), and ``threshold`` is a floor on it for every candidate whichever side
found it.

Text the model cannot represent, with a fallback model (``embedding.fallback``:
``memory_core.embedding.fallback.FallbackModel``)
    Each memory the model cannot represent (``represents`` false: mostly ``[UNK]``) gets the
    fallback's passage vector, held in the user's index only (``UserIndex.fallback``: never
    written to the inner store, so two models' vectors never share a collection). A write
    embeds its own such memories after the inner store acknowledged it and the index applied
    it, waiting at most ``fallback_wait_s`` (the rest land in the background); a build of a
    user's index from the store embeds them all again (the build's first search waits at most
    ``fallback_wait_s`` too). A search the model cannot represent (``fallback_queries:
    "unrepresentable"``; ``"all"``: every search) of a user holding fallback vectors in its
    scope is embedded by the fallback too (as a query), concurrently with the lexical side;
    those memories are then vector candidates scored by the calibrated fallback cosine
    (``FallbackModel.scale_for``, the table of the search's script: the model's scale, so
    ``threshold`` keeps its meaning), ranked with the model's own vector candidates by that
    value. The encoder runs in worker threads, never on the event loop. A failing fallback encoder is counted
    (``on_event("fallback:error")``) and logged, and the search or write goes on as without the
    feature (such memories lexical only); memories left without a vector are retried by the
    next write, build or search of their user (searches at most once per
    ``FALLBACK_RETRY_S`` after a failure).

Candidates: the vector top ``candidate_pool`` (≥ ``limit``), the lexical top
``candidate_pool`` (honouring ``project_id``/``types``), and the neighbours of the
``2 · limit`` best of those. With ``cache_vectors`` lexical and neighbour candidates are scored
from the held vectors, and for a user with at most ``held_search_max`` memories the vector top
is an exact cosine search of the held vectors here (one matrix-vector product) instead of the
inner store's search; a larger user gets the inner store's vector search (whose records are
taken as they come, re-indexing any whose content differs from the index's). Only the returned
memories get their access counts bumped: the vector pool is read with
``inner.retrieve(..., touch=False)`` and the final top ``limit`` go through
``record_access`` (hooks of ``MemoryStore``/``StoreDecorator``). Compose a hot cache
(``CachingStore``) *outside* this decorator — it caches final answers; an inner decorator
whose ``retrieve`` lacks ``touch`` still works, but then the whole vector pool is counted as
accessed.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import inspect
import itertools
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..config import RetrievalSettings
from ..cpu_pool import CpuPool, yield_to_loop
from ..errors import (
    DuplicateMemory,
    EmbeddingIdentityMismatch,
    EmbeddingUnavailable,
    InvalidInput,
    MemoryNotFound,
    StoreClosed,
)
from ..retrieval.diversity import mmr_order
from ..retrieval.feedback import expansion_terms, hop_scores
from ..retrieval.fusion import Fusion, FusionWeights, Signals, base_score, final_score
from ..retrieval.held_vectors import cosine, unit_vector
from ..retrieval.lexical import BM25Corpus, tokenize
from ..retrieval.querytime import query_spans
from ..retrieval.timeparse import temporal_intent
from ..sanitize import require_user_id
from ..types import (
    ListQuery,
    ListResult,
    Memory,
    MemoryChanges,
    MemoryScope,
    MemoryState,
    MemoryType,
    RetrieveOptions,
    ScoredMemory,
    as_float32,
    passes_floor,
    utcnow,
)
from .base import MAX_LIST_LIMIT, MAX_RETRIEVE_LIMIT, StoreDecorator, check_retrieve_options, list_pages
from .user_index import IndexEntry, Timeline, UserIndex, UserIndexes, content_key

if TYPE_CHECKING:  # pragma: no cover
    from ..embedding.fallback import CosineCalibration, FallbackModel
    from ..retrieval.held_vectors import HeldVectors

log = logging.getLogger(__name__)
_D = RetrievalSettings()  # constructor defaults = the configuration defaults
HELD_RECORDS_PER_TURN = 64
"""Most held records ``get_many`` copies in one turn of the event loop (~40 µs each with
their vector: 2,000 at once held the loop that serves every user ~80 ms,
``benchmarks/loop_lag.py``'s consolidation, 2026-12-06)."""
BUILD_CHARS_PER_TURN = 64_000
"""Most content (characters) a user's index build puts into the index in one turn of the event
loop (``_put_read``; at least one memory a turn). Reading the texts (tokenizing, the coverage
check, the time and question rules) runs on the store's build thread; the loop only adds the
terms to the index. A page of ``MAX_LIST_LIMIT`` memories of 16 KB each read at once on the
loop held it for seconds; 64,000 characters of distinct words read there held it ~100 ms
(``benchmarks/loop_lag.py``, the first read of a long-notes user, 2026-12-07)."""
BUILD_INLINE_CHARS = 2_000
"""A build's read of fewer characters (a user of a few short memories: most first reads) is
done on the loop (``_put_read``): at most ~3 ms even for text of distinct words, less than
handing it to the build thread and back costs the request. Below ``BUILD_CHARS_PER_TURN``: a
full chunk always goes to the thread, and that await is the build's turn of the loop."""
assert BUILD_INLINE_CHARS <= BUILD_CHARS_PER_TURN
_PERIOD_YEARS = 200
"""Most years a period without a year ("in June") is looked for in: the latest ones the
user's memories cover."""
_MIN_TS = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_MAX_TS = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
FallbackQueries = Literal["unrepresentable", "all"]
FALLBACK_EVENTS = ("fallback:passage", "fallback:query", "fallback:error")
"""What ``HybridStore`` reports to ``on_event`` with a fallback model: a memory's passage
vector made, a search embedded by the fallback, a failed fallback encoder call."""
FALLBACK_WAIT_S = 2.0
"""Default most seconds a write, or the search that builds a user's index, waits for the
fallback vectors it needs (about 60 short passages with e5 on one thread here); the rest
are made in the background."""
FALLBACK_RETRY_S = 30.0
"""After a failed fallback encoder call, searches start no retry of the memories left
without a vector for this many seconds (writes and builds still try theirs)."""


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


@dataclass
class _FallbackScores:
    """The fallback side of one ranking: the fallback's query vector ``q`` (unit, float32
    ``[dim]``), the user's fallback vectors and the map onto the model's scale (the table of
    the query's script, ``FallbackModel.scale_for``)."""

    q: np.ndarray
    vectors: HeldVectors
    scale: CosineCalibration

    def of(self, memory_id: str) -> float | None:
        """The calibrated fallback cosine of ``memory_id`` (None: no fallback vector held)."""
        cos = cosine(self.vectors.get(memory_id), self.q)
        return None if cos is None else self.scale(cos)

    def top(self, k: int, allowed: np.ndarray) -> list[tuple[str, Memory | None, float]]:
        """The ``k`` best fallback vectors of the rows ``allowed`` marks, as (id, None,
        calibrated cosine), best first (ties by id)."""
        out: list[tuple[str, Memory | None, float]] = [
            (i, None, self.scale(c)) for i, c in self.vectors.top(self.q, k, allowed=allowed)
        ]
        out.sort(key=lambda t: (-t[2], t[0]))
        return out


@dataclass
class _Similarity:
    """The similarity of the query with each candidate, for one ranking: the cosine of the
    two vectors (``held_vectors.cosine``), except for a pair where either text is
    unrepresentable by the embedding model (``q`` is None, or the memory's index entry says
    ``represented: False``), whose cosine means nothing: then, for such a memory with a
    fallback vector when the fallback embedded the query (``fallback``), the calibrated
    fallback cosine; else the lexical coverage (``BM25Corpus.coverage``: the IDF-weighted
    share of the query's terms in the memory)."""

    q: np.ndarray | None
    terms: list[str]
    corpus: BM25Corpus
    fallback: _FallbackScores | None = None

    def lexical_only(self, memory_id: str) -> bool:
        """The model's cosine of this pair means nothing (either text unrepresentable)."""
        attrs = self.corpus.attrs(memory_id)
        return self.q is None or (attrs is not None and attrs.get("represented") is False)

    def of(self, memory_id: str, vec: np.ndarray | None) -> float | None:
        if self.fallback is not None:
            attrs = self.corpus.attrs(memory_id)
            if attrs is not None and attrs.get("represented") is False:
                scored = self.fallback.of(memory_id)
                if scored is not None:
                    return scored
        if self.lexical_only(memory_id):
            return as_float32(self.corpus.coverage(self.terms, memory_id))
        assert self.q is not None  # lexical_only is True without a query vector
        return cosine(vec, self.q)


@dataclass
class _Scoring:
    """The scores of one ranking's candidates (``memory_core.retrieval.fusion``): each
    candidate's signals and base score (``add``), its final score with its neighbours'
    (``score_of``), and a rescore when its stored vector turned out to differ from the held
    one (``rescore``)."""

    corpus: BM25Corpus
    timeline: Timeline
    weights: FusionWeights
    neighbor_max_gap_s: float
    neighbor_radius: int
    lex_all: dict[str, float]
    max_bm25: float
    vector_rank: dict[str, int]
    lexical_rank: dict[str, int]
    when_question: bool
    query_terms: set[str]
    speaker_weight: float
    hop_weight: float = 0.0
    in_period: frozenset[str] = frozenset()
    sig: dict[str, Signals] = field(default_factory=dict)
    base: dict[str, float] = field(default_factory=dict)
    hop: dict[str, float] = field(default_factory=dict)
    # each candidate's neighbours, looked up once per ranking (the seeds of the second hop,
    # the final order and the neighbour expansion all ask)
    _neighbours: dict[str, list[str]] = field(default_factory=dict)

    def signals(self, memory_id: str, similarity: float) -> Signals:
        a = self.corpus.attrs(memory_id) or {}
        return Signals(
            similarity=similarity,
            bm25=self.lex_all.get(memory_id, 0.0),
            vector_rank=self.vector_rank.get(memory_id),
            lexical_rank=self.lexical_rank.get(memory_id),
            temporal_match=bool(self.when_question and a.get("temporal")),
            speaker_named=bool(
                self.speaker_weight > 0 and a.get("speaker_terms") and a["speaker_terms"] & self.query_terms
            ),
            date_match=memory_id in self.in_period,
            asks=bool(a.get("asks")),
        )

    def add(self, memory_id: str, similarity: float) -> None:
        self.sig[memory_id] = self.signals(memory_id, similarity)
        self.base[memory_id] = base_score(self.sig[memory_id], self.weights, self.max_bm25)

    def neighbours(self, memory_id: str) -> list[str]:
        found = self._neighbours.get(memory_id)
        if found is not None:
            return found
        a = self.corpus.attrs(memory_id)
        found = (
            self.timeline.neighbours(
                a.get("group"),
                a.get("ts", 0.0),
                memory_id,
                self.neighbor_max_gap_s,
                a.get("seq", 0),
                self.neighbor_radius,
            )
            if a
            else []
        )
        self._neighbours[memory_id] = found
        return found

    def score_of(self, memory_id: str) -> float:
        nb = (
            [self.base[n] for n in self.neighbours(memory_id) if n in self.base]
            if self.weights.neighbor_weight > 0
            else []
        )
        score = final_score(self.base[memory_id], nb, self.sig[memory_id], self.weights)
        return score + self.hop_weight * self.hop.get(memory_id, 0.0)

    def rescore(self, memory_id: str, cos: float) -> float:
        """The score of a candidate whose stored vector turned out to differ from the held one."""
        self.add(memory_id, cos)
        return self.score_of(memory_id)


@dataclass
class UserWork:
    """The work under way for one user beside its held ``UserIndex`` (``HybridStore`` keeps one
    per user while anything is under way, and drops it once ``idle``): the index being built
    (``build``, until it is installed; writes meanwhile queue in its ``building``), the fill of
    the fallback vectors a held index lacks (``fill``: that index and the task), every
    fallback task of the user, writes' included (``background``: referenced here until it
    ends, since the event loop keeps no reference), and the (memory id, content key) pairs a
    task is making the fallback vector of now (``making``: a fill leaves them to that task)."""

    build: UserIndex | None = None
    fill: tuple[UserIndex, asyncio.Task] | None = None
    background: set[asyncio.Future] = field(default_factory=set)
    making: set[tuple[str, str]] = field(default_factory=set)

    @property
    def idle(self) -> bool:
        """Nothing under way: no build, no fill, no task, no claim."""
        return self.build is None and self.fill is None and not self.background and not self.making


_REFUSALS = (
    InvalidInput,
    MemoryNotFound,
    DuplicateMemory,
    EmbeddingIdentityMismatch,
    EmbeddingUnavailable,
    StoreClosed,
)
"""The errors an inner write raises before writing anything (``HybridStore._outcome_known``)."""

_NO_WORK = UserWork()
"""Read (never changed) where a user has no ``UserWork``: nothing under way."""


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
        speaker_weight: bonus when the memory's speaker (``retrieval.speaker``) is named in the
            query (≥ 0).
        temporal_weight: bonus, for queries asking when, to memories mentioning a time (≥ 0;
            applied when ``RetrieveOptions.temporal_boost``).
        k1, b: BM25 parameters. max_users: most user indexes held (LRU).
        cache_vectors: hold each indexed memory's vector (float32, 4 bytes × dimension) and
            record with its index entry, so candidates are scored and a loaded user's reads
            answered without a store round trip; off: they are loaded from the inner store.
        held_search_max: users with at most this many indexed memories get the vector side
            from an exact search of their held vectors, not from the inner store (needs
            ``cache_vectors``; 0: always the inner store).
        question_weight: how much lower a memory that asks ranks
            (``retrieval.questions``; ≥ 0; 0 disables).
        hop_weight, hop_seeds, hop_terms: the second hop (``retrieval.feedback``): weight of
            its max-normalised BM25 (≥ 0; 0 disables), first-hop memories seeding it (≥ 1),
            expansion terms taken from them (≥ 1).
        fallback: the model for text the inner store's model cannot represent
            (``embedding.fallback.FallbackModel``, see the module docstring); None: such text
            is ranked lexically only.
        fallback_queries: which searches the fallback embeds: ``"unrepresentable"`` (those
            the model cannot represent) or ``"all"`` (every search of a user holding
            fallback vectors in its scope).
        fallback_wait_s: most seconds a write or an index build waits for its fallback
            vectors (≥ 0; the rest are made in the background).
        on_event: called with each of ``FALLBACK_EVENTS`` as it happens (metrics).
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
        neighbor_radius: int = _D.neighbor_radius,
        speaker_weight: float = _D.speaker_weight,
        temporal_weight: float = _D.temporal_weight,
        k1: float = _D.bm25_k1,
        b: float = _D.bm25_b,
        max_users: int = _D.max_index_users,
        cache_vectors: bool = _D.cache_vectors,
        held_search_max: int = _D.held_search_max,
        hop_weight: float = _D.hop_weight,
        hop_seeds: int = _D.hop_seeds,
        hop_terms: int = _D.hop_terms,
        date_weight: float = _D.date_weight,
        date_slack_days: float = _D.date_slack_days,
        question_weight: float = _D.question_weight,
        fallback: FallbackModel | None = None,
        fallback_queries: FallbackQueries = "unrepresentable",
        fallback_wait_s: float = FALLBACK_WAIT_S,
        on_event: Callable[[str], None] | None = None,
    ):
        super().__init__(inner)
        if fallback_queries not in ("unrepresentable", "all"):
            raise ValueError(f"unknown fallback_queries {fallback_queries!r}")
        if fallback_wait_s < 0:
            raise ValueError("fallback_wait_s must be ≥ 0")
        self.fallback = fallback
        self.fallback_queries = fallback_queries
        self.fallback_wait_s = fallback_wait_s
        self._on_event = on_event
        # reads the texts of an index build (``_put_read``); its thread starts on first use
        self._build_pool = CpuPool(threads=1, name="index-build")
        # per user, the work under way beside the held index (``UserWork``): its build, the
        # fill of its fallback vectors, every fallback task; dropped once nothing is under way
        self._work: dict[str, UserWork] = {}
        self._fallback_failed_at = -float("inf")
        if candidate_pool < 1 or rrf_k < 1:
            raise ValueError("candidate_pool and rrf_k must be ≥ 1")
        if fusion not in ("score", "rrf"):
            raise ValueError(f"unknown fusion {fusion!r}")
        if min(neighbor_weight, speaker_weight, temporal_weight, neighbor_max_gap_s) < 0:
            raise ValueError("weights and gaps must be ≥ 0")
        if held_search_max < 0:
            raise ValueError("held_search_max must be ≥ 0")
        if hop_weight < 0 or hop_seeds < 1 or hop_terms < 1:
            raise ValueError("hop_weight must be ≥ 0, hop_seeds and hop_terms ≥ 1")
        if neighbor_radius < 1:
            raise ValueError("neighbor_radius must be ≥ 1")
        if date_weight < 0 or date_slack_days < 0:
            raise ValueError("date_weight and date_slack_days must be ≥ 0")
        if not 0 <= question_weight <= 1:  # NaN fails too
            raise ValueError("question_weight must be in [0, 1]")
        self.question_weight = question_weight
        self.neighbor_radius = neighbor_radius
        self.date_weight, self.date_slack_days = date_weight, date_slack_days
        self.hop_weight, self.hop_seeds, self.hop_terms = hop_weight, hop_seeds, hop_terms
        self.candidate_pool = candidate_pool
        self.fusion = fusion
        self.rrf_k = rrf_k
        self.neighbor_weight = neighbor_weight
        self.neighbor_max_gap_s = neighbor_max_gap_s
        self.speaker_weight = speaker_weight
        self.temporal_weight = temporal_weight
        self.cache_vectors = cache_vectors
        self.held_search_max = held_search_max
        # one UserIndex per loaded user (LRU of max_users): corpus, timeline, held vectors and
        # records, write generation; one being built is its user's ``UserWork.build`` until installed
        self.index = UserIndexes(max_users=max_users, k1=k1, b=b)
        # write generations (a fresh value of one counter per write through this decorator):
        # a read that overlapped a write must not re-index what it read
        self._seq = itertools.count(1)
        try:
            self._inner_touch_kw = "touch" in inspect.signature(inner.retrieve).parameters
        except (TypeError, ValueError):
            self._inner_touch_kw = False

    @classmethod
    def from_settings(cls, inner, settings, **kw: Any) -> HybridStore:
        """Build from ``memory_core.config.RetrievalSettings``; ``kw``: the other arguments
        (``fallback``, ``fallback_queries``, ``on_event``...)."""
        return cls(
            inner,
            candidate_pool=settings.candidate_pool,
            fusion=settings.fusion,
            rrf_k=settings.rrf_k,
            neighbor_weight=settings.neighbor_weight,
            neighbor_max_gap_s=settings.neighbor_max_gap_s,
            neighbor_radius=settings.neighbor_radius,
            speaker_weight=settings.speaker_weight,
            temporal_weight=settings.temporal_weight,
            k1=settings.bm25_k1,
            b=settings.bm25_b,
            max_users=settings.max_index_users,
            cache_vectors=settings.cache_vectors,
            held_search_max=settings.held_search_max,
            hop_weight=settings.hop_weight,
            hop_seeds=settings.hop_seeds,
            hop_terms=settings.hop_terms,
            date_weight=settings.date_weight,
            date_slack_days=settings.date_slack_days,
            question_weight=settings.question_weight,
            **kw,
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
            date_weight=self.date_weight,
            question_weight=self.question_weight,
        )

    def _represents(self, text: str) -> bool:
        check = getattr(self.inner, "represents", None)
        return True if check is None else bool(check(text))

    def held_vector(self, user_id: str, memory_id: str) -> np.ndarray | None:
        """A copy of the unit vector held for ``memory_id`` of a loaded user, else None."""
        ui = self.index.ready(user_id)
        return ui.held.get(memory_id) if ui is not None else None

    def fallback_vector(self, user_id: str, memory_id: str) -> np.ndarray | None:
        """A copy of the fallback's unit vector held for ``memory_id`` of a loaded user, else
        None."""
        ui = self.index.ready(user_id)
        return ui.fallback.get(memory_id) if ui is not None else None

    def _new_index(self) -> UserIndex:
        return UserIndex(
            BM25Corpus(self.index.k1, self.index.b),
            hold_vectors=self.cache_vectors,
            hold_records=self.cache_vectors,
            track_fallback=self.fallback is not None,
        )

    def _apply(self, user_id: str, op: str, arg: Any) -> None:
        """Apply a write to a loaded index, queue it for an index being built, or drop it
        (an unloaded user's index is built from the store later)."""
        work = self._work.get(user_id)
        build = work.build if work is not None else None
        if build is not None and build.building is not None:
            build.building.append((op, arg))
        ui = self.index.ready(user_id)
        if ui is None:
            return
        ui.gen = next(self._seq)
        ui.apply(op, arg, self._represents)

    async def _ensure_index(self, user_id: str) -> UserIndex:
        """The user's index, built from ``inner.list`` on first use (one build at a time)."""
        ui = self.index.ready(user_id)
        if ui is not None:
            return ui
        work = self._work_of(user_id)
        build = work.build
        if build is None or build.task is None:
            new = build = self._new_index()
            new.building = []
            work.build = new
            new.task = asyncio.ensure_future(self._build(user_id, new))

            def built(_t: asyncio.Future) -> None:
                if work.build is new:
                    work.build = None
                    self._settle(user_id, work)

            new.task.add_done_callback(built)
        assert build.task is not None
        return await asyncio.shield(build.task)

    async def _put_read(self, ui: UserIndex, memories: list[Memory]) -> None:
        """Put ``memories`` (a build's next ``BUILD_CHARS_PER_TURN`` characters) into ``ui``:
        their texts read (``IndexEntry.of``: tokenizing, the coverage check, the time and
        question rules) on this store's build thread (``_build_pool``; under
        ``BUILD_INLINE_CHARS`` in all, on the loop), then put into the index on the loop in one
        turn (``UserIndex.put_entry``). Awaiting the thread gives the loop to every other user
        meanwhile (the index is not installed yet: writes meanwhile queue in ``ui.building``).
        Raises ``StoreClosed`` once the store is closed."""
        if self.closed:  # the build thread is shut: refuse as every closed store does
            raise StoreClosed(f"{self.name} store is closed")
        if sum(len(m.content) for m in memories) < BUILD_INLINE_CHARS:
            entries = self._entries(memories)  # less than a thread's round trip costs
        else:
            entries = await self._build_pool.run(self._entries, memories)
        for m, entry in zip(memories, entries, strict=True):
            ui.put_entry(m, entry)

    def _entries(self, memories: list[Memory]) -> list[IndexEntry]:
        """``IndexEntry.of`` each of ``memories`` (a worker thread: pure CPU, thread-safe)."""
        return [IndexEntry.of(m, self._represents(m.content)) for m in memories]

    async def _build(self, user_id: str, ui: UserIndex) -> UserIndex:
        """Fill ``ui`` from ``inner.list`` (pages of ``MAX_LIST_LIMIT``; each
        ``BUILD_CHARS_PER_TURN`` characters read off the loop and put in one loop turn,
        ``_put_read``), replay the writes queued meanwhile, and hold it."""
        read = 0  # characters of the chunk not yet put (BUILD_CHARS_PER_TURN)
        accounted = 0  # writes queued in ui.building that the pages already allow for

        def step_back() -> int:
            """Rows to go back before the next page: one for each write queued since the last
            page was asked for that deleted or moved a memory (pages are read newest first by
            offset, and such a write shifts the later rows up), all of them after a scope
            deletion (an unknown number of rows). A row read twice is indexed twice, which
            changes nothing (``UserIndex.put_entry``); a row skipped would be missing from an index
            that claims to hold every memory."""
            nonlocal accounted
            since = (ui.building or [])[accounted:]
            accounted += len(since)
            if any(op == "scope" for op, _ in since):
                return sys.maxsize
            return sum(op in ("add", "remove") for op, _ in since)

        chunk: list[Memory] = []
        async for page in list_pages(self.inner, ListQuery(user_id=user_id, limit=MAX_LIST_LIMIT), step_back):
            ui.unreadable |= bool(page.unreadable)
            for m in page.memories:
                if m.user_id != user_id:
                    continue
                chunk.append(m)
                read += len(m.content)
                if read >= BUILD_CHARS_PER_TURN:
                    await self._put_read(ui, chunk)
                    chunk, read = [], 0
        if chunk:
            await self._put_read(ui, chunk)
        queued, ui.building = ui.building or [], None
        for op, arg in queued:
            ui.apply(op, arg, self._represents)
        ui.gen = next(self._seq)
        if ui.stale:  # a write of unknown outcome meanwhile (``_outcome_known``): answers this read only
            return ui
        self.index.put(user_id, ui)
        fill = self._request_fill(user_id, ui)
        if fill is not None:  # the vectors of two models never share a collection: made anew
            await asyncio.wait({fill}, timeout=self.fallback_wait_s)
        return ui

    # ------------------------------------------------------------------ the fallback model
    def _event(self, event: str, n: int = 1) -> None:
        if self._on_event is not None:
            for _ in range(n):
                self._on_event(event)

    def _work_of(self, user_id: str) -> UserWork:
        """The ``UserWork`` of ``user_id``, added when none is under way."""
        work = self._work.get(user_id)
        if work is None:
            work = self._work[user_id] = UserWork()
        return work

    def _settle(self, user_id: str, work: UserWork) -> None:
        """Drop ``work`` (``user_id``'s) once nothing is under way in it."""
        if work.idle and self._work.get(user_id) is work:
            del self._work[user_id]

    def _keep(self, user_id: str, future: asyncio.Future) -> asyncio.Future:
        """Hold a reference to a fallback task of ``user_id`` until it ends (the loop does not)."""
        work = self._work_of(user_id)
        work.background.add(future)

        def done(f: asyncio.Future) -> None:
            work.background.discard(f)
            self._settle(user_id, work)

        future.add_done_callback(done)
        return future

    async def _embed_fallback(self, user_id: str, items: Sequence[tuple[str, str, str]]) -> bool:
        """Make the fallback vectors of ``items`` ((memory id, content key, text)) and apply
        them to the user's index (or queue them for its build, ``_apply``); a text the
        fallback cannot embed either is marked as having none. Returns False when the
        encoder failed (counted, logged: those memories stay lexical only for now)."""
        fallback = self.fallback
        assert fallback is not None
        usable = [(i, key, text) for i, key, text in items if fallback.represents(text)]
        for i, key, text in items:
            if not fallback.represents(text):
                self._apply(user_id, "fallback", (i, key, None))
        if not usable:
            return True
        try:
            vectors = await fallback.embed_passages([text for _, _, text in usable])
        except Exception as e:  # the encoder's failure: rank as without the fallback
            self._fallback_failed_at = time.monotonic()
            self._event("fallback:error")
            log.warning("fallback model %s failed on %d stored texts: %r", fallback.label, len(usable), e)
            return False
        for (i, key, _), vector in zip(usable, vectors, strict=True):
            self._apply(user_id, "fallback", (i, key, vector))
        self._event("fallback:passage", len(usable))
        return True

    def _claim(self, user_id: str, items: Sequence[tuple[str, str, str]]) -> builtins.list[tuple[str, str, str]]:
        """Those of ``items`` ((memory id, content key, text)) no task is making the vector
        of, now marked as made by the caller (``_release`` them when it ends)."""
        work = self._work_of(user_id)
        out = [(i, key, text) for i, key, text in items if (i, key) not in work.making]
        work.making.update((i, key) for i, key, _ in out)
        self._settle(user_id, work)
        return out

    def _release(self, user_id: str, items: Sequence[tuple[str, str, str]]) -> None:
        """End the claim ``_claim`` gave on ``items``."""
        work = self._work.get(user_id)
        if work is not None:
            work.making.difference_update((i, key) for i, key, _ in items)
            self._settle(user_id, work)

    def _request_fill(self, user_id: str, ui: UserIndex) -> asyncio.Task | None:
        """The task making the fallback vectors ``ui`` (the user's held index) still lacks
        (``UserIndex.fallback_pending``): the one under way, or a new one; None when nothing
        is pending or there is no fallback."""
        if self.fallback is None or not ui.fallback_pending:
            return None
        work = self._work_of(user_id)
        if work.fill is not None and work.fill[0] is ui and not work.fill[1].done():
            return work.fill[1]  # (the fill of an evicted index stops at its next batch: not this one's)
        task = asyncio.ensure_future(self._fill(user_id, ui))
        entry = work.fill = (ui, task)
        self._keep(user_id, task)

        def filled(_t: asyncio.Future) -> None:
            if work.fill is entry:
                work.fill = None
                self._settle(user_id, work)

        task.add_done_callback(filled)
        return task

    async def _fill(self, user_id: str, ui: UserIndex) -> None:
        """Embed what ``ui`` lacks, ``passage_batch`` texts at a time, until nothing is
        pending but what writes' tasks are making, the encoder fails or ``ui`` is no longer
        the user's index."""
        assert self.fallback is not None
        batch = self.fallback.passage_batch
        while self.index.ready(user_id) is ui and ui.fallback_pending:
            work = self._work.get(user_id)
            making = work.making if work is not None else set()
            unclaimed = ((i, key, text) for i, (key, text) in ui.fallback_pending.items() if (i, key) not in making)
            items = self._claim(user_id, list(itertools.islice(unclaimed, batch)))
            if not items:
                return  # the rest are under way
            try:
                if not await self._embed_fallback(user_id, items):
                    return
            finally:
                self._release(user_id, items)

    async def fallback_settled(self, user_id: str) -> None:
        """Wait until the fallback vectors under way for ``user_id`` (writes' and the index's
        own) are made or given up on; nothing to wait for without a fallback. Never raises
        what those tasks raised (they count and log their failures)."""
        while (work := self._work.get(user_id)) is not None and work.background:
            await asyncio.wait(set(work.background))

    async def _fallback_after_write(self, user_id: str, memories: Sequence[Memory]) -> None:
        """Give the memories just written that the model cannot represent their fallback
        vectors, waiting at most ``fallback_wait_s`` (the rest land in the background, even
        if this write's caller goes away). Only for a user whose index is held or being built
        (another user's is built, with those vectors, on first use); a held index skips what
        already has its vector (same text)."""
        if self.fallback is None or not memories:
            return
        ui = self.index.ready(user_id)
        if ui is None and self._work.get(user_id, _NO_WORK).build is None:
            return
        items = []
        for m in memories:
            key = content_key(m.content)
            if ui is not None:
                wanted = ui.fallback_pending.get(m.id, ("",))[0] == key  # indexed, still without one
            else:
                wanted = not self._represents(m.content)  # the build's replay decides
            if wanted:
                items.append((m.id, key, m.content))
        items = self._claim(user_id, items)  # (one under way already is not made twice)
        task = self._keep(user_id, asyncio.ensure_future(self._embed_fallback(user_id, items))) if items else None
        if task is not None:
            task.add_done_callback(lambda _t: self._release(user_id, items))
        if ui is not None and len(ui.fallback_pending) > len(self._work.get(user_id, _NO_WORK).making):
            self._request_fill(user_id, ui)  # earlier ones left behind, no task making them
        if task is not None:
            await asyncio.wait({task}, timeout=self.fallback_wait_s)

    def _fallback_query_wanted(self, options: RetrieveOptions, ui: UserIndex, q_represented: bool) -> bool:
        """Whether the fallback embeds this search: a fallback, a query text it can embed,
        one the model cannot represent (or ``fallback_queries: "all"``), and fallback
        vectors of this user in the search's scope."""
        fallback = self.fallback
        if fallback is None or not options.query or not len(ui.fallback):
            return False
        if q_represented and self.fallback_queries != "all":
            return False
        if not ui.vector_mask(options.project_id, options.types, options.states, fallback=True).any():
            return False
        return fallback.represents(options.query)

    async def _fallback_query(self, text: str) -> np.ndarray | None:
        """The fallback's unit query vector of ``text``; None when its encoder failed
        (counted, logged: the search goes on as without the fallback)."""
        assert self.fallback is not None
        try:
            vector = await self.fallback.embed_query(text)
        except Exception as e:
            self._fallback_failed_at = time.monotonic()
            self._event("fallback:error")
            log.warning("fallback model %s failed on a search: %r", self.fallback.label, e)
            return None
        self._event("fallback:query")
        return unit_vector(vector)

    async def close(self) -> None:
        """Stop the fallback tasks under way, then close the inner store and the build thread."""
        for work in list(self._work.values()):
            for task in list(work.background):
                task.cancel()
        try:
            await self.inner.close()
        finally:
            self._build_pool.close()

    # ------------------------------------------------------------------ writes
    @contextlib.contextmanager
    def _outcome_known(self, *user_ids: str) -> Iterator[None]:
        """Around an inner write of ``user_ids``: when it raises anything but a refusal
        (``_REFUSALS``: raised before anything is written), what landed is unknown (a timeout
        after the commit, a cancellation, a delete done in part), so each user's held index
        is dropped and an index being built is detached and not installed
        (``UserIndex.stale``: it answers only the reads already waiting for it): the next
        read builds it again from the store, the record of what landed. Without this a
        listing, an export, a search or curation's duplicate check of the held records could
        miss a memory that was written, or keep one that was deleted. (A Qdrant or Valkey
        server that applies a cancelled request after the rebuild listed is not caught.)"""
        try:
            yield
        except _REFUSALS:
            raise
        except BaseException:
            for user_id in set(user_ids):
                self.index.drop_user(user_id)
                work = self._work.get(user_id)
                if work is not None and work.build is not None:
                    work.build.stale = True
                    work.build = None
                    self._settle(user_id, work)
            raise

    async def store(self, memory: Memory) -> Memory:
        """``MemoryStore.store``; indexes the stored record (and makes its fallback vector)."""
        with self._outcome_known(memory.user_id):
            stored = await self.inner.store(memory)
        self._apply(stored.user_id, "add", stored)
        await self._fallback_after_write(stored.user_id, [stored])
        return stored

    async def store_many(self, memories: Sequence[Memory]) -> builtins.list[Memory]:
        """As ``MemoryStore.store_many`` (all or nothing); indexes every stored record (and
        makes the fallback vectors)."""
        memories = builtins.list(memories)
        with self._outcome_known(*(m.user_id for m in memories if isinstance(m, Memory))):
            stored = await self.inner.store_many(memories)
        for memory in stored:
            self._apply(memory.user_id, "add", memory)
        if stored:
            await self._fallback_after_write(stored[0].user_id, stored)
        return stored

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        """``MemoryStore.update``; re-indexes the record (a new text gets a new fallback
        vector, the old one is dropped at once)."""
        with self._outcome_known(user_id):
            updated = await self.inner.update(memory_id, user_id, changes)
        self._apply(user_id, "add", updated)
        await self._fallback_after_write(user_id, [updated])
        return updated

    async def forget(self, memory_id: str, user_id: str) -> None:
        try:
            with self._outcome_known(user_id):
                await self.inner.forget(memory_id, user_id)
        finally:
            self._apply(user_id, "remove", memory_id)

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        try:
            with self._outcome_known(scope.user_id):
                return await self.inner.forget_by_scope(scope)
        finally:
            self._apply(scope.user_id, "scope", (scope.project_id, _types_or_none(scope.types)))

    # ------------------------------------------------------------------ reads of a loaded user
    def _served(self, user_id: str) -> UserIndex | None:
        """The built index that answers reads of ``user_id`` here (records held), else None:
        the inner store answers. Raises ``StoreClosed``, ``InvalidInput`` (empty user id)."""
        if self.closed:
            raise StoreClosed(f"{self.name} store is closed")
        require_user_id(user_id)
        ui = self.index.ready(user_id)
        return ui if ui is not None and ui.hold_records else None

    async def get(self, memory_id: str, user_id: str) -> Memory:
        """``MemoryStore.get``; a loaded user's memory comes from the held record (no store
        round trip): the index sees every write of the user (module docstring). Raises
        ``MemoryNotFound``, ``StoreClosed``, ``InvalidInput``."""
        ui = self._served(user_id)
        if ui is None:
            return await self.inner.get(memory_id, user_id)
        m = ui.record(memory_id)
        if m is None or m.user_id != user_id:
            raise MemoryNotFound(f"memory {memory_id!r} not found")
        return m

    async def get_many(self, memory_ids, user_id: str) -> builtins.list[Memory]:
        """``MemoryStore.get_many``; a loaded user's memories come from the held records."""
        ui = self._served(user_id)
        if ui is None:
            return await self.inner.get_many(memory_ids, user_id)
        ids = [i for i in dict.fromkeys(memory_ids) if isinstance(i, str)]
        out, copied = await self._held_in_turns(ids, user_id, ui)
        if copied < len(ids):  # evicted meanwhile: the store has the rest
            out += await self.inner.get_many(ids[copied:], user_id)
        return out

    async def _held_in_turns(
        self, ids: Sequence[str], user_id: str, ui: UserIndex
    ) -> tuple[builtins.list[Memory], int]:
        """The held records of ``ids`` (those ``ui`` holds, in ``ids``' order), copied
        ``HELD_RECORDS_PER_TURN`` a loop turn (a consolidation pass reads up to 2,000 records:
        not in one turn), and how many of ``ids`` were looked at: fewer than all when ``ui``
        stopped being the user's index between two turns (the caller asks the store for the
        rest)."""
        out: builtins.list[Memory] = []
        for start in range(0, len(ids), HELD_RECORDS_PER_TURN):
            if start:
                await yield_to_loop()
                if self.index.ready(user_id) is not ui:
                    return out, start
            out.extend(self._held_records(ids[start : start + HELD_RECORDS_PER_TURN], user_id, ui).values())
        return out, len(ids)

    async def list(self, query: ListQuery) -> ListResult:
        """``MemoryStore.list``; a loaded user's page comes from the held records, without a
        store call: the page's ids of the scope and states newest first (``created_at`` in
        epoch milliseconds as the persistent stores keep it, ``_records.to_ms``, then ``id``,
        both descending; ``total`` all of them), read from the records the index keeps in
        that order (``UserIndex.newest_first``: nothing sorted at a listing), and the page's
        records copied
        ``HELD_RECORDS_PER_TURN`` a loop turn, as ``get_many`` copies them. The inner store
        answers for a user not loaded, one whose index build met records it could not read
        (``ListResult.unreadable``: only the store lists them), and one whose index is evicted
        while the page is copied.

        Why: on Milvus Lite a listing walks every row of the collection (``_get_sync``'s
        measurement), on the store's one worker thread under the process's GIL, so each
        listing of one user slowed every other user's search on the shard; a consolidation
        pass lists its user twice (``benchmarks/lanes.py --ops consolidate``). Raises
        ``StoreClosed``, ``InvalidInput`` (empty user id)."""
        ui = self._served(query.user_id)
        if ui is None or ui.unreadable:
            return await self.inner.list(query)
        page, total = ui.newest_first(query.project_id, query.types, query.states, query.offset, query.limit)
        out, copied = await self._held_in_turns(page, query.user_id, ui)
        if copied < len(page):  # evicted meanwhile: the store answers
            return await self.inner.list(query)
        return ListResult(memories=out, total=total)

    async def same_content(
        self,
        user_id: str,
        content: str,
        *,
        project_id: str | None,
        types: tuple[MemoryType, ...],
        states: tuple[MemoryState, ...],
    ) -> builtins.list[Memory]:
        """``MemoryStore.same_content`` from this user's index (``UserIndex.same_content``:
        one lookup of the text's content key, no ranking), the records with their vectors
        (held, else loaded from the inner store). Raises ``StoreClosed``, ``InvalidInput``
        (empty user id), what the inner ``get_many`` raises."""
        if self.closed:
            raise StoreClosed(f"{self.name} store is closed")
        require_user_id(user_id)
        ui = await self._ensure_index(user_id)
        ids = ui.same_content(content, project_id, types, states)
        if not ids:
            return []
        found = self._held_records(ids, user_id, ui) if ui.hold_records else await self._load(ids, user_id, ui)
        return [
            m
            for m in (found.get(i) for i in ids)
            if m is not None and m.content == content and m.project_id == project_id and m.state in states
        ]

    async def record_access(self, memory_ids, user_id: str) -> datetime:
        """``MemoryStore.record_access`` (the inner store's write-behind log), and the same
        count on the held records of a loaded user."""
        ids = list(dict.fromkeys(memory_ids))
        now = await self.inner.record_access(ids, user_id)
        ui = self.index.ready(user_id)
        if ui is not None:
            ui.count_access(ids, now)
        return now

    # ------------------------------------------------------------------ retrieve
    async def retrieve(self, options: RetrieveOptions, *, touch: bool = True) -> builtins.list[ScoredMemory]:
        """Hybrid top ``limit`` when ``options.hybrid`` (see the module docstring), else the
        inner store's retrieve. ``similarity`` is cosine; ``threshold`` is a cosine floor.
        Raises what ``MemoryStore.retrieve`` raises (``StoreClosed`` first, before any
        validation)."""
        if not options.hybrid:
            return await self.inner.retrieve(options, touch=touch)
        if self.closed:  # as MemoryStore.retrieve: a closed store refuses before validating
            raise StoreClosed(f"{self.name} store is closed")
        check_retrieve_options(options)
        user_id = options.user_id
        results = await self._ranked(options)
        if results and touch:
            now = await self.record_access([r.memory.id for r in results], user_id)
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

    async def _ranked(self, options: RetrieveOptions) -> builtins.list[ScoredMemory]:
        """The hybrid top ``limit``, access counts untouched (a query the model cannot
        represent is ranked lexically only)."""
        user_id = options.user_id
        # before the vector search: its hits are then current. This user's index as of now: an
        # eviction while this ranking awaits does not take it from under the ranking
        ui = await self._ensure_index(user_id)
        pool = max(self.candidate_pool, options.limit)
        corpus, held, timeline, gen = ui.corpus, ui.held, ui.timeline, ui.gen
        if not corpus.count(options.project_id, options.types, options.states):
            # the built index holds every memory of the user: none in this scope, nothing to
            # rank (the query text is not embedded either: a fact search of a user who holds
            # only events, as each memory of a bulk import of events asks, costs a tally).
            # The request is still checked as a search would check it: a given vector
            # (dimension, identity) or a query text at all (``embed_query`` raises, embeds
            # nothing in either case)
            if options.embedding is not None or not options.query.strip():
                await self.inner.embed_query(options)
            return []
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
        # the fallback model's side, for text the model cannot represent: its query vector
        fallback_side = (
            asyncio.ensure_future(self._fallback_query(options.query))
            if self._fallback_query_wanted(options, ui, q_represented)
            else None
        )
        if ui.fallback_pending and not self._work.get(user_id, _NO_WORK).background:
            # memories left without a fallback vector (a failed or cancelled write): retried
            # in the background, not more often than FALLBACK_RETRY_S after a failure
            if time.monotonic() - self._fallback_failed_at >= FALLBACK_RETRY_S:
                self._request_fill(user_id, ui)
        try:
            lex_all = dict(corpus.score_terms(q_terms, None, options.project_id, options.types, options.states))
            # score_terms ranks best first, ties by id (the dict keeps that order): its head
            lex_top = list(itertools.islice(lex_all.items(), pool))
            uncached = [i for i, _ in lex_top if i not in held]
            lex_loaded = await self._load(uncached, user_id, ui)
            vector, store_hits = (await vector_side) if vector_side is not None else (None, [])
        except BaseException:
            for side in (vector_side, fallback_side):
                if side is not None:
                    side.cancel()
                    await asyncio.wait({side})  # never raises: a cancel of this caller still gets through
                    if not side.cancelled():
                        side.exception()  # retrieved: its outcome is moot now
            raise
        fallback_q = (await fallback_side) if fallback_side is not None else None

        q = None
        if vector is not None:
            q = unit_vector(vector)
            if q is None:
                raise InvalidInput("query vector must be finite and non-zero")
        assert self.fallback is not None or fallback_q is None
        sim = _Similarity(
            q,
            q_terms,
            corpus,
            _FallbackScores(fallback_q, ui.fallback, self.fallback.scale_for(options.query))
            if fallback_q is not None and self.fallback
            else None,
        )
        vec_top = await self._vector_top(options, ui, gen, sim, vector, store_hits, pool, held_search)
        if sim.fallback is not None:  # the fallback's candidates, on the model's scale, ranked with the model's
            allowed = ui.vector_mask(options.project_id, options.types, options.states, fallback=True)
            vec_top = sorted([*vec_top, *sim.fallback.top(pool, allowed)], key=lambda t: (-t[2], t[0]))
        # id → (record, similarity); the record is None until loaded (candidates scored from a
        # held vector are loaded only if they make the final top ``limit``)
        cands: dict[str, tuple[Memory | None, float]] = {i: (m, cos) for i, m, cos in vec_top}
        await self._add_candidates(
            [i for i, _ in lex_top if i not in cands], options, sim, ui, cands, loaded=lex_loaded
        )
        scoring = _Scoring(
            corpus=corpus,
            timeline=timeline,
            weights=self._weights(options.lexical_weight),
            neighbor_max_gap_s=self.neighbor_max_gap_s,
            neighbor_radius=self.neighbor_radius,
            lex_all=lex_all,
            max_bm25=lex_top[0][1] if lex_top else 0.0,
            vector_rank={i: r for r, (i, _, _) in enumerate(vec_top, 1)},
            lexical_rank={i: r for r, (i, _) in enumerate(lex_top, 1)},
            when_question=bool(options.temporal_boost and self.temporal_weight > 0 and temporal_intent(options.query)),
            query_terms=set(q_terms),
            speaker_weight=self.speaker_weight,
            hop_weight=self.hop_weight,
        )
        if self.date_weight > 0:
            scoring.in_period = await self._period_candidates(options, ui, sim, lex_all, pool, held_search, cands)
        for i, (_, cos) in cands.items():
            scoring.add(i, cos)
        if self.neighbor_weight > 0 and scoring.base:
            top = sorted(scoring.base, key=lambda i: -scoring.base[i])[: 2 * options.limit]
            extra = list(dict.fromkeys(n for i in top for n in scoring.neighbours(i) if n not in cands))
            if extra:
                await self._add_candidates(extra, options, sim, ui, cands)
                for i in extra:
                    if i in cands and i not in scoring.base:
                        scoring.add(i, cands[i][1])
        if self.hop_weight > 0 and options.second_hop and scoring.base:
            await self._second_hop(scoring, q_terms, pool, options, sim, ui, cands)
        ranked = sorted(
            ((scoring.score_of(i), i) for i, (_, cos) in cands.items() if passes_floor(cos, options.threshold)),
            key=lambda t: (-t[0], t[1]),
        )
        if options.diversity <= 0 or not self.cache_vectors:
            return await self._winners(ranked, cands, options, sim, ui, scoring.rescore, options.limit)
        # maximal marginal relevance over twice the limit (``diversify``)
        depth = min(2 * options.limit, MAX_RETRIEVE_LIMIT)
        return self._diversify(
            await self._winners(ranked, cands, options, sim, ui, scoring.rescore, depth), options, ui
        )

    def diversify(self, results: Sequence[ScoredMemory], options: RetrieveOptions) -> builtins.list[ScoredMemory]:
        """``results`` (best first, memories of ``options.user_id``) reordered by maximal
        marginal relevance with weight ``options.diversity`` (``retrieval.diversity.mmr_order``;
        only with ``options.hybrid``),
        the first ``options.limit``, each ``score`` the pick's marginal relevance. The vectors
        are those the user's index holds now (``cache_vectors``); a memory without one (the
        user's index not loaded — evicted since a cached answer was made, say —, ``cache_vectors``
        off) or whose vector means nothing (the model cannot represent its text) is neither
        penalised nor penalises others: without any, the order is the plain one. The cosines
        are between memories, so a query the model cannot represent is diversified too.
        ``_ranked`` applies it to its best ``2 × limit`` (with the index it ranked with);
        ``CuratingStore`` to its hits once superseded ones stand for the memories that
        replaced them."""
        return self._diversify(results, options, self.index.ready(options.user_id))

    @staticmethod
    def _diversify(
        results: Sequence[ScoredMemory], options: RetrieveOptions, ui: UserIndex | None
    ) -> builtins.list[ScoredMemory]:
        """``diversify`` with the vectors of ``ui`` (None: none); the plain order without
        ``options.hybrid`` or with ``options.diversity`` 0 (the rule is part of the hybrid
        ranking)."""
        if options.diversity <= 0 or not options.hybrid:
            return list(results[: options.limit])
        vectors: dict[str, np.ndarray] = {}
        if ui is not None:
            for r in results:
                attrs = ui.corpus.attrs(r.memory.id)
                vec = ui.held.get(r.memory.id) if attrs is not None and attrs.get("represented") is not False else None
                if vec is not None:
                    vectors[r.memory.id] = vec
        by_id = {r.memory.id: r for r in results}
        order = mmr_order([(r.memory.id, r.score) for r in results], vectors, options.diversity, options.limit)
        return [by_id[memory_id].model_copy(update={"score": score}) for memory_id, score in order]

    async def _period_candidates(
        self,
        options: RetrieveOptions,
        ui: UserIndex,
        sim: _Similarity,
        lex_all: dict[str, float],
        pool: int,
        held_search: bool,
        cands: dict[str, tuple[Memory | None, float]],
    ) -> frozenset[str]:
        """The memories created within the periods the query names (``retrieval.querytime``,
        each widened by ``date_slack_days``; a period without a year in each year the user's
        memories cover, widened by that slack, at most ``_PERIOD_YEARS`` of them, the latest); empty when it names
        none. The best ``pool`` of them by BM25 and, with the held search, by cosine join
        ``cands``: a memory of that time is ranked even when neither side's overall top
        found it."""
        spans = query_spans(options.query)
        bounds = ui.timeline.span() if spans else None
        if bounds is None:
            return frozenset()
        # the years whose period, widened by the slack, can hold one of the user's memories
        slack_s = self.date_slack_days * 86400.0
        lo, hi = max(bounds[0] - slack_s, _MIN_TS), min(bounds[1] + slack_s, _MAX_TS)
        first, last = (datetime.fromtimestamp(t, UTC).year for t in (lo, hi))
        years = range(max(first, last - _PERIOD_YEARS + 1, 1), min(last, 9998) + 1)
        period: set[str] = set()
        for span in spans:
            for start, end in span.intervals(self.date_slack_days, years):
                period.update(ui.timeline.between(start, end))
        if not period:
            return frozenset()
        lexical = sorted(((s, i) for i, s in lex_all.items() if i in period), key=lambda t: (-t[0], t[1]))[:pool]
        extra = [i for _, i in lexical]
        if held_search and sim.q is not None and len(ui.held) >= len(ui.corpus):
            allowed = ui.vector_mask(options.project_id, options.types, options.states) & ui.held.mask_of(period)
            extra += [i for i, _ in ui.held.top(sim.q, pool, allowed=allowed)]
        await self._add_candidates([i for i in dict.fromkeys(extra) if i not in cands], options, sim, ui, cands)
        return frozenset(period)

    async def _second_hop(
        self,
        scoring: _Scoring,
        q_terms: builtins.list[str],
        pool: int,
        options: RetrieveOptions,
        sim: _Similarity,
        ui: UserIndex,
        cands: dict[str, tuple[Memory | None, float]],
    ) -> None:
        """The second hop (``retrieval.feedback``): seeds are the ``hop_seeds`` best
        candidates so far (their speakers' name terms are no expansion terms); the second
        hop's top ``pool`` join the candidates and every candidate's score gains
        ``hop_weight`` × its second-hop signal (``scoring.hop``)."""
        corpus = scoring.corpus
        seeds = sorted(scoring.base, key=lambda i: (-scoring.score_of(i), i))[: self.hop_seeds]
        speakers = {t for i in seeds for t in (corpus.attrs(i) or {}).get("speaker_terms", ())}
        terms = expansion_terms(corpus, seeds, q_terms, self.hop_terms, exclude=speakers)
        scoring.hop = hop_scores(corpus, terms, pool, options.project_id, options.types, options.states)
        extra = [i for i in scoring.hop if i not in cands]
        if extra:
            await self._add_candidates(extra, options, sim, ui, cands)
            for i in extra:
                if i in cands and i not in scoring.base:
                    scoring.add(i, cands[i][1])

    async def _vector_top(
        self,
        options: RetrieveOptions,
        ui: UserIndex,
        gen: int,
        sim: _Similarity,
        vector: builtins.list[float] | None,
        store_hits: builtins.list[ScoredMemory],
        pool: int,
        held_search: bool,
    ) -> builtins.list[tuple[str, Memory | None, float]]:
        """The vector side's top ``pool`` as (id, record or None, cosine), best first: the
        held search when ``held_search`` (and it can answer), else the inner store's hits
        (``store_hits``, or asked for now), re-indexing what they show changed unless a write
        through this decorator came since ``gen``; none without a query vector."""
        if sim.q is None:
            return []
        if held_search:
            vec_top = await self._held_side(options.user_id, ui, sim.q, pool, options)
            if vec_top is not None:
                return vec_top
            assert vector is not None  # q was made from it
            store_hits = await self._store_search(options, vector, pool)
        out: builtins.list[tuple[str, Memory | None, float]] = []
        unchanged = self._current(options.user_id, ui, gen)
        for hit in store_hits:
            if unchanged:  # else a write through this decorator may be newer than the hit
                self._reconcile(ui, hit.memory)
            if sim.lexical_only(hit.memory.id):
                continue  # a meaningless cosine: found lexically or not at all
            out.append((hit.memory.id, hit.memory, cosine(unit_vector(hit.memory.embedding), sim.q) or hit.similarity))
        return out

    def _current(self, user_id: str, ui: UserIndex, gen: int) -> bool:
        """``ui`` is still the user's held index and no write applied to it since ``gen``."""
        return self.index.ready(user_id) is ui and ui.gen == gen

    def _reconcile(self, ui: UserIndex, memory: Memory) -> None:
        """Re-index ``memory`` (a record the store returned) when the index holds another
        version of its content, or no vector while ``memory`` carries one. A memory the index
        lacks is not added here: a read that raced a delete must not bring it back."""
        attrs = ui.corpus.attrs(memory.id)
        if attrs is None:
            return
        if attrs.get("key") != content_key(memory.content):
            ui.put(memory, self._represents(memory.content))
        elif self.cache_vectors and memory.embedding is not None:
            ui.held.put(memory.id, memory.embedding)

    async def _vector_side(
        self, options: RetrieveOptions, pool: int, *, search_store: bool
    ) -> tuple[builtins.list[float], builtins.list[ScoredMemory]]:
        """(query vector, the inner store's top ``pool`` by cosine when ``search_store``, else
        ``[]``)."""
        vector = await self.inner.embed_query(options)
        return vector, (await self._store_search(options, vector, pool) if search_store else [])

    async def _store_search(
        self, options: RetrieveOptions, vector: builtins.list[float], pool: int
    ) -> builtins.list[ScoredMemory]:
        """The inner store's top ``pool`` by cosine to ``vector``, access counts untouched."""
        vec_opts = options.model_copy(
            update={"embedding": vector, "embedding_identity": None, "limit": min(pool, 1000), "hybrid": False}
        )
        if self._inner_touch_kw:
            return await self.inner.retrieve(vec_opts, touch=False)
        return await self.inner.retrieve(vec_opts)  # a decorator without the hook bumps the pool

    async def _held_side(
        self, user_id: str, ui: UserIndex, q: np.ndarray, pool: int, options: RetrieveOptions
    ) -> builtins.list[tuple[str, Memory | None, float]] | None:
        """The top ``pool`` of the user's held vectors by cosine with ``q`` (exact), honouring
        ``project_id``/``types``, as (id, None, cosine) best first; None when the inner
        store must be searched instead (the index was evicted meanwhile, or more than
        ``MAX_LIST_LIMIT`` memories lack a held vector). Indexed memories without a held
        vector are read from the inner store first (one ``get_many``), which holds theirs."""
        corpus, held = ui.corpus, ui.held
        if self.index.ready(user_id) is not ui:
            return None  # evicted meanwhile: writes since then are not in this index
        if len(held) < len(corpus):
            missing = [i for i in corpus.ids() if i not in held]
            if len(missing) > MAX_LIST_LIMIT:
                return None
            await self._load(missing, user_id, ui)
            if self.index.ready(user_id) is not ui:
                return None
        # the scope's rows, memories the model cannot represent left out (their cosines mean
        # nothing: never a vector candidate); made once per scope between writes
        allowed = ui.vector_mask(options.project_id, options.types, options.states)
        return [(i, None, cos) for i, cos in held.top(q, pool, allowed=allowed)]

    @staticmethod
    def _held_records(ids: Sequence[str], user_id: str, ui: UserIndex) -> dict[str, Memory]:
        """The held records (with their held vectors) of those of ``ids`` that ``ui`` holds
        and ``user_id`` owns; no store round trip."""
        out = {}
        for memory_id in ids:
            m = ui.record(memory_id)
            if m is not None and m.user_id == user_id:
                out[memory_id] = m
        return out

    async def _load(self, ids: Sequence[str], user_id: str, ui: UserIndex) -> dict[str, Memory]:
        """``ids`` loaded from the inner store (those that exist and belong to ``user_id``);
        prunes from the index the ids the store no longer has and re-indexes the ones whose
        content differs from the index's."""
        if not ids:
            return {}
        gen = ui.gen
        found = {m.id: m for m in await self.inner.get_many(ids, user_id)}
        # a write through this decorator while the read was out may be newer than what it
        # read: then the read only answers, it does not touch the index
        upkeep = self._current(user_id, ui, gen)
        out: dict[str, Memory] = {}
        for memory_id in ids:
            m = found.get(memory_id)
            if m is None:
                if upkeep:
                    ui.remove(memory_id)
                continue
            if m.user_id != user_id:
                continue
            if upkeep:
                self._reconcile(ui, m)
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
        ui: UserIndex,
        into: dict[str, tuple[Memory | None, float]],
        *,
        loaded: dict[str, Memory] | None = None,
    ) -> None:
        """Add ``ids`` to ``into`` as (record or None, cosine): from ``loaded`` records, else
        from the vector the index holds (record None: loaded later if it wins), else loaded
        from the inner store now. ``loaded`` is the result of an earlier ``_load`` of every
        id here without a held vector, so an id it lacks is gone and is not loaded again.
        Candidates failing the ``project_id``/``types`` filters are left out."""
        corpus, held = ui.corpus, ui.held
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
            fetched = await self._load(need, options.user_id, ui)
            self._admit([fetched[i] for i in need if i in fetched], options, sim, into)

    async def _winners(
        self,
        ranked: Sequence[tuple[float, str]],
        cands: dict[str, tuple[Memory | None, float]],
        options: RetrieveOptions,
        sim: _Similarity,
        ui: UserIndex,
        rescore: Callable[[str, float], float],
        limit: int,
    ) -> builtins.list[ScoredMemory]:
        """The top ``limit`` of ``ranked`` ((score, id), best first) as results.

        Candidates scored from a held vector take the index's held record (records held: no
        store round trip); one without a held record is read from the inner store (one
        ``get_many`` per round, for the leading ones). One the store no longer has, or that
        fails the filters now, is dropped and the next ranked candidate moves up; one whose
        stored vector differs from the held one (re-indexed by ``_load``) gets its cosine from
        the stored vector and its score from ``rescore``, and is ranked again."""
        pending = list(ranked)
        out: builtins.list[ScoredMemory] = []
        while pending and len(out) < limit:
            while pending and len(out) < limit and cands[pending[0][1]][0] is not None:
                score, memory_id = pending.pop(0)
                memory, cos = cands[memory_id]
                assert memory is not None  # the loop condition checked it
                if passes_floor(cos, options.threshold):
                    out.append(ScoredMemory(memory=memory, score=score, similarity=cos))
            if not pending or len(out) >= limit:
                break
            need = [i for _, i in pending[: limit - len(out)] if cands[i][0] is None]
            loaded = self._held_records(need, options.user_id, ui)
            loaded.update(await self._load([i for i in need if i not in loaded], options.user_id, ui))
            rescored: dict[str, float] = {}
            for memory_id in need:
                fresh: dict[str, tuple[Memory | None, float]] = {}
                if memory_id in loaded:
                    self._admit([loaded[memory_id]], options, sim, fresh)
                if memory_id not in fresh:
                    del cands[memory_id]
                    continue
                held = cands[memory_id][1]
                cands[memory_id] = fresh[memory_id]
                if abs(fresh[memory_id][1] - held) > 1e-6:
                    rescored[memory_id] = rescore(memory_id, fresh[memory_id][1])
            pending = sorted(
                ((rescored.get(i, score), i) for score, i in pending if i in cands), key=lambda t: (-t[0], t[1])
            )
        return out
