"""Two signals of ``HybridStore`` read from what a client sends: the periods a query names
matched against ``created_at`` (``date_weight``, ``date_slack_days``; the memories of that time
become candidates), and the context window of ``neighbor_radius`` turns around a match."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_core.retrieval.fusion import FusionWeights, Signals, final_score
from memory_core.retrieval.held_vectors import HeldVectors
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.types import Memory
from tests.ids import tid
from tests.memory_core.stores.test_hybrid import DIM, by_name, fake_embed, ids, opts, plain

MAY_1 = datetime(2022, 5, 1, 20, 0, tzinfo=UTC)


def memory(name: str, content: str, when: datetime, conv: str | None = "c1") -> Memory:
    return Memory(id=tid(name), user_id="u1", content=content, conversation_id=conv, created_at=when)


async def dated_store(**kw) -> HybridStore:
    """A watched-film memory of 1 May 2022 that shares no word with the question below, and
    30 memories of other days that do ("movie"), so neither side's top 2 holds the first."""
    h = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain(candidate_pool=2, **kw))
    await h.store(memory("film", "Joanna: we saw the trilogy last night, awesome", MAY_1 + timedelta(days=1)))
    for i in range(30):
        when = datetime(2022, 1, 1, tzinfo=UTC) + timedelta(days=3 * i) if i % 2 else MAY_1 + timedelta(days=40 + i)
        await h.store(memory(f"f{i}", f"Joanna: movie number {i} was a movie to watch", when, conv=f"c{i}"))
    return h


async def test_a_memory_of_the_period_the_query_names_is_found_and_gets_the_bonus():
    q = opts(query="What movie did Joanna watch on 1 May, 2022?", limit=3)
    off = await (await dated_store(date_weight=0.0)).retrieve(q)
    assert "film" not in ids(off)  # in neither side's top 2, nowhere near the others' words
    h = await dated_store(date_weight=0.3, date_slack_days=1)
    on = await h.retrieve(q)
    assert "film" in ids(on)
    # the bonus is date_weight exactly: the same memory's score without it (large pool) differs by it
    wide = await (await dated_store(date_weight=0.0)).retrieve(opts(query=q.query, limit=40))
    assert by_name(on)["film"] == pytest.approx(by_name(wide)["film"] + 0.3, abs=1e-6)
    # created on 2 May: outside the day itself, inside with a day of slack
    strict = await (await dated_store(date_weight=0.3, date_slack_days=0)).retrieve(q)
    assert "film" not in ids(strict)


async def test_a_month_without_a_year_and_a_query_without_a_period():
    h = await dated_store(date_weight=0.3, date_slack_days=0)
    # limit 40: every memory is a candidate, so the scores alone tell the bonus
    in_may = by_name(await h.retrieve(opts(query="Which movie did Joanna see in May?", limit=40)))
    in_aug = by_name(await h.retrieve(opts(query="Which movie did Joanna see in August?", limit=40)))
    off = await dated_store(date_weight=0.0)
    wide = by_name(await off.retrieve(opts(query="Which movie did Joanna see in May?", limit=40)))
    assert in_may["film"] == pytest.approx(wide["film"] + 0.3, abs=1e-6)
    assert in_may["f0"] == pytest.approx(wide["f0"], abs=1e-6)  # 10 June
    # no memory of any August: nothing changes
    assert in_aug == pytest.approx(
        by_name(await off.retrieve(opts(query="Which movie did Joanna see in August?", limit=40)))
    )
    plain_query = opts(query="Which movie did Joanna see?", limit=5)
    with_dates = await h.retrieve(plain_query)
    without = await (await dated_store(date_weight=0.0)).retrieve(plain_query)
    assert by_name(with_dates) == pytest.approx(by_name(without))  # no period named: nothing changes


async def test_the_period_bonus_honours_the_threshold_and_filters():
    h = await dated_store(date_weight=0.3)
    q = "What movie did Joanna watch on 1 May, 2022?"
    assert "film" not in ids(await h.retrieve(opts(query=q, threshold=0.5)))  # its cosine is ~0
    assert "film" not in ids(await h.retrieve(opts(query=q, project_id="elsewhere")))


async def test_a_month_spelt_with_a_long_s_is_a_search_like_any_other():
    h = await dated_store(date_weight=0.3)
    assert "f0" in ids(await h.retrieve(opts(query="Which movie did Joanna watch in \u017feptember?", limit=40)))


async def test_a_day_without_a_year_reaches_across_new_year_with_its_slack():
    """The years a period without a year is looked for in are those its slack can reach from
    the user's memories: a memory of 1 January told of the day before is matched by "on 31
    December" whether or not the user has memories of the year before (and forward)."""

    async def party_score(when: datetime, query: str, weight: float) -> float:
        h = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain(date_weight=weight, date_slack_days=1))
        await h.store(memory("party", "Joanna: the party was loud", when))
        await h.store(memory("other", "Joanna: the party was fun", when + timedelta(days=60)))
        return by_name(await h.retrieve(opts(query=query, limit=5)))["party"]

    for when, query in (
        (datetime(2024, 1, 1, 10, tzinfo=UTC), "What was the party like on 31 December?"),
        (datetime(2023, 12, 31, 23, tzinfo=UTC), "What was the party like on 1 January?"),
    ):
        bonus = await party_score(when, query, 0.3) - await party_score(when, query, 0.0)
        assert bonus == pytest.approx(0.3, abs=1e-6), query


def turn(name: str, speaker: str, text: str, i: int, day: int = 0) -> Memory:
    t0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC) + timedelta(days=day, seconds=i)
    return memory(name, f"{speaker}: {text}", t0)


async def context_store(radius: int, weight: float = 0.5) -> HybridStore:
    h = HybridStore(
        InMemoryStore(embed=fake_embed, dimension=DIM), **plain(neighbor_weight=weight, neighbor_radius=radius)
    )
    for m in [
        turn("ask", "Ann", "how was the coconut ice cream you made?", 0),
        turn("hm", "Bob", "oh let me think", 1),
        turn("ans", "Ann", "super good, rich and smooth", 2),
        turn("far", "Bob", "rich and smooth, like the sea", 3, day=3),  # another session
    ]:
        await h.store(m)
    return h


async def test_a_turn_two_steps_from_the_match_gets_its_context_with_a_wider_window():
    q = opts(query="What did Ann think of the coconut ice cream?", limit=4)
    base = by_name(await (await context_store(1, weight=0.0)).retrieve(q))  # every memory a candidate
    one = by_name(await (await context_store(1)).retrieve(q))
    two = by_name(await (await context_store(2)).retrieve(q))
    assert base["ask"] > base["hm"]
    assert one["ans"] == pytest.approx(base["ans"] + 0.5 * base["hm"], abs=1e-6)
    # "ask" is two turns back: its score is context only in the wider window
    assert two["ans"] == pytest.approx(base["ans"] + 0.5 * base["ask"], abs=1e-6)
    assert two["far"] == pytest.approx(base["far"], abs=1e-6)  # the window stops at the session gap
    with pytest.raises(ValueError):
        HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), neighbor_radius=0)


def test_the_date_bonus_in_the_formula():
    w = FusionWeights("score", 0.4, 60, 0.5, 0.3, 0.2, date_weight=0.25)
    assert final_score(0.5, [], Signals(similarity=0.5, date_match=True), w) == pytest.approx(0.75)
    assert final_score(0.5, [], Signals(similarity=0.5), w) == pytest.approx(0.5)


def test_mask_of_marks_the_rows_of_the_held_ids():
    held = HeldVectors()
    for i in range(5):
        held.put(f"m{i}", [1.0, float(i), 0.0, 0.0])
    held.remove("m1")
    mask = held.mask_of(["m2", "m4", "m1", "absent"])
    assert mask.shape == held.mask(lambda _: True).shape
    assert [i for i, _ in held.top(held.get("m4"), 5, allowed=mask)] == ["m4", "m2"]
