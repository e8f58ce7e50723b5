"""Helpers shared by the persistent backends: the flat record layout (``record_fields`` /
``memory_from_fields``), timestamps as epoch milliseconds, the newest-first ordering of
listings, and ``decode_rows``, the one place a stored row that cannot be read is skipped."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, overload

from ..types import Memory, MemoryState, MemoryType

log = logging.getLogger(__name__)
Row = TypeVar("Row")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@overload
def to_ms(when: datetime) -> int: ...
@overload
def to_ms(when: None) -> None: ...
@overload
def to_ms(when: datetime | None) -> int | None: ...
def to_ms(when: datetime | None) -> int | None:
    """Epoch milliseconds (int) of an aware datetime; ``None`` stays ``None``."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - EPOCH) // _MS


def from_ms(ms: int | float | str | bytes | None) -> datetime | None:
    """Aware UTC datetime of epoch milliseconds (negative: before 1970); ``None`` stays
    ``None``."""
    if ms is None:
        return None
    if isinstance(ms, bytes):
        ms = ms.decode()
    value = int(ms) if isinstance(ms, int) or (isinstance(ms, str) and ms.lstrip("-").isdigit()) else int(float(ms))
    return EPOCH + timedelta(milliseconds=value)


def order_ms(value: Any) -> int:
    """The ``created_at`` epoch ms a listing sorts a stored row by: the stored number, or 0
    when it is missing or not a number (such a row sorts as of 1970 and is reported
    ``unreadable`` by the page that reads it, instead of failing the listing)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def newest_first(pairs: list[tuple[int, str]]) -> list[str]:
    """Ids of ``(created_at_ms, id)`` pairs sorted newest first, ties by id descending (the
    contract's deterministic order)."""
    return [i for _, i in sorted(pairs, reverse=True)]


def rows_newest_first(rows: Iterable[dict[str, Any]]) -> list[str]:
    """``newest_first`` of stored rows (each with ``"id"`` and ``"created_at"`` in epoch ms,
    read by ``order_ms``)."""
    return newest_first([(order_ms(r.get("created_at")), str(r["id"])) for r in rows])


ORDER_ON_LOOP_MAX = 2_000
"""Most rows a listing orders on the event loop (``ordered_off_loop``); more are ordered on a
worker thread. Ordering a user's 100,000 rows took ~75 ms (10,000: ~9 ms; 1,000: 0.4 ms),
repeated for each page of a listing, on the loop that serves every user of the store."""

Item = TypeVar("Item")


async def ordered_off_loop(order: Callable[[list[Item]], list[str]], items: list[Item]) -> list[str]:
    """``order(items)`` (``newest_first``, ``rows_newest_first``): on the loop for at most
    ``ORDER_ON_LOOP_MAX`` items, else on a worker thread (``asyncio.to_thread``), so that one
    large user's listing does not hold every other user's requests."""
    if len(items) <= ORDER_ON_LOOP_MAX:
        return order(items)
    return await asyncio.to_thread(order, items)


def record_fields(memory: Memory) -> dict[str, Any]:
    """The scalar fields of ``memory`` as one flat record (Milvus row, Qdrant payload):
    ``memory_type`` for the type, timestamps in epoch ms, no vector."""
    return {
        "id": memory.id,
        "user_id": memory.user_id,
        "project_id": memory.project_id,
        "memory_type": memory.type.value,
        "content": memory.content,
        "source": memory.source,
        "created_via": memory.created_via,
        "conversation_id": memory.conversation_id,
        "created_by_user_id": memory.created_by_user_id,
        "created_at": to_ms(memory.created_at),
        "updated_at": to_ms(memory.updated_at),
        "last_accessed": to_ms(memory.last_accessed),
        "access_count": int(memory.access_count),
        "importance": float(memory.importance),
        "metadata": memory.metadata or {},
        "embedding_identity": memory.embedding_identity,
        **lifecycle_fields(memory),
    }


LIFECYCLE_FIELDS = (
    "state",
    "superseded_by",
    "merged_into",
    "merged_from",
    "valid_from",
    "valid_to",
    "expires_at",
    "state_reason",
)
"""The record fields of a memory's lifecycle (``Memory.state`` and what goes with it)."""


def lifecycle_fields(memory: Memory) -> dict[str, Any]:
    """The lifecycle part of a record: ``state`` as its value, times in epoch ms,
    ``merged_from`` as a list of ids."""
    return {
        "state": memory.state.value,
        "superseded_by": memory.superseded_by,
        "merged_into": memory.merged_into,
        "merged_from": list(memory.merged_from),
        "valid_from": to_ms(memory.valid_from),
        "valid_to": to_ms(memory.valid_to),
        "expires_at": to_ms(memory.expires_at),
        "state_reason": memory.state_reason,
    }


def lifecycle_from_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """``Memory`` keyword arguments of a record's lifecycle fields; a record written before
    lifecycles existed (no ``state``) is ``active`` and valid from its creation."""
    merged_from = fields.get("merged_from")
    return {
        "state": MemoryState(fields.get("state") or MemoryState.ACTIVE.value),
        "superseded_by": fields.get("superseded_by") or None,
        "merged_into": fields.get("merged_into") or None,
        "merged_from": [str(x) for x in merged_from] if isinstance(merged_from, list) else [],
        "valid_from": from_ms(fields.get("valid_from")) or from_ms(fields.get("created_at")),
        "valid_to": from_ms(fields.get("valid_to")),
        "expires_at": from_ms(fields.get("expires_at")),
        "state_reason": fields.get("state_reason") or None,
    }


def memory_from_fields(fields: dict[str, Any], vector: Any = None) -> Memory:
    """The ``Memory`` of a ``record_fields`` record (and its vector, when fetched)."""
    return Memory(
        id=str(fields["id"]),
        user_id=str(fields["user_id"]),
        project_id=fields.get("project_id"),
        type=MemoryType(fields["memory_type"]),
        content=str(fields["content"]),
        source=fields.get("source") or "api",
        created_via=fields.get("created_via") or "api",
        conversation_id=fields.get("conversation_id"),
        created_by_user_id=fields.get("created_by_user_id"),
        created_at=from_ms(fields.get("created_at")),
        updated_at=from_ms(fields.get("updated_at")),
        last_accessed=from_ms(fields.get("last_accessed")),
        access_count=int(fields.get("access_count") or 0),
        importance=float(fields["importance"]) if fields.get("importance") is not None else 0.5,
        metadata=dict(fields.get("metadata") or {}),
        embedding=[float(x) for x in vector] if vector is not None else None,
        embedding_identity=fields.get("embedding_identity"),
        **lifecycle_from_fields(fields),
    )


UNREADABLE_ROWS: Counter[str] = Counter()
"""Rows skipped by ``decode_rows`` in this process since start, by backend name (a row read
again is counted again: the count of failed reads, not of bad rows)."""
_LOGGED_MAX = 10_000
_logged: set[tuple[str, str]] = set()


def decode_rows(
    rows: Iterable[Row], decode: Callable[[Row], Memory], *, backend: str, row_id: Callable[[Row], Any]
) -> tuple[list[Memory], list[str]]:
    """``(memories, unreadable ids)``: ``decode`` applied to each row, a row it cannot decode
    (any ``Exception``: a time out of range, an unknown type, a missing field...) skipped
    instead of failing the whole read. A read never fails for every row because one row is
    odd; the skipped row stays in the backend, where it is still counted, listed by id and
    deletable (``MemoryStore.forget`` / ``forget_by_scope`` never decode).

    Each skip is counted in ``UNREADABLE_ROWS[backend]`` and logged once per (backend, id)
    per process (at most ``_LOGGED_MAX`` ids remembered), with the exception's type only:
    never a stored value, which may be user text. ``row_id(row)`` gives the id to report
    (``str()`` of it; ``"?"`` when that fails too)."""
    memories: list[Memory] = []
    unreadable: list[str] = []
    for row in rows:
        try:
            memories.append(decode(row))
        except Exception as e:
            try:
                memory_id = str(row_id(row))
            except Exception:
                memory_id = "?"
            unreadable.append(memory_id)
            UNREADABLE_ROWS[backend] += 1
            key = (backend, memory_id)
            if key not in _logged:
                if len(_logged) < _LOGGED_MAX:
                    _logged.add(key)
                log.warning("%s: record %s cannot be read (%s); skipped", backend, memory_id, type(e).__name__)
    return memories, unreadable
