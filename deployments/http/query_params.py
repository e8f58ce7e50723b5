"""Query parameters shared by the route groups and the event feed."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from memory_core.errors import InvalidInput

E = TypeVar("E", bound=Enum)


def parse_enum_list(values: list[str] | None, kind: type[E], field: str) -> list[E] | None:
    """``?field=a,b&field=c`` → members of ``kind``; absent → None. An empty or unknown value
    is an ``InvalidInput`` (400) naming ``field``, never "no filter" (a typo must not widen a
    delete or a feed)."""
    if values is None:
        return None
    names = [v.strip() for part in values for v in part.split(",")]
    try:
        if not names or any(not n for n in names):
            raise ValueError
        return [kind(n) for n in names]
    except ValueError as e:
        raise InvalidInput(f"{field} must be one of {[m.value for m in kind]}") from e
