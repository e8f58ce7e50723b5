"""One way to open the service's own SQLite files (the key database, the event feed and
webhook outbox, the audit log)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def open_sqlite(path: str, *, timeout_s: float = 10.0, durable: bool = False) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (its parent folders created) or to
    ``":memory:"``: usable from any thread (callers hold their own lock), autocommit
    (``isolation_level=None``: callers open their transactions), waiting up to ``timeout_s``
    seconds for another process's lock, the file in WAL mode (readers never block the writer;
    several processes of one node share it). ``durable``: ``synchronous=FULL``, so a committed
    row survives a power loss. Raises ``OSError`` (the folder) or ``sqlite3.Error``."""
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=timeout_s)
    if path != ":memory:":
        db.execute("PRAGMA journal_mode=WAL")
    if durable:
        db.execute("PRAGMA synchronous=FULL")
    return db
