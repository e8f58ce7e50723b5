"""memory_core.chat.extract: what a turn leaves in memory — typed statements, skip reasons,
windows of the conversation, block/think stripping, quoted memories, truncation."""

from __future__ import annotations

import pytest

from memory_core.chat.extract import ELLIPSIS, classify_sentence, extract_turn, remove_quoted, truncate_utf8
from memory_core.chat.inject import inject_memories
from memory_core.sanitize import MAX_CONTENT_BYTES
from memory_core.types import Memory, MemoryType


def mem(content: str, i: int = 0) -> Memory:
    return Memory(content=content, user_id="u1")


def test_jaccard_quote_removed_but_new_fact_kept():
    injected = [mem("The user's dog is called Biscuit and is a beagle")]
    # same words, reordered/rephrased slightly: Jaccard >= 0.8 (9/10 here)
    answer = "The dog of the user is called Biscuit and is a beagle. It turns five in May."
    out = remove_quoted(answer, injected)
    assert out == "It turns five in May."


def test_below_quote_threshold_kept():
    injected = [mem("The user likes green tea in the morning")]
    answer = "Green tea sounds good for the afternoon."
    assert remove_quoted(answer, injected) == answer


def test_short_memory_does_not_remove_everything():
    injected = [mem("Yes.")]
    answer = "Yes, I can help with that plan."
    assert remove_quoted(answer, injected) == answer


def test_truncate_utf8():
    assert truncate_utf8("abc", 3) == "abc"
    assert truncate_utf8("abcdef", 5) == "ab" + ELLIPSIS
    assert truncate_utf8("日本語テキスト", 10) == "日本" + ELLIPSIS  # 3-byte chars: 6 + 3 <= 10
    assert truncate_utf8("abcdef", 2) == ""


def turn(text, answer="ok", history=(), injected=(), **kw):
    messages = [*history, {"role": "user", "content": text}]
    return extract_turn(messages, answer, list(injected), **kw)


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("My locker code is 4817.", MemoryType.SEMANTIC),
        ("I prefer aisle seats on long flights.", MemoryType.SEMANTIC),
        ("The staging database is on port 5432.", MemoryType.SEMANTIC),
        ("我住在上海。", MemoryType.SEMANTIC),
        ("Always answer me in French.", MemoryType.PROCEDURAL),
        ("From now on, keep your answers short.", MemoryType.PROCEDURAL),
        ("Call me Sam from now on.", MemoryType.PROCEDURAL),
        ("Yesterday I went to the support group.", MemoryType.EPISODIC),
        ("Last week we visited my parents in Lyon.", MemoryType.EPISODIC),
        ("What is my locker code?", "question"),
        ("where do I live", "question"),
        ("Hi there!", "greeting"),
        ("thanks a lot", "greeting"),
        ("I'd rather not say.", "refusal"),
        ("Write me a poem about cats.", "request"),
        ("Can you summarise this article.", "request"),
        ("why", "question"),
        ("blue car", "too_short"),
        ("lol ok", "greeting"),
    ],
)
def test_sentences_are_typed_or_skipped_with_a_reason(sentence, kind):
    assert classify_sentence(sentence) == kind


def test_a_turn_keeps_its_statements_by_type_and_drops_lead_ins_and_questions():
    out = turn("Remember: my locker code is 4817. Always answer in French please. What time is it?")
    assert [(m.type, m.content) for m in out.memories] == [
        (MemoryType.SEMANTIC, "my locker code is 4817."),
        (MemoryType.PROCEDURAL, "Always answer in French please."),
    ]
    assert out.skipped is None


def test_a_turn_that_states_nothing_says_why():
    assert turn("What is my locker code?").skipped == "question"
    assert turn("ok").skipped == "greeting"
    assert turn("   ").skipped == "empty"
    assert turn("What is my locker code?").memories == []


def test_think_blocks_and_injected_blocks_are_not_remembered():
    injected = [mem("Locker code is 4817")]
    sent = inject_memories([{"role": "user", "content": "<think>should I say it?</think>I moved to Lyon."}], injected)
    out = extract_turn(sent, "<think>plan</think>Nice, Lyon is lovely.", injected, window_every=1)
    (fact, window) = out.memories
    assert fact.content == "I moved to Lyon." and "4817" not in window.content
    assert window.window and window.content == "user: I moved to Lyon.\nassistant: Nice, Lyon is lovely."


def test_every_third_user_turn_gives_a_window_of_both_speakers():
    history = []
    for i in range(1, 7):
        out = turn(f"Turn {i}: I painted wall number {i} today.", f"Answer {i}.", history)
        windows = [m for m in out.memories if m.window]
        assert bool(windows) == (i % 3 == 0)
        if windows:
            lines = windows[0].content.splitlines()
            assert lines[-1] == f"assistant: Answer {i}." and lines[-2].startswith(f"user: Turn {i}")
            assert sum(1 for line in lines if line.startswith("user: ")) == min(i, 5)
        history += [
            {"role": "user", "content": f"Turn {i}: I painted wall number {i} today."},
            {"role": "assistant", "content": f"Answer {i}."},
        ]


def test_window_drops_answer_sentences_that_quote_injected_memories():
    injected = [mem("Your locker code is 4817")]
    out = turn(
        "Book the gym for Tuesday.",
        "Your locker code is 4817. I booked the gym for Tuesday at 7.",
        injected=injected,
        window_every=1,
    )
    assert out.memories[-1].content.endswith("assistant: I booked the gym for Tuesday at 7.")


def test_long_statements_are_cut_at_the_store_limit():
    out = turn("My notes say " + "é" * MAX_CONTENT_BYTES)
    (m,) = out.memories
    assert len(m.content.encode()) <= MAX_CONTENT_BYTES and m.content.endswith(ELLIPSIS)
