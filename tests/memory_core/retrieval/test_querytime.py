"""The periods a query names (memory_core.retrieval.querytime) and their intervals."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core.retrieval.querytime import MAX_SPANS, TimeSpan, query_spans


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    "query, spans",
    [
        ("What movie did Joanna watch on 1 May, 2022?", [TimeSpan(2022, 5, 1)]),
        ("What painting did Melanie show on October 13, 2023?", [TimeSpan(2023, 10, 13)]),
        ("the 3rd of June 2023", [TimeSpan(2023, 6, 3)]),
        ("What did Nate do for Joanna on 25 May, 2022?", [TimeSpan(2022, 5, 25)]),
        ("What did John do the week before August 3, 2023?", [TimeSpan(2023, 8, 3)]),
        ("Sept. 9th 2021", [TimeSpan(2021, 9, 9)]),
        ("What did John host for the veterans in May 2023?", [TimeSpan(2023, 5)]),
        ("a tournament in the beginning of November 2022", [TimeSpan(2022, 11)]),
        ("January, 2022 was cold", [TimeSpan(2022, 1)]),
        ("What state did Joanna visit in summer 2021?", [TimeSpan(2021, 6, None, 3)]),
        ("winter of 2020", [TimeSpan(2020, 12, None, 3)]),
        ("Which outdoor spot did Joanna visit in May?", [TimeSpan(None, 5)]),
        ("When did Melanie go camping in June?", [TimeSpan(None, 6)]),
        ("on June 3rd", [TimeSpan(None, 6, 3)]),
        ("How many times has Melanie gone to the beach in 2023?", [TimeSpan(2023)]),
        ("between 2021 and 2022", [TimeSpan(2021), TimeSpan(2022)]),
        # periods one character apart: the character after one is the start of the next
        ("What did I do in 2021-2022?", [TimeSpan(2021), TimeSpan(2022)]),
        ("2022 2023", [TimeSpan(2022), TimeSpan(2023)]),
        ("in 2021\u20132022", [TimeSpan(2021), TimeSpan(2022)]),  # an en dash: 3 bytes of UTF-8
        ("on 1 May/2 May 2022", [TimeSpan(None, 5, 1), TimeSpan(2022, 5, 2)]),
    ],
)
def test_periods_a_query_names(query, spans):
    assert query_spans(query) == spans


@pytest.mark.parametrize(
    "query",
    [
        "",
        "What did Caroline research?",
        "I may go there",  # the verb
        "in may we trust",  # lower-case "may" without a day or year
        "she may 2 times",
        "June is a name here",  # a month alone needs a lead word
        "room 2023b and 12345 and 1700",  # not a year word, or out of range
        "last week and yesterday",  # relative expressions are not read
        "on the 45 of nothing",
    ],
)
def test_no_period(query):
    assert query_spans(query) == []


@pytest.mark.parametrize(
    "query, spans",
    [
        # RE2's case-insensitive "s" is also U+017F (long s), "k" also U+212A (Kelvin sign): such
        # a month or season name was looked up as written and raised KeyError (a failed search)
        ("in \u017feptember", [TimeSpan(None, 9)]),
        ("\u017fummer 2021", [TimeSpan(2021, 6, None, 3)]),
        ("in Augu\u017ft 2020", [TimeSpan(2020, 8)]),
        ("on 3 \u017fep 2021", [TimeSpan(2021, 9, 3)]),
    ],
)
def test_a_name_read_through_unicode_case_folding_is_its_month(query, spans):
    assert query_spans(query) == spans


def test_a_lower_case_may_with_a_year_or_day_is_the_month():
    assert query_spans("may 2023") == [TimeSpan(2023, 5)]
    assert query_spans("on 4 may 2023") == [TimeSpan(2023, 5, 4)]


def test_at_most_max_spans_are_read():
    query = " ".join(f"in {y}" for y in range(2000, 2000 + MAX_SPANS + 3))
    assert query_spans(query) == [TimeSpan(y) for y in range(2000, 2000 + MAX_SPANS)]


def test_intervals_are_the_period_widened_by_the_slack():
    day = TimeSpan(2022, 5, 1)
    assert day.intervals(0, range(0)) == [(ts(2022, 5, 1), ts(2022, 5, 2))]
    assert day.intervals(1, range(0)) == [(ts(2022, 4, 30), ts(2022, 5, 3))]
    assert TimeSpan(2023, 12).intervals(0, range(0)) == [(ts(2023, 12, 1), ts(2024, 1, 1))]
    assert TimeSpan(2023).intervals(0.5, range(0)) == [(ts(2023, 1, 1) - 43200, ts(2024, 1, 1) + 43200)]
    assert TimeSpan(2021, 12, None, 3).intervals(0, range(0)) == [(ts(2021, 12, 1), ts(2022, 3, 1))]
    # without a year: once per year the memories cover; an impossible day has none
    assert TimeSpan(None, 6).intervals(0, range(2022, 2024)) == [
        (ts(2022, 6, 1), ts(2022, 7, 1)),
        (ts(2023, 6, 1), ts(2023, 7, 1)),
    ]
    assert TimeSpan(None, 2, 29).intervals(0, range(2022, 2025)) == [(ts(2024, 2, 29), ts(2024, 3, 1))]
    assert TimeSpan(2023, 2, 31).intervals(1, range(0)) == []
