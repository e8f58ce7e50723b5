"""Every rule that reads caller text runs in time linear in the text.

For each rule of ``RULES`` (every public function that reads caller text) and each generated
adversarial input family of ``FAMILIES`` (runs of each character class and separator,
repeated words, alternations of letters, digits and punctuation, keyword-prefixed runs), the
time for the largest accepted input (``Rule.max_bytes`` UTF-8 bytes) is compared with the
time for a 16× smaller one of the same family, in the same run: the ratio must stay at most
``MAX_RATIO`` = 16^1.5 = 64, halfway (in log scale) between a linear rule (16; CI machines
measured up to 32, from caches and allocation on the larger input) and a quadratic one (256).

Timing: CPU time of the test's thread (``time.thread_time``: what other processes take of
the shared CPUs does not count), calls looped until a run is long enough for the timer; each
size's time is the minimum of its runs, the two sizes measured in turn (``_ratio``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from memory_core.chat.extract import (
    classify_sentence,
    clean_turn_text,
    extract_turn,
    is_request,
    join_sentences,
    remove_quoted,
    strip_think,
)
from memory_core.chat.gate import HeuristicGate
from memory_core.chat.inject import format_memory_block, render_memory_text, strip_memory_block
from memory_core.chat.routing import is_greeting, is_punctuation_only
from memory_core.chat.tokens import count_cjk, estimate_tokens, word_tokens
from memory_core.config import ReflectionSettings
from memory_core.curation.change_cues import clear_cues_cache, read_cues
from memory_core.curation.consolidate import merged_content, plan_groups
from memory_core.curation.consolidate import words as consolidation_words
from memory_core.curation.judge import MAX_JUDGED_CHARS, judge, read_statement, same_values, strip_lead_in
from memory_core.curation.llm import LLMUnusable, parse_json_reply
from memory_core.curation.screening import screen, screen_window
from memory_core.errors import InvalidInput
from memory_core.retrieval import lexical
from memory_core.retrieval.lexical import tokenize
from memory_core.retrieval.querytime import query_spans
from memory_core.retrieval.questions import is_question
from memory_core.retrieval.speaker import leading_speaker
from memory_core.retrieval.timeparse import has_time_expression, parse_session_date, temporal_intent
from memory_core.sanitize import (
    MAX_CONTENT_BYTES,
    check_json_text,
    check_label,
    check_text,
    clean_content,
    is_memory_id,
    is_visible,
    normalize_headers,
    request_context,
)
from memory_core.sentences import split_sentences
from memory_core.types import Memory, MemoryType, ScoredMemory

MAX_RATIO = 64.0
SHRINK = 16
REPEATS = 4
RECHECKS = 2
"""Families over ``MAX_RATIO`` are measured again this many times (the lowest ratio counts): a
busy CI machine gave linear rules up to 31.8 (16 on a quiet one), while a super-linear rule
stays far beyond the bound however often it is measured."""
CHAT_MAX_BYTES = 64 * 1024
"""Largest chat message the rules are timed on (the chat path has no smaller bound of its
own; memory content is bounded by ``MAX_CONTENT_BYTES``)."""


def _memory(content: str, i: int = 0) -> Memory:
    return Memory(id=f"m{i:031d}", user_id="u", type=MemoryType.SEMANTIC, content=content)


def _swallow(fn: Callable[[str], object]) -> Callable[[str], object]:
    """``fn`` with the errors a rule raises for bad input taken as its answer."""

    def run(text: str) -> object:
        try:
            return fn(text)
        except (InvalidInput, LLMUnusable) as e:
            return e

    return run


_GATE = HeuristicGate()
_NOW = datetime(2026, 1, 1, tzinfo=UTC)
_GATE_SETTINGS = ReflectionSettings(block_patterns=[r"password", r"secret\s+key"], max_inject_tokens=10**9)


def _gate(text: str) -> object:
    candidates = [ScoredMemory(memory=_memory(text, 1), similarity=0.9, score=0.9)]
    candidates.append(ScoredMemory(memory=_memory(text + " x", 2), similarity=0.8, score=0.8))
    return _GATE.apply(candidates, _GATE_SETTINGS, _NOW)


def _tokenize_uncached(text: str) -> object:
    """``tokenize`` as for a text never seen (its stemming cache would hide a repeat's cost)."""
    lexical._stem_cached.cache_clear()
    lexical._clear_terms_cache()
    return tokenize(text)


def _judge_uncached(old: str, new: str) -> object:
    """``judge`` as for texts never seen (the cache of ``read_cues`` would hide a repeat's cost)."""
    clear_cues_cache()
    return judge(old, new)


@dataclass(frozen=True)
class Rule:
    """One rule reading caller text: ``fn(text)``, timed on inputs up to ``max_bytes``."""

    fn: Callable[[str], object]
    max_bytes: int = MAX_CONTENT_BYTES


_FACT = "My locker code is 4817 and I live in Boston."
RULES: dict[str, Rule] = {
    # the speaker of a memory (retrieval/speaker.py): a name-shaped run, then the text
    "leading_speaker": Rule(leading_speaker),
    "leading_speaker(name-like)": Rule(lambda t: leading_speaker("Mary " + t.replace(" ", "-") + ": hi")),
    # screening (owned by curation/screening.py)
    "screen": Rule(screen),
    "screen_window": Rule(lambda t: screen_window(f"user: {t}\nassistant: ok")),
    # extraction (chat path: the user's message)
    "extract_turn": Rule(lambda t: extract_turn([{"role": "user", "content": t}], t[:4096]), CHAT_MAX_BYTES),
    "extract_window": Rule(
        lambda t: extract_turn([{"role": "user", "content": t}] * 3, "ok", window_every=1)
    ),  # a window is at most MAX_CONTENT_BYTES
    "classify_sentence": Rule(classify_sentence, CHAT_MAX_BYTES),
    "clean_turn_text": Rule(clean_turn_text, CHAT_MAX_BYTES),
    "strip_think": Rule(strip_think, CHAT_MAX_BYTES),
    "strip_memory_block": Rule(lambda t: strip_memory_block("<memory_context>" + t), CHAT_MAX_BYTES),
    "remove_quoted(answer)": Rule(lambda t: remove_quoted(t, [_memory(_FACT)]), CHAT_MAX_BYTES),
    "remove_quoted(memory)": Rule(lambda t: remove_quoted(_FACT + " " + _FACT, [_memory(t)])),
    "remove_quoted(both)": Rule(lambda t: remove_quoted(t, [_memory(t), _memory(t[::-1])])),
    "is_greeting": Rule(is_greeting, CHAT_MAX_BYTES),
    "is_punctuation_only": Rule(is_punctuation_only, CHAT_MAX_BYTES),
    "is_request": Rule(is_request, CHAT_MAX_BYTES),
    "join_sentences": Rule(lambda t: join_sentences(t.split(".")), CHAT_MAX_BYTES),
    "split_sentences": Rule(split_sentences, CHAT_MAX_BYTES),
    "split_sentences(initials)": Rule(lambda t: split_sentences(t.replace(" ", " A. ")), CHAT_MAX_BYTES),
    # the curation judge: the adversarial text old, new, and both
    "judge(old)": Rule(lambda t: _judge_uncached(t, "My code is a1b2 now, I moved to Paris.")),
    "judge(new)": Rule(lambda t: _judge_uncached("My code is a1b2 and I live in Boston.", t)),
    "judge(both)": Rule(lambda t: _judge_uncached(t, t)),
    "judge(both, differing)": Rule(lambda t: _judge_uncached(t, t + " now")),
    "same_values": Rule(lambda t: same_values(t, t + " 1")),
    # beyond MAX_JUDGED_CHARS the judge reads nothing: its readers at the largest size, and
    # the judge itself within its bound
    "read_statement(text)": Rule(lambda t: read_statement(t, "My code is a1b2 now, I moved to Paris.")),
    "read_statement(other)": Rule(lambda t: read_statement("My code is a1b2 and I live in Boston.", t)),
    "read_cues": Rule(lambda t: (clear_cues_cache(), read_cues(t))),
    "judge(both, within the bound)": Rule(lambda t: _judge_uncached(t, t[:-4] + " now"), MAX_JUDGED_CHARS),
    "strip_lead_in": Rule(strip_lead_in),
    # consolidation
    "consolidation_words": Rule(consolidation_words),
    "merged_content": Rule(lambda t: merged_content([_memory(t, 1), _memory(t.replace("a", "b") + " zz", 2)])),
    "plan_groups": Rule(
        lambda t: plan_groups(
            [_memory(t, 1), _memory(t + " x", 2)], lambda a, b: 1.0, min_cosine=0.5, min_jaccard=0.5, max_groups=4
        )
    ),
    # a model's answer (influenced by the caller's text)
    "parse_json_reply": Rule(_swallow(parse_json_reply), CHAT_MAX_BYTES),
    # input rules
    "clean_content": Rule(_swallow(clean_content)),
    "check_text": Rule(lambda t: check_text(t, "content"), CHAT_MAX_BYTES),
    "check_json_text": Rule(lambda t: check_json_text({"messages": [{"content": t}]}), CHAT_MAX_BYTES),
    "is_visible": Rule(is_visible),
    "check_label": Rule(_swallow(lambda t: check_label(t, "source"))),
    "is_memory_id": Rule(is_memory_id),
    "request_context": Rule(
        _swallow(
            lambda t: request_context(
                normalize_headers([("x-authz-user-id", t[:256]), ("x-project-id", t), ("x-other", t)])
            )
        )
    ),
    # tokens, gate, injection
    "estimate_tokens": Rule(estimate_tokens, CHAT_MAX_BYTES),
    "word_tokens": Rule(word_tokens, CHAT_MAX_BYTES),
    "count_cjk": Rule(count_cjk, CHAT_MAX_BYTES),
    "gate": Rule(_gate),
    "render_memory_text": Rule(render_memory_text),
    "format_memory_block": Rule(lambda t: format_memory_block([_memory(t)])),
    # retrieval
    "lexical_tokenize": Rule(_tokenize_uncached, CHAT_MAX_BYTES),
    "temporal_intent": Rule(temporal_intent, CHAT_MAX_BYTES),
    "query_spans": Rule(query_spans, CHAT_MAX_BYTES),
    "has_time_expression": Rule(has_time_expression),
    "is_question": Rule(is_question),
    "is_question(closing run)": Rule(lambda t: is_question("?" + " )" * (len(t) // 2))),
    "parse_session_date": Rule(_swallow(parse_session_date)),
}

# ----------------------------------------------------------------------------- inputs
_CHARS = [
    "a", "A", "1", "-", ".", "@", ":", "/", "'", ",", "<", "`", "[", " ", "\n", "\t", "\u2028", "\u3000", "中",
    "\u0301", "\u200b",
]  # fmt: skip
_ALTERNATIONS = [
    "a-", "a.", "1-", "a@", "a1.", "1:", "a/", "A ", "1 ", "1,", "a\n", "A. ", "中,", "a'", "a_", "x@y.", "Aa 1 ",
    "a1-", "a\u0301", "\n\n", " \n",
]  # fmt: skip
_WORDS = [
    "Boston ", "not a ", "from a to ", "my sister ", "Dr. Aa ", "hey Aa, ", "May 1 ", "<think>", "```json",
    "<memory_context>", "住在中", "remember: ", "moved ", "1:56 pm on 8 May, ", "in June ", "3 May 2023 ", "last week ", "n't ", "system: ",
    "[INST]", "<|im_start|>", "Aa Bb. ",
    # the judge's people, conditions, occasions and additions (2026-12-05)
    "il ", "if I'd ", "si me ", "Tom's sister ", "la hermana de ", "another one ", "还", "、もし", "grew up in ",
    "should I, ", "is gone ",
]  # fmt: skip
_PREFIXED = [
    ("My code is ", "a-"), ("from ", "x "), ("from the ", "a"), ("My email is ", "a."), ("I live in ", "Aa "),
    ("not ", "a-"), ("<think>", "a "), ("```json", "a "), ("[", "1,"), ("Hey ", "A"), ("Thanks, ", "Aa"),
    ("what ", " "), ("1", " "),
]  # fmt: skip
FAMILIES: list[tuple[str, str]] = [("", u * 8) for u in _CHARS] + [("", u) for u in _ALTERNATIONS + _WORDS]
"""Runs of each character class and separator, alternations, repeated words..."""
FAMILIES += _PREFIXED  # ...and keyword-prefixed runs
NUMBERED = "Word{i}. "
"""A family of distinct sentences (``Word1. Word2. …``): what deduplication cannot fold."""
FAMILIES.append(("", NUMBERED))


def _text(prefix: str, unit: str, max_bytes: int) -> str:
    """``prefix`` + ``unit`` repeated, as long as fits in ``max_bytes`` UTF-8 bytes."""
    room = max_bytes - len(prefix.encode())
    if unit == NUMBERED:
        pieces, size = [], 0
        while size + len(NUMBERED) + 6 <= room:
            pieces.append(NUMBERED.format(i=len(pieces)))
            size += len(pieces[-1])
        return prefix + "".join(pieces)
    return prefix + unit * max(1, room // len(unit.encode()))


def _seconds(fn: Callable[[str], object], text: str) -> float:
    """CPU seconds of this thread per call of ``fn(text)`` (immune to the time other
    processes take the CPU for: a long run would be preempted more often than a short one),
    calls looped until the run lasts ≥ 0.2 ms."""
    n = 1
    while True:
        start = time.thread_time()
        for _ in range(n):
            fn(text)
        spent = time.thread_time() - start
        if spent >= 2e-4:
            return spent / n
        n *= 4


def _ratio(fn: Callable[[str], object], small: str, large: str) -> float:
    """``time(large) / time(small)``, each the minimum of up to ``REPEATS`` interleaved runs:
    stops as soon as the ratio is within ``MAX_RATIO``, or far beyond it after two runs."""
    base = best = float("inf")
    ratio = 0.0
    for attempt in range(REPEATS):
        base = min(base, min(_seconds(fn, small) for _ in range(3)))
        best = min(best, _seconds(fn, large))
        ratio = best / base
        if ratio <= MAX_RATIO or (attempt and ratio > 4 * MAX_RATIO):
            break
    return ratio


@pytest.mark.parametrize("name", list(RULES))
def test_rule_runs_in_linear_time(name: str) -> None:
    rule = RULES[name]
    slow = {}
    for prefix, unit in FAMILIES:
        large = _text(prefix, unit, rule.max_bytes)
        small = _text(prefix, unit, rule.max_bytes // SHRINK)
        ratio = _ratio(rule.fn, small, large)
        for _ in range(RECHECKS):
            if ratio <= MAX_RATIO:
                break
            ratio = min(ratio, _ratio(rule.fn, small, large))
        if ratio > MAX_RATIO:
            slow[repr(prefix + unit)] = round(ratio, 1)
    assert not slow, f"{name}: time(largest) / time(16x smaller) > {MAX_RATIO} for {slow}"


def test_inputs_reach_the_largest_accepted_size() -> None:
    """The generated inputs are as large as the rules accept (the sizes are the limits)."""
    for prefix, unit in FAMILIES:
        text = _text(prefix, unit, MAX_CONTENT_BYTES)
        assert MAX_CONTENT_BYTES - 64 < len(text.encode()) <= MAX_CONTENT_BYTES
        clean_content("x" + text[1:])  # accepted as memory content (invisible runs padded)


def _quadratic(text: str) -> object:
    """A backtracking pattern that, from each start, runs to the end and fails: ~n²/2 steps."""
    return re.search(r"(?:a-)*\x00", text)


def test_the_measurement_tells_a_quadratic_rule_from_a_linear_one() -> None:
    """The bound separates the two classes on inputs of the same family, 16x apart."""
    large = _text("", "a-", 8 * 1024)
    small = _text("", "a-", 8 * 1024 // SHRINK)
    assert _ratio(_quadratic, small, large) > MAX_RATIO
    assert _ratio(lambda t: re.search(r"\x00", t), small, large) <= MAX_RATIO
