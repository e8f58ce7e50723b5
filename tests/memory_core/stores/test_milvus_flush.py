"""Milvus flushing: ``flush_every``, the debounced idle flush and its lifecycle, the bulk
upsert of ``store_many``. Most tests use a fake pymilvus client (exact call records, no
timing noise from Milvus Lite); one runs on Milvus Lite end to end."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from memory_core.config import MilvusSettings
from memory_core.stores.milvus import MilvusStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory, RetrieveOptions


def mem(user: str, content: str, **kw) -> Memory:
    return Memory(user_id=user, content=content, **kw)


class FakeClient:
    """The pymilvus calls the write paths make; records them (called on the worker thread)."""

    def __init__(self):
        self.events: list[str] = []
        self.upserts: list[int] = []
        self.flush_error: Exception | None = None
        self.flush_gate: threading.Event | None = None
        self.flush_started = threading.Event()

    def query(self, collection, filter, output_fields, limit=None):
        # reads by id are ``id in [...]`` expressions of escaped literals (``_ids_filter``)
        assert filter.startswith("id in [")
        self.events.append("query")
        return []

    def get(self, collection, ids, output_fields):  # pragma: no cover - must not be used
        raise AssertionError("reads by id go through query() with escaped ids, never get(ids=...)")

    def upsert(self, collection, rows):
        self.events.append("upsert")
        self.upserts.append(len(rows))

    def flush(self, collection):
        self.events.append("flush-start")
        self.flush_started.set()
        if self.flush_gate is not None:
            self.flush_gate.wait(5)
        if self.flush_error is not None:
            self.events.append("flush-failed")
            raise self.flush_error
        self.events.append("flush-end")

    def close(self):
        self.events.append("close")

    def flushes(self) -> int:
        return self.events.count("flush-end")


def fake_store(tmp_path, **kw) -> tuple[MilvusStore, FakeClient]:
    kw.setdefault("flush_idle_min_rows", 1)
    store = MilvusStore(
        MilvusSettings(uri=str(tmp_path / "fake.db"), collection="c"), embed=CountingEmbed(), dimension=DIM, **kw
    )
    client = FakeClient()
    store._client = client
    store._opened = True  # the fake needs no collection
    return store, client


def test_defaults_lite_and_server(tmp_path):
    lite = MilvusStore(MilvusSettings(uri=str(tmp_path / "m.db"), collection="c"), embed=None, dimension=DIM)
    server = MilvusStore(MilvusSettings(uri="http://milvus:19530", collection="c"), embed=None, dimension=DIM)
    assert (lite._flush_every, lite._flush_idle_s) == (1000, 0.5)
    assert (server._flush_every, server._flush_idle_s) == (0, 0.0)
    custom = MilvusStore(
        MilvusSettings(uri="http://milvus:19530", collection="c"), embed=None, dimension=DIM, flush_idle_s=2
    )
    assert custom._flush_idle_s == 2.0


async def test_idle_flush_is_debounced(tmp_path):
    idle = 0.3
    store, client = fake_store(tmp_path, flush_every=0, flush_idle_s=idle)
    for i in range(3):  # writes closer together than flush_idle_s: no flush in between
        await store.store(mem("u", f"burst {i}"))
        await asyncio.sleep(idle / 3)
    await store.store_many([mem("u", f"batch {i}") for i in range(4)])
    assert client.flushes() == 0 and store.flush_count == 0
    assert store._idle_task is not None and not store._idle_task.done()
    deadline = time.monotonic() + 5
    while store.flush_count == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(idle * 1.5)
    assert client.flushes() == 1  # once for the whole burst
    assert store.flush_count == store.idle_flush_count == 1
    assert store._unflushed == 0 and store._idle_task is None
    # the next write re-arms it
    await store.store(mem("u", "later"))
    await asyncio.sleep(idle * 2.5)
    assert client.flushes() == 2
    await store.close()
    assert client.events[-1] == "close"


async def test_close_cancels_pending_idle_flush(tmp_path):
    store, client = fake_store(tmp_path, flush_every=0, flush_idle_s=0.2)
    await store.store(mem("u", "unflushed"))
    task = store._idle_task
    assert task is not None and not task.done()
    await store.close()
    assert task.cancelled() and store._idle_task is None
    await asyncio.sleep(0.3)
    assert "flush-start" not in client.events and client.events[-1] == "close"


async def test_close_during_running_flush_closes_client_after_it(tmp_path):
    store, client = fake_store(tmp_path, flush_every=0, flush_idle_s=0.05)
    client.flush_gate = threading.Event()
    await store.store(mem("u", "x"))
    await asyncio.to_thread(client.flush_started.wait, 5)  # the idle flush is on the worker thread
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    client.flush_gate.set()
    await asyncio.wait_for(closing, 5)
    assert client.events[-3:] == ["flush-start", "flush-end", "close"]
    assert client.events.count("flush-start") == 1  # and none after close began


async def test_failed_idle_flush_is_logged_not_raised(tmp_path, caplog):
    store, client = fake_store(tmp_path, flush_every=0, flush_idle_s=0.05)
    client.flush_error = RuntimeError("disk on fire")
    with caplog.at_level(logging.WARNING, logger="memory_core.stores.milvus"):
        await store.store(mem("u", "x"))
        deadline = time.monotonic() + 5
        while store._idle_task is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    assert "idle flush" in caplog.text and "disk on fire" in caplog.text
    assert store.flush_count == 0 and store._unflushed == 1 and store._idle_task is None
    client.flush_error = None
    await store.store(mem("u", "y"))  # the next write re-arms it; both rows get flushed
    deadline = time.monotonic() + 5
    while store.flush_count == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert store.flush_count == 1 and store._unflushed == 0
    await store.close()


async def test_flush_every_still_applies(tmp_path):
    store, client = fake_store(tmp_path, flush_every=3, flush_idle_s=0)
    for i in range(7):
        await store.store(mem("u", f"m{i}"))
    assert client.flushes() == 2 and store._unflushed == 1 and store._idle_task is None
    await store.close()


async def test_store_many_is_one_lookup_and_one_upsert_per_1000(tmp_path):
    store, client = fake_store(tmp_path, flush_every=0, flush_idle_s=0)
    await store.store_many([mem("u", f"m{i}") for i in range(1000)])
    assert client.events.count("query") == 1 and client.upserts == [1000]
    rows = [mem("u", f"x{i}") for i in range(2500)]
    await store._insert_many(rows)  # the hook itself splits larger inputs
    assert client.upserts[1:] == [1000, 1000, 500]
    await store.close()


async def test_milvus_lite_flushes_after_idle(tmp_path):
    embed = CountingEmbed()
    store = MilvusStore(
        MilvusSettings(uri=str(tmp_path / "lite.db"), collection="idle"),
        embed=embed,
        dimension=DIM,
        flush_every=10_000,
        flush_idle_s=0.4,
        flush_idle_min_rows=1,
    )
    await store.open()
    real_flush = store._client.flush
    flushed: list[float] = []

    def counting_flush(*a, **kw):
        flushed.append(time.monotonic())
        return real_flush(*a, **kw)

    store._client.flush = counting_flush
    try:
        await store.store_many([mem("u", f"burst memory {i}") for i in range(50)])
        await store.store(mem("u", "one more"))
        last_write = time.monotonic()
        assert flushed == []
        deadline = time.monotonic() + 10
        while store.idle_flush_count == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(flushed) == 1 and flushed[0] - last_write >= 0.3
        assert store.idle_flush_count == 1 and store._unflushed == 0
        res = await store.retrieve(RetrieveOptions(user_id="u", query="one more", threshold=0.99))
        assert [r.memory.content for r in res][:1] == ["one more"]
        await store.store(mem("u", "pending at close"))
        assert store._idle_task is not None
    finally:
        await store.close()
    assert len(flushed) == 1  # the pending idle flush was cancelled, none ran after close
    assert store._idle_task is None


async def test_idle_flush_waits_for_min_rows(tmp_path):
    """A trickle below ``flush_idle_min_rows`` stays in the growing segment (no tiny
    segments); reaching the minimum arms the idle flush."""
    store, client = fake_store(tmp_path, flush_every=0, flush_idle_s=0.05, flush_idle_min_rows=5)
    for i in range(4):
        await store.store(mem("u", f"trickle {i}"))
    await asyncio.sleep(0.3)
    assert client.flushes() == 0 and store._idle_task is None and store._unflushed == 4
    await store.store(mem("u", "fifth"))
    deadline = time.monotonic() + 5
    while client.flushes() == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert client.flushes() == 1 and store._unflushed == 0
    await store.close()


def test_lite_default_min_rows(tmp_path):
    assert (
        MilvusStore(
            MilvusSettings(uri=str(tmp_path / "m.db"), collection="c"), embed=None, dimension=DIM
        )._flush_idle_min_rows
        == 100
    )
