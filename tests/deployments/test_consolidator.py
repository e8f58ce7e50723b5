"""``Consolidator``'s loop, in process (no Ray instance): a reconfigure wakes it, called the
way Serve calls it, without touching the loop from another thread."""

from __future__ import annotations

import asyncio
import contextlib
import inspect

import pytest

from deployments.consolidator import Consolidator
from memory_core.errors import InvalidInput


class _Remote:
    def __init__(self, value):
        self._value = value

    async def remote(self, *args):
        return self._value


class _Pool:
    """A store pool with no shards: a round finds no user and ends at once."""

    shard_handles = _Remote([])


async def _serve_calls_reconfigure(replica, user_config) -> None:
    """As Ray Serve 2.60's replica does: await a coroutine method, run a plain one on a thread
    of the pool (``RAY_SERVE_RUN_SYNC_IN_THREADPOOL`` defaults to on)."""
    if inspect.iscoroutinefunction(replica.reconfigure):
        await replica.reconfigure(user_config)
    else:
        await asyncio.get_running_loop().run_in_executor(None, replica.reconfigure, user_config)


async def _rounds_reach(replica, n: int, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while replica.passes < n:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def test_a_reconfigure_wakes_the_waiting_loop_at_once():
    async def scenario():
        replica = Consolidator.func_or_class(_Pool())
        await _serve_calls_reconfigure(replica, {"interval_s": 3600})
        assert await _rounds_reach(replica, 1, 5)  # the first round runs at start
        rounds = replica.passes
        # the loop now waits an hour; a new config must start the next round now
        await _serve_calls_reconfigure(replica, {"interval_s": 3600, "max_users_per_pass": 5})
        assert await _rounds_reach(replica, rounds + 1, 5), "the reconfigure did not wake the loop"
        assert replica.config.max_users_per_pass == 5
        with pytest.raises(InvalidInput):
            await replica.reconfigure({"interval_s": 0})
        await replica.check_health()
        replica._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await replica._task

    # debug mode: asyncio raises when a loop's callbacks are touched from another thread; the
    # loop is closed without cancelling what is left (a task whose waiter another thread
    # touched may never finish cancelling), so a failure fails instead of hanging
    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 30))
    finally:
        loop.close()
