"""Operators' patterns (routing ``regex``, reflection ``block_patterns``) read caller text, so
they run on RE2 too: a pattern that backtracks exponentially in Python's ``re`` is linear
there, and syntax RE2 lacks is refused when the configuration loads."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from memory_core.chat.gate import compile_block_patterns
from memory_core.chat.routing import _compiled
from memory_core.config import MatchRules, ReflectionSettings

EVIL = r"(a+)+$"  # exponential in a backtracking engine on "aaa…b"


def _cpu(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


@pytest.mark.parametrize("compile_", [lambda p: _compiled(p), lambda p: compile_block_patterns((p,))[0]])
def test_a_backtracking_pattern_is_linear_in_the_text(compile_):
    pattern = compile_(EVIL)
    small, large = "a" * 1000 + "b", "a" * 16000 + "b"
    assert pattern.search(small) is None and pattern.search(large) is None
    t_small = min(_cpu(lambda: pattern.search(small)) for _ in range(5))
    t_large = min(_cpu(lambda: pattern.search(large)) for _ in range(5))
    # 16× the text: 16^1.5 = 64 lies between linear (16) and quadratic (256); Python's re
    # does not finish "a"*30+"b"
    assert t_large <= 64 * max(t_small, 1e-5)


def test_block_patterns_match_case_insensitively_as_one_alternation():
    (combined,) = compile_block_patterns(("secret", r"(?s)pass.word"))
    assert combined.search("my SECRET") and combined.search("PASS\nWORD") and not combined.search("hello")


@pytest.mark.parametrize("pattern", [r"(?=x)y", r"(a)\1", r"(?<!a)b"])
def test_syntax_re2_lacks_is_refused_at_load(pattern):
    with pytest.raises(ValidationError, match="not a valid RE2 pattern"):
        ReflectionSettings(block_patterns=[pattern])
    with pytest.raises(ValidationError, match=r"regex\[0\]"):
        MatchRules(regex=[pattern])
