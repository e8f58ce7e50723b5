"""A stored row that cannot be read never fails a read of the other rows (on every rig of the
conformance suite: each backend, bare and cached, and behind the hybrid index).

The odd rows are written under the validation, through the backend's ``_replace`` hook, as
a row written by an older version (or by hand) would be: instants whose epoch milliseconds
lie outside what a ``datetime`` holds (``0001-01-01T00:00:00+23:59`` is 1 day minus a minute
before year 1 in UTC; ``9999-12-31T23:59:59-23:59`` after year 9999). Every read path
answers with the readable rows (``list`` reports the others in ``unreadable``), the admin
views' counts still count them, and they are deletable by id and by scope."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory_core.errors import MemoryNotFound
from memory_core.migration import export_user
from memory_core.stores import _records
from memory_core.types import ListQuery, Memory, MemoryScope, MemoryState
from tests.ids import tid
from tests.memory_core.stores.test_conformance import Q, mem, raw, rig  # noqa: F401 (rig: a fixture)

BEFORE_YEAR_1 = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=23, minutes=59)))
AFTER_YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))


async def _odd(s, name: str, content: str, **times) -> str:
    """Writes a row of alice that cannot be read back, under the store's validation."""
    backend = raw(s)
    vector = (await backend.embed_documents([content]))[0]
    odd = Memory(
        id=tid(name),
        user_id="alice",
        content=content,
        embedding=vector,
        embedding_identity=backend.identity,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        updated_at=datetime(2024, 1, 1, tzinfo=UTC),
    ).model_copy(update=times)
    await backend._replace(odd)
    return odd.id


async def test_reads_survive_an_unreadable_row_which_stays_deletable(rig):  # noqa: F811
    store = rig.open()
    good = [await store.store(mem("alice", f"my favourite tea number {i} is genmaicha")) for i in range(2)]
    await store.store(mem("bob", "my favourite tea is sencha"))
    skipped = _records.UNREADABLE_ROWS[raw(store).name]
    first = await _odd(store, "odd-created", "my favourite tea is an odd one", created_at=BEFORE_YEAR_1)
    second = await _odd(store, "odd-accessed", "my favourite tea is odder still", last_accessed=AFTER_YEAR_9999)
    odd = {first, second}

    page = await store.list(ListQuery(user_id="alice"))
    assert page.total == 4 and {m.id for m in page.memories} == {m.id for m in good}
    assert set(page.unreadable) == odd
    assert _records.UNREADABLE_ROWS[raw(store).name] > skipped  # counted
    # a pager that advances by ``rows`` sees every row once, readable or not
    seen, unreadable, offset = [], [], 0
    while True:
        one = await store.list(ListQuery(user_id="alice", limit=1, offset=offset))
        seen += [m.id for m in one.memories]
        unreadable += one.unreadable
        offset += one.rows
        if not one.rows or offset >= one.total:
            break
    assert sorted(seen) == sorted(m.id for m in good) and set(unreadable) == odd
    # the admin views count memories with ``list(limit=1)``: they still answer, counting them
    assert (await store.list(ListQuery(user_id="alice", limit=1, states=[MemoryState.ACTIVE]))).total == 4

    hits = await store.retrieve(Q(user_id="alice", query="my favourite tea", threshold=-1, limit=10))
    assert {h.memory.id for h in hits} == {m.id for m in good}
    assert (await store.get(good[0].id, "alice")).id == good[0].id
    assert {m.id for m in await store.get_many([*odd, good[1].id], "alice")} == {good[1].id}
    with pytest.raises(MemoryNotFound):
        await store.get(first, "alice")

    lines = [line async for line in export_user(store, "alice", page_size=1)]
    assert len(lines) == 3 and f'"unreadable":["{min(odd)}","{max(odd)}"]' in lines[-1]
    assert '"end_of_export":{"memories":2' in lines[-1]

    with pytest.raises(MemoryNotFound):  # another user cannot delete it
        await store.forget(first, "bob")
    await store.forget(first, "alice")  # by id
    page = await store.list(ListQuery(user_id="alice"))
    assert page.total == 3 and page.unreadable == [second]
    assert await store.forget_by_scope(MemoryScope(user_id="alice")) == 3  # by scope
    assert (await store.list(ListQuery(user_id="alice"))).total == 0
    assert (await store.list(ListQuery(user_id="bob"))).total == 1


async def test_a_row_with_values_of_the_wrong_kind_is_skipped_too(rig):  # noqa: F811
    """A payload (Qdrant) or HASH (Valkey) edited by hand: no number where ``created_at`` is
    sorted on, a type no version wrote. The listing still answers (the row sorts as of 1970)."""
    if rig.kind not in ("qdrant", "valkey") or rig.hybrid:
        pytest.skip("schemaless record stores only (Milvus and the in-memory store type their fields)")
    store = rig.open()
    good = await store.store(mem("alice", "my favourite tea is genmaicha"))
    bad = await store.store(mem("alice", "my favourite tea is sencha"))
    backend = raw(store)
    if rig.kind == "qdrant":
        from memory_core.stores.qdrant import point_id

        await backend._conn.set_payload(
            backend.collection, payload={"created_at": "soon", "memory_type": "gossip"}, points=[point_id(bad.id)]
        )
    else:
        await backend._conn.hset(backend._key(bad.id), mapping={"memory_type": "gossip", "created_at": "soon"})
    page = await store.list(ListQuery(user_id="alice"))
    assert [m.id for m in page.memories] == [good.id] and page.unreadable == [bad.id] and page.total == 2
    hits = await store.retrieve(Q(user_id="alice", query="my favourite tea", threshold=-1))
    assert [h.memory.id for h in hits] == [good.id]
    await store.forget(bad.id, "alice")
    assert (await store.list(ListQuery(user_id="alice"))).unreadable == []
