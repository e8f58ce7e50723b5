"""JSONL export/import and re-embedding migration between two model identities."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_core.errors import InvalidInput, RequestTooLarge
from memory_core.migration import (
    MigrationError,
    count_import_lines,
    export_end_line,
    export_user,
    import_lines,
    load_user_ids,
    memory_to_export_line,
    migrate,
    parse_import_line,
)
from memory_core.sanitize import is_scoped_to, scoped_memory_id
from memory_core.stores import InMemoryStore
from memory_core.types import ListQuery, Memory, MemoryType
from tests.ids import tid


def fake_embed(dim: int, calls: list[int] | None = None):
    """Deterministic text → unit vector of ``dim`` (a different 'model' per dim)."""

    def vec(text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(f"{dim}:{text}".encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(dim)
        return (v / np.linalg.norm(v)).tolist()

    async def embed(texts: list[str]) -> list[list[float]]:
        if calls is not None:
            calls.append(len(texts))
        return [vec(t) for t in texts]

    embed.vec = vec  # type: ignore[attr-defined]
    return embed


def old_store() -> InMemoryStore:
    return InMemoryStore(embed=fake_embed(8), dimension=8, identity="identity-A")


async def _fill(store, user: str, n: int) -> list[Memory]:
    base = datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        m = Memory(
            content=f"{user} fact number {i}",
            user_id=user,
            type=MemoryType.EPISODIC if i % 2 else MemoryType.SEMANTIC,
            project_id="p1" if i % 3 == 0 else None,
            metadata={"i": i, "tags": ["x"]},
            importance=0.25,
            created_at=base + timedelta(minutes=i),
            access_count=i,
        )
        out.append(await store.store(m))
    return out


# ---------------------------------------------------------------- lines
def test_export_line_round_trip_without_vector():
    m = Memory(content="likes tea", user_id="u1", metadata={"k": [1, 2]}, embedding=[1.0, 0.0], embedding_identity="A")
    line = memory_to_export_line(m)
    assert "\n" not in line and "embedding" not in json.loads(line)
    parsed = parse_import_line(line, user_id="u1")
    back = parsed.memory
    provenance = {"embedding", "embedding_identity", "created_via", "created_by_user_id"}
    # the id was issued for u1 (``Memory()``), so u1's import keeps it
    assert parsed.given_id == m.id and back.id == m.id
    assert back.embedding is None and back.model_dump(exclude=provenance) == m.model_dump(exclude=provenance)
    # the importing user and the import pipeline are the provenance, whatever the line claims
    assert (back.created_via, back.created_by_user_id) == ("import", "u1")
    forged = json.dumps({"content": "x", "created_by_user_id": "alice", "created_via": "auto_store"})
    assert parse_import_line(forged, user_id="bob").memory.created_by_user_id == "bob"


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"content": "  "}', "content"),
        ('{"content": "\\u200b\\u200c"}', "content"),  # invisible-only content, like whitespace-only
        ('{"content": "x", "user_id": "someone-else"}', "belongs to another user"),
        ('{"content": "x", "id": "dup-1"}', "32 lowercase hex"),  # not the memory id format
        ('{"content": "x", "id": "6100000000000000000000000000000A"}', "32 lowercase hex"),  # upper-case hex
        ('{"content": "x", "importance": 7}', "importance"),
        ('{"content": "x", "type": "dream"}', "type"),
    ],
)
def test_parse_import_line_rejects_bad_lines(line, match):
    with pytest.raises(InvalidInput, match=match):
        parse_import_line(line, user_id="u1")


def test_parse_import_line_user_and_id_rules():
    parsed = parse_import_line('{"content": "x"}', user_id="u1")
    m = parsed.memory
    assert m.user_id == "u1" and m.created_via == "import" and parsed.given_id is None
    assert parse_import_line('{"content": "x"}', user_id="u1").memory.id == m.id  # deterministic id
    assert is_scoped_to(m.id, "u1")
    assert parse_import_line('{"content": "x"}', user_id="u2").memory.id != m.id  # scoped to the user
    with pytest.raises(InvalidInput, match="user_id"):
        parse_import_line('{"content": "x"}', user_id=None)
    assert parse_import_line('{"content": "x", "user_id": "u9"}', user_id=None).memory.user_id == "u9"
    # a line's id issued for the importing user is kept ...
    own = Memory(content="x", user_id="u1").id
    kept = parse_import_line(json.dumps({"id": own, "content": "x"}), user_id="u1")
    assert (kept.given_id, kept.memory.id) == (own, own)
    # ... any other id of the format (another user's, or one without an owner tag) is replaced by
    # the importing user's deterministic scoped id
    for given in (Memory(content="x", user_id="u2").id, tid("shared")):
        renamed = parse_import_line(json.dumps({"id": given, "content": "x"}), user_id="u1")
        assert renamed.given_id == given and renamed.memory.id == scoped_memory_id("u1", "id:" + given)
        assert is_scoped_to(renamed.memory.id, "u1") and not is_scoped_to(renamed.memory.id, "u2")
        again = parse_import_line(json.dumps({"id": given, "content": "other text"}), user_id="u1")
        assert again.memory.id == renamed.memory.id  # derived from the id, not the content


# ---------------------------------------------------------------- export / import
async def test_export_then_import_is_idempotent():
    src = old_store()
    mems = await _fill(src, "alice", 23)
    await _fill(src, "bob", 3)
    lines = [line async for line in export_user(src, "alice", page_size=5)]
    assert len(lines) == 24 and all(line.endswith("\n") for line in lines)
    assert json.loads(lines[-1]) == {"end_of_export": {"memories": 23, "unreadable": []}}
    assert [json.loads(x)["id"] for x in lines[:-1]] == [
        m.id for m in sorted(mems, key=lambda m: m.created_at, reverse=True)
    ]

    calls: list[int] = []
    dst = InMemoryStore(embed=fake_embed(16, calls), dimension=16, identity="identity-B")
    seen = []
    bad = ["", '{"content": "ok", "user_id": "mallory"}', "garbage"]
    report = await import_lines(dst, lines + bad, user_id="alice", on_progress=lambda r: seen.append(r.imported))
    assert report.imported == 23 and report.skipped_duplicates == 0
    assert [f.line for f in report.failed] == [26, 27] and "belongs to another user" in report.failed[0].error
    assert report.renamed == []  # alice's own ids are kept
    assert seen and max(seen) == 23 and len(calls) == 23

    again = await import_lines(dst, iter(lines), user_id="alice")
    assert again.imported == 0 and again.skipped_duplicates == 23 and again.failed == [] and again.renamed == []
    stored = (await dst.list(ListQuery(user_id="alice", limit=100))).memories
    assert {m.id for m in stored} == {m.id for m in mems}
    by_id = {m.id: m for m in mems}
    for m in stored:
        orig = by_id[m.id]
        assert (m.content, m.metadata, m.type, m.project_id, m.created_at, m.access_count) == (
            orig.content,
            orig.metadata,
            orig.type,
            orig.project_id,
            orig.created_at,
            orig.access_count,
        )
        assert m.embedding_identity == "identity-B" and len(m.embedding) == 16
    assert (await dst.list(ListQuery(user_id="bob", limit=10))).total == 0


async def test_import_id_of_another_user_is_renamed_whether_or_not_it_is_held():
    """A line whose id another user holds is imported under alice's scoped id (listed in
    ``renamed``), and alice's report is the same whether or not another user holds the id:
    an import tells nothing about other users' memories, and never touches them."""
    bobs = Memory(content="bob's", user_id="bob")  # an id issued for bob
    lines = [
        json.dumps({"id": bobs.id, "content": "mine"}),
        json.dumps({"id": tid("shared"), "content": "mine too"}),  # the format, but no owner tag
    ]
    held, empty = old_store(), old_store()
    await held.store(bobs)
    await held.store(Memory(id=tid("shared"), content="bob's shared", user_id="bob"))
    reports = [await import_lines(store, lines, user_id="alice") for store in (held, empty)]
    assert reports[0].model_dump() == reports[1].model_dump()
    report = reports[0]
    assert report.imported == 2 and report.skipped_duplicates == 0 and report.failed == []
    new_ids = [scoped_memory_id("alice", "id:" + bobs.id), scoped_memory_id("alice", "id:" + tid("shared"))]
    assert [(r.line, r.id, r.new_id) for r in report.renamed] == [
        (1, bobs.id, new_ids[0]),
        (2, tid("shared"), new_ids[1]),
    ]
    for store in (held, empty):
        assert [(await store.get(i, "alice")).content for i in new_ids] == ["mine", "mine too"]
        assert (await store.list(ListQuery(user_id="alice"))).total == 2
    assert (await held.get(bobs.id, "bob")).content == "bob's"
    assert (await held.get(tid("shared"), "bob")).content == "bob's shared"
    assert (await held.list(ListQuery(user_id="bob"))).total == 2
    # re-importing changes nothing and says the same thing again
    again = await import_lines(held, lines, user_id="alice")
    assert again.imported == 0 and again.skipped_duplicates == 2 and again.failed == []
    assert again.renamed == report.renamed
    assert (await held.list(ListQuery(user_id="alice"))).total == 2 and (
        await held.list(ListQuery(user_id="bob"))
    ).total == 2


# ---------------------------------------------------------------- migration
async def test_migrate_reembeds_everything_and_is_rerunnable():
    src = old_store()
    alice = await _fill(src, "alice", 1200)  # more than one page
    bob = await _fill(src, "bob", 7)
    before = {m.id: m.model_dump() for m in (await src.list(ListQuery(user_id="alice", limit=1000))).memories}

    calls: list[int] = []
    new_embed = fake_embed(16, calls)
    dst = InMemoryStore(embed=new_embed, dimension=16, identity="identity-B")
    progress = []
    report = await migrate(src, dst, ["alice", "bob", "nobody"], on_progress=progress.append)
    assert report.reembedded and report.migrated == 1207 and report.skipped_existing == 0
    assert [(u.user_id, u.source, u.target) for u in report.users] == [
        ("alice", 1200, 1200),
        ("bob", 7, 7),
        ("nobody", 0, 0),
    ]
    assert progress[-1].user_id == "nobody" and any(p.done == 1200 and p.total == 1200 for p in progress)
    assert sum(calls) == 1207

    for m in alice + bob:
        got = await dst.get(m.id, m.user_id)
        assert got.content == m.content and got.created_at == m.created_at and got.metadata == m.metadata
        assert got.embedding_identity == "identity-B"
        assert np.allclose(got.embedding, new_embed.vec(m.content))

    # the old store is untouched
    after = {m.id: m.model_dump() for m in (await src.list(ListQuery(user_id="alice", limit=1000))).memories}
    assert after == before and (await src.list(ListQuery(user_id="alice", limit=1))).total == 1200

    # rerun: nothing re-embedded, everything skipped
    calls.clear()
    again = await migrate(src, dst, ["alice", "bob"])
    assert again.migrated == 0 and again.skipped_existing == 1207 and calls == []


async def test_migrate_resumes_after_partial_run():
    src = old_store()
    mems = await _fill(src, "carol", 30)
    dst = InMemoryStore(embed=fake_embed(16), dimension=16, identity="identity-B")
    for m in mems[:12]:  # an interrupted earlier run
        await dst.store(m.model_copy(update={"embedding": None, "embedding_identity": None}))
    report = await migrate(src, dst, ["carol"])
    assert report.users[0].migrated == 18 and report.users[0].skipped_existing == 12
    assert (await dst.list(ListQuery(user_id="carol", limit=1))).total == 30


async def test_migrate_count_check_fails_when_target_has_extra():
    src = old_store()
    await _fill(src, "dave", 3)
    dst = InMemoryStore(embed=fake_embed(16), dimension=16, identity="identity-B")
    await dst.store(Memory(content="written only in the new store", user_id="dave"))
    with pytest.raises(MigrationError, match="count check"):
        await migrate(src, dst, ["dave"])


async def test_migrate_same_identity_copies_vectors():
    src = old_store()
    mems = await _fill(src, "erin", 4)
    calls: list[int] = []
    dst = InMemoryStore(embed=fake_embed(8, calls), dimension=8, identity="identity-A")
    report = await migrate(src, dst, ["erin"])
    assert not report.reembedded and calls == []
    for m in mems:
        assert (await dst.get(m.id, "erin")).embedding == pytest.approx(m.embedding)


def test_load_user_ids(tmp_path):
    f = tmp_path / "users.txt"
    f.write_text("alice\n# comment\n\nbob  # trailing\nalice\n")
    assert load_user_ids(f) == ["alice", "bob"]
    assert load_user_ids(["x", " y "]) == ["x", "y"]
    with pytest.raises(InvalidInput):
        load_user_ids(tmp_path / "missing.txt")
    with pytest.raises(InvalidInput):
        load_user_ids([])


async def test_migrate_between_milvus_lite_collections(tmp_path):
    """Same Milvus Lite file, one collection per identity (the layout the service uses)."""
    pytest.importorskip("milvus_lite")
    from memory_core.config import MilvusSettings
    from memory_core.stores.factory import physical_name
    from memory_core.stores.milvus import MilvusStore

    uri = str(tmp_path / "memory.db")
    src = MilvusStore(
        MilvusSettings(uri=uri, collection=physical_name("agentic_memory", "aaaaaaaaaaaa")),
        embed=fake_embed(8),
        dimension=8,
        identity="identity-A",
    )
    new_embed = fake_embed(16)
    dst = MilvusStore(
        MilvusSettings(uri=uri, collection=physical_name("agentic_memory", "bbbbbbbbbbbb")),
        embed=new_embed,
        dimension=16,
        identity="identity-B",
    )
    try:
        mems = await _fill(src, "alice", 15)
        await _fill(src, "bob", 2)
        report = await migrate(src, dst, ["alice", "bob"])
        assert report.migrated == 17
        again = await migrate(src, dst, ["alice", "bob"])
        assert again.migrated == 0 and again.skipped_existing == 17
        got = await dst.get(mems[3].id, "alice")
        assert got.content == mems[3].content and np.allclose(got.embedding, new_embed.vec(mems[3].content), atol=1e-5)
        assert (await src.list(ListQuery(user_id="alice", limit=1))).total == 15
    finally:
        await src.close()
        await dst.close()


def test_an_import_for_another_user_records_who_imported_it():
    from memory_core.migration import parse_import_line

    line = '{"content": "I was born in Lisbon.", "created_by_user_id": "mallory"}'
    assert parse_import_line(line, user_id="alice").memory.created_by_user_id == "alice"
    parsed = parse_import_line(line, user_id="alice", created_by="ops")
    assert parsed.memory.user_id == "alice" and parsed.memory.created_by_user_id == "ops"


def test_an_import_counts_its_non_blank_lines_and_refuses_more_than_the_limit():
    lines = ['{"content": "a"}', "", "   ", '{"content": "b"}', "not json", ""]
    assert count_import_lines(lines, 3) == 3  # blank lines cost nothing; a bad line may still write
    with pytest.raises(
        RequestTooLarge, match=r"has 3 lines: the limit is 2 lines per request \(global.limits.import_lines\)"
    ):
        count_import_lines(lines, 2)
    assert count_import_lines([""] * 10_000, 1) == 0
    # an export's end line holds no memory: a file of exactly the limit fits
    end = export_end_line(2)
    assert count_import_lines(['{"content": "a"}', '{"content": "b"}', end], 2) == 2
