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
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..sentences import join_sentences, split_sentences
from ..types import Memory, MemoryState

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0eff]")


def words(text: str) -> set[str]:
    """Lowercase word set of ``text`` (each CJK/Thai character a word of its own)."""
    found = _WORD.findall(text.lower())
    if not _CJK.search(text):
        return set(found)  # no CJK/Thai character anywhere: one set built in C
    out: set[str] = set()
    for w in found:
        if _CJK.search(w):
            out.update(w)
        else:
            out.add(w)
    return out


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets)."""
    return len(a & b) / len(a | b) if (a or b) else 1.0


SKETCH_BITS = (256, 16_384)
"""Smallest and largest bitset ``WordSketches`` gives a word set: the power of two at least
twice the largest set of the call, within these bounds (16,384 bits = 2 KB a memory; a
memory's 16,000 bytes hold at most ~8,000 words, and the bound stays exact when bits fill)."""


SKETCH_MIN_CANDIDATES = 4
"""Fewer candidate groups than this for a memory are read without their bound (``may_reach``):
a near-duplicate's one or two are read faster than numpy is called."""


class WordSketches:
    """Each of n word sets as a bitset (a word sets bit ``hash(word) mod bits``), giving, for
    one set against many, an upper bound of their Jaccard similarity in numpy, without the
    GIL-holding set operations of ``jaccard``.

    Why it is an upper bound (exact, whatever the collisions): a bit set in A's bitset and not
    in B's was set by at least one word of A whose hash no word of B has, so that word is not
    in B, and distinct bits are distinct words: ``|A \\ B| ≥ popcount(a & ~b)``. So
    ``|A ∩ B| ≤ I = min(|A| − popcount(a & ~b), |B|)`` and, since ``I / (|A| + |B| − I)``
    grows with I, ``jaccard(A, B) ≤ I / (|A| + |B| − I)``; both sides are one IEEE division
    of integers, so a pair whose bound is below a threshold also fails ``jaccard`` there.
    Hashes are Python's ``hash`` (this process's salt: sketches are not kept across calls).

    ``sets``: the word sets, by position (each hashed when first compared). Memory: n × bits /
    8 bytes (``SKETCH_BITS``).
    """

    def __init__(self, sets: Sequence[set[str]]):
        self.sets = sets
        self.sizes = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
        largest = int(self.sizes.max(initial=0))
        low, high = SKETCH_BITS
        self.bits = min(high, max(low, 1 << max(0, 2 * largest - 1).bit_length()))
        self.rows = np.zeros((len(sets), self.bits // 64), dtype=np.uint64)
        self.built = np.zeros(len(sets), dtype=np.bool_)  # each row is hashed when first compared

    def _build(self, positions: np.ndarray) -> None:
        mask = self.bits - 1
        for i in positions[~self.built[positions]].tolist():
            words_of = self.sets[i]
            if words_of:
                row = np.zeros(self.bits, dtype=np.bool_)
                row[np.fromiter((hash(w) & mask for w in words_of), dtype=np.int64, count=len(words_of))] = True
                self.rows[i] = np.packbits(row, bitorder="little").view(np.uint64)
            self.built[i] = True

    def upper_bounds(self, i: int, others: Sequence[int]) -> np.ndarray:
        """An upper bound of ``jaccard(set i, set j)`` for each j of ``others`` (positions),
        float64 in [0, 1]; 1.0 for two empty sets (``jaccard``'s value)."""
        js = np.asarray(others, dtype=np.int64)
        self._build(np.append(js, i))
        only_mine = np.bitwise_count(self.rows[i] & ~self.rows[js]).sum(axis=1, dtype=np.int64)
        shared = np.minimum(self.sizes[i] - only_mine, self.sizes[js])
        union = self.sizes[i] + self.sizes[js] - shared
        return np.where(union > 0, shared / np.maximum(union, 1), 1.0)

    def may_reach(self, i: int, others: Sequence[int], min_jaccard: float) -> list[int]:
        """The positions of ``others`` (in their order) whose set's Jaccard similarity with
        set i may be ≥ ``min_jaccard`` (its upper bound is; all of them when they are fewer
        than ``SKETCH_MIN_CANDIDATES``); the others cannot reach it."""
        if len(others) < SKETCH_MIN_CANDIDATES:
            return list(others)  # reading them costs less than bounding them
        return [j for j, ok in zip(others, self.upper_bounds(i, others) >= min_jaccard, strict=True) if ok]


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
    sketches: bool = True,
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
    2,000 LoCoMo memories grouped in 79 ms instead of 2.5 s, ``benchmarks/consolidation_plan.py``).
    Vectors that are not unit length would make the prefilter drop pairs ``cosine`` accepts:
    pass ``unit_vector``'s. Vectors of several shapes, or none at all: no prefilter.

    ``sketches`` (default on): before reading a group, the Jaccard similarity of the memory
    with the group's first member is bounded from above in numpy (``WordSketches``, one call
    per memory for all its candidate groups), and a group whose bound is below
    ``min_jaccard`` is not read: the same groups (the bound is exact), without a Python set
    operation per pair. Without it, long memories that the model places near each other but
    that share few words (maximal batches of 3.9 KB notes, ``benchmarks.lanes.batch_body``,
    ~17 % of them built with a twin by the filler) cost a ``jaccard`` of two large sets per
    pair, up to n²/2 of them, all holding the GIL: 256 such notes 0.91 s → 0.055 s, 2,000 of
    them 62.8 s → 0.85 s; LoCoMo users 6–8 % slower (2,000 memories 79 → 84 ms, the numpy
    calls of memories with four or more candidate groups) (``benchmarks/consolidation_plan.py``). Off: every
    candidate pair's Jaccard is read (the rule as written, for comparisons).
    Raises nothing of its own (``cosine``'s errors propagate)."""
    order = sorted(memories, key=lambda m: (m.created_at.timestamp() if m.created_at else 0.0, m.id))
    word_sets = {m.id: words(m.content) for m in order}
    near = _near_rows(order, vectors, min_cosine - NEAR_SLACK) if vectors is not None and order else None
    bounds = WordSketches([word_sets[m.id] for m in order]) if sketches and order else None
    groups: list[list[Memory]] = []
    group_of_head: dict[int, list[Memory]] = {}  # by the position of its first member, in begun order
    for i, m in enumerate(order):
        positions = list(group_of_head) if near is None else [j for j in near(i) if j in group_of_head]
        for j in positions if bounds is None else bounds.may_reach(i, positions, min_jaccard):
            group = group_of_head[j]
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
