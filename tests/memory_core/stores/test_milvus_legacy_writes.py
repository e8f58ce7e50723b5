"""Writes on a Milvus server before 2.5 (a collection without nullable fields, where upsert
misplaces partition-key rows, so writes are delete + insert): new rows are inserted without
a blind delete of their ids (an insert after a delete of the same primary key lost whole
batches on Milvus 2.3.5), and a retried write stays idempotent. A fake pymilvus client that,
like Milvus, keeps duplicate primary keys as separate rows, so a double insert is seen."""

from __future__ import annotations

import re

import pytest

from memory_core.config import MilvusSettings
from memory_core.stores.milvus import MilvusStore, SentinelLayout
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory, MemoryChanges


class LegacyClient:
    """Rows as a list (duplicate ids kept, like Milvus); ``fail_after_insert`` makes the next
    ``insert`` land and then raise a transient error (the reply was lost);
    ``fail_before_insert`` makes it raise one without landing."""

    def __init__(self):
        self.rows: list[dict] = []
        self.events: list[str] = []
        self.fail_after_insert = 0
        self.fail_before_insert = 0

    @staticmethod
    def _ids(expr: str) -> set[str]:
        assert expr.startswith("id in [")
        return set(re.findall(r'"((?:[^"\\]|\\.)*)"', expr.split("]")[0]))

    def query(self, collection, filter, output_fields, consistency_level=None, **kw):
        # a retry must see an insert that landed: only a Strong read waits for it
        self.events.append("query" if consistency_level == "Strong" else f"query:{consistency_level}")
        ids = self._ids(filter)
        return [dict(r) for r in self.rows if r["id"] in ids]

    def delete(self, collection, filter, **kw):
        ids = self._ids(filter)
        self.events.append(f"delete:{len(ids)}")
        self.rows = [r for r in self.rows if r["id"] not in ids]

    def insert(self, collection, rows, **kw):
        if self.fail_before_insert:
            self.fail_before_insert -= 1
            self.events.append("insert-failed")
            raise ConnectionError("the insert did not reach the server")
        self.events.append(f"insert:{len(rows)}")
        self.rows += [dict(r) for r in rows]
        if self.fail_after_insert:
            self.fail_after_insert -= 1
            raise ConnectionError("reply lost after the insert landed")

    def upsert(self, collection, rows, **kw):  # pragma: no cover - must not be used here
        raise AssertionError("a collection without nullable fields is written by delete + insert")

    def flush(self, collection):
        self.events.append("flush")

    def close(self):
        pass


def legacy_store(tmp_path) -> tuple[MilvusStore, LegacyClient]:
    store = MilvusStore(
        MilvusSettings(uri="http://milvus:19530", collection="c"), embed=CountingEmbed(), dimension=DIM, backoff_s=0.0
    )
    client = LegacyClient()
    store._client = client
    store._opened = True  # the fake needs no collection
    store._layout = SentinelLayout()  # what _prepare finds on Milvus 2.3.5
    return store, client


def ids_held(client: LegacyClient) -> list[str]:
    return sorted(r["id"] for r in client.rows)


async def test_new_rows_are_inserted_without_a_delete(tmp_path):
    store, client = legacy_store(tmp_path)
    one = await store.store(Memory(user_id="u", content="a single new memory"))
    many = await store.store_many([Memory(user_id="u", content=f"bulk {i}") for i in range(1000)])
    assert not [e for e in client.events if e.startswith("delete")]
    assert [e for e in client.events if e.startswith("insert")] == ["insert:1", "insert:1000"]
    assert ids_held(client) == sorted([one.id, *(m.id for m in many)])


@pytest.mark.parametrize("bulk", [False, True])
async def test_a_retried_insert_that_had_landed_is_not_doubled(tmp_path, bulk):
    store, client = legacy_store(tmp_path)
    client.fail_after_insert = 1
    if bulk:
        stored = await store.store_many([Memory(user_id="u", content=f"bulk {i}") for i in range(3)])
    else:
        stored = [await store.store(Memory(user_id="u", content="retried"))]
    want = sorted(m.id for m in stored)
    assert ids_held(client) == want  # each id once, although the first insert landed
    n = len(want)
    # the retry asked (Strong) which ids landed, found them all: nothing deleted, nothing re-inserted
    assert client.events[-2:] == [f"insert:{n}", "query"]
    assert not [e for e in client.events if e.startswith("delete")]


async def test_a_retried_insert_that_had_not_landed_inserts_the_rows(tmp_path):
    store, client = legacy_store(tmp_path)
    client.fail_before_insert = 1
    stored = await store.store_many([Memory(user_id="u", content=f"bulk {i}") for i in range(3)])
    assert ids_held(client) == sorted(m.id for m in stored)
    assert client.events[-3:] == ["insert-failed", "query", "insert:3"]
    assert not [e for e in client.events if e.startswith("delete")]


async def test_a_retry_inserts_only_the_rows_that_had_not_landed(tmp_path):
    store, client = legacy_store(tmp_path)
    memories = [Memory(user_id="u", content=f"bulk {i}") for i in range(4)]
    stored = await store.store_many(memories[:2])  # as if an earlier attempt landed half
    rows_before = len(client.rows)
    client.events.clear()
    rows = [store._layout.row(m) for m in (*stored, *memories[2:])]
    await store._call(store._layout.add, client, store.collection, rows, first_attempt=False)
    assert client.events == ["query", "insert:2"]
    assert len(client.rows) == rows_before + 2 and len(set(ids_held(client))) == 4


async def test_replacing_a_held_row_deletes_then_inserts(tmp_path):
    store, client = legacy_store(tmp_path)
    m = await store.store(Memory(user_id="u", content="before"))
    client.events.clear()
    await store.update(m.id, "u", MemoryChanges(content="after"))
    assert ids_held(client) == [m.id]
    assert [r["content"] for r in client.rows] == ["after"]
    assert [e for e in client.events if e.startswith(("delete", "insert"))] == ["delete:1", "insert:1"]
