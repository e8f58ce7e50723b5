"""A write cancelled because its caller went away (the shard's call cancelled: README "Faults
and overload") stops while it is being planned and writes nothing; once it commits, what it
decided is written whole (never half of a batch's slices, never a new record without the
supersession it decided) and then the cancellation goes on."""

from __future__ import annotations

import asyncio

import pytest

from memory_core.config import MemoryStoreSettings
from memory_core.stores.curating import WRITE_SLICE
from memory_core.stores.factory import make_store
from memory_core.testing.fake_embed import CountingEmbed
from memory_core.types import ListQuery, Memory

N = 3 * WRITE_SLICE + 5


def _store():
    return make_store(MemoryStoreSettings(backend="inmemory"), embed=CountingEmbed(), dimension=32)


def _batch(user: str) -> list[Memory]:
    return [Memory(user_id=user, content=f"Parcel {i} went to locker {i * 7} on floor {i % 5}.") for i in range(N)]


async def test_cancelled_while_planning_writes_nothing():
    store = _store()
    inner_retrieve = store.inner.retrieve
    searched = asyncio.Event()

    async def slow_retrieve(options, **kw):  # the candidate search of each memory
        searched.set()
        await asyncio.sleep(0.01)
        return await inner_retrieve(options, **kw)

    store.inner.retrieve = slow_retrieve
    task = asyncio.create_task(store.write(_batch("plan")))
    await searched.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.inner.retrieve = inner_retrieve
    assert (await store.list(ListQuery(user_id="plan"))).total == 0


async def test_cancelled_while_committing_writes_the_whole_batch():
    store = _store()
    inner_store_many = store.inner.store_many
    slices = []
    committing = asyncio.Event()

    async def slow_store_many(memories):
        slices.append(len(memories))
        committing.set()
        await asyncio.sleep(0.01)
        return await inner_store_many(memories)

    store.inner.store_many = slow_store_many
    task = asyncio.create_task(store.write(_batch("commit")))
    await committing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slices == [WRITE_SLICE, WRITE_SLICE, WRITE_SLICE, 5]  # bounded slices, all of them
    assert (await store.list(ListQuery(user_id="commit", limit=500))).total == N
