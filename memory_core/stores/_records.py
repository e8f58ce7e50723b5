"""Helpers shared by the persistent backends: timestamps as epoch milliseconds, and the
newest-first ordering of listings."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def to_ms(when: datetime | None) -> int | None:
    """Epoch milliseconds (int) of an aware datetime; ``None`` stays ``None``."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - EPOCH) // _MS


def from_ms(ms: int | float | str | bytes | None) -> datetime | None:
    """Aware UTC datetime of epoch milliseconds; ``None``/negative means absent."""
    if ms is None:
        return None
    value = int(float(ms))
    if value < 0:
        return None
    return EPOCH + timedelta(milliseconds=value)


def newest_first(pairs: list[tuple[int, str]]) -> list[str]:
    """Ids of ``(created_at_ms, id)`` pairs sorted newest first, ties by id descending (the
    contract's deterministic order)."""
    return [i for _, i in sorted(pairs, reverse=True)]
