"""The operator views ``GET /v1/admin/stats`` and ``GET /v1/admin/users``, from aggregate
store queries (``Store.counts``) in bounded time whatever the number of users.

- ``service_stats``: one ``counts(EVERYONE)`` call (a bounded number of backend queries:
  one count per state and per type) and two registry counts: the same cost for 10 users or
  1,000,000.
- ``users_page``: one page of the users seen (``limit`` at most ``MAX_USERS_PAGE``), each with
  their memories, counted for the page's users only in one ``Store.totals`` call (one call to
  each store shard holding any of them; on Milvus Lite one pass over its columns, on the other
  backends one count query per user, 8 at a time).
"""

from __future__ import annotations

import asyncio
from typing import Any

from .access import KeyRegistry
from .errors import InvalidInput
from .stores.base import Store
from .types import EVERYONE

MAX_USERS_PAGE = 500
"""The largest page of ``users_page`` (its cost grows with the page where the backend counts
one owner at a time: ``benchmarks/admin_views.py``)."""
DEFAULT_USERS_PAGE = 100


async def service_stats(store: Store, registry: KeyRegistry) -> dict[str, Any]:
    """``{"users", "memories", "by_state": {state: n}, "by_type": {type: n}, "keys"}``:
    users seen, every memory in the store by lifecycle state and by type (every state),
    active API keys. One store call. Raises the store's errors (``StoreUnavailable``...)."""
    counts = await store.counts(EVERYONE)
    users, keys = await asyncio.to_thread(lambda: (registry.user_count(), registry.active_key_count()))
    return {
        "users": users,
        "memories": counts.total,
        "by_state": {s.value: n for s, n in counts.by_state.items()},
        "by_type": {t.value: n for t, n in counts.by_type.items()},
        "keys": keys,
    }


async def users_page(
    store: Store, registry: KeyRegistry, limit: int = DEFAULT_USERS_PAGE, offset: int = 0
) -> dict[str, Any]:
    """``{"users": [{"user_id", "memories", "keys"}], "total", "limit", "offset"}``: the users
    seen sorted by id, ``users[offset:offset + limit]`` of them, each with their memories
    (every state) and active keys; ``total`` = every user seen. One ``totals`` store call.
    Raises ``InvalidInput`` (``limit`` outside 1..``MAX_USERS_PAGE``, negative ``offset``)."""
    if not 0 < limit <= MAX_USERS_PAGE:
        raise InvalidInput(f"limit must be in 1..{MAX_USERS_PAGE}")
    if offset < 0:
        raise InvalidInput("offset must be ≥ 0")
    # the key registry's SQLite queries on a worker thread, not on the loop serving every user
    page, seen = await asyncio.to_thread(lambda: (registry.users(limit=limit, offset=offset), registry.user_count()))
    counted = await store.totals([u for u, _ in page]) if page else {}
    totals = [counted.get(u, 0) for u, _ in page]
    return {
        "users": [
            {"user_id": u, "memories": total, "keys": keys} for (u, keys), total in zip(page, totals, strict=True)
        ],
        "total": seen,
        "limit": limit,
        "offset": offset,
    }
