"""What a query says about *when*: the dates and periods it names, as time spans to match
against the memories' ``created_at``.

A question such as "What movie did Joanna watch on 1 May, 2022?", "What did John host for
the veterans in May 2023?" or "Which outdoor spot did Joanna visit in May?" names the time
of what it asks about; the memories a client wrote then carry that time as their
``created_at`` (a conversation's turns are stored with their session's time). So
``query_spans`` reads the absolute time expressions of a query:

- a day: ``1 May, 2022``, ``May 1st 2022``, ``October 13, 2023``, ``the 3rd of June 2023``;
  without a year (``on 13 October``, ``June 3rd``): that day in any year;
- a month: ``May 2023``, ``January, 2022``; without a year, only after ``in``, ``during``,
  ``of``, ``early``, ``mid``, ``late``, ``since``, ``until``, ``by``, ``before``, ``after``
  (``in June``, ``the beginning of March``) and, for ``May``, only capitalised (the verb);
- a season with a year: ``summer 2021`` (northern hemisphere: spring March–May, summer
  June–August, fall/autumn September–November, winter December to February of the next
  year);
- a year: ``in 2023``, ``2022``.

Relative expressions ("last week", "yesterday") are not read: relative to the time of the
question they rarely name the time of a stored memory. English month names only.

``TimeSpan.intervals`` turns a span into ``[start, end)`` intervals of POSIX seconds, widened
by a slack of whole days on both sides (an event told the day after it happened, a question
dated by the session that tells of it), for the years a memory can fall in. ``HybridStore``
gives the memories created within them a bonus (``RetrievalSettings.date_weight``) and takes
the best of them by cosine and by BM25 as candidates.

The patterns run on RE2 (``memory_core.linear_re``): linear in the query's length, at most
``MAX_SPANS`` spans read; two periods one character apart ("2021-2022") are both read.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import linear_re
from .timeparse import MONTHS

MAX_SPANS = 4
"""Most spans read from one query (the first ones)."""

_FULL_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_ANY_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_SEASONS = {"spring": (3, 3), "summer": (6, 3), "fall": (9, 3), "autumn": (9, 3), "winter": (12, 3)}
"""Season → (first month, number of months)."""

_SP = r"[ \t]+"
_DAY = r"([0-9]{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:1[89]|2[0-9])[0-9][0-9])"
_MON = rf"({_ANY_MONTH})\.?"
_LEAD = r"(?:in|during|of|early|mid|late|since|until|till|by|before|after)"
_LEAD_IN = rf"(?:{_LEAD}{_SP}(?:the{_SP}(?:beginning|start|middle|end){_SP}of{_SP})?)"
_QUERY_TIME = linear_re.compile(
    linear_re.START
    + "(?:"
    # 1-3: day month [year]
    + rf"{_LEAD_IN}?{_DAY}{_SP}(?:of{_SP})?{_MON}(?:,?{_SP}{_YEAR})?"
    # 4-6: month day [year]
    + rf"|{_LEAD_IN}?{_MON}{_SP}{_DAY}(?:,?{_SP}{_YEAR})?"
    # 7-8: month year
    + rf"|{_LEAD_IN}?{_MON},?{_SP}{_YEAR}"
    # 9-10: season year
    + rf"|{_LEAD_IN}?(spring|summer|fall|autumn|winter),?{_SP}(?:of{_SP})?{_YEAR}"
    # 11: a lead word, then a month alone
    + rf"|{_LEAD_IN}({_FULL_MONTHS})"
    # 12: a year alone
    + rf"|{_LEAD_IN}?{_YEAR}"
    + ")"
    + linear_re.END,
    linear_re.IGNORECASE,
)
_DAY_S = 86400.0


@dataclass(frozen=True)
class TimeSpan:
    """A period a query names: ``year`` (None: any year), ``month`` (None: the whole year),
    ``day`` (None: the whole month), ``months``: how many months from ``month`` (a season)."""

    year: int | None
    month: int | None = None
    day: int | None = None
    months: int = 1

    def intervals(self, slack_days: float, years: range) -> list[tuple[float, float]]:
        """``[start, end)`` POSIX-seconds intervals (UTC) of this span, each widened by
        ``slack_days`` on both sides; a span without a year gets one interval per year of
        ``years`` (the years the user's memories cover); an impossible day (31 February)
        none."""
        slack = max(0.0, slack_days) * _DAY_S
        out = []
        for year in [self.year] if self.year is not None else list(years):
            start_end = self._bounds(year)
            if start_end is not None:
                out.append((start_end[0] - slack, start_end[1] + slack))
        return out

    def _bounds(self, year: int) -> tuple[float, float] | None:
        if not 1 <= year <= 9998:
            return None
        if self.month is None:
            start = datetime(year, 1, 1, tzinfo=UTC)
            return start.timestamp(), datetime(year + 1, 1, 1, tzinfo=UTC).timestamp()
        if self.day is not None:
            if self.day < 1 or self.day > calendar.monthrange(year, self.month)[1]:
                return None
            start = datetime(year, self.month, self.day, tzinfo=UTC)
            return start.timestamp(), (start + timedelta(days=1)).timestamp()
        start = datetime(year, self.month, 1, tzinfo=UTC)
        end_month = self.month - 1 + self.months
        end = datetime(year + end_month // 12, end_month % 12 + 1, 1, tzinfo=UTC)
        return start.timestamp(), end.timestamp()


def _month(name: str) -> int:
    """The month ``name`` (as the pattern matched it) names: case-folded, since RE2's
    case-insensitive ``s`` also matches U+017F (``ſ``)."""
    return MONTHS[name.casefold().rstrip(".")]


def query_spans(query: str) -> list[TimeSpan]:
    """The periods ``query`` names (module docstring), in order, at most ``MAX_SPANS``; ``[]``
    when it names none.

    >>> query_spans("What movie did Joanna watch on 1 May, 2022?")
    [TimeSpan(year=2022, month=5, day=1, months=1)]
    >>> query_spans("Which outdoor spot did Joanna visit in May?")
    [TimeSpan(year=None, month=5, day=None, months=1)]
    >>> query_spans("I may go there")
    []
    """
    out: list[TimeSpan] = []
    # UTF-8 bytes: RE2 searches them from an offset without converting the whole text again
    # (a str's offsets are mapped back to characters at every call: quadratic in the query)
    text, pos = (query or "").encode("utf-8"), 0
    while len(out) < MAX_SPANS and (m := _QUERY_TIME.search(text, pos)) is not None:
        span = _span(tuple(g.decode("utf-8") if g is not None else None for g in m.groups()))
        if span is not None:
            out.append(span)
        # the word edge after a match (linear_re.END: a character it consumed) may be the next
        # one's start ("2021-2022"): search on from that character's first byte
        pos = m.end() - 1
        while pos > m.start() + 1 and text[pos] & 0xC0 == 0x80:
            pos -= 1
        pos = max(pos, m.start() + 1)
    return out


def _span(g: tuple[Any, ...]) -> TimeSpan | None:
    """The period of one match's groups (``_QUERY_TIME``'s, in order), None when they name
    none (``may`` the verb)."""
    if g[0] is not None:  # day month [year]
        if g[2] is None and not _may_is_a_month(g[1]):
            return None
        return TimeSpan(_int(g[2]), _month(g[1]), int(g[0]))
    if g[3] is not None:  # month day [year]
        if g[5] is None and not _may_is_a_month(g[3]):
            return None
        return TimeSpan(_int(g[5]), _month(g[3]), int(g[4]))
    if g[6] is not None:  # month year
        return TimeSpan(int(g[7]), _month(g[6]))
    if g[8] is not None:  # season year
        first, months = _SEASONS[g[8].casefold()]
        return TimeSpan(int(g[9]), first, None, months)
    if g[10] is not None:  # lead word + month
        if not _may_is_a_month(g[10]):
            return None
        return TimeSpan(None, _month(g[10]))
    if g[11] is not None:  # year
        return TimeSpan(int(g[11]))
    return None


def _may_is_a_month(name: str) -> bool:
    """Without a year beside it, "may" names the month only when written ``May`` (the
    lower-case word is the verb: "in may be", "I may 2 ...")."""
    return name.casefold() != "may" or name == "May"


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None
