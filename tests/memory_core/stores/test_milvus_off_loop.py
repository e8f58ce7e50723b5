"""Milvus Lite: what a read or an access-count write does to many rows runs on the store's
worker thread, not on the event loop that serves every user: decoding the rows read into
memories, and preparing the rows the access counts rewrite (which stays idempotent when
the call is retried)."""

from __future__ import annotations

import threading

from memory_core.config import MilvusSettings
from memory_core.stores import milvus
from memory_core.stores.milvus import MilvusStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory
from memory_core.types import utcnow as now


async def _opened(tmp_path) -> MilvusStore:
    store = MilvusStore(
        MilvusSettings(uri=str(tmp_path / "off_loop.db"), collection="off_loop"),
        embed=CountingEmbed(),
        dimension=DIM,
        access_flush_s=0,
    )
    await store.open()
    return store


async def test_rows_read_are_decoded_and_access_rows_prepared_off_the_loop(tmp_path, monkeypatch):
    store = await _opened(tmp_path)
    try:
        stored = await store.store_many([Memory(user_id="u", content=f"note {i}") for i in range(20)])
        loop_thread = threading.get_ident()
        decoded_on: list[int] = []
        real_decode = milvus.decode_rows

        def recording_decode(*args, **kwargs):
            decoded_on.append(threading.get_ident())
            return real_decode(*args, **kwargs)

        monkeypatch.setattr(milvus, "decode_rows", recording_decode)
        got = await store.get_many([m.id for m in stored], "u")
        assert len(got) == 20 and decoded_on and loop_thread not in decoded_on

        touched_on: list[int] = []
        real_touch = MilvusStore._touch_rows

        def recording_touch(self, *args):
            touched_on.append(threading.get_ident())
            return real_touch(self, *args)

        monkeypatch.setattr(MilvusStore, "_touch_rows", recording_touch)
        await store.record_access([m.id for m in stored[:5]], "u")
    finally:
        await store.close()  # writes the pending accesses
    assert touched_on and loop_thread not in touched_on
    store = await _opened(tmp_path)
    try:
        counts = {m.id: m.access_count for m in await store.get_many([m.id for m in stored], "u")}
    finally:
        await store.close()
    assert sorted(counts.values()) == [0] * 15 + [1] * 5


async def test_an_access_write_retried_with_the_rows_as_read_counts_once(tmp_path):
    store = await _opened(tmp_path)
    try:
        memory = await store.store(Memory(user_id="u", content="a note read twice"))
        rows = store._get_sync([memory.id], milvus._ALL_FIELDS)
        stamp = int(now().timestamp() * 1000)
        store._touch_rows(rows, {memory.id: 1}, stamp)
        store._touch_rows(rows, {memory.id: 1}, stamp)  # a retry after a transient error
        assert rows[0]["access_count"] == 0  # the rows as read are left as they were
        (again,) = await store.get_many([memory.id], "u")
    finally:
        await store.close()
    assert again.access_count == 1
