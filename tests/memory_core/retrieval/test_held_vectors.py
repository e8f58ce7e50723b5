import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.retrieval.held_vectors import HeldVectors, clamp_cosine, unit_vector

DIM = 4
IDS = [f"m{i}" for i in range(40)]
vectors = st.lists(st.integers(-3, 3), min_size=DIM, max_size=DIM).filter(any)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(IDS), vectors),
        st.tuples(st.just("remove"), st.sampled_from(IDS), st.none()),
    ),
    max_size=200,
)


def brute_force(model: dict[str, np.ndarray], q: np.ndarray, k: int, keep=None) -> list[tuple[str, float]]:
    scored = [(i, float(np.dot(v, q))) for i, v in model.items() if keep is None or keep(i)]
    return sorted(scored, key=lambda t: (-t[1], t[0]))[:k]


@settings(max_examples=150, deadline=None)
@given(ops=ops, query=vectors, k=st.integers(1, 45), odd_only=st.booleans())
def test_top_is_the_exact_top_k_after_any_puts_and_removes(ops, query, k, odd_only):
    held, model = HeldVectors(), {}
    for op, memory_id, vec in ops:
        if op == "put":
            assert held.put(memory_id, vec)
            model[memory_id] = unit_vector(vec)
        else:
            assert held.remove(memory_id) == (memory_id in model)
            model.pop(memory_id, None)
    assert len(held) == len(model)
    # growth doubles; free rows stay until more than half (and more than 16) of the used rows
    n = len(model)
    assert held.capacity <= max(4 * n, 2 * n + 32)
    keep = (lambda i: int(i[1:]) % 2 == 1) if odd_only else None
    q = unit_vector(query)
    got = held.top(q, k, keep)
    want = brute_force(model, q, k, keep)
    assert [c for _, c in got] == pytest.approx([c for _, c in want], abs=1e-6)
    # the same ids in the same order, except among ties (equal to float32 rounding)
    for (got_id, got_cos), (want_id, _) in zip(got, want, strict=True):
        assert got_id == want_id or abs(got_cos - float(np.dot(model[want_id], q))) <= 1e-6
    for memory_id, vec in model.items():
        assert np.allclose(held.get(memory_id), vec, atol=1e-6)


def test_ties_go_by_id_and_k_larger_than_held():
    held = HeldVectors()
    for memory_id in ("c", "a", "b"):
        held.put(memory_id, [1.0, 0.0])
    held.put("d", [0.0, 1.0])
    assert held.top(np.array([1.0, 0.0], dtype=np.float32), 2) == [("a", 1.0), ("b", 1.0)]
    assert [i for i, _ in held.top(np.array([1.0, 0.0], dtype=np.float32), 10)] == ["a", "b", "c", "d"]


def test_unusable_vectors_are_not_held_and_drop_the_old_one():
    held = HeldVectors()
    assert held.put("a", [3.0, 4.0]) and np.allclose(held.get("a"), [0.6, 0.8])
    for bad in ([0.0, 0.0], [float("nan"), 1.0], [1.0, 2.0, 3.0], [], None):
        held.put("a", [3.0, 4.0])
        assert not held.put("a", bad)
        assert held.get("a") is None and "a" not in held
    assert held.put("b", [1.0, 0.0]) and held.dimension == 2


def test_top_of_nothing_or_of_another_dimension_is_empty():
    held = HeldVectors()
    q = np.array([1.0, 0.0], dtype=np.float32)
    assert held.top(q, 3) == []
    held.put("a", [1.0, 0.0])
    assert held.top(q, 0) == [] and held.top(np.array([1.0, 0.0, 0.0], dtype=np.float32), 3) == []
    assert held.top(q, 3, keep=lambda i: False) == []
    held.remove("a")
    assert held.capacity == 0 and held.dimension is None  # emptied: a new dimension may come


def test_compaction_keeps_every_vector():
    held = HeldVectors()
    for i in range(1000):
        held.put(f"m{i}", [float(i + 1), 1.0])
    for i in range(0, 1000, 4):
        held.put(f"m{i}", [float(i + 1), 1.0])  # replace in place
    for i in range(1000):
        if i % 10:
            held.remove(f"m{i}")
    assert len(held) == 100 and held.capacity <= 256
    for i in range(0, 1000, 10):
        assert np.allclose(held.get(f"m{i}"), unit_vector([float(i + 1), 1.0]), atol=1e-6)


def test_clamp_cosine():
    assert clamp_cosine(1.0000001) == 1.0 and clamp_cosine(-1.0000001) == -1.0
    assert clamp_cosine(0.5) == 0.5 and clamp_cosine(float("nan")) is None
