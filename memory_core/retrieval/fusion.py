"""The ranking of hybrid retrieval as pure functions: what each candidate brings
(``Signals``), how the signals combine (``base_score``, ``final_score``), under which weights
(``FusionWeights``). ``memory_core.stores.hybrid.HybridStore`` gathers the candidates and
their signals; this module decides their order, and can be read and tested alone.

All terms are on the scale of cosine similarity; all but the cosine and the last (the
question discount) are ≥ 0, so a score can be negative (the reflection gate decays such a
score by subtraction, ``memory_core.chat.gate.decayed_score``)::

    base(d)  = (1 − w) · sim(q, d) + w · bm25(q, d) / max_d' bm25(q, d')     fusion="score"
             | ((1 − w) · rrf_vec(d) + w · rrf_lex(d)) · (k + 1)              fusion="rrf"
             + temporal_weight · [q asks "when…" and d mentions a time]
    score(d) = base(d) + neighbor_weight · max(base(n) for n in window(d))
             + speaker_weight · [d's speaker is named in q]
             + date_weight · [d was created within a period q names]
             − question_weight · [d asks: its text ends with a question mark]

``w`` = ``lexical_weight``. ``sim`` is the cosine (or, for text the embedding model cannot
represent, the lexical coverage: see ``HybridStore``). RRF: reciprocal rank fusion,
rrf(d) = 1 / (k + rank) (Cormack, Clarke & Büttcher, SIGIR 2009), k = ``rrf_k``; the ``k + 1``
factor puts a first rank at 1, the scale of a cosine. BM25: Robertson & Zaragoza 2009 (see
``memory_core.retrieval.lexical``). ``window(d)``: the ``neighbor_radius`` memories before and
after ``d`` in time within the same conversation, a session's context (``HybridStore`` finds
them); a neighbour counts only when it is a candidate itself. The periods a query names ("on 1 May, 2022", "in June") are read by
``memory_core.retrieval.querytime``; ``HybridStore`` matches them against ``created_at``. A memory that asks
(``memory_core.retrieval.questions``) states nothing of its own: it ranks ``question_weight``
lower, while its base score still counts as context for its neighbours (the answer after it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Fusion = Literal["score", "rrf"]


@dataclass(frozen=True)
class FusionWeights:
    """The constants of the ranking (``config.RetrievalSettings`` holds their defaults and how
    they were chosen). ``lexical_weight`` is clamped to [0, 1]."""

    fusion: Fusion
    lexical_weight: float
    rrf_k: int
    neighbor_weight: float
    speaker_weight: float
    temporal_weight: float
    date_weight: float = 0.0
    question_weight: float = 0.0

    @property
    def w(self) -> float:
        return min(max(self.lexical_weight, 0.0), 1.0)


@dataclass(frozen=True)
class Signals:
    """What one candidate brings: its ``similarity`` with the query; its BM25 score (0 when the
    lexical side did not find it); its 1-based ranks on the vector and the lexical side
    (``None``: not found there); whether the query asks when and the memory mentions a time
    (``temporal_match``); whether the memory's speaker is named in the query; whether the
    memory was created within a period the query names (``date_match``); whether the memory
    asks rather than states (``asks``, ``memory_core.retrieval.questions``)."""

    similarity: float
    bm25: float = 0.0
    vector_rank: int | None = None
    lexical_rank: int | None = None
    temporal_match: bool = False
    speaker_named: bool = False
    date_match: bool = False
    asks: bool = False


def base_score(signals: Signals, weights: FusionWeights, max_bm25: float) -> float:
    """``base(d)`` of the module docstring. ``max_bm25``: the best BM25 score of the query
    over the user's memories (0: no lexical hit at all)."""
    w = weights.w
    if weights.fusion == "rrf":
        k = weights.rrf_k
        rv = 1.0 / (k + signals.vector_rank) if signals.vector_rank is not None else 0.0
        rl = 1.0 / (k + signals.lexical_rank) if signals.lexical_rank is not None else 0.0
        score = ((1 - w) * rv + w * rl) * (k + 1)
    else:
        score = (1 - w) * signals.similarity + (w * signals.bm25 / max_bm25 if max_bm25 > 0 else 0.0)
    if signals.temporal_match:
        score += weights.temporal_weight
    return score


def final_score(base: float, neighbour_bases: Iterable[float], signals: Signals, weights: FusionWeights) -> float:
    """``score(d)`` of the module docstring: ``base`` plus the best of ``neighbour_bases``
    (the base scores of the adjacent memories that are candidates) weighted by
    ``neighbor_weight``, plus ``speaker_weight`` when the speaker is named and
    ``date_weight`` when the memory lies in a period the query names, minus
    ``question_weight`` when the memory asks."""
    score = base
    best = max(neighbour_bases, default=None)
    if weights.neighbor_weight > 0 and best is not None:
        score += weights.neighbor_weight * best
    if signals.speaker_named:
        score += weights.speaker_weight
    if signals.date_match:
        score += weights.date_weight
    if signals.asks:
        score -= weights.question_weight
    return score
