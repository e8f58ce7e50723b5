"""``BackgroundWrites``: the turns stored behind their answers are bounded per user and per
replica, counted until they end however they end, and drained when a replica stops."""

from __future__ import annotations

import asyncio

import pytest

from memory_core.chat.background import BackgroundWrites


def test_bounds_below_one_are_refused():
    with pytest.raises(ValueError):
        BackgroundWrites(per_user=0, total=4)
    with pytest.raises(ValueError):
        BackgroundWrites(per_user=1, total=0)


def test_a_user_at_their_bound_gets_no_new_store_and_others_do():
    made: list[str] = []

    def make(name: str, gate: asyncio.Event):
        def coro():
            made.append(name)
            return gate.wait()

        return coro

    async def scenario():
        writes = BackgroundWrites(per_user=2, total=10)
        gate = asyncio.Event()
        assert writes.start("alice", make("a1", gate)) is not None
        assert writes.start("alice", make("a2", gate)) is not None
        refused = writes.start("alice", make("a3", gate))  # at the bound: not started
        bob = writes.start("bob", make("b1", gate))  # another user's lane is open
        counts = writes.pending("alice"), writes.pending()
        gate.set()
        assert await writes.drain(5.0) == 0
        again = writes.start("alice", make("a4", gate))  # room again once a store ended
        await writes.drain(5.0)
        return refused, bob, counts, again

    refused, bob, counts, again = asyncio.run(scenario())
    assert refused is None and bob is not None and again is not None
    assert counts == (2, 3)
    assert made == ["a1", "a2", "b1", "a4"]  # the refused store's coroutine was never made


def test_the_replica_bound_counts_every_user_including_stores_without_one():
    async def scenario():
        writes = BackgroundWrites(per_user=5, total=3)
        gate = asyncio.Event()
        writes.start("alice", gate.wait)
        writes.start("bob", gate.wait)
        writes.start(None, gate.wait)  # a store without a user: the replica's count only
        full = writes.has_room("carol"), writes.start("carol", gate.wait)
        gate.set()
        await writes.drain(5.0)
        return full, writes.has_room("carol")

    (room, started), room_after = asyncio.run(scenario())
    assert room is False and started is None and room_after is True


def test_a_store_that_fails_or_is_cancelled_is_no_longer_counted():
    async def fails():
        raise RuntimeError("store down")

    async def scenario():
        writes = BackgroundWrites(per_user=1, total=4)
        failing = writes.start("alice", fails)
        await asyncio.gather(failing, return_exceptions=True)
        await asyncio.sleep(0)  # done callbacks run on the next loop turn
        assert writes.has_room("alice")
        hanging = writes.start("alice", lambda: asyncio.sleep(60))
        assert not writes.has_room("alice")
        hanging.cancel()
        await asyncio.gather(hanging, return_exceptions=True)
        await asyncio.sleep(0)
        return writes.has_room("alice"), writes.pending()

    assert asyncio.run(scenario()) == (True, 0)


def test_drain_waits_for_pending_stores_and_reports_what_did_not_finish():
    async def scenario():
        writes = BackgroundWrites(per_user=4, total=4)
        landed: list[str] = []

        async def store(name: str, delay: float):
            await asyncio.sleep(delay)
            landed.append(name)

        writes.start("alice", lambda: store("quick", 0.01))
        slow = writes.start("bob", lambda: store("slow", 30))
        left = await writes.drain(0.5)
        slow.cancel()
        return left, landed

    left, landed = asyncio.run(scenario())
    assert left == 1 and landed == ["quick"]
