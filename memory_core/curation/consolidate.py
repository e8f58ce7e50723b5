"""Consolidation, as pure functions: which of a user's active memories are near-duplicates
(``plan_groups``), what one memory standing for a group says (``merged_content``), and the
chain of versions a memory belongs to (``history``).

Grouping: memories of the same ``type`` and ``project_id`` join a group when their cosine
similarity with *every* member is at least ``cosine`` and their word-level Jaccard similarity
with every member is at least ``jaccard`` (complete linkage, so a chain of small differences
never grows one group across unrelated memories). Jaccard ≥ 0.60 over word sets is the
reference router's near-duplicate rule; the cosine bound keeps paraphrases of different facts
apart. Words: ``memory_core.chat.tokens.word_tokens``-like lowercase word sets.

Merged content loses nothing: it starts from the member with the most words (the newest of
equals) and appends, sentence by sentence, every sentence of the other members that brings a
word the merged text does not have yet (``lost_words(merged, members) == set()``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..sentences import join_sentences, split_sentences
from ..types import Memory, MemoryState

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0eff]")


def words(text: str) -> set[str]:
    """Lowercase word set of ``text`` (each CJK/Thai character a word of its own)."""
    out: set[str] = set()
    for w in _WORD.findall(text.lower()):
        if _CJK.search(w):
            out.update(w)
        else:
            out.add(w)
    return out


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if (a or b) else 1.0


NEAR_SLACK = 1e-3
"""How far below ``min_cosine`` a pair's dot product may fall in ``plan_groups``' prefilter and
still be read by ``cosine``: float32 sums in another order (one matrix product against one
``np.dot`` per pair) differ by ~1e-6 for unit vectors, so the prefilter never drops a pair the
exact rule would group."""


def plan_groups(
    memories: Sequence[Memory],
    cosine: Callable[[Memory, Memory], float],
    *,
    min_cosine: float,
    min_jaccard: float,
    max_groups: int,
    vectors: Mapping[str, np.ndarray | None] | None = None,
) -> list[list[Memory]]:
    """Groups (of at least two) of near-duplicate ``memories``, oldest first, at most
    ``max_groups``. ``cosine(a, b)`` is the similarity of two memories' vectors. Deterministic
    (memories are visited by ``created_at`` then id; each joins the first group, in the order
    the groups were begun, whose every member it matches).

    ``vectors`` (optional): the vectors ``cosine`` reads, by memory id: finite float32 unit
    vectors of one shape ``(d,)`` (``held_vectors.unit_vector``; None or missing: no vector,
    which ``cosine`` must then score below ``min_cosine``). With them a memory is compared only
    with the groups whose first member's dot product with it is at least ``min_cosine -
    NEAR_SLACK`` (one matrix-vector product per memory, which numpy runs without the GIL),
    since a group it joins must match its first member: the same groups, without the Jaccard
    and ``cosine`` of every pair (n memories: up to n²/2 pairs read in Python without them;
    2,000 memories grouped in 65 ms instead of 2.2 s, ``benchmarks/consolidation_plan.py``).
    Vectors that are not unit length would make the prefilter drop pairs ``cosine`` accepts:
    pass ``unit_vector``'s. Vectors of several shapes, or none at all: no prefilter.
    Raises nothing of its own (``cosine``'s errors propagate)."""
    order = sorted(memories, key=lambda m: (m.created_at.timestamp() if m.created_at else 0.0, m.id))
    word_sets = {m.id: words(m.content) for m in order}
    near = _near_rows(order, vectors, min_cosine - NEAR_SLACK) if vectors is not None and order else None
    groups: list[list[Memory]] = []
    group_of_head: dict[int, list[Memory]] = {}
    for i, m in enumerate(order):
        if near is None:
            candidates: Iterable[list[Memory]] = groups
        else:
            candidates = (group_of_head[j] for j in near(i) if j in group_of_head)
        for group in candidates:
            head = group[0]
            if head.type != m.type or head.project_id != m.project_id:
                continue
            if all(
                jaccard(word_sets[m.id], word_sets[g.id]) >= min_jaccard and cosine(m, g) >= min_cosine for g in group
            ):
                group.append(m)
                break
        else:
            groups.append([m])
            group_of_head[i] = groups[-1]
    return [g for g in groups if len(g) > 1][:max_groups]


def _near_rows(
    order: Sequence[Memory], vectors: Mapping[str, np.ndarray | None], floor: float
) -> Callable[[int], list[int]] | None:
    """``near(i)``: the positions j < i (ascending) of ``order`` whose vector's dot product with
    position i's is ≥ ``floor`` (a memory without a vector counts as the zero vector); None
    when the vectors are not all of one 1-D shape, or there is none (no prefilter)."""
    found = [vectors.get(m.id) for m in order]
    dims = {v.shape for v in found if v is not None}
    if len(dims) != 1:
        return None
    (shape,) = dims
    if len(shape) != 1:
        return None
    matrix = np.zeros((len(order), shape[0]), dtype=np.float32)
    for i, v in enumerate(found):
        if v is not None:
            matrix[i] = v

    def near(i: int) -> list[int]:
        if i == 0:
            return []
        return np.flatnonzero(matrix[:i] @ matrix[i] >= floor).tolist()

    return near


def merged_content(members: Sequence[Memory]) -> str:
    """One text saying what every member says (see the module docstring)."""
    by_size = sorted(
        members,
        key=lambda m: (len(words(m.content)), m.created_at.timestamp() if m.created_at else 0.0),
        reverse=True,
    )
    text = by_size[0].content
    have = words(text)
    added: list[str] = []  # joined once at the end (appending to the text each time is quadratic)
    for m in by_size[1:]:
        for sentence in split_sentences(m.content):
            new = words(sentence) - have
            if new:
                added.append(sentence)
                have |= new
    return join_sentences([text.rstrip(), *added], glue_unspaced=False) if added else text


def lost_words(merged: str, members: Sequence[Memory]) -> set[str]:
    """Words of ``members`` missing from ``merged`` (empty for ``merged_content``'s output)."""
    have = words(merged)
    return {w for m in members for w in words(m.content)} - have


def successor(memory: Memory) -> str | None:
    """The id of the memory that replaced ``memory``: ``superseded_by`` of a superseded one,
    ``merged_into`` of a consolidated one; ``None`` in any other state (a link field left on
    a memory of another state is not followed)."""
    if memory.state == MemoryState.SUPERSEDED:
        return memory.superseded_by
    if memory.state == MemoryState.CONSOLIDATED:
        return memory.merged_into
    return None


def history(memory_id: str, memories: Sequence[Memory]) -> list[Memory]:
    """The versions of the fact ``memory_id`` holds, oldest first: the memories it replaced
    (the memories whose ``successor`` it is, recursively), itself, and the memories that
    replaced it (following ``successor``). ``memories``: the owner's memories in every state,
    and only those: a link to an id not among them (deleted, another user's) ends the walk
    there. ``[]`` when ``memory_id`` is not among them."""
    by_id = {m.id: m for m in memories}
    if memory_id not in by_id:
        return []
    successors = {m.id: successor(m) for m in memories}
    predecessors: dict[str, list[str]] = {}
    for m in memories:
        nxt = successors[m.id]
        if nxt:
            predecessors.setdefault(nxt, []).append(m.id)
    chain: dict[str, Memory] = {}
    stack = [memory_id]
    while stack:  # everything upstream of it
        current = stack.pop()
        if current in chain or current not in by_id:
            continue
        chain[current] = by_id[current]
        stack.extend(predecessors.get(current, []))
    nxt = successors.get(memory_id)
    while nxt and nxt in by_id and nxt not in chain:  # and downstream
        chain[nxt] = by_id[nxt]
        nxt = successors.get(nxt)
    return sorted(chain.values(), key=lambda m: (m.created_at.timestamp() if m.created_at else 0.0, m.id))
