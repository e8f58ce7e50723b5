"""A memory that asks ranks ``question_weight`` lower (``memory_core.retrieval.questions``), and
its match still lends its neighbours context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_core.config import RetrievalSettings
from memory_core.retrieval.fusion import FusionWeights, Signals, final_score
from memory_core.retrieval.questions import is_question
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.types import Memory
from tests.ids import tid
from tests.memory_core.stores.test_hybrid import DIM, by_name, fake_embed, ids, opts, plain


@pytest.mark.parametrize(
    "text",
    [
        "What kind of music do you play?",
        "really?   ",
        'She asked "why?"',
        "(is it?)",
        "你去过北京吗？",
        "هل ذهبت؟",
        "Which one? [maybe?]",
        # what chat puts after a question's mark: "!", emoji, variation selectors,
        # zero-width and format characters, any script's closing or quoting marks, markdown
        "Really?!",
        "How are you? 😊",
        "How are you? 👍🏽",
        "Why?\ufe0f",
        "Why?\u200b",
        "Why?\ufeff",
        "„warum?“",
        "‚warum?‘",
        "‹pourquoi?›",
        "《为什么？》",
        "{why?}",
        "*why?*",
        "_why?_",
        "`why?`",
        # other question marks, and those whose compatibility form holds "?"
        "Are you ok❓",
        "Are you ok❔",
        "Really‽",
        "What⁇",
        "Really⁉",
        "Really⁈",
        "Why\ufe56",
        "Why\ufe16",
        "x?" + "!" * 64,
    ],
)
def test_a_text_ending_with_a_question_mark_asks(text):
    assert is_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "?? no, I play the clarinet.",
        "Did you go? We did.",
        "Cool, right? [shares a photo: a photo of a guitar]",
        "I wonder why",
        "Is it good; yes",
        "the ? is in the middle",
        "I love it!",
        "Great 😊",
        "x?" + "!" * 65,  # more than MAX_TRAILING characters after the mark: not read as one
        "Why?" + ")" * 16_000,
    ],
)
def test_a_text_that_ends_otherwise_states(text):
    assert not is_question(text)


def test_the_question_discount_in_the_formula():
    w = FusionWeights("score", 0.4, 60, 0.5, 0.3, 0.2, question_weight=0.15)
    assert final_score(0.5, [], Signals(similarity=0.5, asks=True), w) == pytest.approx(0.35)
    assert final_score(0.5, [], Signals(similarity=0.5), w) == pytest.approx(0.5)
    # a question's own neighbours are not discounted: only the memory that asks
    assert final_score(0.5, [0.4], Signals(similarity=0.5), w) == pytest.approx(0.7)


def turn(name: str, speaker: str, text: str, i: int, day: int = 0) -> Memory:
    when = datetime(2023, 5, 8, 13, 0, tzinfo=UTC) + timedelta(days=day, seconds=i)
    return Memory(id=tid(name), user_id="u1", content=f"{speaker}: {text}", conversation_id="c1", created_at=when)


async def store(**kw) -> HybridStore:
    h = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain(**kw))
    for m in [
        turn("ask", "Ann", "Which instruments do you play?", 0),
        turn("ans", "Bob", "I play instruments: the guitar, the clarinet", 1),
        turn("other", "Ann", "My teacher plays the guitar in town", 2, day=3),
    ]:
        await h.store(m)
    return h


async def test_a_memory_that_asks_ranks_below_the_one_that_answers():
    q = opts(query="Which instruments does Bob play?", limit=3)
    off = await (await store()).retrieve(q)
    assert ids(off)[0] == "ask"  # it shares the most words with the search
    on_store = await store(question_weight=0.2)
    on = await on_store.retrieve(q)
    assert ids(on)[0] == "ans"
    assert by_name(on)["ask"] == pytest.approx(by_name(off)["ask"] - 0.2, abs=1e-6)
    assert by_name(on)["ans"] == pytest.approx(by_name(off)["ans"], abs=1e-6)


async def test_the_question_still_lends_its_neighbour_context():
    q = opts(query="Which instruments does Bob play?", limit=3)
    plain_ctx = by_name(await (await store(neighbor_weight=0.5)).retrieve(q))
    discounted = by_name(await (await store(neighbor_weight=0.5, question_weight=0.2)).retrieve(q))
    assert discounted["ans"] == pytest.approx(plain_ctx["ans"], abs=1e-6)
    assert discounted["ask"] == pytest.approx(plain_ctx["ask"] - 0.2, abs=1e-6)


def test_question_weight_is_checked():
    with pytest.raises(ValueError):
        HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), question_weight=-0.1)
    with pytest.raises(ValueError):
        RetrievalSettings(question_weight=-1)
    assert (
        HybridStore.from_settings(
            InMemoryStore(embed=fake_embed, dimension=DIM), RetrievalSettings(question_weight=0.15)
        ).question_weight
        == 0.15
    )


@pytest.mark.parametrize("value", [float("inf"), "inf", float("nan"), -0.1, 1.5])
def test_the_question_weight_is_a_finite_share(value):
    """``retrieval.question_weight`` is in [0, 1] and finite (an infinite weight made every
    question score -inf: the search route could not encode its answer, a 500)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        RetrievalSettings(question_weight=value)
    if isinstance(value, float):
        with pytest.raises(ValueError):
            HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain(question_weight=value))
