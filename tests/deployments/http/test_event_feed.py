"""``event_feed.feed_page``: bad query values are 400s (``InvalidInput``), never a 500."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from deployments.http.event_feed import feed_page
from memory_core.errors import InvalidInput
from memory_core.events import EventLog


@pytest.fixture
def log():
    log = EventLog(":memory:")
    yield log
    log.close()


@pytest.mark.parametrize("cursor", ["9999999999999999999", "9223372036854775808", "-1", "１２", "1.5", ""])
def test_a_cursor_beyond_sqlite_or_not_a_sequence_is_refused(log, cursor):
    with pytest.raises(InvalidInput, match="cursor"):
        feed_page(log, cursor=cursor)


@pytest.mark.parametrize(
    "when",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-14))),
    ],
)
def test_an_instant_outside_utcs_calendar_is_refused_naming_the_field(log, when):
    with pytest.raises(InvalidInput, match="since"):
        feed_page(log, since=when)
    with pytest.raises(InvalidInput, match="until"):
        feed_page(log, until=when)


def test_naive_and_aware_times_compare_as_utc(log):
    naive, aware = datetime(2024, 1, 1), datetime(2024, 1, 2, tzinfo=UTC)
    assert feed_page(log, since=naive, until=aware)["events"] == []
    with pytest.raises(InvalidInput, match="since must not be after until"):
        feed_page(log, since=aware, until=naive)
