"""Tests for memory_core.chat.tokens: script-aware estimates, word tokens, Jaccard, counters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.chat.tokens import (
    HeuristicTokenCounter,
    TokenCounter,
    TokenizerTokenCounter,
    count_cjk,
    estimate_tokens,
    jaccard,
    token_counter,
    word_tokens,
)
from memory_core.config import ReflectionSettings


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("   ", 0),
        ("The quick brown fox", 6),  # ceil(4 × 1.3 = 5.2)
        ("hello", 2),  # ceil(1.3)
        ("one two three four five six seven eight nine ten", 13),  # exactly 13.0, no float drift
        ("Hello, world! ...", 3),  # 2 words (… is punctuation only) → 2.6
        ("我喜欢吃苹果", 9),  # Chinese, 6 Han × 1.5
        ("我喜欢猫", 6),  # space-free CJK counts per character, not 1 word
        ("我喜欢猫。", 6),  # the full stop is punctuation only
        ("東京タワーに行きたい", 15),  # Japanese: 東京 + タワー + に行きたい = 10 chars
        ("こんにちは", 8),  # 5 Hiragana → 7.5
        ("안녕하세요 세계", 11),  # Korean: 7 Hangul → 10.5
        ("我爱Python编程", 8),  # mixed: 4 CJK (6.0) + 1 word (1.3) = 7.3
        ("I live in 東京 now", 9),  # 4 words (5.2) + 2 CJK (3.0) = 8.2
        ("Meeting at 3pm 会议室A", 10),  # 4 words incl. "A" (5.2) + 3 CJK (4.5) = 9.7
    ],
)
def test_estimate_tokens_exact(text, expected):
    assert estimate_tokens(text) == expected


def test_thai_is_approximate_one_word_per_run():
    # Thai has no spaces: a whole run counts as one word (documented approximation)
    assert estimate_tokens("สวัสดีครับ") == 2
    assert estimate_tokens("สวัสดี ครับ") == 3


def test_count_cjk():
    assert count_cjk("a我b愛cアdあe한") == 5
    assert count_cjk("plain ascii") == 0


def test_word_tokens():
    assert word_tokens("The cat, the CAT!") == {"the", "cat"}
    assert word_tokens("我爱Python编程") == {"我", "爱", "python", "编", "程"}
    assert word_tokens("it's 4817") == {"it", "s", "4817"}
    assert word_tokens("...") == set()


def test_jaccard():
    assert jaccard({"a", "b"}, {"a", "b"}) == 1.0
    assert jaccard({"a"}, {"b"}) == 0.0
    assert jaccard({"a", "b", "c"}, {"a", "b"}) == pytest.approx(2 / 3)
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a"}, set()) == 0.0


def test_heuristic_counter():
    c = HeuristicTokenCounter()
    assert isinstance(c, TokenCounter)
    assert c("The quick brown fox") == c.count("The quick brown fox") == 6


def test_token_counter_selection():
    assert token_counter(ReflectionSettings())("The quick brown fox") == 6
    exact = token_counter(ReflectionSettings(exact_token_count=True))
    assert isinstance(exact, TokenizerTokenCounter)
    assert exact is token_counter(ReflectionSettings(exact_token_count=True))  # cached


def test_tokenizer_counter_exact_no_special_tokens_no_truncation():
    c = TokenizerTokenCounter()
    assert c("The quick brown fox") == 4  # WordPiece: the / quick / brown / fox, no [CLS]/[SEP]
    assert c("") == 0
    long = "word " * 1000
    assert c(long) == 1000  # not truncated at the model's 256/512 tokens


def test_tokenizer_counter_missing_path_falls_back(tmp_path):
    counter = token_counter(ReflectionSettings(exact_token_count=True), model_path=str(tmp_path / "missing"))
    assert counter("The quick brown fox") == 6


@settings(max_examples=300, deadline=None)
@given(a=st.text(max_size=60), b=st.text(max_size=60))
def test_property_monotone_under_concatenation(a, b):
    ab = estimate_tokens(a + b)
    assert ab >= max(estimate_tokens(a), estimate_tokens(b))
    # separated by a space the parts are counted independently; ceil makes the sum an upper bound
    spaced = estimate_tokens(a + " " + b)
    assert max(estimate_tokens(a), estimate_tokens(b)) <= spaced <= estimate_tokens(a) + estimate_tokens(b)


@settings(max_examples=200, deadline=None)
@given(words=st.integers(0, 200), cjk=st.integers(0, 200))
def test_property_formula(words, cjk):
    text = " ".join(["word"] * words) + " " + "字" * cjk
    assert estimate_tokens(text) == math.ceil((13 * words + 15 * cjk) / 10)
