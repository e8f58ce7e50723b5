"""``plan_groups``: the vector prefilter and the word sketches give exactly the groups of the rule
read pair by pair (the class: any texts, vectors, types, projects, times, thresholds), and they
read fewer pairs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.curation.consolidate import (
    _CJK,
    _WORD,
    NEAR_SLACK,
    SKETCH_MIN_CANDIDATES,
    WordSketches,
    jaccard,
    plan_groups,
)
from memory_core.curation.consolidate import words as consolidation_words
from memory_core.retrieval.held_vectors import cosine, unit_vector
from memory_core.types import Memory, MemoryType

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = ["I", "keep", "my", "keys", "in", "the", "blue", "bowl", "red", "drawer", "again", "said", "that"]


def _memories(draw_texts, draw_vectors, kinds, projects, times) -> list[Memory]:
    return [
        Memory(
            id=f"m{i}",
            user_id="u",
            content=text,
            type=kind,
            project_id=project,
            created_at=None if t is None else T0 + timedelta(seconds=t),
            embedding=vector,
        )
        for i, (text, vector, kind, project, t) in enumerate(
            zip(draw_texts, draw_vectors, kinds, projects, times, strict=True)
        )
    ]


def _exact(vectors):
    def similarity(a: Memory, b: Memory) -> float:
        va, vb = vectors.get(a.id), vectors.get(b.id)
        if va is None or vb is None:
            return -1.0
        return cosine(va, vb) or -1.0

    return similarity


@st.composite
def user_memories(draw):
    n = draw(st.integers(1, 24))
    # a few directions, each memory near one of them (so groups form), some without a vector
    centres = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal((3, 8))
    texts, vectors = [], []
    for _ in range(n):
        words = draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=8))
        texts.append(" ".join(words) or "…")
        if draw(st.integers(0, 9)) == 0:
            vectors.append(None)
            continue
        centre = centres[draw(st.integers(0, 2))]
        noise = draw(st.floats(0.0, 0.6))
        jitter = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(8) * noise
        vectors.append((centre + jitter).tolist())
    kinds = [draw(st.sampled_from([MemoryType.SEMANTIC, MemoryType.EPISODIC])) for _ in range(n)]
    projects = [draw(st.sampled_from([None, "p"])) for _ in range(n)]
    times = [draw(st.one_of(st.none(), st.integers(0, 5))) for _ in range(n)]
    return _memories(texts, vectors, kinds, projects, times)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=user_memories(),
    min_cosine=st.sampled_from([-1.0, -0.2, 0.0, 0.5, 0.8, 0.95, 1.0]),
    min_jaccard=st.sampled_from([0.1, 0.3, 0.6, 1.0]),
    max_groups=st.integers(1, 5),
)
def test_the_prefilter_gives_exactly_the_groups_read_pair_by_pair(memories, min_cosine, min_jaccard, max_groups):
    vectors = {m.id: unit_vector(m.embedding) for m in memories}
    rule = {"min_cosine": min_cosine, "min_jaccard": min_jaccard, "max_groups": max_groups}
    pairwise = plan_groups(memories, _exact(vectors), sketches=False, **rule)
    prefiltered = plan_groups(memories, _exact(vectors), vectors=vectors, **rule)
    assert [[m.id for m in g] for g in prefiltered] == [[m.id for m in g] for g in pairwise]


def _pair_the_matrix_product_rounds_down() -> np.ndarray:
    """Three unit vectors (384 dimensions) where the prefilter's product of rows 0–1 with
    row 2 gives row 0 a dot product below ``cosine(row 0, row 2)`` (summed in another order)."""
    rng = np.random.default_rng(11)
    for _ in range(500):
        m = np.stack([unit_vector(rng.standard_normal(384)) for _ in range(3)]).astype(np.float32)
        if float((m[:2] @ m[2])[0]) < cosine(m[0], m[2]):
            return m
    pytest.skip("no such vectors in 500 draws: this platform's BLAS sums as np.dot does (nothing to round)")


def test_a_pair_exactly_at_the_floor_is_grouped_although_the_product_rounds_it_below():
    """``min_cosine`` set to a pair's exact cosine, where the prefilter's matrix product rounds
    that pair a little below it: the pair still groups, as it does read pair by pair (without
    ``NEAR_SLACK`` the prefilter would drop it)."""
    m = _pair_the_matrix_product_rounds_down()
    floor = cosine(m[0], m[2])
    assert floor is not None and float((m[:2] @ m[2])[0]) < floor
    memories = [
        Memory(id="a", user_id="u", content="my keys are in the blue bowl", created_at=T0),
        Memory(id="x", user_id="u", content="Ana moved to Lisbon in March", created_at=T0 + timedelta(seconds=1)),
        Memory(id="b", user_id="u", content="my keys are in the blue bowl", created_at=T0 + timedelta(seconds=2)),
    ]
    vectors = dict(zip(("a", "x", "b"), m, strict=True))
    rule = {"min_cosine": floor, "min_jaccard": 0.6, "max_groups": 5}
    pairwise = plan_groups(memories, _exact(vectors), sketches=False, **rule)
    prefiltered = plan_groups(memories, _exact(vectors), vectors=vectors, **rule)
    assert [[g.id for g in group] for group in pairwise] == [["a", "b"]]
    assert [[g.id for g in group] for group in prefiltered] == [["a", "b"]]
    assert NEAR_SLACK > floor - float((m[:2] @ m[2])[0])


def test_the_prefilter_reads_only_pairs_near_a_group_head():
    """400 memories in 200 near-duplicate pairs of unrelated directions: the exact rule is
    asked about far fewer pairs than the n²/2 the scan reads without the vectors."""
    rng = np.random.default_rng(7)
    memories, vectors = [], {}
    for i in range(200):
        v = unit_vector(rng.standard_normal(64))
        for k in range(2):
            m = Memory(id=f"m{i}-{k}", user_id="u", content=f"fact {i} said {'again' if k else ''}",
                       created_at=T0 + timedelta(seconds=2 * i + k))  # fmt: skip
            memories.append(m)
            vectors[m.id] = v
    asked = {"with": 0, "without": 0}

    def counting(key):
        exact = _exact(vectors)

        def similarity(a, b):
            asked[key] += 1
            return exact(a, b)

        return similarity

    rule = {"min_cosine": 0.8, "min_jaccard": 0.3, "max_groups": 500}
    without = plan_groups(memories, counting("without"), **rule)
    with_vectors = plan_groups(memories, counting("with"), vectors=vectors, **rule)
    assert len(with_vectors) == len(without) == 200
    assert asked["with"] == 200  # one pair per group: each second member against its head
    assert asked["without"] > 100 * asked["with"]  # every earlier group's head, for each memory


@pytest.mark.parametrize("shapes", [[(3,), (4,)], [(2, 2)]])
def test_vectors_of_mixed_or_odd_shapes_fall_back_to_the_pairwise_scan(shapes):
    memories = [Memory(id=f"m{i}", user_id="u", content="the same words", created_at=T0 + timedelta(seconds=i))
                for i in range(len(shapes) + 1)]  # fmt: skip
    vectors = {m.id: np.ones(shapes[i % len(shapes)], dtype=np.float32) for i, m in enumerate(memories)}
    groups = plan_groups(memories, lambda a, b: 1.0, min_cosine=0.5, min_jaccard=0.5, max_groups=5, vectors=vectors)
    assert [[m.id for m in g] for g in groups] == [[m.id for m in memories]]


# --- the word sketches: an exact upper bound of Jaccard, whatever the collisions -----------

VOCABULARY = [f"w{i}" for i in range(3000)] + ["東", "京", "ไทย", "über", "_", "naïve"]


@settings(max_examples=300, deadline=None)
@given(
    sets=st.lists(st.sets(st.sampled_from(VOCABULARY), max_size=400), min_size=1, max_size=6),
)
def test_a_sketch_bound_is_never_below_the_jaccard_it_bounds(sets):
    """Sets of up to 400 words of a 3,000-word vocabulary: the bitsets (256–1,024 bits here)
    collide often, and the bound still holds for every pair, equal sets and empty ones included."""
    sketches = WordSketches(sets)
    assert len(sets) < SKETCH_MIN_CANDIDATES or len(sketches.may_reach(0, list(range(len(sets))), 1.1)) == 0
    for i, a in enumerate(sets):
        bounds = sketches.upper_bounds(i, list(range(len(sets))))
        for j, b in enumerate(sets):
            assert bounds[j] >= jaccard(a, b), (i, j)
            assert 0.0 <= bounds[j] <= 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=user_memories(),
    min_cosine=st.sampled_from([-1.0, 0.0, 0.8]),
    min_jaccard=st.sampled_from([0.1, 0.3, 0.6, 1.0]),
    max_groups=st.integers(1, 5),
    with_vectors=st.booleans(),
)
def test_the_sketches_give_exactly_the_groups_of_the_rule(memories, min_cosine, min_jaccard, max_groups, with_vectors):
    vectors = {m.id: unit_vector(m.embedding) for m in memories}
    rule = {"min_cosine": min_cosine, "min_jaccard": min_jaccard, "max_groups": max_groups}
    if with_vectors:
        rule["vectors"] = vectors
    read = plan_groups(memories, _exact(vectors), sketches=False, **rule)
    sketched = plan_groups(memories, _exact(vectors), **rule)
    assert [[m.id for m in g] for g in sketched] == [[m.id for m in g] for g in read]


def test_long_notes_near_in_vectors_but_not_in_words_are_not_read_pair_by_pair(monkeypatch):
    """300 distinct 3.9 KB notes sharing a vector (the model places such notes near each
    other): without the sketches every note's words are compared with every earlier one's
    (~45,000 Jaccards of ~650-word sets, all holding the GIL); with them, none is, and no group
    forms either way. Two copies of one note still group."""
    from memory_core.curation import consolidate

    def note(i: int) -> str:
        return f"note {i}: " + " ".join(f"w{(i * 7919 + k) % 99991}x{k}" for k in range(650))

    memories = [Memory(id=f"n{i}", user_id="u", content=note(i), created_at=T0 + timedelta(seconds=i))
                for i in range(300)]  # fmt: skip
    memories.append(Memory(id="copy", user_id="u", content=note(5) + " again", created_at=T0 + timedelta(days=1)))
    vectors = {m.id: unit_vector(np.ones(8)) for m in memories}
    asked = {"n": 0}
    exact_jaccard = consolidate.jaccard

    def counting(a, b):
        asked["n"] += 1
        return exact_jaccard(a, b)

    monkeypatch.setattr(consolidate, "jaccard", counting)
    rule = {"min_cosine": 0.8, "min_jaccard": 0.6, "max_groups": 100, "vectors": vectors}
    read = plan_groups(memories, _exact(vectors), sketches=False, **rule)
    read_pairs, asked["n"] = asked["n"], 0
    sketched = plan_groups(memories, _exact(vectors), **rule)
    assert [[m.id for m in g] for g in sketched] == [[m.id for m in g] for g in read] == [["n5", "copy"]]
    assert read_pairs > 40_000
    # the first notes (fewer earlier groups than SKETCH_MIN_CANDIDATES: read, not bounded)
    # and the copy against its original, whose words it shares
    assert asked["n"] == sum(range(SKETCH_MIN_CANDIDATES)) + 1


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(st.sampled_from(["My", "KEYS", "x_y", "東京", "ไทย", "İ", "ΣΑΣ", " ", ","]), max_size=12).map("".join),
    )
)
def test_words_are_the_same_with_and_without_the_whole_text_shortcut(text):
    """``words``' shortcut (no CJK/Thai character in the text: one set of the regex's words)
    gives what the per-word path gives, for any text."""
    per_word: set[str] = set()
    for w in _WORD.findall(text.lower()):
        per_word.update(w) if _CJK.search(w) else per_word.add(w)
    assert consolidation_words(text) == per_word


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sets=st.lists(st.sets(st.sampled_from(VOCABULARY[:300]), min_size=0, max_size=120), min_size=2, max_size=14),
    min_jaccard=st.sampled_from([0.05, 0.2, 0.4, 0.6]),
)
def test_saturated_sketches_still_give_exactly_the_groups_of_the_rule(sets, min_jaccard, monkeypatch_bits):
    """Every bitset 64 bits (``SKETCH_BITS`` forced down) for sets of up to 120 words: nearly
    every bit of every row is set, and the groups are still those of the rule read pair by pair."""
    memories = [
        Memory(id=f"m{i}", user_id="u", content=" ".join(sorted(s)) or "…", created_at=T0 + timedelta(seconds=i))
        for i, s in enumerate(sets)
    ]
    vectors = {m.id: unit_vector(np.ones(4)) for m in memories}
    rule = {"min_cosine": 0.5, "min_jaccard": min_jaccard, "max_groups": 20, "vectors": vectors}
    read = plan_groups(memories, _exact(vectors), sketches=False, **rule)
    sketched = plan_groups(memories, _exact(vectors), **rule)
    assert [[m.id for m in g] for g in sketched] == [[m.id for m in g] for g in read]


@pytest.fixture(scope="module")
def monkeypatch_bits():
    from memory_core.curation import consolidate

    before = consolidate.SKETCH_BITS
    consolidate.SKETCH_BITS = (64, 64)
    yield
    consolidate.SKETCH_BITS = before
