"""Import never tells the importer anything about another user's memories: ids are scoped to
their owner, so the answer (and what is stored) is identical whether or not another user
holds the line's id."""

from __future__ import annotations

import json

from memory_core.migration import export_user, import_lines
from memory_core.sanitize import is_scoped_to, scoped_memory_id
from memory_core.stores import InMemoryStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import ListQuery, Memory

LEGACY = "0123456789abcdef0123456789abcdef"  # an id from before owner tags (plain hex)


class CountingStore(InMemoryStore):
    """Counts contract calls, to show malformed lines never reach the store."""

    def __init__(self):
        super().__init__(embed=CountingEmbed(), dimension=DIM)
        self.calls = 0

    async def store(self, memory):
        self.calls += 1
        return await super().store(memory)

    async def get_many(self, memory_ids, user_id):
        self.calls += 1
        return await super().get_many(memory_ids, user_id)


def line(**fields) -> str:
    return json.dumps(fields)


async def _world(victim_holds: list[str]) -> CountingStore:
    store = CountingStore()
    for memory_id in victim_holds:
        await store.store(Memory(id=memory_id, user_id="victim", content=f"victim's memory {memory_id}"))
    store.calls = 0
    return store


async def test_the_answer_is_identical_whether_or_not_another_user_holds_the_id():
    victim_id = scoped_memory_id("victim", "theirs")
    lines = [
        line(id=victim_id, content="first line"),
        line(id=LEGACY, content="second line"),
        line(content="third line without id"),
    ]
    held = await _world([victim_id, LEGACY])
    empty = await _world([])
    report_held = await import_lines(held, lines, user_id="attacker")
    report_empty = await import_lines(empty, lines, user_id="attacker")
    assert report_held.model_dump() == report_empty.model_dump()
    assert report_held.imported == 3 and report_held.failed == []
    assert [(r.line, r.id) for r in report_held.renamed] == [(1, victim_id), (2, LEGACY)]
    assert all(is_scoped_to(r.new_id, "attacker") for r in report_held.renamed)
    stored_held = sorted((m.id, m.content) for m in (await held.list(ListQuery(user_id="attacker"))).memories)
    stored_empty = sorted((m.id, m.content) for m in (await empty.list(ListQuery(user_id="attacker"))).memories)
    assert stored_held == stored_empty
    # the victim's memories are untouched
    assert {m.id for m in (await held.list(ListQuery(user_id="victim"))).memories} == {victim_id, LEGACY}
    assert (await held.get(victim_id, "victim")).content == f"victim's memory {victim_id}"
    # idempotent: importing again changes nothing, and says the same in both worlds
    again_held = await import_lines(held, lines, user_id="attacker")
    again_empty = await import_lines(empty, lines, user_id="attacker")
    assert again_held.model_dump() == again_empty.model_dump()
    assert again_held.imported == 0 and again_held.skipped_duplicates == 3
    assert (await held.list(ListQuery(user_id="attacker"))).total == 3


async def test_a_users_own_export_keeps_its_ids_when_reimported():
    store = await _world([])
    mine = [await store.store(Memory(user_id="alice", content=f"fact {i}")) for i in range(3)]
    exported = [x async for x in export_user(store, "alice")]
    for m in mine:
        await store.forget(m.id, "alice")
    report = await import_lines(store, exported, user_id="alice")
    assert report.imported == 3 and report.renamed == [] and report.failed == []
    assert {m.id for m in (await store.list(ListQuery(user_id="alice"))).memories} == {m.id for m in mine}
    assert (await import_lines(store, exported, user_id="alice")).skipped_duplicates == 3


async def test_malformed_ids_are_per_line_errors_before_any_store_call():
    store = await _world([])
    bad = [
        line(id="a'b", content="x"),
        line(id=f"{LEGACY}'] or user_id == 'victim' or id in ['zz", content="x"),
        line(id=LEGACY.upper(), content="x"),
        line(id="", content="x"),
        line(id=5, content="x"),
    ]
    report = await import_lines(store, bad, user_id="attacker")
    assert [f.line for f in report.failed] == [1, 2, 3, 4, 5]
    assert report.imported == 0 and store.calls == 0
