"""Memory lifecycle events: what happened to a memory, who did it, and the durable outbox
their webhook deliveries are made from.

Every lifecycle change of a memory is one ``MemoryEvent`` (``EventKind``: created,
reinforced, refined, superseded, consolidated, quarantined, restored, unmerged, updated,
deleted, expired) with the memory id, its owner, the ``actor`` (``user:<id>``, ``admin:<id>``,
``chat``, ``consolidation``, ``expiry``, ``system``), the ``outcome`` (the memory's state after
the change, or ``deleted``), a small ``detail`` (ids only, never memory text) and the time.

``EventLog`` keeps them in one SQLite file (WAL, like the API key database of
``memory_core.access``; stdlib ``sqlite3``): the feed (filters by user, kind, memory and
time; cursor pagination by the log's monotonically increasing ``sequence``) and, per webhook
endpoint, the delivery state of each event (``pending``/``delivered``/``failed``, attempts,
next attempt time). An event appended is on disk when ``append`` returns, so a restart of any
process loses no event and no pending delivery: delivery is at least once.

``RetryPolicy``: exponential backoff with equal jitter, up to ``max_attempts`` attempts and
``max_age_s`` after the event; then the delivery is ``failed`` (counted, kept in the feed).

The actor of the changes a task makes is a context value (``acting_as``/``current_actor``):
the HTTP ingress sets the caller's, the chat auto-store ``chat``, and the store shard takes it
from the call (``memory_core.stores.recording``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .clock import utcnow  # the package's one clock (millisecond precision)
from .errors import InvalidInput
from .sqlite_file import open_sqlite


class EventKind(str, Enum):
    """What happened to one memory: ``created`` (stored new), ``reinforced`` (a write repeated
    a held fact), ``refined`` (a write added detail to a held fact, same id), ``superseded``
    (replaced by a newer memory: ``detail.superseded_by``), ``consolidated`` (merged into
    ``detail.merged_into``), ``quarantined`` (stored or changed but withheld: it reads as
    instructions), ``restored`` (made active again by an admin), ``unmerged`` (a consolidated
    original made active again), ``updated`` (edited), ``deleted``, ``expired`` (deleted by
    retention)."""

    CREATED = "created"
    REINFORCED = "reinforced"
    REFINED = "refined"
    SUPERSEDED = "superseded"
    CONSOLIDATED = "consolidated"
    QUARANTINED = "quarantined"
    RESTORED = "restored"
    UNMERGED = "unmerged"
    UPDATED = "updated"
    DELETED = "deleted"
    EXPIRED = "expired"


CHAT_ACTOR = "chat"
CONSOLIDATION_ACTOR = "consolidation"
EXPIRY_ACTOR = "expiry"
SYSTEM_ACTOR = "system"
"""The actor of a change made with no actor in context (a tool, a test)."""
MAX_PAGE = 1000
DEFAULT_PAGE = 100


def user_actor(user_id: str, *, admin: bool = False) -> str:
    """The actor of a caller: ``user:<id>`` or ``admin:<id>``."""
    return f"{'admin' if admin else 'user'}:{user_id}"


_actor: contextvars.ContextVar[str | None] = contextvars.ContextVar("memory_router_event_actor", default=None)


def set_actor(actor: str) -> None:
    """Make ``actor`` the actor of the changes the current task (and the tasks it starts)
    makes from now on."""
    _actor.set(actor)


def current_actor() -> str | None:
    """The actor set in this context (``set_actor``/``acting_as``), or ``None``."""
    return _actor.get()


@contextlib.contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """``actor`` is the actor of the changes made inside the ``with`` block."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)


class MemoryEvent(BaseModel):
    """One lifecycle change of one memory. ``event_id``: ``evt_`` + 24 hex (the webhook's
    ``webhook-id``, the same on every retry, so receivers can drop duplicates);
    ``sequence``: its place in the log (set by ``EventLog.append``; increasing);
    ``user_id``: the memory's owner; ``outcome``: the memory's state after the change
    (``deleted`` for a deletion); ``detail``: related ids (``superseded_by``, ``merged_into``,
    ``superseded``), never memory text; ``time``: UTC."""

    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(default_factory=lambda: "evt_" + secrets.token_hex(12))
    sequence: int | None = None
    kind: EventKind
    memory_id: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    actor: str = Field(min_length=1)
    outcome: str
    detail: dict[str, str | list[str]] = Field(default_factory=dict)
    project_id: str | None = None
    time: datetime = Field(default_factory=utcnow)

    @field_validator("time")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def public(self) -> dict[str, Any]:
        """JSON-ready dict (the feed's items and a webhook payload's ``data``)."""
        return self.model_dump(mode="json")


def webhook_payload(event: MemoryEvent) -> dict[str, Any]:
    """The body of the webhook for ``event``, in the Standard Webhooks shape:
    ``{"type": "memory.<kind>", "timestamp": <ISO 8601>, "data": <event>}``."""
    return {"type": f"memory.{event.kind.value}", "timestamp": event.time.isoformat(), "data": event.public()}


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed delivery is tried again: after attempt ``n`` (1-based) wait
    ``min(max_delay_s, initial_delay_s * 2**(n-1))`` with equal jitter (half fixed, half
    uniform random), until ``max_attempts`` attempts were made or the event is older than
    ``max_age_s``: then the delivery is failed."""

    initial_delay_s: float = 1.0
    max_delay_s: float = 300.0
    max_attempts: int = 12
    max_age_s: float = 86400.0

    def delay_s(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt (≥ 1)."""
        base = min(self.max_delay_s, self.initial_delay_s * 2 ** max(attempts - 1, 0))
        return base / 2 + (rng or random).uniform(0, base / 2)


@dataclass(frozen=True)
class EventPage:
    """One page of the feed, oldest first; ``next_cursor``: pass it as ``cursor`` for the
    next page, or later to poll for newer events (the page's last sequence; the cursor
    given when the page is empty); ``has_more``: whether more events matched already."""

    events: list[MemoryEvent]
    next_cursor: str | None
    has_more: bool = False


@dataclass(frozen=True)
class PendingDelivery:
    """A delivery due now: the event, and the attempts made so far."""

    event: MemoryEvent
    attempts: int


@dataclass(frozen=True)
class DeliveryCounts:
    """Deliveries of one endpoint by state."""

    pending: int = 0
    delivered: int = 0
    failed: int = 0


MAX_SEQUENCE = 2**63 - 1
"""The largest sequence SQLite's INTEGER holds."""


def parse_cursor(cursor: str | None) -> int:
    """The sequence after which a page starts: ``cursor`` as ``EventPage.next_cursor`` gave
    it (a decimal sequence number), 0 for none. Raises ``InvalidInput``."""
    if cursor is None:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19 or int(cursor) > MAX_SEQUENCE:
        raise InvalidInput("cursor must be a next_cursor of an earlier page")
    return int(cursor)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL,
    project_id TEXT,
    time_us INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_user ON events (user_id, sequence);
CREATE INDEX IF NOT EXISTS events_by_memory ON events (memory_id, sequence);
CREATE INDEX IF NOT EXISTS events_by_time ON events (time_us);
CREATE TABLE IF NOT EXISTS endpoints (
    endpoint TEXT PRIMARY KEY,
    enqueued_through INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    endpoint TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    memory_id TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_us INTEGER NOT NULL,
    last_error TEXT,
    PRIMARY KEY (endpoint, sequence)
);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (endpoint, state, next_attempt_us);
CREATE INDEX IF NOT EXISTS deliveries_by_memory ON deliveries (endpoint, memory_id, state, sequence);
"""
_COLUMNS = "sequence, event_id, kind, memory_id, user_id, actor, outcome, detail, project_id, time_us"


def _micros(when: datetime) -> int:
    aware = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    return int(aware.timestamp() * 1_000_000)


def _event(row: tuple) -> MemoryEvent:
    sequence, event_id, kind, memory_id, user_id, actor, outcome, detail, project_id, time_us = row
    return MemoryEvent(
        event_id=event_id,
        sequence=sequence,
        kind=EventKind(kind),
        memory_id=memory_id,
        user_id=user_id,
        actor=actor,
        outcome=outcome,
        detail=json.loads(detail),
        project_id=project_id,
        time=datetime.fromtimestamp(time_us / 1_000_000, tz=UTC),
    )


class EventLog:
    """The event feed and the webhook outbox in one SQLite file (WAL: every process of a
    node shares it; on a cluster, the file of one node, as ``access.KeyRegistry``'s).

    ``path``: the file (parent folders are created) or ``":memory:"``. Thread-safe; every
    method is one short transaction on indexed rows (``append`` one for the whole batch)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = open_sqlite(self.path, durable=True)  # an appended event survives a power cut
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------ the feed
    def append(self, events: Sequence[MemoryEvent]) -> list[MemoryEvent]:
        """Write ``events`` in order, in one transaction; returns them with their
        ``sequence``. Raises ``sqlite3.Error`` (nothing written then)."""
        out = []
        with self._transaction() as db:
            for e in events:
                cursor = db.execute(
                    f"INSERT INTO events ({_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        e.event_id, e.kind.value, e.memory_id, e.user_id, e.actor, e.outcome,
                        json.dumps(e.detail, sort_keys=True), e.project_id, _micros(e.time),
                    ),
                )  # fmt: skip
                out.append(e.model_copy(update={"sequence": cursor.lastrowid}))
        return out

    def page(
        self,
        *,
        user_id: str | None = None,
        kinds: Sequence[EventKind] | None = None,
        memory_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE,
    ) -> EventPage:
        """Events oldest first (by sequence), after ``cursor``, filtered by owner, kinds,
        memory and time (``since`` inclusive, ``until`` exclusive); at most ``limit``
        (1..``MAX_PAGE``). Raises ``InvalidInput`` (a bad cursor or limit)."""
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be 1..{MAX_PAGE}")
        where: list[str] = ["sequence > ?"]
        args: list[int | str] = [parse_cursor(cursor)]
        if user_id is not None:
            where.append("user_id = ?")
            args.append(user_id)
        if memory_id is not None:
            where.append("memory_id = ?")
            args.append(memory_id)
        if kinds:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            args.extend(EventKind(k).value for k in kinds)
        if since is not None:
            where.append("time_us >= ?")
            args.append(_micros(since))
        if until is not None:
            where.append("time_us < ?")
            args.append(_micros(until))
        sql = f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY sequence LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, limit + 1)).fetchall()
        events = [_event(r) for r in rows[:limit]]
        next_cursor = str(events[-1].sequence) if events else cursor
        return EventPage(events, next_cursor, len(rows) > limit)

    # ------------------------------------------------------------------ the outbox
    def enqueue(self, endpoint: str, kinds: Sequence[EventKind] | None, now: datetime | None = None) -> int:
        """Make a pending delivery to ``endpoint`` of every event appended since the last
        call (of ``kinds``; ``None``: every kind), due now; returns how many. An endpoint
        seen for the first time starts after the events already in the log."""
        now_us = _micros(now or utcnow())
        with self._transaction() as db:
            row = db.execute("SELECT enqueued_through FROM endpoints WHERE endpoint = ?", (endpoint,)).fetchone()
            last = db.execute("SELECT COALESCE(MAX(sequence), 0) FROM events").fetchone()[0]
            if row is None:
                db.execute("INSERT INTO endpoints (endpoint, enqueued_through) VALUES (?, ?)", (endpoint, last))
                return 0
            kind_filter, args = "", [endpoint, now_us, row[0], last]
            if kinds is not None:
                kind_filter = f" AND kind IN ({', '.join('?' * len(kinds))})"
                args.extend(EventKind(k).value for k in kinds)
            cursor = db.execute(
                "INSERT INTO deliveries (endpoint, sequence, memory_id, state, attempts, next_attempt_us) "
                f"SELECT ?, sequence, memory_id, 'pending', 0, ? FROM events WHERE sequence > ? AND sequence <= ?"
                f"{kind_filter}",
                args,
            )
            db.execute("UPDATE endpoints SET enqueued_through = ? WHERE endpoint = ?", (last, endpoint))
            return cursor.rowcount

    def due(self, endpoint: str, now: datetime | None = None, limit: int = 100) -> list[PendingDelivery]:
        """Pending deliveries to ``endpoint`` due by ``now``, oldest first, each the earliest
        pending one of its memory (a memory's next event waits until the one before it is
        delivered or failed)."""
        sql = (
            f"SELECT {', '.join('e.' + c.strip() for c in _COLUMNS.split(','))}, d.attempts "
            "FROM deliveries d JOIN events e ON e.sequence = d.sequence "
            "WHERE d.endpoint = ? AND d.state = 'pending' AND d.next_attempt_us <= ? "
            "AND d.sequence = (SELECT MIN(p.sequence) FROM deliveries p WHERE p.endpoint = d.endpoint "
            "AND p.memory_id = d.memory_id AND p.state = 'pending') "
            "ORDER BY d.sequence LIMIT ?"
        )
        with self._lock:
            rows = self._db.execute(sql, (endpoint, _micros(now or utcnow()), limit)).fetchall()
        return [PendingDelivery(_event(r[:-1]), r[-1]) for r in rows]

    def delivered(self, endpoint: str, sequence: int) -> None:
        """Record the delivery of event ``sequence`` to ``endpoint``."""
        with self._transaction() as db:
            db.execute(
                "UPDATE deliveries SET state = 'delivered', attempts = attempts + 1, last_error = NULL "
                "WHERE endpoint = ? AND sequence = ?",
                (endpoint, sequence),
            )

    def attempt_failed(
        self,
        endpoint: str,
        delivery: PendingDelivery,
        error: str,
        policy: RetryPolicy,
        now: datetime | None = None,
        rng: random.Random | None = None,
    ) -> bool:
        """Record a failed attempt (``error``: a status or an exception name, no payload):
        the delivery is due again after ``policy``'s backoff, or ``failed`` when the policy's
        attempts or age are spent. Returns whether it will be tried again."""
        now = now or utcnow()
        attempts = delivery.attempts + 1
        age_s = (now - delivery.event.time).total_seconds()
        retry = attempts < policy.max_attempts and age_s < policy.max_age_s
        next_us = _micros(now) + int(policy.delay_s(attempts, rng) * 1_000_000)
        with self._transaction() as db:
            db.execute(
                "UPDATE deliveries SET state = ?, attempts = ?, next_attempt_us = ?, last_error = ? "
                "WHERE endpoint = ? AND sequence = ?",
                ("pending" if retry else "failed", attempts, next_us, error[:200], endpoint, delivery.event.sequence),
            )
        return retry

    def delivery_counts(self, endpoint: str) -> DeliveryCounts:
        """How many deliveries to ``endpoint`` are pending, delivered and failed."""
        with self._lock:
            rows = self._db.execute(
                "SELECT state, COUNT(*) FROM deliveries WHERE endpoint = ? GROUP BY state", (endpoint,)
            ).fetchall()
        return DeliveryCounts(**{state: n for state, n in rows})
