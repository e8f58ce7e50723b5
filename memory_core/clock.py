"""The package's one clock: ``utcnow`` and the millisecond precision every backend stores.

A module of its own, importing nothing of the package, so that every module can take its
time from it (``types`` re-exports both names)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["to_millis", "utcnow"]


def to_millis(when: datetime) -> datetime:
    """``when`` truncated to whole milliseconds (the precision every backend stores:
    timestamps are persisted as epoch milliseconds)."""
    return when.replace(microsecond=(when.microsecond // 1000) * 1000)


def utcnow() -> datetime:
    """Current time, timezone-aware UTC, at millisecond precision (``to_millis``): the
    precision every backend stores, so a record a store returns from ``store``/``update``
    equals what any backend returns for it later. The one clock of the package."""
    return to_millis(datetime.now(UTC))
