"""Session-date parsing and temporal cues (memory_core.retrieval.timeparse)."""

from datetime import UTC, datetime

import pytest

from memory_core.errors import InvalidInput
from memory_core.retrieval.timeparse import (
    has_time_expression,
    parse_session_date,
    temporal_intent,
    try_parse_session_date,
)

UTC = UTC


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9, tzinfo=UTC)),
        ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
        ("8 May 2023", datetime(2023, 5, 8, tzinfo=UTC)),
        ("May 8, 2023 10:02 am", datetime(2023, 5, 8, 10, 2, tzinfo=UTC)),
        ("3rd Feb 2022", datetime(2022, 2, 3, tzinfo=UTC)),
        ("2023-05-08T10:00:00", datetime(2023, 5, 8, 10, tzinfo=UTC)),
        ("2023-05-08T10:00:00+02:00", datetime(2023, 5, 8, 8, tzinfo=UTC)),
    ],
)
def test_parse_session_date(text, expected):
    got = parse_session_date(text)
    assert got == expected and got.tzinfo is not None


@pytest.mark.parametrize("bad", ["", "sometime last spring", "31 February, 2023", "13:00 pm on 8 May, 2023"])
def test_parse_session_date_rejects(bad):
    with pytest.raises(InvalidInput):
        parse_session_date(bad)
    assert try_parse_session_date(bad) is None


def test_temporal_intent():
    assert temporal_intent("When did Caroline go to the LGBTQ support group?")
    assert temporal_intent("In what year did she move?")
    assert temporal_intent("How long ago was the trip?")
    assert temporal_intent("Which month did they meet?")
    assert not temporal_intent("What did Caroline research?")
    assert not temporal_intent("")


def test_has_time_expression():
    assert has_time_expression("I went to a support group yesterday")
    assert has_time_expression("We moved there 4 years ago")
    assert has_time_expression("last Sunday we ran a race")
    assert has_time_expression("back in 2022 I painted it")
    assert has_time_expression("on May 5 we left")
    assert not has_time_expression("I may paint a sunrise")
    assert not has_time_expression("I love painting landscapes")


def test_a_month_matched_case_insensitively_is_looked_up_case_folded():
    """``re.I`` lets ``ſ`` (U+017F) match ``s``: the name is case-folded before the lookup,
    never a ``KeyError``."""
    assert parse_session_date("1:56 pm on 8 ſeptember, 2023") == datetime(2023, 9, 8, 13, 56, tzinfo=UTC)
