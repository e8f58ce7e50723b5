"""``memory_core.audit.AuditLog``: append, filters, cursor pagination, the database refusing
UPDATE and DELETE itself, appends from two connections, the hash chain."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory_core.audit import (
    MAX_AUDIT_PAGE,
    Actor,
    AuditEntry,
    AuditLog,
    AuditQuery,
)
from memory_core.errors import AuditUnavailable

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
ADMIN = Actor(user_id="ops", role="admin", credential="api_key", key_id="key_0123456789abcdef")
ALICE = Actor(user_id="alice", role="user", credential="trusted_header")


def entry(actor: Actor = ADMIN, action: str = "memory.search", minutes: int = 0, **fields) -> AuditEntry:
    return AuditEntry(time=T0 + timedelta(minutes=minutes), actor=actor, action=action, status=200, **fields)


@pytest.fixture
def audit(tmp_path):
    log = AuditLog(tmp_path / "nested" / "audit.sqlite")
    yield log
    log.close()


def test_append_assigns_sequences_and_round_trips_every_field(audit):
    first = audit.append(
        entry(
            target_user_id="alice",
            target="key_0123456789abcdef",
            error_code=None,
            client_address="203.0.113.7",
            peer_address="127.0.0.1",
            request_id="req-1",
        )
    )
    second = audit.append(entry(ALICE, "admin.stats", 1, error_code="forbidden"))
    assert (first.sequence, second.sequence) == (1, 2)
    page = audit.query(AuditQuery())
    assert [e.sequence for e in page.entries] == [2, 1]  # newest first
    assert page.entries[1] == first
    assert page.entries[1].time == T0 and page.entries[1].time.tzinfo is not None
    assert page.entries[0].actor == ALICE and page.entries[0].error_code == "forbidden"
    assert page.next_cursor is None


def test_naive_and_offset_times_are_stored_in_utc(audit):
    plus_two = timezone(timedelta(hours=2))
    stored = audit.append(
        AuditEntry(time=datetime(2026, 3, 1, 16, 0, tzinfo=plus_two), actor=ADMIN, action="a", status=200)
    )
    assert stored.time == datetime(2026, 3, 1, 14, 0, tzinfo=UTC) and stored.time.utcoffset() == timedelta(0)
    assert audit.query(AuditQuery()).entries[0].time == stored.time
    naive = AuditQuery(since=datetime(2026, 3, 1, 14, 0))  # taken as UTC
    assert [e.sequence for e in audit.query(naive).entries] == [stored.sequence]


def test_filters_by_actor_target_user_action_and_time_window(audit):
    audit.append(entry(ADMIN, "memory.search", 0, target_user_id="alice"))
    audit.append(entry(ADMIN, "admin.stats", 10))
    audit.append(entry(ALICE, "memory.list", 20, target_user_id="bob"))
    audit.append(entry(ADMIN, "memory.search", 30, target_user_id="bob"))

    def seqs(**filters) -> list[int]:
        return [e.sequence or 0 for e in audit.query(AuditQuery(**filters)).entries]

    assert seqs(actor="ops") == [4, 2, 1]
    assert seqs(actor="alice") == [3]
    assert seqs(target_user="bob") == [4, 3]
    assert seqs(action="memory.search") == [4, 1]
    assert seqs(action="memory.search", target_user="alice") == [1]
    assert seqs(since=T0 + timedelta(minutes=10)) == [4, 3, 2]  # since: inclusive
    assert seqs(until=T0 + timedelta(minutes=20)) == [2, 1]  # until: exclusive
    assert seqs(since=T0 + timedelta(minutes=5), until=T0 + timedelta(minutes=25), actor="ops") == [2]
    assert seqs(actor="nobody") == []


def test_cursor_pages_cover_every_match_once_while_entries_are_appended(audit):
    for i in range(7):
        audit.append(entry(minutes=i, action="memory.get" if i % 2 else "memory.list"))
    seen: list[int] = []
    cursor = None
    while True:
        page = audit.query(AuditQuery(action="memory.list", cursor=cursor, limit=2))
        seen += [e.sequence or 0 for e in page.entries]
        audit.append(entry(minutes=100, action="memory.list"))  # newer: never in a later page
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [7, 5, 3, 1]


def test_page_size_is_bounded():
    with pytest.raises(ValueError):
        AuditQuery(limit=MAX_AUDIT_PAGE + 1)
    with pytest.raises(ValueError):
        AuditQuery(limit=0)


def test_the_database_refuses_update_and_delete_itself(audit, tmp_path):
    audit.append(entry())
    audit.append(entry(minutes=1))
    raw = sqlite3.connect(audit.path)  # another connection, as anyone with the file would open it
    try:
        for sql in (
            "UPDATE audit_log SET actor_user_id = 'someone-else'",
            "UPDATE audit_log SET status = 200 WHERE sequence = 1",
            "DELETE FROM audit_log WHERE sequence = 1",
            "DELETE FROM audit_log",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                raw.execute(sql)
            raw.rollback()
    finally:
        raw.close()
    assert [e.actor.user_id for e in audit.query(AuditQuery()).entries] == ["ops", "ops"]
    assert not any(name in dir(AuditLog) for name in ("update", "delete", "remove", "clear"))


def test_appends_from_two_connections_get_distinct_sequences_and_one_chain(tmp_path):
    path = tmp_path / "audit.sqlite"
    logs = [AuditLog(path), AuditLog(path)]  # two ingress replicas on one node
    per_writer = 60

    def write(log: AuditLog, who: str) -> None:
        for i in range(per_writer):
            log.append(entry(Actor(user_id=who, role="admin", credential="api_key"), minutes=i))

    threads = [threading.Thread(target=write, args=(log, f"w{n}")) for n, log in enumerate(logs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = []
    cursor = None
    while True:
        page = logs[0].query(AuditQuery(cursor=cursor, limit=MAX_AUDIT_PAGE))
        everything += page.entries
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(e.sequence or 0 for e in everything) == list(range(1, 2 * per_writer + 1))
    assert {e.actor.user_id for e in everything} == {"w0", "w1"}
    assert logs[1].verify() is None
    for log in logs:
        log.close()


def test_the_hash_chain_shows_an_edit_made_around_the_triggers(audit):
    for i in range(3):
        audit.append(entry(minutes=i))
    assert audit.verify() is None
    raw = sqlite3.connect(audit.path)
    raw.execute("DROP TRIGGER audit_log_no_update")  # someone with write access to the file
    raw.execute("UPDATE audit_log SET target_user_id = 'mallory' WHERE sequence = 2")
    raw.commit()
    raw.close()
    assert audit.verify() == 2


def test_an_unwritable_log_raises_audit_unavailable(tmp_path):
    path = tmp_path / "audit.sqlite"
    log = AuditLog(path, timeout_s=0.05)
    log.append(entry())
    locker = sqlite3.connect(path, timeout=0)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        with pytest.raises(AuditUnavailable):
            log.check_writable()
        with pytest.raises(AuditUnavailable):
            log.append(entry(minutes=1))
    finally:
        locker.rollback()
        locker.close()
    log.check_writable()
    assert log.append(entry(minutes=2)).sequence == 2  # nothing half-written by the failed append
    log.close()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(AuditUnavailable):  # its folder would have to be inside a file
        AuditLog(tmp_path / "a-file" / "audit.sqlite")


def test_entries_hold_no_free_text_fields():
    """The entry's fields are identifiers, addresses and codes: there is no field a request
    body, a memory's content or a key could be put in."""
    assert set(AuditEntry.model_fields) == {
        "sequence",
        "time",
        "actor",
        "action",
        "target_user_id",
        "target",
        "status",
        "error_code",
        "client_address",
        "peer_address",
        "request_id",
        "digest",
    }
    assert set(Actor.model_fields) == {"user_id", "role", "credential", "key_id"}
