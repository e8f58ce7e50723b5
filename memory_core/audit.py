"""The audit log: who did what, when and from where, for every admin action and every access
to another user's memories (``AuditEntry``), kept append-only in SQLite (``AuditLog``).

What enters an entry is metadata only: the actor (user id, role, how it authenticated and the
public id of its API key, never the key), the action (a name of the route, e.g.
``memory.search`` or ``admin.keys.create``), the user whose memories were acted on, the memory
or key id acted on, the outcome (HTTP status and error code), the client address and the
request id. Never memory content, query text, request bodies or keys.

Append-only is enforced by the database itself: triggers abort every ``UPDATE`` and
``DELETE`` on the table (``sqlite3.IntegrityError``), and this module has no method that
changes or removes an entry. Each entry also carries ``digest``, the SHA-256 of the previous
entry's digest and its own fields (a hash chain, as in Certificate Transparency logs), so an
edit made around the triggers (someone writing the file directly) shows in ``AuditLog.verify``.

The file is one node's: ingress replicas on the node share it (WAL mode, appends serialized by
SQLite's write lock); on a cluster each node keeps its own unless ``path`` is on storage every
ingress node mounts.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import AuditUnavailable, InvalidInput
from .sanitize import check_instant
from .sqlite_file import open_sqlite

Credential = Literal["api_key", "bootstrap_key", "trusted_header"]
"""How an actor authenticated: an API key of the key registry, the bootstrap admin key
(``access.api_keys.admin_key_env``), or a trusted gateway's identity headers."""

MAX_AUDIT_PAGE = 500
"""The most entries one ``AuditLog.query`` (one ``GET /v1/admin/audit``) returns."""
DEFAULT_AUDIT_PAGE = 100
GENESIS_DIGEST = "0" * 64
"""The "previous digest" of the first entry."""
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""Stored times: fixed width, UTC, so text order is time order."""


class AuditSettings(BaseModel):
    """``global.audit``: ``path``, the audit log's SQLite file (parent folders are created;
    ``":memory:"`` for tests). Relative paths are relative to the working directory of the
    ingress replicas, like ``access.api_keys.path``."""

    model_config = ConfigDict(extra="forbid")

    path: str = "./data/audit.sqlite"


class Actor(BaseModel):
    """Who acted: ``user_id`` and ``role`` (``user``/``admin``) as the service identified them,
    ``credential`` (how), ``key_id`` (the public id of the API key, ``key_`` + 16 hex; ``None``
    for the bootstrap key and gateway identities)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: str = Field(min_length=1)
    role: str
    credential: Credential
    key_id: str | None = None


MAX_SEQUENCE = 2**63 - 1
"""SQLite's largest integer: the largest cursor."""


def _utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive datetime is taken as UTC. Raises ``ValueError`` for a time
    that has no UTC equivalent (year 1 or 9999 shifted past the calendar)."""
    try:
        return check_instant(value)
    except InvalidInput as e:
        raise ValueError(str(e)) from None


def _stored_time(value: datetime) -> str:
    return _utc(value).strftime(_TIME_FORMAT)


class AuditEntry(BaseModel):
    """One audited request.

    ``sequence``: its position in the log (1, 2, ...; ``None`` before it is appended);
    ``time``: when the request was answered (UTC, microseconds); ``actor``; ``action`` (the
    route's name, ``deployments.http.audit_hook.ACTIONS``); ``target_user_id``: the owner of
    the memories acted on when it is not the actor (or the user a key is created for);
    ``target``: the memory id or key id acted on; ``status``: the HTTP status answered;
    ``error_code``: the error body's ``code`` for an error status; ``client_address``: the
    client as the trusted proxies report it (``X-Forwarded-For``), else the peer;
    ``peer_address``: the TCP peer; ``request_id``: Serve's request id (``x-request-id``);
    ``digest``: the hash chain's SHA-256 (hex), set by ``AuditLog.append``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sequence: int | None = None
    time: datetime
    actor: Actor
    action: str = Field(min_length=1, max_length=128)
    target_user_id: str | None = None
    target: str | None = Field(default=None, max_length=256)
    status: int = Field(ge=100, le=599)
    error_code: str | None = Field(default=None, max_length=64)
    client_address: str | None = Field(default=None, max_length=64)
    peer_address: str | None = Field(default=None, max_length=64)
    request_id: str | None = Field(default=None, max_length=128)
    digest: str | None = None

    @field_validator("time")
    @classmethod
    def _in_utc(cls, value: datetime) -> datetime:
        return _utc(value)


class AuditQuery(BaseModel):
    """A page of ``AuditLog.query``: entries newest first, filtered by ``actor`` (the actor's
    user id), ``target_user`` (``target_user_id``), ``action`` (exact name), ``since``
    (inclusive) and ``until`` (exclusive; naive datetimes are UTC); ``cursor``: the
    ``next_cursor`` of the previous page (entries with a smaller sequence); ``limit``: 1 to
    ``MAX_AUDIT_PAGE``. Raises ``pydantic.ValidationError`` for values out of these bounds."""

    model_config = ConfigDict(extra="forbid")

    actor: str | None = Field(default=None, min_length=1, max_length=256)
    target_user: str | None = Field(default=None, min_length=1, max_length=256)
    action: str | None = Field(default=None, min_length=1, max_length=128)
    since: datetime | None = None
    until: datetime | None = None
    cursor: int | None = Field(default=None, gt=0, le=MAX_SEQUENCE)
    limit: int = Field(default=DEFAULT_AUDIT_PAGE, gt=0, le=MAX_AUDIT_PAGE)

    @field_validator("since", "until")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _utc(value)


class AuditPage(BaseModel):
    """One page of entries, newest first, and ``next_cursor`` (pass it as the next query's
    ``cursor``; ``None`` on the last page): ``AuditLog.query``'s answer and the body of
    ``GET /v1/admin/audit``."""

    entries: list[AuditEntry]
    next_cursor: int | None = None


_COLUMNS = (
    "sequence",
    "time",
    "actor_user_id",
    "actor_role",
    "actor_credential",
    "actor_key_id",
    "action",
    "target_user_id",
    "target",
    "status",
    "error_code",
    "client_address",
    "peer_address",
    "request_id",
    "digest",
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_log (
    sequence INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    actor_user_id TEXT NOT NULL,
    actor_role TEXT NOT NULL,
    actor_credential TEXT NOT NULL,
    actor_key_id TEXT,
    action TEXT NOT NULL,
    target_user_id TEXT,
    target TEXT,
    status INTEGER NOT NULL,
    error_code TEXT,
    client_address TEXT,
    peer_address TEXT,
    request_id TEXT,
    digest TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_actor ON audit_log (actor_user_id, sequence);
CREATE INDEX IF NOT EXISTS audit_by_target_user ON audit_log (target_user_id, sequence);
CREATE INDEX IF NOT EXISTS audit_by_action ON audit_log (action, sequence);
CREATE INDEX IF NOT EXISTS audit_by_time ON audit_log (time);
CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: entries cannot be changed'); END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: entries cannot be deleted'); END;
"""


def entry_digest(previous: str, entry: AuditEntry) -> str:
    """The hash chain's link of ``entry``: SHA-256 (hex) of ``previous`` (the prior entry's
    digest, ``GENESIS_DIGEST`` for the first) and the entry's fields but ``digest`` (canonical
    JSON, sorted keys)."""
    fields = entry.model_dump(mode="json", exclude={"digest"})
    fields["time"] = _stored_time(entry.time)
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256((previous + canonical).encode("utf-8")).hexdigest()


def _row(entry: AuditEntry) -> tuple:
    a = entry.actor
    return (
        entry.sequence,
        _stored_time(entry.time),
        a.user_id,
        a.role,
        a.credential,
        a.key_id,
        entry.action,
        entry.target_user_id,
        entry.target,
        entry.status,
        entry.error_code,
        entry.client_address,
        entry.peer_address,
        entry.request_id,
        entry.digest,
    )


def _entry(row: tuple) -> AuditEntry:
    d = dict(zip(_COLUMNS, row, strict=True))
    actor = Actor(
        user_id=d.pop("actor_user_id"),
        role=d.pop("actor_role"),
        credential=d.pop("actor_credential"),
        key_id=d.pop("actor_key_id"),
    )
    d["time"] = datetime.strptime(d["time"], _TIME_FORMAT).replace(tzinfo=UTC)
    return AuditEntry(actor=actor, **d)


class AuditLog:
    """The append-only audit log in one SQLite file (WAL mode: the ingress replicas of a
    node share it; appends from several connections or processes are serialized by SQLite's
    write lock).

    ``path``: the database file (parent folders are created) or ``":memory:"``;
    ``timeout_s``: how long a write waits for another connection's write lock. Methods are
    thread-safe; ``append`` and ``query`` are one transaction each (well under a millisecond
    on a local disk, plus the commit's fsync). Errors of SQLite (a missing folder, a read-only
    or full disk, a lock held beyond the timeout) raise ``AuditUnavailable``."""

    def __init__(self, path: str | Path, timeout_s: float = 10.0):
        self.path = str(path)
        try:
            self._db = open_sqlite(self.path, timeout_s=timeout_s, durable=True)  # survives a power loss
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise AuditUnavailable(f"audit log {self.path} cannot be opened: {e}") from e
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def check_writable(self) -> None:
        """Take the database's write lock and give it back without writing: raises
        ``AuditUnavailable`` when an append would fail now for a missing, read-only or locked
        file (not for a disk that fills up in between)."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute("ROLLBACK")
            except sqlite3.Error as e:
                raise AuditUnavailable(f"audit log {self.path} is not writable: {e}") from e

    def append(self, entry: AuditEntry) -> AuditEntry:
        """Append ``entry`` (its ``sequence`` and ``digest`` are assigned here; any given are
        ignored): returns the stored entry. Raises ``AuditUnavailable`` when SQLite fails."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    last = self._db.execute(
                        "SELECT sequence, digest FROM audit_log ORDER BY sequence DESC LIMIT 1"
                    ).fetchone()
                    sequence, previous = (last[0] + 1, last[1]) if last else (1, GENESIS_DIGEST)
                    stored = entry.model_copy(update={"sequence": sequence})
                    stored = stored.model_copy(update={"digest": entry_digest(previous, stored)})
                    self._db.execute(
                        f"INSERT INTO audit_log ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                        _row(stored),
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise AuditUnavailable(f"audit log {self.path}: the entry could not be appended: {e}") from e
        return stored

    def query(self, query: AuditQuery) -> AuditPage:
        """One page of entries matching ``query`` (see ``AuditQuery``), newest first, with the
        cursor of the next page. Raises ``AuditUnavailable`` when SQLite fails."""
        where: list[str] = []
        args: list[str | int] = []
        for column, value in (
            ("actor_user_id", query.actor),
            ("target_user_id", query.target_user),
            ("action", query.action),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if query.since is not None:
            where.append("time >= ?")
            args.append(_stored_time(query.since))
        if query.until is not None:
            where.append("time < ?")
            args.append(_stored_time(query.until))
        if query.cursor is not None:
            where.append("sequence < ?")
            args.append(query.cursor)
        sql = f"SELECT {', '.join(_COLUMNS)} FROM audit_log"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY sequence DESC LIMIT ?"
        args.append(query.limit + 1)
        with self._lock:
            try:
                rows = self._db.execute(sql, args).fetchall()
            except sqlite3.Error as e:
                raise AuditUnavailable(f"audit log {self.path} cannot be read: {e}") from e
        entries = [_entry(r) for r in rows[: query.limit]]
        more = len(rows) > query.limit
        return AuditPage(entries=entries, next_cursor=entries[-1].sequence if more and entries else None)

    def verify(self) -> int | None:
        """Walk the hash chain from the first entry: the sequence of the first entry whose
        digest or sequence does not follow (an edit, a removal, an insertion), or ``None``
        when the whole log is intact. Reads every entry (O(entries)); for an operator's
        check, not a request path."""
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM audit_log ORDER BY sequence").fetchall()
        previous, expected = GENESIS_DIGEST, 1
        for row in rows:
            entry = _entry(row)
            if entry.sequence != expected or entry.digest != entry_digest(previous, entry):
                return entry.sequence
            previous, expected = entry.digest or "", expected + 1
        return None
