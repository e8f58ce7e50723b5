"""``has_time_expression`` and ``temporal_intent`` on RE2 (``memory_core.linear_re``) say what
the Python ``re`` patterns they replaced said, for any text (the class: the patterns' own words
in any case, split by any whitespace, glued to letters, digits and marks of other scripts), and
run on RE2 (linear time: ``tests/memory_core/test_linear_time.py`` holds both).

Where RE2's rules differ from Python's, the texts drawn here leave it out: the information
separators U+001C–U+001F (Python's ``\\s``, not ``linear_re.SPACE``), combining marks
(``linear_re.WORD``, not Python's ``\\w``: a mark belongs to its word), the Turkish dotted and
dotless I inside a word (Python's ``re.I`` folds them to ``i``, RE2 does not: ``FRİDAY``) and
characters only RE2's newer Unicode tables assign (``test_the_known_differences``)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.retrieval.timeparse import has_time_expression, temporal_intent

_FULL_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
PYTHON_TIME_EXPRESSION = re.compile(  # the pattern as it was (Python's re), the reference
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|last\s+(?:week|month|year|night|weekend|summer|winter|spring|fall|"
    rf"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|next\s+(?:week|month|year|weekend)"
    rf"|this\s+(?:week|month|year|weekend|morning|summer|winter|spring|fall)|recently|lately|earlier|"
    rf"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|(?:19|20)\d\d|{_FULL_MONTHS}|may\s+\d{{1,2}}"
    rf"|(?:a|one|two|three|four|five|six|few|couple\s+of)\s+(?:days?|weeks?|months?|years?)"
    rf"|since|years?|months?|weeks?)\b",
    re.I,
)
PYTHON_TEMPORAL_INTENT = re.compile(
    r"\b(?:when|what\s+(?:year|month|day|date|time|week(?:end)?|season)|which\s+(?:year|month|day|date|week(?:end)?)"
    r"|how\s+long(?:\s+ago)?|how\s+many\s+(?:years|months|weeks|days)|since\s+when|what\s+age|how\s+old"
    r"|before\s+or\s+after|first\s+time|last\s+time|until\s+when)\b",
    re.I,
)

PIECES = [
    # the patterns' words, whole and cut
    *"yesterday today tonight tomorrow ago last next this recently lately earlier weekend since when what which how".split(),
    *"long many age old before or after first time until year years month months week weeks day days date season".split(),
    *"monday Sunday MAY May may january DECEMBER a one two three four five six few couple of morning night".split(),
    "yester",
    "tod",
    "mon",
    "wee",
    "ks",
    "s",
    "ing",
    # digits of several scripts, and years
    "1",
    "19",
    "20",
    "2023",
    "1999",
    "٢٠٢٣",
    "२०",
    "0",
    "7",
    # whitespace, ASCII and Unicode
    " ",
    "  ",
    "\t",
    "\n",
    "\u00a0",
    "\u2003",
    "\u3000",
    "\u2028",
    "\x85",
    # glue: punctuation, underscore, other scripts' letters
    ".",
    ",",
    "!",
    "?",
    "-",
    "'",
    "_",
    "é",
    "ß",
    "东京",
    "ไทย",
    "Ω",
    "İ",
    "K",
    "ſ",
]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14).map("".join))
def test_the_time_patterns_say_what_the_python_patterns_said(text):
    assert has_time_expression(text) == bool(PYTHON_TIME_EXPRESSION.search(text))
    assert temporal_intent(text) == bool(PYTHON_TEMPORAL_INTENT.search(text))


def test_each_pattern_word_is_found_alone_and_not_inside_another_word():
    for phrase in ["yesterday", "last   week", "next\tmonth", "this morning", "in 2023", "May 8", "a couple of weeks",
                   "3 years ago", "since"]:  # fmt: skip
        assert has_time_expression(f"We met {phrase}.") and has_time_expression(phrase.upper())
        assert not has_time_expression(f"x{phrase.split()[0]}x")
    for question in ["When did she go?", "what   year was it", "How long ago?", "since when"]:
        assert temporal_intent(question) and not temporal_intent(question.replace(" ", "_"))


def test_the_known_differences():
    """The differences the docstring names, pinned: if one goes away (a newer RE2 or Python),
    the docstrings must say so."""
    assert bool(PYTHON_TIME_EXPRESSION.search("FRİDAY")) and not has_time_expression("FRİDAY")
    assert bool(PYTHON_TIME_EXPRESSION.search("sınce")) and not has_time_expression("sınce")
    assert bool(PYTHON_TIME_EXPRESSION.search("today\u0301")) and not has_time_expression("today\u0301")
    assert bool(PYTHON_TIME_EXPRESSION.search("two\x1cdays")) and not has_time_expression("two\x1cdays")
