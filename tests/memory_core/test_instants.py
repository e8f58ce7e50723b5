"""Every datetime the API, an import line or a store accepts is representable once converted
to UTC (``sanitize.check_instant``), so no accepted date can make a record unreadable; an
instant that is not is a 400 naming its field."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deployments.http.schemas import CreateMemoriesRequest
from memory_core.errors import InvalidInput
from memory_core.migration import parse_import_line
from memory_core.sanitize import INSTANT_FIELDS, check_instant
from memory_core.stores import InMemoryStore
from memory_core.stores._records import from_ms, to_ms
from memory_core.stores.base import to_millis
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import ListQuery, Memory, MemoryChanges

MIN_UTC = datetime.min.replace(tzinfo=UTC)
MAX_UTC = datetime.max.replace(tzinfo=UTC)
EDGE_OFFSETS = [timedelta(hours=23, minutes=59), -timedelta(hours=23, minutes=59), timedelta(0)]
OFFSETS = st.one_of(
    st.sampled_from(EDGE_OFFSETS),
    st.timedeltas(min_value=-timedelta(hours=23, minutes=59, seconds=59), max_value=timedelta(hours=23, minutes=59)),
)
EDGE_DAYS = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(1, 1, 2, 23, 59, 59, 999999)),
    st.datetimes(min_value=datetime(9999, 12, 30), max_value=datetime.max),
)
TIMES = st.one_of(EDGE_DAYS, st.datetimes())  # naive; an offset is added below (or not)


def utc_or_none(naive: datetime, offset: timedelta | None) -> datetime | None:
    """The oracle: the UTC time of ``naive`` at ``offset`` by integer arithmetic on the
    distance from year 1 (``None``: outside the range of ``datetime``)."""
    if offset is None:
        return naive.replace(tzinfo=UTC)
    since_min = (naive - datetime.min) - offset
    if since_min < timedelta(0) or since_min > datetime.max - datetime.min:
        return None
    return (datetime.min + since_min).replace(tzinfo=UTC)


@settings(max_examples=400, deadline=None)
@given(TIMES, st.one_of(st.none(), OFFSETS))
def test_an_instant_is_accepted_exactly_when_its_utc_time_exists_and_then_round_trips(naive, offset):
    when = naive if offset is None else naive.replace(tzinfo=timezone(offset))
    expected = utc_or_none(naive, offset)
    if expected is None:
        with pytest.raises(InvalidInput, match="^expires_at: .*outside the representable range"):
            check_instant(when, "expires_at")
        return
    got = check_instant(when, "expires_at")
    assert got == expected and got.tzinfo is UTC
    assert from_ms(to_ms(got)) == to_millis(got)  # the epoch ms of every backend read back


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01T00:00:00+23:59",
        "0001-01-01T23:58:59+23:59",
        "9999-12-31T23:59:59-23:59",
        "9999-12-31T00:01:00-23:59",
    ],
)
def test_a_body_or_import_line_with_an_instant_outside_utc_is_refused_naming_the_field(value):
    with pytest.raises(ValidationError) as e:
        CreateMemoriesRequest.model_validate({"memories": [{"content": "x", "created_at": value}]})
    assert e.value.errors()[0]["loc"] == ("memories", 0, "created_at")
    assert "outside the representable range" in str(e.value)
    for name in ("created_at", "updated_at", "last_accessed"):
        with pytest.raises(InvalidInput, match=f"^{name}: .*outside the representable range"):
            parse_import_line(json.dumps({"content": "x", name: value}), user_id="alice")


@pytest.mark.parametrize(
    "value, utc",
    [
        ("0001-01-01T00:00:00-23:59", datetime(1, 1, 1, 23, 59, tzinfo=UTC)),
        ("0001-01-01T23:59:00+23:59", datetime(1, 1, 1, 0, 0, tzinfo=UTC)),
        ("0001-01-01T00:00:00", datetime(1, 1, 1, tzinfo=UTC)),  # naive: UTC
        ("1969-07-20T20:17:40.123456+02:00", datetime(1969, 7, 20, 18, 17, 40, 123456, tzinfo=UTC)),
    ],
)
def test_an_instant_at_the_edge_is_kept_in_utc(value, utc):
    (memory,) = CreateMemoriesRequest.model_validate({"memories": [{"content": "x", "created_at": value}]}).memories
    assert memory.created_at == utc and memory.created_at.tzinfo is UTC
    line = parse_import_line(json.dumps({"content": "x", "created_at": value, "updated_at": value}), user_id="a")
    assert line.memory.created_at == utc and line.memory.updated_at == utc


def test_leap_seconds_and_offsets_of_a_day_never_parse():
    for value in ("2016-12-31T23:59:60Z", "2020-01-01T00:00:00+24:00", "0000-12-31T00:00:00Z"):
        with pytest.raises(ValidationError):
            CreateMemoriesRequest.model_validate({"memories": [{"content": "x", "created_at": value}]})
        with pytest.raises(InvalidInput):
            parse_import_line(json.dumps({"content": "x", "last_accessed": value}), user_id="a")


@pytest.mark.parametrize("field", INSTANT_FIELDS)
async def test_a_store_refuses_an_instant_outside_utc_in_every_field(field):
    """The store's own rule (``_normalise``, ``update``): also for writers other than the
    API (curation, migration), and for the lifecycle times an update sets."""
    store = InMemoryStore(embed=CountingEmbed(), dimension=DIM)
    odd = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=23, minutes=59)))
    with pytest.raises(InvalidInput, match=f"^{field}: "):
        await store.store(Memory(user_id="alice", content="x", **{field: odd}))
    kept = await store.store(Memory(user_id="alice", content="x"))
    if field in ("valid_to", "expires_at"):  # the updatable ones
        late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=1)))
        with pytest.raises(InvalidInput, match=f"^{field}: "):
            await store.update(kept.id, "alice", MemoryChanges(**{field: late}))
    assert [m.id for m in (await store.list(ListQuery(user_id="alice"))).memories] == [kept.id]
    offset = datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    stored = await store.store(Memory(user_id="alice", content="y", **{field: offset}))
    assert getattr(stored, field) == offset and getattr(stored, field).tzinfo is UTC  # the same instant, in UTC
    assert getattr(await store.get(stored.id, "alice"), field) == offset
