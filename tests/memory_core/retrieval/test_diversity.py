"""Maximal marginal relevance (``retrieval.diversity.mmr_order``) and its use in ``HybridStore``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.errors import InvalidInput
from memory_core.retrieval.diversity import mmr_order
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.types import Memory, RetrieveOptions
from tests.ids import tid, tname
from tests.memory_core.stores.test_hybrid import DIM, fake_embed, plain


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_near_copy_drops_below_a_memory_that_says_something_else():
    ranked = [("a", 1.0), ("a_copy", 0.95), ("b", 0.8)]
    vectors = {"a": unit(1, 0, 0), "a_copy": unit(1, 0.05, 0), "b": unit(0.1, 1, 0)}
    assert [i for i, _ in mmr_order(ranked, vectors, 0.3, 3)] == ["a", "b", "a_copy"]
    # a weight too small to outweigh the relevance gap keeps the order
    assert [i for i, _ in mmr_order(ranked, vectors, 0.05, 3)] == ["a", "a_copy", "b"]


def test_weight_zero_keeps_the_ranking_and_its_scores():
    ranked = [("a", 1.0), ("a_copy", 0.95), ("b", 0.8)]
    vectors = {i: unit(1, 0, 0) for i, _ in ranked}
    assert mmr_order(ranked, vectors, 0.0, 2) == ranked[:2]


def test_scores_are_the_marginal_relevance_and_never_rise():
    ranked = [("a", 1.0), ("a_copy", 0.95), ("b", 0.8)]
    vectors = {"a": unit(1, 0, 0), "a_copy": unit(1, 0, 0), "b": unit(0, 1, 0)}
    out = mmr_order(ranked, vectors, 0.5, 3)
    assert out == [("a", 1.0), ("b", 0.8), ("a_copy", pytest.approx(0.45))]


def test_a_candidate_without_a_vector_is_never_penalised_and_penalises_nothing():
    ranked = [("a", 1.0), ("lexical", 0.9), ("a_copy", 0.85)]
    vectors = {"a": unit(1, 0), "a_copy": unit(1, 0)}
    out = mmr_order(ranked, vectors, 1.0, 3)
    assert [i for i, _ in out] == ["a", "lexical", "a_copy"]
    assert out[1][1] == 0.9
    assert out[2][1] == pytest.approx(-0.15)


def test_negative_cosines_are_no_bonus():
    ranked = [("a", 1.0), ("opposite", 0.5)]
    vectors = {"a": unit(1, 0), "opposite": unit(-1, 0)}
    assert mmr_order(ranked, vectors, 1.0, 2) == [("a", 1.0), ("opposite", 0.5)]


def test_minus_infinity_scores_are_picked_once_each_and_nan_is_refused():
    ranked = [("a", 1.0), ("c", 0.5), ("b", float("-inf"))]
    vectors = {i: unit(1, 0) for i, _ in ranked}
    assert [i for i, _ in mmr_order(ranked, vectors, 0.5, 3)] == ["a", "c", "b"]
    with pytest.raises(ValueError):
        mmr_order([("a", 1.0), ("b", float("nan"))], vectors, 0.5, 2)


@pytest.mark.parametrize("weight", [-0.1, 1.1, float("nan")])
def test_a_weight_outside_zero_one_raises(weight):
    with pytest.raises(ValueError):
        mmr_order([("a", 1.0)], {}, weight, 1)


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=0, max_size=25),
    seed=st.integers(0, 2**16),
    weight=st.floats(0, 1),
    limit=st.integers(0, 30),
    without=st.sets(st.integers(0, 24)),
)
def test_picks_are_distinct_candidates_best_first_never_above_their_score(scores, seed, weight, limit, without):
    ranked = sorted(((f"m{i}", float(s)) for i, s in enumerate(scores)), key=lambda t: -t[1])
    rng = np.random.default_rng(seed)
    vectors = {}
    for i, _ in ranked:
        if int(i[1:]) not in without:
            v = rng.normal(size=8).astype(np.float32)
            vectors[i] = v / np.linalg.norm(v)
    out = mmr_order(ranked, vectors, weight, limit)
    assert len(out) == min(limit, len(ranked))
    assert len({i for i, _ in out}) == len(out)
    original = dict(ranked)
    assert all(s <= original[i] + 1e-9 for i, s in out)
    assert all(a[1] >= b[1] for a, b in zip(out, out[1:], strict=False))
    if out:
        assert out[0] == ranked[0]  # nothing is picked yet: the best candidate comes first


# ------------------------------------------------------------------ through HybridStore


TWO_COPIES_AND_ANOTHER = (
    ("pottery", "I signed up for a pottery class with clay on saturday"),
    ("pottery_again", "I signed up for a pottery class with clay on saturday again"),
    ("camping", "We went camping by the lake"),
)
QUERY = "pottery class with clay on saturday, or camping"
"""Ranked by relevance alone, the two near-copies come first for ``QUERY``."""


async def holding_two_copies_and_another(store, *, open_it: bool = True):
    """``store`` (opened unless ``open_it`` is false) holding ``TWO_COPIES_AND_ANOTHER`` of
    user u1, written to it directly."""
    if open_it:
        await store.open()
    for mid, content in TWO_COPIES_AND_ANOTHER:
        await store.store(Memory(id=tid(mid), user_id="u1", content=content))
    return store


async def test_a_search_with_diversity_returns_the_other_memory_before_the_near_copy():
    h = await holding_two_copies_and_another(HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain()))
    query = QUERY

    def ask(diversity: float, limit: int = 2) -> RetrieveOptions:
        return RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=limit, diversity=diversity)

    plain_top = [tname(r.memory.id) for r in await h.retrieve(ask(0.0))]
    assert sorted(plain_top) == ["pottery", "pottery_again"]
    diverse = await h.retrieve(ask(1.0))
    assert [tname(r.memory.id) for r in diverse][1] == "camping"
    assert diverse[0].score >= diverse[1].score
    # all three asked for: the same memories, the near-copy last
    every = [tname(r.memory.id) for r in await h.retrieve(ask(1.0, limit=3))]
    assert sorted(every) == ["camping", "pottery", "pottery_again"] and every[2] in ("pottery", "pottery_again")
    await h.close()


async def test_without_held_vectors_the_ranking_is_the_relevance_ranking():
    """``cache_vectors`` off: the index holds no vectors to compare (the documented limit), so
    nothing is penalised."""
    h = await holding_two_copies_and_another(
        HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain(cache_vectors=False))
    )
    query = QUERY
    ranked = [
        (tname(r.memory.id), r.score)
        for r in await h.retrieve(RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=3, diversity=1.0))
    ]
    plain_ranked = [
        (tname(r.memory.id), r.score)
        for r in await h.retrieve(RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=3))
    ]
    assert ranked == plain_ranked
    await h.close()


@pytest.mark.parametrize("diversity", [-0.5, 1.5, float("nan")])
async def test_a_diversity_outside_zero_one_is_invalid_input(diversity):
    h = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain())
    await h.open()
    with pytest.raises(InvalidInput):
        await h.retrieve(RetrieveOptions(user_id="u1", query="x", hybrid=True, diversity=diversity))
    await h.close()


# ------------------------------------------------------------------ through CuratingStore


async def curated_over(hybrid: HybridStore):
    from memory_core.config import CurationSettings
    from memory_core.stores.curating import CuratingStore

    store = CuratingStore(hybrid, CurationSettings())
    await store.open()
    return store


async def test_curation_diversifies_a_search_of_its_hits():
    hybrid = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain())
    curated = await curated_over(hybrid)
    # written beside curation (as an import of old rows would): two near-copies and another memory
    await holding_two_copies_and_another(hybrid, open_it=False)
    query = QUERY
    plain_top = await curated.retrieve(RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=2))
    assert sorted(tname(r.memory.id) for r in plain_top) == ["pottery", "pottery_again"]
    diverse = await curated.retrieve(RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=2, diversity=1.0))
    assert tname(diverse[1].memory.id) == "camping"
    await curated.close()


async def test_a_replaced_memory_that_answers_nothing_pushes_no_other_memory_down():
    """A superseded match whose replacement left the caller's scope (expired) is dropped; it
    must not have cost its near-copy the place it would hold without diversity."""
    from datetime import UTC, datetime, timedelta

    from memory_core.types import MemoryState

    hybrid = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain())
    curated = await curated_over(hybrid)
    past = datetime.now(UTC) - timedelta(days=1)
    await hybrid.store(Memory(id=tid("gone"), user_id="u1", content="I moved to Oslo", expires_at=past))
    await hybrid.store(
        Memory(
            id=tid("stale"),
            user_id="u1",
            content="I signed up for a pottery class with clay on saturday",
            state=MemoryState.SUPERSEDED,
            superseded_by=tid("gone"),
        )
    )
    await hybrid.store(
        Memory(id=tid("copy"), user_id="u1", content="I signed up for a pottery class with clay on saturday again")
    )
    await hybrid.store(Memory(id=tid("camping"), user_id="u1", content="We went camping by the lake"))
    query = QUERY
    plain_top = await curated.retrieve(RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=1))
    diverse = await curated.retrieve(RetrieveOptions(user_id="u1", query=query, hybrid=True, limit=1, diversity=1.0))
    assert [tname(r.memory.id) for r in plain_top] == ["copy"]
    assert [tname(r.memory.id) for r in diverse] == ["copy"]
    await curated.close()


@pytest.mark.parametrize("diversity", [-0.5, 1.5, float("nan")])
async def test_curation_refuses_a_diversity_outside_zero_one_as_invalid_input(diversity):
    curated = await curated_over(HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain()))
    await curated.store(Memory(user_id="u1", content="We went camping by the lake"))
    with pytest.raises(InvalidInput):
        await curated.retrieve(RetrieveOptions(user_id="u1", query="camping", hybrid=True, diversity=diversity))
    await curated.close()


def test_the_service_asks_for_the_second_hop_and_diversity_only_with_hybrid():
    from memory_core.config import RetrievalSettings

    on = RetrievalSettings(diversity_weight=0.25, hop_weight=0.1).ranking_options()
    assert (on["second_hop"], on["diversity"]) == (True, 0.25)
    off = RetrievalSettings(hybrid=False, diversity_weight=0.25, hop_weight=0.1).ranking_options()
    assert (off["second_hop"], off["diversity"]) == (False, 0.0)
    assert RetrievalSettings(hop_weight=0.0).ranking_options()["second_hop"] is False
    RetrieveOptions(user_id="u1", **on)  # every field is a RetrieveOptions field
