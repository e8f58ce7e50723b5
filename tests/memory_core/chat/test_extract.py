"""Tests for memory_core.chat.extract: Q/A content, block stripping, quoted memories, truncation."""

from __future__ import annotations

from memory_core.chat.extract import ELLIPSIS, remove_quoted, truncate_utf8, turn_memory_content
from memory_core.chat.inject import format_memory_block, inject_memories, last_user_text
from memory_core.sanitize import MAX_CONTENT_BYTES
from memory_core.types import Memory


def mem(content: str, i: int = 0) -> Memory:
    return Memory(id=f"m{i}", content=content, user_id="u1")


def test_plain_turn():
    assert turn_memory_content("I moved to Lyon.", "Nice, Lyon is lovely.", []) == (
        "Q: I moved to Lyon.\nA: Nice, Lyon is lovely."
    )


def test_strips_injected_block_from_user_text():
    injected = [mem("Locker code is 4817")]
    sent = inject_memories([{"role": "user", "content": "Book a table for two tonight."}], injected)
    user_text = last_user_text(sent)
    assert "<memory_context>" in user_text
    out = turn_memory_content(user_text, "Done: table for two at 8pm.", injected)
    assert out == "Q: Book a table for two tonight.\nA: Done: table for two at 8pm."
    assert "4817" not in out and "memory_context" not in out


def test_strips_echoed_block_from_assistant_text():
    injected = [mem("Likes green tea")]
    block = format_memory_block(injected)
    out = turn_memory_content("hello there friend", "You said: hello there friend\n\n" + block, injected)
    assert out == "Q: hello there friend\nA: You said: hello there friend"


def test_removes_sentences_quoting_injected_memories():
    injected = [mem("Your locker code is 4817", 1), mem("Q: what tea do I like?\nA: You like green tea.", 2)]
    answer = (
        "Your locker code is 4817. You like green tea! "
        "I booked the gym for Tuesday at 7.\nAlso: your locker code is 4817, as noted."
    )
    out = turn_memory_content("Book the gym for Tuesday.", answer, injected)
    assert out == "Q: Book the gym for Tuesday.\nA: I booked the gym for Tuesday at 7."


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


def test_answer_entirely_quoting_stores_nothing():
    """A question answered only by quoting injected memories teaches nothing new; storing the
    bare question would crowd that question's later retrievals."""
    injected = [mem("Locker code is 4817")]
    assert turn_memory_content("what's my locker code?", "Locker code is 4817.", injected) is None


def test_empty_answer_keeps_the_question():
    assert turn_memory_content("remember my locker code is 4817", "", []) == "Q: remember my locker code is 4817"


def test_none_when_nothing_of_the_user_remains():
    block = format_memory_block([mem("x")])
    assert turn_memory_content(block, "answer", [mem("x")]) is None
    assert turn_memory_content("   ", "answer", []) is None
    assert turn_memory_content("", "answer", []) is None


def test_cjk_sentences():
    injected = [mem("用户的储物柜密码是4817")]
    answer = "用户的储物柜密码是4817。明天下雨，记得带伞。"
    out = turn_memory_content("明天天气怎么样？", answer, injected)
    assert out == "Q: 明天天气怎么样？\nA: 明天下雨，记得带伞。"


def test_truncation_at_character_boundary():
    user = "Summarise this"
    answer = "é" * MAX_CONTENT_BYTES  # 2 bytes per char: far over the limit
    out = turn_memory_content(user, answer, [])
    data = out.encode("utf-8")
    assert len(data) <= MAX_CONTENT_BYTES
    assert out.startswith("Q: Summarise this\nA: é") and out.endswith(ELLIPSIS)
    # never mid-character: the text round-trips and only whole "é" precede the ellipsis
    assert set(out[len("Q: Summarise this\nA: ") : -1]) == {"é"}
    # it is as long as fits: one more "é" would not
    assert len(data) + 2 > MAX_CONTENT_BYTES


def test_truncation_of_four_byte_chars_small_limit():
    out = turn_memory_content("q", "😀" * 10, [], max_bytes=20)
    # head "Q: q\nA: " is 8 bytes; 2 emoji (8) + "…" (3) = 19 <= 20; a third emoji would make 23
    assert out == "Q: q\nA: 😀😀…"
    assert len(out.encode()) <= 20


def test_overlong_user_text_is_cut_too():
    out = turn_memory_content("x" * 100, "answer", [], max_bytes=50)
    assert len(out.encode()) <= 50 and out.startswith("Q: xxx") and out.endswith(ELLIPSIS)


def test_truncate_utf8():
    assert truncate_utf8("abc", 3) == "abc"
    assert truncate_utf8("abcdef", 5) == "ab" + ELLIPSIS
    assert truncate_utf8("日本語テキスト", 10) == "日本" + ELLIPSIS  # 3-byte chars: 6 + 3 <= 10
    assert truncate_utf8("abcdef", 2) == ""
