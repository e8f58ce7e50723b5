"""The second hop of a retrieval: pseudo-relevance feedback on the lexical side.

A multi-hop question ("What do Melanie's kids like?") names one thing and is answered by
turns that name another (the kids' names, the places they went). The first hop's best
memories usually hold that second thing. So, after the first ranking:

1. the ``seeds``: the first hop's best ``seed_count`` memories;
2. the expansion terms (``expansion_terms``): terms of the seeds that the query lacks, held
   by at least two memories of the user (a term only one memory holds can only find that
   memory again) and by at most ``max_df_share`` of them (a term most memories hold says
   nothing), ranked by idf × the number of seeds holding them (ties: the term), the first
   ``term_count``. The RM3 / Rocchio family of query expansion (Lavrenko & Croft 2001;
   Manning et al., "Introduction to Information Retrieval", §9.1.2), with the seeds' term
   counts replaced by document counts so a long seed does not dominate;
3. the second hop (``hop_scores``): BM25 of the user's memories for those terms, divided by
   the best such score, so each memory's second-hop signal is in [0, 1]. ``HybridStore``
   adds ``hop_weight`` × that signal to each candidate's score and takes the second hop's
   top memories as candidates too.

Pure functions over one user's ``BM25Corpus``; no I/O. Cost: one more BM25 pass over the
postings of ``term_count`` terms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from .lexical import BM25Corpus


def expansion_terms(
    corpus: BM25Corpus,
    seeds: Sequence[str],
    query_terms: Iterable[str],
    term_count: int,
    max_df_share: float = 0.2,
    exclude: Iterable[str] = (),
) -> list[str]:
    """At most ``term_count`` expansion terms from the memories ``seeds`` (ids in ``corpus``;
    unknown ids hold no terms), none of ``query_terms`` or ``exclude`` (e.g. the speakers'
    name terms), each held by at least 2 and at most ``max_df_share`` × len(corpus) memories;
    best first as the module docstring ranks them. ``[]`` when ``term_count`` ≤ 0."""
    if term_count <= 0 or not seeds:
        return []
    skip = set(query_terms) | set(exclude)
    held_by = Counter(t for s in dict.fromkeys(seeds) for t in corpus.terms(s) if t not in skip)
    cap = max(2.0, max_df_share * len(corpus))
    scored = [(corpus.idf(t) * n, t) for t, n in held_by.items() if 2 <= corpus.doc_freq(t) <= cap]
    scored.sort(key=lambda st: (-st[0], st[1]))
    return [t for _, t in scored[:term_count]]


def hop_scores(
    corpus: BM25Corpus,
    terms: Sequence[str],
    limit: int,
    project_id: str | None = None,
    types: Iterable[object] | None = None,
    states: Iterable[object] | None = None,
) -> dict[str, float]:
    """``{memory id: BM25 for terms / the best such score}`` (values in (0, 1]) of the top
    ``limit`` memories matching the filters; ``{}`` without terms or matches."""
    if not terms or limit <= 0:
        return {}
    ranked = corpus.score_terms(terms, limit, project_id, types, states)
    if not ranked or ranked[0][1] <= 0:
        return {}
    best = ranked[0][1]
    return {i: s / best for i, s in ranked}
