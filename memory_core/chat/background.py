"""``BackgroundWrites``: the turns an ingress replica is storing after their answers went out
(chat's auto-store), bounded per user and per replica.

A chat's answer is returned before its turn is stored (``MemoryPipeline.remember`` runs as a
task behind the response), so nothing in the request itself bounds how many such stores pile
up when the store side is slow: without a bound, one user sending chats faster than their
turns can be curated grows a queue of tasks (each holding the turn's text) in front of
everyone else's writes on the same shard. The bound is asked when a chat request arrives,
before any work: a user with ``per_user`` turns still being stored, or a replica with
``total``, is refused with ``WritesPending`` (HTTP 429 ``writes_pending`` with ``Retry-After``)
and nothing is lost (no answer was produced, no turn dropped). So one user's backlog is at
most ``per_user`` plus the chats of theirs already in flight (each replica runs at most
``max_ongoing_requests``), and retrying helps as soon as one of their stores finishes.

No Ray here: the ingress (``deployments.http.routes.chat``) holds one per replica and drains
it when the replica stops (``drain``)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine
from typing import Any

from ..errors import WritesPending

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
"""``Retry-After`` of a refusal (seconds): a turn's store takes tens of milliseconds to a
second, so one second is when retrying can first help."""


class BackgroundWrites:
    """The background stores of one replica: ``admit(user_id)`` before a chat's work (raises
    ``WritesPending`` at ``per_user`` pending stores of that user or ``total`` of the replica,
    both ≥ 1), ``start(user_id, coro, context)`` once its answer is out (runs ``coro`` as a task
    in ``context`` and counts it until it ends, however it ends), ``pending(user_id)`` (one
    user's count; ``None``: the replica's), ``drain(timeout_s)`` (awaits the pending stores,
    returns how many did not finish in time). Raises ``ValueError`` for a bound below 1."""

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

    def admit(self, user_id: str) -> None:
        """Raises ``WritesPending`` when ``user_id`` has ``per_user`` stores pending or the
        replica ``total``; otherwise returns (nothing is reserved: the count grows at
        ``start``)."""
        if self.pending(user_id) >= self.per_user:
            raise WritesPending(
                f"{self.per_user} turns of this user are still being stored "
                "(global.limits.pending_writes_per_user); retry",
                RETRY_AFTER_S,
            )
        if len(self._tasks) >= self.total:
            raise WritesPending(
                f"{self.total} turns are still being stored on this replica (global.limits.pending_writes); retry",
                RETRY_AFTER_S,
            )

    def start(
        self, user_id: str | None, coro: Coroutine[Any, Any, Any], context: contextvars.Context | None = None
    ) -> asyncio.Task:
        """``coro`` as a task of the running loop (in ``context`` when given), counted against
        ``user_id`` (``None``: the replica's count only) until it ends. Not bounded itself: the bound is ``admit``'s, asked when the
        request arrived (a turn whose answer went out is always stored)."""
        task = asyncio.get_running_loop().create_task(coro, context=context)
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
