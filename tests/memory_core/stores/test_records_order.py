"""``_records.ordered_off_loop``: a listing's ordering of many rows leaves the event loop, with
the same order as on it."""

from __future__ import annotations

import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memory_core.stores._records import ORDER_ON_LOOP_MAX, newest_first, ordered_off_loop, rows_newest_first

pairs = st.lists(st.tuples(st.integers(-(2**41), 2**41), st.text("0123456789abcdef", min_size=1, max_size=8)))


@given(pairs)
def test_rows_newest_first_is_newest_first_of_their_pairs(items):
    rows = [{"id": i, "created_at": ms} for ms, i in items]
    assert rows_newest_first(rows) == newest_first(items)


def test_a_row_without_a_readable_time_sorts_as_of_1970():
    rows = [{"id": "a", "created_at": None}, {"id": "b", "created_at": -5}, {"id": "c", "created_at": "x"}]
    assert rows_newest_first(rows) == ["c", "a", "b"]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 3 * ORDER_ON_LOOP_MAX))
@example(ORDER_ON_LOOP_MAX)
@example(ORDER_ON_LOOP_MAX + 1)
async def test_more_rows_than_the_loop_orders_go_to_a_thread_in_the_same_order(n):
    loop_thread = threading.get_ident()
    ran_on: list[int] = []

    def order(items):
        ran_on.append(threading.get_ident())
        return newest_first(items)

    items = [((i * 7919) % 1000, f"id{i}") for i in range(n)]
    assert await ordered_off_loop(order, items) == newest_first(items)
    assert (ran_on[0] == loop_thread) == (n <= ORDER_ON_LOOP_MAX)


@pytest.mark.parametrize("backend", ["milvus", "qdrant"])
async def test_a_listing_orders_its_rows_off_the_loop(backend, tmp_path, monkeypatch):
    """A listing's rows are ordered newest first off the event loop: Milvus on its store
    thread, with the read; Qdrant beyond ``ORDER_ON_LOOP_MAX`` rows on a thread (the bound
    lowered to 5 here); in the contract's order (ordering a user's 100,000 rows on the loop
    held it ~75 ms a page)."""
    from datetime import timedelta

    from memory_core.config import MilvusSettings
    from memory_core.stores import _records, milvus, qdrant
    from memory_core.stores.milvus import MilvusStore
    from memory_core.stores.qdrant import QdrantStore
    from memory_core.testing.fake_embed import DIM, CountingEmbed
    from memory_core.types import ListQuery, Memory, utcnow

    if backend == "milvus":
        module, store = (
            milvus,
            MilvusStore(
                MilvusSettings(uri=str(tmp_path / "order.db"), collection="order"), embed=CountingEmbed(), dimension=DIM
            ),
        )
    else:
        module, store = (
            qdrant,
            QdrantStore(url=None, path=str(tmp_path / "q"), collection="order", embed=CountingEmbed(), dimension=DIM),
        )
    await store.open()
    try:
        t0 = utcnow()
        stored = await store.store_many(
            [Memory(user_id="u", content=f"note {i}", created_at=t0 + timedelta(seconds=i)) for i in range(12)]
        )
        loop_thread = threading.get_ident()
        ordered_on: list[int] = []
        real_order = module.rows_newest_first

        def recording_order(rows):
            ordered_on.append(threading.get_ident())
            return real_order(rows)

        monkeypatch.setattr(module, "rows_newest_first", recording_order)
        monkeypatch.setattr(_records, "ORDER_ON_LOOP_MAX", 5)
        page = await store.list(ListQuery(user_id="u", limit=5, offset=2))
    finally:
        await store.close()
    assert ordered_on and loop_thread not in ordered_on
    assert [m.id for m in page.memories] == [m.id for m in reversed(stored)][2:7] and page.total == 12
