"""``BackgroundWrites``: the turns an ingress replica is storing after their answers went out
(chat's auto-store), bounded per user and per replica.

A chat's answer is returned before its turn is stored (``MemoryPipeline.remember`` runs as a
task behind the response), so nothing in the request itself bounds how many such stores pile
up when the store side is slow (a shard or the Embedder restarting, one user's curation
backlog): without a bound, one user sending chats faster than their turns can be stored grows
a queue of tasks (each holding the turn's text and, in the store pool, a place in front of
everyone else's writes on the same shard).

The bound is asked when a turn's store would start: a user with ``per_user`` turns still being
stored on this replica, or a replica with ``total``, has this turn **answered but not stored**
(``start`` returns ``None``; the ingress counts it as ``memory_extraction{outcome=
"skipped_writes_pending"}``), the same rule as the per-user write rate limit
(``access.WriteRateLimiter``: a chat turn beyond it is answered but not stored). A chat is never
refused for it: the service's contract is that a chat is answered, with or without memory,
while the store side heals. So one user's backlog on a replica is at most ``per_user`` turns,
and every other user's turns are still stored as long as the replica total has room.

No Ray here: the ingress (``deployments.http.routes.chat``) holds one per replica and drains
it when the replica stops (``drain``)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class BackgroundWrites:
    """The background stores of one replica.

    ``start(user_id, make, context)`` runs ``make()`` (a coroutine) as a task in ``context``
    and counts it against ``user_id`` until it ends, however it ends, or returns ``None``
    without calling ``make`` when ``user_id`` has ``per_user`` stores pending or the replica
    ``total``. ``pending(user_id)`` is one user's count (``None``: the replica's);
    ``drain(timeout_s)`` awaits the pending stores and returns how many did not finish in
    time. Raises ``ValueError`` for a bound below 1."""

    def __init__(self, per_user: int, total: int):
        if per_user < 1 or total < 1:
            raise ValueError("per_user and total must be >= 1")
        self.per_user = per_user
        self.total = total
        self._tasks: set[asyncio.Task] = set()
        self._by_user: dict[str, int] = {}

    def pending(self, user_id: str | None = None) -> int:
        """Stores not finished: ``user_id``'s, or (``None``) every user's."""
        return len(self._tasks) if user_id is None else self._by_user.get(user_id, 0)

    def has_room(self, user_id: str | None) -> bool:
        """Whether a store of ``user_id`` (``None``: a store without a user, counted against
        the replica only) would start now."""
        if len(self._tasks) >= self.total:
            return False
        return user_id is None or self.pending(user_id) < self.per_user

    def start(
        self,
        user_id: str | None,
        make: Callable[[], Coroutine[Any, Any, Any]],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task | None:
        """``make()`` as a task of the running loop (in ``context`` when given), counted against
        ``user_id`` until it ends; ``None`` (``make`` not called) when ``has_room`` is false."""
        if not self.has_room(user_id):
            return None
        task = asyncio.get_running_loop().create_task(make(), context=context)
        self._tasks.add(task)
        if user_id is not None:
            self._by_user[user_id] = self._by_user.get(user_id, 0) + 1
        task.add_done_callback(lambda t: self._finished(user_id, t))
        return task

    def _finished(self, user_id: str | None, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if user_id is None:
            return
        left = self._by_user.get(user_id, 0) - 1
        if left > 0:
            self._by_user[user_id] = left
        else:
            self._by_user.pop(user_id, None)

    async def drain(self, timeout_s: float) -> int:
        """Awaits every pending store for at most ``timeout_s`` seconds (a replica stopping:
        the stores of answers already sent still land); returns how many had not finished
        (they are left running, and logged)."""
        tasks = list(self._tasks)
        if not tasks:
            return 0
        _, unfinished = await asyncio.wait(tasks, timeout=timeout_s)
        if unfinished:
            log.warning("%d background turn stores did not finish within %.1f s", len(unfinished), timeout_s)
        return len(unfinished)
