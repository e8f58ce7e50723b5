"""The event feed over HTTP: ``GET /v1/admin/events`` (every user's, admin only) and
``GET /v1/memory/{id}/events`` (one memory's, for its owner or an admin), read from the
``memory_core.events.EventLog`` the store shards write (``global.stores.memory.events``).
``MemoryIngress`` holds the routes; the parsing and shaping is here."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from memory_core.config import RouterConfig
from memory_core.errors import InvalidInput
from memory_core.events import EventKind, EventLog
from memory_core.sanitize import check_instant

from .query_params import parse_enum_list

DEFAULT_FEED_PAGE = 100
MAX_FEED_PAGE = 1000


class EventOut(BaseModel):
    """One lifecycle event (``memory_core.events.MemoryEvent``)."""

    event_id: str
    sequence: int
    kind: EventKind
    memory_id: str
    user_id: str
    actor: str
    outcome: str
    detail: dict[str, str | list[str]]
    project_id: str | None
    time: datetime


class EventsOut(BaseModel):
    """A page of events, oldest first; ``next_cursor``: the ``cursor`` of the next page (or
    of a later poll for newer events); ``has_more``: more events matched already."""

    events: list[EventOut]
    next_cursor: str | None
    has_more: bool


def open_feed(config: RouterConfig) -> EventLog | None:
    """The event log of ``config`` (``None`` when events are off)."""
    settings = config.memory.events
    return EventLog(settings.path) if settings.enabled else None


def parse_kinds(values: list[str] | None) -> list[EventKind] | None:
    """``?kind=a,b&kind=c`` → event kinds; absent → None. Raises ``InvalidInput`` for an
    empty or unknown kind (``query_params.parse_enum_list``)."""
    return parse_enum_list(values, EventKind, "kind")


def feed_page(
    log: EventLog | None,
    *,
    user_id: str | None = None,
    memory_id: str | None = None,
    kinds: list[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_FEED_PAGE,
) -> dict:
    """One page of the feed as ``EventsOut`` data. Raises ``InvalidInput`` when events are
    off, for an unknown kind, a bad cursor or ``since`` after ``until``."""
    if log is None:
        raise InvalidInput("the event feed is off (global.stores.memory.events.enabled: false)")
    since = check_instant(since, "since") if since is not None else None  # 400 outside UTC's calendar
    until = check_instant(until, "until") if until is not None else None
    if since is not None and until is not None and since > until:
        raise InvalidInput("since must not be after until")
    page = log.page(
        user_id=user_id,
        memory_id=memory_id,
        kinds=parse_kinds(kinds),
        since=since,
        until=until,
        cursor=cursor,
        limit=limit,
    )
    return {"events": [e.public() for e in page.events], "next_cursor": page.next_cursor, "has_more": page.has_more}
