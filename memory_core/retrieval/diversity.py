"""Diversity of a ranking: maximal marginal relevance over the best candidates.

A user's memories often say one thing several times (a habit told in three sessions, a turn
and its echo in the next one). Ranked by relevance alone, such near-copies fill the top of a
search and crowd out the memories that say something else the query also needs ("What
activities does Melanie do?" is answered by pottery, camping and swimming, not by three
turns about pottery). Maximal marginal relevance (Carbonell & Goldstein, "The Use of MMR,
Diversity-Based Reranking for Reordering Documents and Producing Summaries", SIGIR 1998)
picks the results one at a time: each next one is the candidate with the best

    score − weight × max(0, the largest cosine between its vector and a result already picked)

so a near-copy of a picked memory drops by up to ``weight`` and a memory that says something
new keeps its score. ``weight`` 0 keeps the ranking as it is.

Pure function over numpy vectors; no I/O. Cost: one matrix-vector product (candidates ×
dimension) per pick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def mmr_order(
    ranked: Sequence[tuple[str, float]],
    vectors: Mapping[str, np.ndarray],
    weight: float,
    limit: int,
) -> list[tuple[str, float]]:
    """The first ``limit`` picks of maximal marginal relevance over ``ranked``.

    ``ranked``: (id, score), best first (the relevance ranking). ``vectors``: unit vectors
    (float32 ``[dim]``, one dimension for all) of the candidates whose similarity to others is
    meaningful; a candidate without one is never penalised and penalises nothing.
    ``weight``: in [0, 1]. Returns (id, adjusted score) in pick order; the adjusted score is
    the pick's marginal relevance, made non-increasing down the list (each at most the one
    before it), so the list stays sorted by its score. Ties go to the earlier candidate of
    ``ranked``. ``weight`` 0, or fewer than two candidates with a vector: ``ranked``'s first
    ``limit`` unchanged. Raises ``ValueError`` for a weight outside [0, 1], a negative
    ``limit`` or a NaN score."""
    if not 0.0 <= weight <= 1.0:  # NaN fails too
        raise ValueError("weight must be in [0, 1]")
    if limit < 0:
        raise ValueError("limit must be ≥ 0")
    head = list(ranked)
    if any(s != s for _, s in head):
        raise ValueError("scores must not be NaN")
    with_vector = [i for i, (memory_id, _) in enumerate(head) if memory_id in vectors]
    if weight == 0.0 or len(with_vector) < 2:
        return head[:limit]
    matrix = np.stack([vectors[head[i][0]] for i in with_vector]).astype(np.float32, copy=False)
    row_of = {i: r for r, i in enumerate(with_vector)}
    scores = np.array([s for _, s in head], dtype=np.float64)
    redundancy = np.zeros(len(head), dtype=np.float64)  # max(0, max cosine to a pick) so far
    left = np.ones(len(head), dtype=bool)
    out: list[tuple[str, float]] = []
    ceiling = float("inf")
    while len(out) < limit and left.any():
        remaining = np.flatnonzero(left)
        marginal = scores[remaining] - weight * redundancy[remaining]
        pick = int(remaining[int(np.argmax(marginal))])  # the first of equal values: ties to the earlier
        left[pick] = False
        ceiling = min(ceiling, float(scores[pick] - weight * redundancy[pick]))
        out.append((head[pick][0], ceiling))
        row = row_of.get(pick)
        if row is not None:
            cos = np.zeros(len(head), dtype=np.float64)
            cos[with_vector] = matrix @ matrix[row]
            np.maximum(redundancy, cos, out=redundancy)
    return out
