"""``BackgroundWrites``: the turns stored behind their answers are bounded per user and per
replica, counted until they end however they end, and drained when a replica stops."""

from __future__ import annotations

import asyncio

import pytest

from memory_core.chat.background import BackgroundWrites
from memory_core.errors import RateLimited, WritesPending


def test_bounds_below_one_are_refused():
    with pytest.raises(ValueError):
        BackgroundWrites(per_user=0, total=4)
    with pytest.raises(ValueError):
        BackgroundWrites(per_user=1, total=0)


def test_a_user_at_their_bound_is_refused_and_others_are_not():
    async def scenario():
        writes = BackgroundWrites(per_user=2, total=10)
        gate = asyncio.Event()
        for _ in range(2):
            writes.admit("alice")
            writes.start("alice", gate.wait())
        with pytest.raises(WritesPending) as refused:
            writes.admit("alice")
        writes.admit("bob")  # another user's lane is open
        assert writes.pending("alice") == 2 and writes.pending() == 2
        gate.set()
        assert await writes.drain(5.0) == 0
        writes.admit("alice")  # retrying helps once a store ended
        assert writes.pending("alice") == 0 and writes.pending() == 0
        return refused.value

    error = asyncio.run(scenario())
    assert isinstance(error, RateLimited) and error.code == "writes_pending"
    assert error.retry_after_s >= 1 and "pending_writes_per_user" in str(error)


def test_the_replica_bound_counts_every_user_including_stores_without_one():
    async def scenario():
        writes = BackgroundWrites(per_user=5, total=3)
        gate = asyncio.Event()
        writes.start("alice", gate.wait())
        writes.start("bob", gate.wait())
        writes.start(None, gate.wait())  # an anonymous chat's store: the replica's count only
        with pytest.raises(WritesPending, match="global.limits.pending_writes"):
            writes.admit("carol")
        gate.set()
        await writes.drain(5.0)
        writes.admit("carol")

    asyncio.run(scenario())


def test_a_store_that_fails_or_is_cancelled_is_no_longer_counted():
    async def fails():
        raise RuntimeError("store down")

    async def scenario():
        writes = BackgroundWrites(per_user=1, total=4)
        failing = writes.start("alice", fails())
        await asyncio.gather(failing, return_exceptions=True)
        await asyncio.sleep(0)  # done callbacks run on the next loop turn
        writes.admit("alice")
        hanging = writes.start("alice", asyncio.sleep(60))
        hanging.cancel()
        await asyncio.gather(hanging, return_exceptions=True)
        await asyncio.sleep(0)
        writes.admit("alice")
        assert writes.pending() == 0

    asyncio.run(scenario())


def test_drain_waits_for_pending_stores_and_reports_what_did_not_finish():
    async def scenario():
        writes = BackgroundWrites(per_user=4, total=4)
        landed: list[str] = []

        async def store(name: str, delay: float):
            await asyncio.sleep(delay)
            landed.append(name)

        writes.start("alice", store("quick", 0.01))
        slow = writes.start("bob", store("slow", 30))
        left = await writes.drain(0.5)
        slow.cancel()
        return left, landed

    left, landed = asyncio.run(scenario())
    assert left == 1 and landed == ["quick"]
