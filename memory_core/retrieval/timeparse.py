"""Dates as conversations write them, and what a question asks about time.

- ``parse_session_date``: a conversation/session timestamp string → aware UTC ``datetime``.
  Accepts the LoCoMo shape ``"1:56 pm on 8 May, 2023"`` and common variants (``"8 May 2023"``,
  ``"May 8, 2023 10:02 am"``, ISO 8601). Used by the offline benchmark and by the service
  replay, so both give memories the same ``created_at``.
- ``temporal_intent``: does a query ask *when* something happened (``when``, ``what year``,
  ``how long ago``, ``since when`` …)? Hybrid retrieval uses it to decide whether date-bearing
  memories get a boost (``memory_core.stores.hybrid``).
- ``has_time_expression``: does a text mention a time (``yesterday``, ``last week``,
  ``in 2022``, ``May``, ``Sunday`` …)? Turns that mention time are the ones that answer
  *when* questions in conversation logs.

Pure functions, no I/O; English only (other languages simply yield no temporal intent).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from .. import linear_re
from ..errors import InvalidInput
from ..linear_re import DIGIT, END, SPACE, START

MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11,
    "december": 12, "dec": 12,
}  # fmt: skip
"""English month names and their abbreviations (lower case) → month number."""
_MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
_TIME = r"(?P<h>\d{1,2})(?::(?P<mi>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?"
_DMY = re.compile(rf"(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<mon>{_MONTH_RE})\.?,?\s+(?P<y>\d{{4}})", re.I)
_MDY = re.compile(rf"(?P<mon>{_MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>\d{{4}})", re.I)
_TIME_RE = re.compile(rf"\b{_TIME}\b", re.I)


def parse_session_date(text: str) -> datetime:
    """Parse a session timestamp into an aware ``datetime`` (UTC; a naive input is read as UTC).

    ``"1:56 pm on 8 May, 2023"`` → 2023-05-08 13:56 UTC. Also: ISO 8601, ``"8 May 2023"``,
    ``"May 8, 2023"``, with an optional ``h[:mm] [am|pm]`` before or after the date. Without a
    time of day, midnight. Raises ``InvalidInput`` when no date is found or it is invalid.
    """
    s = (text or "").strip()
    if not s:
        raise InvalidInput("empty date string")
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
        return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    except ValueError:
        pass
    m = _DMY.search(s) or _MDY.search(s)
    if not m:
        raise InvalidInput(f"no date found in {text!r}")
    day, month, year = int(m.group("d")), MONTHS[m.group("mon").casefold().rstrip(".")], int(m.group("y"))
    rest = (s[: m.start()] + " " + s[m.end() :]).strip()
    hour = minute = 0
    t = None
    for cand in _TIME_RE.finditer(rest):
        if cand.group("ampm") or cand.group("mi"):
            t = cand
            break
    if t is not None:
        hour, minute = int(t.group("h")), int(t.group("mi") or 0)
        ampm = (t.group("ampm") or "").lower().replace(".", "")
        if ampm:
            if not 1 <= hour <= 12:
                raise InvalidInput(f"bad hour in {text!r}")
            hour = hour % 12 + (12 if ampm == "pm" else 0)
    try:
        return datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError as e:
        raise InvalidInput(f"invalid date in {text!r}: {e}") from e


def try_parse_session_date(text: str | None) -> datetime | None:
    """``parse_session_date`` or ``None`` when ``text`` is empty or not a date."""
    if not text:
        return None
    try:
        return parse_session_date(text)
    except InvalidInput:
        return None


_S = SPACE + "+"
"""One or more whitespace characters (Python's ``\\s+``)."""

_TEMPORAL_INTENT = linear_re.compile(
    rf"{START}(?:when|what{_S}(?:year|month|day|date|time|week(?:end)?|season)|which{_S}(?:year|month|day|date|week(?:end)?)"
    rf"|how{_S}long(?:{_S}ago)?|how{_S}many{_S}(?:years|months|weeks|days)|since{_S}when|what{_S}age|how{_S}old"
    rf"|before{_S}or{_S}after|first{_S}time|last{_S}time|until{_S}when){END}",
    linear_re.IGNORECASE,
)
"""Words that ask about time, as whole words (RE2: linear in the query, ``memory_core.linear_re``)."""

# full month names except "may" (a modal verb far more often than a month in chat)
_FULL_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"

_TIME_EXPRESSION = linear_re.compile(
    rf"{START}(?:yesterday|today|tonight|tomorrow|ago|last{_S}(?:week|month|year|night|weekend|summer|winter|spring|fall|"
    rf"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|next{_S}(?:week|month|year|weekend)"
    rf"|this{_S}(?:week|month|year|weekend|morning|summer|winter|spring|fall)|recently|lately|earlier|"
    rf"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|(?:19|20){DIGIT}{DIGIT}|{_FULL_MONTHS}"
    rf"|may{_S}{DIGIT}{{1,2}}"
    rf"|(?:a|one|two|three|four|five|six|few|couple{_S}of){_S}(?:days?|weeks?|months?|years?)"
    rf"|since|years?|months?|weeks?){END}",
    linear_re.IGNORECASE,
)
"""A time mentioned, as whole words. RE2 (``memory_core.linear_re``): every memory indexed is
read by it on the store shard's event loop (``UserIndex.put``), and Python's ``re`` took ~85 ms
for the 256 notes of a maximal 1 MB batch, holding that loop for every other user; RE2's
automaton reads them in a few ms. The same answers as the ``re`` pattern it replaced (a
hypothesis test, ``tests/memory_core/retrieval/test_timeparse_linear.py``) except where RE2's
rules differ from Python's: ``linear_re``'s documented ``SPACE``/``WORD`` (U+001C–U+001F,
combining marks), the Turkish dotted and dotless I (Python's ``re.I`` matches ``FRİDAY`` and
``sınce``, RE2 does not) and characters that RE2's newer Unicode tables assign and
Python 3.11's do not."""


def temporal_intent(query: str) -> bool:
    """True when ``query`` asks about time (when / what year / how long ago / …). English."""
    return bool(_TEMPORAL_INTENT.search(query or ""))


def has_time_expression(text: str) -> bool:
    """True when ``text`` mentions a time (relative: yesterday, last week, 3 years ago;
    absolute: a year, a month name, a weekday). English."""
    return bool(_TIME_EXPRESSION.search(text or ""))
