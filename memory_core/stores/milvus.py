"""Milvus backend: Milvus Lite (embedded, ``uri`` is a file path) or a Milvus server
(``uri`` is ``http(s)://host:port``), through the official ``pymilvus.MilvusClient``.

Layout of the collection (one row per memory):

============== ================ =====================================================
field          type             notes
============== ================ =====================================================
id             VARCHAR(128)     primary key
user_id        VARCHAR(1024)    partition key (Milvus prunes partitions by it)
project_id     VARCHAR, null    filter
memory_type    VARCHAR(32)      filter
content        VARCHAR(65535)   ≤ 16 KB UTF-8 by the sanitizer
created_at ..  INT64            epoch milliseconds (last_accessed nullable)
metadata       JSON
embedding      FLOAT_VECTOR     HNSW index, COSINE metric (Milvus Lite 3.2 accepts both)
============== ================ =====================================================

Null values: fields marked ``null`` above are nullable where the server has nullable fields
(Milvus 2.5+, Milvus Lite 3). A server without them (Milvus 2.3/2.4 ignores the flag and
refuses a missing value) gets a collection whose fields are not nullable; the store then
writes the sentinels ``""`` (VARCHAR) and ``NULL_MS`` (INT64), which no valid value equals
(ids are non-empty, times are after year 1), and reads both back as ``None``; such a server
also keeps only objects in JSON fields, so ``merged_from`` is stored as ``{"ids": [...]}``.
The choice follows the collection as the server describes it, so a collection keeps working
wherever it is opened.

Partition key: ``user_id`` is the collection's partition key, so a Milvus server hashes
each user to one of ``num_partitions`` partitions and a search filtered on ``user_id ==``
reads that partition only. Milvus Lite 3 keeps 16 buckets but searches all of them.

Credentials and TLS (servers): the token (or ``user`` + password) is read from the
environment variable the configuration names when the store opens
(``memory_core.stores.credentials``) and never appears in logs or errors.

Every value that enters a Milvus expression goes through :func:`milvus_literal` (the one
escaping helper of this backend; Milvus Lite has no expression templates), ids included:
reads and deletes by id use ``id in [...]`` expressions built here (with the owner's
``user_id`` too), never ``MilvusClient.get(ids=...)``/``delete(ids=...)``, which splice the
ids into an expression unescaped. pymilvus is synchronous and one client is not documented as thread-safe, so all
client calls run on one dedicated worker thread (off the event loop, serialized, FIFO: the
final ``client.close()`` is queued behind any call still running). Transient errors are
retried a bounded number of times with exponential backoff, then raise
``StoreUnavailable``. Results are converted to plain Python data right away (pymilvus
result objects do not pickle).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import MilvusSettings, is_milvus_lite
from ..errors import ConfigError, StoreUnavailable
from ..types import ListResult, Memory, MemoryCounts, MemoryState, MemoryType, RetrieveOptions, ScoredMemory
from ._records import (
    LIFECYCLE_FIELDS,
    decode_rows,
    lifecycle_fields,
    memory_from_fields,
    record_fields,
    rows_newest_first,
    to_ms,
)
from .base import MemoryStore, candidate_count
from .credentials import secret_from_env
from .lite_engine import LiteEngine

if TYPE_CHECKING:
    from pymilvus import MilvusClient

    from .lite_process import LiteServer

log = logging.getLogger(__name__)

_VECTOR_FIELD = "embedding"
_SCALAR_FIELDS = [
    "id",
    "user_id",
    "project_id",
    "memory_type",
    "content",
    "source",
    "created_via",
    "conversation_id",
    "created_by_user_id",
    "created_at",
    "updated_at",
    "last_accessed",
    "access_count",
    "importance",
    "metadata",
    "embedding_identity",
    *LIFECYCLE_FIELDS,
]
_ALL_FIELDS = _SCALAR_FIELDS + [_VECTOR_FIELD]
_QUERY_BATCH = 4096
LEGACY_UPGRADE_SUFFIX = "_l2"
"""Suffix of the collection a collection from before memory lifecycles is copied into."""
_MAX_TOPK = 16384
NULL_MS = -(2**63)
"""INT64 sentinel of a null time in a collection without nullable fields."""
_NULLABLE_VARCHAR = (
    "project_id",
    "conversation_id",
    "created_by_user_id",
    "embedding_identity",
    "superseded_by",
    "merged_into",
    "state_reason",
)
_NULLABLE_INT64 = ("last_accessed", "valid_from", "valid_to", "expires_at")
TLS_OPTIONS = ("secure", "server_pem_path", "server_name", "ca_pem_path", "client_pem_path", "client_key_path")
"""The ``MilvusSettings`` fields passed to ``pymilvus.MilvusClient`` as they are (when set)."""


def milvus_literal(value: str) -> str:
    """``value`` as a double-quoted Milvus expression string literal: backslash, both quote
    characters and line breaks/tabs escaped, so the value can never end the literal and
    splice its own expression (``x" || user_id != "y`` stays one literal)."""
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("'", "\\'")
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def _filter(
    user_id: str,
    types: tuple[MemoryType, ...] | None,
    project_id: str | None,
    states: tuple[MemoryState, ...] | None = None,
) -> str:
    parts = [f"user_id == {milvus_literal(user_id)}"]
    if project_id is not None:
        parts.append(f"project_id == {milvus_literal(project_id)}")
    if types:
        parts.append("memory_type in [" + ", ".join(milvus_literal(MemoryType(t).value) for t in types) + "]")
    if states:
        parts.append("state in [" + ", ".join(milvus_literal(MemoryState(s).value) for s in states) + "]")
    return " and ".join(parts)


_STATES = {s.value: s for s in MemoryState}
_TYPES = {t.value: t for t in MemoryType}


def _known(state: Any, kind: Any) -> tuple[MemoryState, MemoryType] | None:
    """A row's stored ``state`` and ``memory_type`` as the enums, or None when either is not
    one of their values (a user's counts and totals leave such a row out)."""
    pair = (_STATES.get(str(state)), _TYPES.get(str(kind)))
    return None if pair[0] is None or pair[1] is None else (pair[0], pair[1])


def _ids_filter(ids: list[str], user_id: str | None = None) -> str:
    """``id in [...]`` over escaped literals, and the owner when ``user_id`` is given."""
    expr = "id in [" + ", ".join(milvus_literal(i) for i in ids) + "]"
    return expr if user_id is None else f"{expr} and user_id == {milvus_literal(user_id)}"


def _is_auth_error(exc: BaseException) -> bool:
    """Whether a pymilvus error says the credentials were refused or missing."""
    text = str(exc).lower()
    return any(w in text for w in ("auth", "credential", "password", "unauthenticated", "permission denied"))


def _is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: connection/timeouts and Milvus 'unavailable'/'rate limit'."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        from pymilvus.exceptions import MilvusException, MilvusUnavailableException
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, MilvusUnavailableException):
        return True
    if isinstance(exc, MilvusException):
        text = str(exc).lower()
        return any(w in text for w in ("unavailable", "timeout", "timed out", "rate limit", "connection"))
    return False


def _to_row(memory: Memory) -> dict[str, Any]:
    """The Milvus row of ``memory`` (every record field, the vector as floats), ``None``
    values as they are (``NullableLayout``)."""
    return {**record_fields(memory), _VECTOR_FIELD: [float(x) for x in memory.embedding or []]}


class NullableLayout:
    """How rows are written to a collection with nullable fields (Milvus 2.5+, Milvus Lite):
    ``None`` stored as null, and every write, new rows or replacements, is one upsert
    (idempotent, so a retried call is harmless)."""

    nullable = True

    def fit(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` as this layout stores it (here: unchanged)."""
        return row

    def row(self, memory: Memory) -> dict[str, Any]:
        """The row of ``memory`` in this layout."""
        return self.fit(_to_row(memory))

    def replace(self, client: MilvusClient, name: str, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` (whole records) in place of the records of the same ids."""
        client.upsert(name, rows)

    def add(self, client: MilvusClient, name: str, rows: list[dict[str, Any]], *, first_attempt: bool) -> None:
        """Write ``rows`` whose ids are new (nobody else holds them), unless an earlier attempt
        of this same write (``first_attempt`` False) landed them, with the same content."""
        client.upsert(name, rows)


class SentinelLayout(NullableLayout):
    """How rows are written to a collection of a server before Milvus 2.5 (no nullable
    fields; Milvus 2.3.5 measured).

    Rows: ``None`` in the nullable fields becomes their sentinels, and ``merged_from`` (a
    list) is wrapped as ``{"ids": [...]}`` (such a server stores only objects in JSON fields).

    No upsert: Milvus 2.3.5 upserts rows of a partition-key collection into a partition other
    than the one its partition-key filter reads (measured: rows upserted for ``user_id`` "u"
    were found by ``id in [...]`` but not by ``user_id == "u"``; inserted rows were). So a
    replacement deletes the ids, then inserts the rows. An insert after a delete of the same
    primary keys is a known fault of Milvus 2.x (milvus-io/milvus#21446): on such a server
    replacements (updates, access counts) keep that risk; see README "Stores".

    New rows are inserted, with no delete: a delete of ids followed by their insert lost
    whole batches on Milvus 2.3.5 (a 1,000,000-row load ended with 898,000 rows, no error
    returned). A retry first asks (a Strong ``id in [...]`` query) which ids an earlier
    attempt landed and inserts only the others. An earlier attempt whose insert had not yet
    been assigned a timestamp when this query ran (a client timeout while the server still
    works on it) is not seen, and its rows can end up stored twice."""

    nullable = False

    def fit(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the sentinels and the wrapped ``merged_from``, in place."""
        if isinstance(row.get("merged_from"), list):
            row["merged_from"] = {"ids": row["merged_from"]}
        for name in _NULLABLE_VARCHAR:
            if row.get(name) is None:
                row[name] = ""
        for name in _NULLABLE_INT64:
            if row.get(name) is None:
                row[name] = NULL_MS
        return row

    def replace(self, client: MilvusClient, name: str, rows: list[dict[str, Any]]) -> None:
        """Delete the rows' ids, then insert the rows (see the class)."""
        client.delete(name, filter=_ids_filter([str(r["id"]) for r in rows]))
        client.insert(name, rows)

    def add(self, client: MilvusClient, name: str, rows: list[dict[str, Any]], *, first_attempt: bool) -> None:
        """Insert ``rows``; on a retry only those whose ids no earlier attempt landed (see the
        class)."""
        if not first_attempt:
            held = client.query(
                name, filter=_ids_filter([str(r["id"]) for r in rows]), output_fields=["id"], consistency_level="Strong"
            )
            landed = {str(r["id"]) for r in held}
            rows = [r for r in rows if str(r["id"]) not in landed]
        if rows:
            client.insert(name, rows)


def layout_of(nullable: bool) -> NullableLayout:
    """The layout of a collection that declares nullable fields (``nullable``) or not."""
    return NullableLayout() if nullable else SentinelLayout()


def _from_row(row: dict[str, Any]) -> Memory:
    """The ``Memory`` of a Milvus row (sentinels read as ``None``, a wrapped
    ``merged_from`` unwrapped)."""
    merged = row.get("merged_from")
    if isinstance(merged, dict):
        row["merged_from"] = merged.get("ids") or []
    for name in _NULLABLE_VARCHAR:
        if row.get(name) == "":
            row[name] = None
    for name in _NULLABLE_INT64:
        if row.get(name) == NULL_MS:
            row[name] = None
    return memory_from_fields(row, row.get(_VECTOR_FIELD))


class MilvusStore(MemoryStore):
    """Milvus / Milvus Lite store.

    Args:
        settings: ``config.MilvusSettings``: ``uri`` (Milvus Lite file path or server URL),
            ``collection`` (created when absent, with the layout above), the credentials
            (``token_env``, or ``user`` with ``password_env``: environment variables),
            ``db_name`` (server database; ignored by Milvus Lite), the TLS options (only
            those set are passed to ``pymilvus.MilvusClient``), ``num_partitions``
            (partitions of the ``user_id`` partition key when this store creates the
            collection on a server; ``None``: the server's default) and ``consistency``: the
            consistency level of every read (``Strong``, ``Session``, ``Bounded``,
            ``Eventually``); ``None``: the collection's own level (``Strong`` for the
            collections this store creates). ``Strong`` waits on every read for the server's
            newest time tick, whatever the data. ``Session`` is meant to read this process's
            own writes without that wait, but on Milvus 2.3.5 it did not see deletes at once
            (a forgotten memory was still returned), so it is not the default; choose it only
            on a server where the conformance suite passes with it (README "Stores").
            ``lite_process`` (Milvus Lite): the engine runs in a child process started by
            ``open`` (:class:`~memory_core.stores.lite_process.LiteServer`, reached over loopback
            gRPC) and stopped by ``close``; while it restarts after a crash every call raises
            ``StoreUnavailable``, and the first call after it answers again reconnects
            (``_follow_server``). ``open`` raises ``ConfigError`` when another owner holds the
            directory.
        token: a literal token, for programs that hold one (the configuration never gives
            one: ``token_env``).
        settings_key: the configuration key of ``settings``, named in errors.

        retries: attempts per call on transient errors (≥ 1); ``backoff_s`` is the first
            pause, doubled each retry.
        flush_every: flush (seal the growing segment so the HNSW index covers it) after
            this many written/deleted rows; default 1000 for Milvus Lite, where unsealed
            (growing) data is searched by brute force, and 0 (never; the server seals by
            itself) for a server.
        flush_idle_s: debounced idle flush: once a write leaves rows unflushed, flush when
            no further write has arrived for this many seconds (one background task per
            store; a failed idle flush is logged, not raised). Default 0.5 for Milvus Lite
            (unflushed rows are searched slowly), 0 (disabled) for a server. ``close`` cancels a pending idle flush before closing
            the client; no flush starts once ``close`` has begun.
        flush_idle_min_rows: the idle flush only fires once at least this many rows are
            unflushed (default 100 for Milvus Lite): every flush seals a segment and Milvus
            Lite does not merge them, so flushing a trickle of rows (auto-stored turns,
            access-count updates) would pile up tiny segments and slow every search, while a
            search over < 100 unflushed rows costs little.
        embed, dimension, identity: see :class:`MemoryStore`.

    Opening (``await store.open()`` or the first operation) reads the credentials from the
    environment, connects, creates or checks the collection and loads it (a collection
    reopened from disk must be loaded before search). Raises ``ConfigError`` when a
    credential variable is unset, the server says it refuses the credentials (Milvus 2.3.5
    does not: a wrong password there is a failed connection, ``StoreUnavailable``), or an existing
    collection's vector dimension differs from ``dimension``; ``StoreUnavailable`` when the
    server cannot be reached.
    """

    name = "milvus"

    def __init__(
        self,
        settings: MilvusSettings,
        *,
        token: str | None = None,
        settings_key: str = "global.stores.memory.milvus",
        retries: int = 3,
        backoff_s: float = 0.05,
        flush_every: int | None = None,
        flush_idle_s: float | None = None,
        flush_idle_min_rows: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.settings = settings
        self.uri = settings.uri
        self.collection = settings.collection
        self._retries = max(1, retries)
        self._backoff_s = backoff_s
        lite = is_milvus_lite(settings.uri)
        self._flush_every = (1000 if lite else 0) if flush_every is None else max(0, flush_every)
        self._flush_idle_s = (0.5 if lite else 0.0) if flush_idle_s is None else max(0.0, float(flush_idle_s))
        self._flush_idle_min_rows = (100 if lite else 1) if flush_idle_min_rows is None else max(1, flush_idle_min_rows)
        self._unflushed = 0  # rows written/deleted since the last flush
        self._last_write = 0.0  # loop time of the last write (idle flush debounce)
        self._idle_task: asyncio.Task | None = None
        self.flush_count = 0  # flushes done (any trigger); idle_flush_count: by the idle timer
        self.idle_flush_count = 0
        self._token = token
        self._settings_key = settings_key
        self._tls = {name: getattr(settings, name) for name in TLS_OPTIONS if getattr(settings, name)}
        self._lite = lite
        self._layout: NullableLayout = NullableLayout()  # the collection in use's (set once by _prepare)
        # reads name their consistency level when one is configured (else the collection's
        # own level, Strong for the collections this store creates)
        consistency = settings.consistency
        self._read_level: dict[str, Any] = {} if consistency is None else {"consistency_level": consistency}
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="milvus")
        self._client: MilvusClient | None = None
        # lite_process: the Milvus Lite child (started by _open) and the generation of the
        # child the client is connected to (a restarted child has a new port)
        self._lite_process = lite and settings.lite_process
        # the engine of an in-process Milvus Lite, for the hot calls (set by _open)
        self._engine: LiteEngine | None = None
        self.server: LiteServer | None = None
        self._generation = 0

    @property
    def _conn(self) -> MilvusClient:
        """The client; ``_open`` creates it, and the base class opens the store before any
        other hook runs."""
        assert self._client is not None, "MilvusStore hook called before _open"
        return self._client

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        if self._client is None and self._lite_process:
            self._client = await loop.run_in_executor(self._executor, self._start_server)
        elif self._client is None:
            token = self._credential()
            self._client = await loop.run_in_executor(
                self._executor, self._connect, self.uri, token, self.settings.db_name, self._tls, self._settings_key
            )
            if self._lite and self.settings.lite_engine_calls:
                self._engine = LiteEngine.attach(self.uri, self.settings.db_name)
                if self._engine is None:
                    log.warning("Milvus Lite's engine for %s not found in this process: every call via gRPC", self.uri)
        await loop.run_in_executor(self._executor, self._prepare)

    def _start_server(self) -> MilvusClient:
        """``lite_process``: start the Milvus Lite child on ``uri``'s directory
        (:class:`~memory_core.stores.lite_process.LiteServer`) and connect to it. Raises
        ``ConfigError`` when another owner holds the directory, ``StoreUnavailable`` when the
        child does not start (the child is stopped again when the connection fails)."""
        from .lite_process import LiteServer

        server = LiteServer(self.uri)
        uri = server.start()
        try:
            client = self._connect(uri, None, None, {}, self._settings_key)
        except BaseException:
            server.stop()
            raise
        self.server, self._generation = server, server.current()[1]
        return client

    def _follow_server(self) -> None:
        """Worker thread, before every call (``lite_process``): raise ``StoreUnavailable``
        while the Milvus Lite child restarts; once a new child answers, replace the client
        by one connected to it and load the collection again."""
        server = self.server
        if server is None:
            return
        uri, generation = server.current()
        if generation == self._generation:
            return
        old, self._client = self._client, None
        if old is not None:
            try:
                old.close()
            except Exception as e:  # the dead child's connection: nothing to keep
                log.debug("closing the client of a dead Milvus Lite child: %s", e)
        client = self._connect(uri, None, None, {}, self._settings_key)
        client.load_collection(self.collection)
        self._client, self._generation = client, generation
        log.info("milvus store reconnected to the restarted Milvus Lite server at %s", uri)

    def _on_client(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self._conn.<method>(*args, **kwargs)`` on the client current when the call runs
        (``_follow_server`` may have replaced it since the call was queued)."""
        return getattr(self._conn, method)(*args, **kwargs)

    def _credential(self) -> str | None:
        """The token to connect with: from ``token_env``, else ``user:<password_env>``, else
        the literal ``token``. Raises ``ConfigError`` naming the key and the variable when
        the variable is unset."""
        s = self.settings
        if s.token_env:
            return secret_from_env(s.token_env, f"{self._settings_key}.token_env")
        if s.user and s.password_env:
            return f"{s.user}:{secret_from_env(s.password_env, f'{self._settings_key}.password_env')}"
        return self._token

    # ------------------------------------------------------------------ sync (worker thread)
    @staticmethod
    def _connect(
        uri: str, token: str | None, db_name: str | None, tls: dict[str, Any], settings_key: str
    ) -> MilvusClient:
        """A connected client. Raises ``ConfigError`` when the server refuses the
        credentials, ``StoreUnavailable`` otherwise; the token never appears in either."""
        from pymilvus import MilvusClient

        kwargs: dict[str, Any] = {"uri": uri, **tls}
        if is_milvus_lite(uri):  # a file whose directory must exist
            Path(uri).expanduser().parent.mkdir(parents=True, exist_ok=True)
        if token:
            kwargs["token"] = token
        if db_name:
            kwargs["db_name"] = db_name
        try:
            return MilvusClient(**kwargs)
        except Exception as e:
            text = str(e).replace(token, "***") if token else str(e)
            if _is_auth_error(e):
                raise ConfigError(
                    f"Milvus at {uri} refused the credentials ({text}); check {settings_key}.token_env or "
                    f"{settings_key}.user/password_env"
                ) from None
            raise StoreUnavailable(f"cannot open Milvus at {uri}: {text}") from None

    def _prepare(self) -> None:
        c = self._conn
        name = self.collection
        if not c.has_collection(name):
            self._create(name)
        else:
            self._check_dimension(name)
            if not self._has_lifecycle(name):
                # a collection of the record layout before lifecycles: Milvus Lite cannot add
                # fields, so its rows are copied (once) into ``<name>_l2``, which is used from
                # now on; the old collection is left untouched
                self.collection = f"{name}{LEGACY_UPGRADE_SUFFIX}"
                if not c.has_collection(self.collection):
                    self._create(self.collection)
                    self._copy_legacy(name, self.collection)
        self._layout = layout_of(self._has_nullable(self.collection))
        # a collection reopened from disk (or released) must be loaded before search;
        # loading a loaded collection is a no-op
        c.load_collection(self.collection)

    def _has_nullable(self, name: str) -> bool:
        """Whether collection ``name`` declares its optional fields nullable (``project_id``
        stands for all: they are created together). Logs once when it does not (a server
        without nullable fields: the store writes sentinels)."""
        fields = self._conn.describe_collection(name).get("fields", [])
        nullable = any(f.get("name") == "project_id" and f.get("nullable") for f in fields)
        if not nullable:
            log.info("milvus collection %r has no nullable fields: nulls are stored as sentinels", name)
        return nullable

    def _check_dimension(self, name: str) -> None:
        """Raise ``ConfigError`` unless collection ``name`` holds vectors of this store's
        dimension (a collection filled by another model, or not by this service)."""
        info = self._conn.describe_collection(name)
        dims = [
            int(f.get("params", {}).get("dim", 0)) for f in info.get("fields", []) if f.get("name") == _VECTOR_FIELD
        ]
        if not dims:
            raise ConfigError(
                f"milvus collection {name!r} at {self.uri} has no {_VECTOR_FIELD!r} vector field; "
                "it was not created by this service (choose another milvus.collection)"
            )
        if dims[0] != self.dimension:
            raise ConfigError(
                f"milvus collection {name!r} at {self.uri} holds {dims[0]}-dimensional vectors but the "
                f"embedding model produces {self.dimension}; use another milvus.collection or the model "
                "that filled it"
            )

    def _has_lifecycle(self, name: str) -> bool:
        return any(f.get("name") == "state" for f in self._conn.describe_collection(name).get("fields", []))

    def _copy_legacy(self, legacy: str, target: str) -> None:
        """Copy every row of a ``legacy`` collection (no lifecycle fields) into ``target``, each
        ``active`` and valid from its creation, then check the counts. Raises
        ``ConfigError`` when the copy is incomplete (``target`` is then dropped, so the next
        start copies again)."""
        c = self._conn
        c.load_collection(legacy)
        legacy_fields = [f for f in _SCALAR_FIELDS if f not in LIFECYCLE_FIELDS] + [_VECTOR_FIELD]
        layout = layout_of(self._has_nullable(target))
        it = c.query_iterator(legacy, batch_size=1000, filter='id != ""', output_fields=legacy_fields)
        copied = 0
        try:
            while True:
                batch = it.next()
                if not batch:
                    break
                rows = []
                for r in batch:
                    row = dict(r)
                    row.update(lifecycle_fields(memory_from_fields(row)))
                    row[_VECTOR_FIELD] = [float(x) for x in row[_VECTOR_FIELD]]
                    rows.append(layout.fit(row))
                # as a retry: a start after a failed copy finds rows already there
                layout.add(c, target, rows, first_attempt=False)
                copied += len(rows)
        finally:
            it.close()
        c.flush(target)
        total = int(c.query(legacy, filter="", output_fields=["count(*)"])[0]["count(*)"])
        if copied != total:
            c.drop_collection(target)
            raise ConfigError(f"upgrading milvus collection {legacy!r}: copied {copied} of {total} rows; retry")
        log.warning(
            "milvus collection %r predates memory lifecycles: %d rows copied into %r, which is used from now "
            "on; the old collection is untouched (drop it once satisfied)",
            legacy,
            copied,
            target,
        )

    def _create(self, name: str) -> None:
        """Create collection ``name`` with the record layout of the module docstring."""
        from pymilvus import DataType

        c = self._conn
        s = c.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
        s.add_field("user_id", DataType.VARCHAR, max_length=1024, is_partition_key=True)
        s.add_field("project_id", DataType.VARCHAR, max_length=1024, nullable=True)
        s.add_field("memory_type", DataType.VARCHAR, max_length=32)
        s.add_field("content", DataType.VARCHAR, max_length=65535)
        s.add_field("source", DataType.VARCHAR, max_length=4096)
        s.add_field("created_via", DataType.VARCHAR, max_length=4096)
        s.add_field("conversation_id", DataType.VARCHAR, max_length=1024, nullable=True)
        s.add_field("created_by_user_id", DataType.VARCHAR, max_length=1024, nullable=True)
        s.add_field("created_at", DataType.INT64)
        s.add_field("updated_at", DataType.INT64)
        s.add_field("last_accessed", DataType.INT64, nullable=True)
        s.add_field("access_count", DataType.INT64)
        s.add_field("importance", DataType.DOUBLE)
        s.add_field("metadata", DataType.JSON)
        s.add_field("embedding_identity", DataType.VARCHAR, max_length=256, nullable=True)
        s.add_field("state", DataType.VARCHAR, max_length=32)
        s.add_field("superseded_by", DataType.VARCHAR, max_length=128, nullable=True)
        s.add_field("merged_into", DataType.VARCHAR, max_length=128, nullable=True)
        s.add_field("merged_from", DataType.JSON)
        s.add_field("valid_from", DataType.INT64, nullable=True)
        s.add_field("valid_to", DataType.INT64, nullable=True)
        s.add_field("expires_at", DataType.INT64, nullable=True)
        s.add_field("state_reason", DataType.VARCHAR, max_length=4096, nullable=True)
        s.add_field(_VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=self.dimension)
        index = c.prepare_index_params()
        index.add_index(
            field_name=_VECTOR_FIELD,
            index_type="HNSW",
            metric_type="COSINE",
            params={"M": 16, "efConstruction": 200},
        )
        extra: dict[str, Any] = {}
        if self.settings.num_partitions and not self._lite:
            extra["num_partitions"] = self.settings.num_partitions
        c.create_collection(name, schema=s, index_params=index, consistency_level="Strong", **extra)

    # ------------------------------------------------------------------ plumbing
    async def _call(self, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """Run ``fn`` on the worker thread; retry transient errors with exponential backoff,
        then raise ``StoreUnavailable``."""
        loop = asyncio.get_running_loop()
        delay = self._backoff_s
        for attempt in range(1, self._retries + 1):
            try:
                return await loop.run_in_executor(
                    self._executor, self._following, functools.partial(fn, *args, **kwargs)
                )
            except Exception as e:
                if not _is_transient(e):
                    raise
                if attempt == self._retries:
                    raise StoreUnavailable(f"milvus call {getattr(fn, '__name__', fn)} failed: {e}") from e
                log.warning("milvus transient error (attempt %d/%d): %s", attempt, self._retries, e)
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _following(self, call: Callable[[], Any]) -> Any:
        """``call()`` after ``_follow_server`` (worker thread)."""
        self._follow_server()
        return call()

    def _replace_rows(self, rows: list[dict[str, Any]]) -> None:
        """Write ``rows`` (whole records) in place of the records of the same ids in the
        collection in use, as its layout does (``NullableLayout.replace``; an in-process
        Milvus Lite's engine upserts them directly); idempotent."""
        if self._engine is not None:
            self._engine.upsert(self.collection, rows)
        else:
            self._layout.replace(self._conn, self.collection, rows)

    async def _write_new_rows(self, rows: list[dict[str, Any]]) -> None:
        """Write rows whose ids are new (the base checked no record holds them) as the
        collection's layout does (``NullableLayout.add``); a retry is told it is one, so it
        stays idempotent. Raises ``StoreUnavailable`` like ``_call``."""
        attempts = 0

        def write_new_rows() -> None:
            nonlocal attempts
            attempts += 1
            if self._engine is not None:  # Milvus Lite's layout upserts: idempotent
                self._engine.upsert(self.collection, rows)
            else:
                self._layout.add(self._conn, self.collection, rows, first_attempt=attempts == 1)

        await self._call(write_new_rows)

    def _query_all(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Every row matching ``expr`` (iterator: no 16384-row query window; an in-process
        Milvus Lite's engine answers in one call)."""
        if self._engine is not None:
            return self._engine.query(self.collection, expr, fields)
        it = self._conn.query_iterator(
            self.collection, batch_size=_QUERY_BATCH, filter=expr, output_fields=fields, **self._read_level
        )
        rows: list[dict[str, Any]] = []
        try:
            while True:
                batch = it.next()
                if not batch:
                    break
                rows.extend(dict(r) for r in batch)
        finally:
            it.close()
        return rows

    def _get_sync(self, ids: list[str], fields: list[str], user_id: str | None = None) -> list[dict[str, Any]]:
        """The rows of ``ids`` (of ``user_id`` when given), ``fields`` of each.

        Milvus Lite reads a bare ``id in [...]`` expression by primary key and any other
        expression by walking every row of the collection (measured,
        ``benchmarks/flat_cost.py``: a 5-id read 21 ms at 1,000 rows, 149 ms at 10,000), so
        there the owner is checked here, on the rows read by key (``user_id`` is added to
        the fields read); a server filters on both."""
        by_key = self._lite and user_id is not None
        read_fields = [*fields, "user_id"] if by_key and "user_id" not in fields else fields
        out: list[dict[str, Any]] = []
        for start in range(0, len(ids), 1000):
            batch = ids[start : start + 1000]
            if self._engine is not None:  # by key on the engine, the owner checked here
                rows = self._engine.get(self.collection, batch, read_fields)
                out.extend(r for r in rows if not by_key or r.get("user_id") == user_id)
                continue
            rows = self._conn.query(
                self.collection,
                filter=_ids_filter(batch, None if by_key else user_id),
                output_fields=read_fields,
                limit=len(batch),
                **self._read_level,
            )
            out.extend(dict(r) for r in rows if not by_key or r.get("user_id") == user_id)
        return out

    # ------------------------------------------------------------------ hooks
    async def _exists(self, memory_id: str) -> bool:
        return bool(await self._call(self._get_sync, [memory_id], ["id"]))

    async def _counts(self, user_id: str | None) -> MemoryCounts:
        """On Milvus Lite's engine in this process: the engine's kept ``owner_counts`` (the
        user's, or the collection's), which its writes update, so a read costs the user, not
        the collection (``benchmarks/lite_engine.py``, row "write+counts"). Otherwise, a user:
        one query of the user's ``state`` and ``memory_type`` (the
        partition the user hashes to, as listing reads it), counted here (one query instead
        of seven ``count(*)`` queries per user: ``benchmarks/admin_views.py``); every user:
        one ``count(*)`` query per state and per type (7)."""
        states, kinds = _STATES, _TYPES
        if self._engine is not None:  # the counts the engine keeps as it writes
            engine = self._engine

            def kept() -> list[tuple[tuple[Any, Any], int]]:
                owned = engine.owner_counts(self.collection)
                counts = owned.total if user_id is None else owned.by_owner.get(user_id, Counter())
                return list(counts.items())  # copied on the worker thread, as every write runs

            by_state = {s: 0 for s in MemoryState}
            by_type = {t: 0 for t in MemoryType}
            for (state, kind), n in await self._call(kept):
                if user_id is not None and _known(state, kind) is None:
                    continue  # a user's counts: as the rows read below (both values known)
                if str(state) in states:  # every user's: as the count(*) per state, per type
                    by_state[states[str(state)]] += n
                if str(kind) in kinds:
                    by_type[kinds[str(kind)]] += n
            return MemoryCounts(by_state=by_state, by_type=by_type)
        if user_id is not None:
            rows = await self._call(self._query_all, _filter(user_id, None, None), ["state", "memory_type"])
            known = (_known(r.get("state"), r.get("memory_type")) for r in rows)
            return MemoryCounts.of(pair for pair in known if pair is not None)

        def count(clause: str) -> int:
            rows = self._conn.query(self.collection, filter=clause, output_fields=["count(*)"], **self._read_level)
            return int(rows[0]["count(*)"])

        def counts() -> MemoryCounts:
            return MemoryCounts(
                by_state={s: count(f"state == {milvus_literal(s.value)}") for s in MemoryState},
                by_type={t: count(f"memory_type == {milvus_literal(t.value)}") for t in MemoryType},
            )

        return await self._call(counts)

    async def _totals(self, user_ids: list[str]) -> dict[str, int]:
        """On Milvus Lite's engine in this process: the engine's kept ``owner_counts`` of
        each owner (a lookup per user of the page, not a pass over the collection);
        elsewhere the base's ``_counts`` of each."""
        if self._engine is None:
            return await super()._totals(user_ids)
        engine = self._engine

        def totals() -> dict[str, int]:
            by_owner = engine.owner_counts(self.collection).by_owner
            return {
                u: sum(n for (state, kind), n in by_owner.get(u, {}).items() if _known(state, kind) is not None)
                for u in user_ids
            }  # as ``counts``: a row of an unknown state or type is left out

        return await self._call(totals)

    async def _flush(self) -> None:
        """Flush the collection (seal growing segments) and count it."""
        await self._call(self._on_client, "flush", self.collection)
        self.flush_count += 1

    async def _wrote(self, rows: int) -> None:
        """Count written/deleted rows; flush when ``flush_every`` is reached, else (re)arm
        the idle flush."""
        self._unflushed += rows
        if self._flush_every and self._unflushed >= self._flush_every:
            self._unflushed = 0
            await self._flush()
            return
        if self._flush_idle_s and self._unflushed >= self._flush_idle_min_rows:
            self._last_write = asyncio.get_running_loop().time()
            if self._idle_task is None:
                self._idle_task = asyncio.get_running_loop().create_task(
                    self._idle_flusher(), name=f"milvus-idle-flush-{self.collection}"
                )

    async def _idle_flusher(self) -> None:
        """Background task: sleep until ``flush_idle_s`` have passed since the last write,
        then flush once; ends when nothing is left unflushed, after a failed flush (the next
        write re-arms it) or when the store is closing."""
        loop = asyncio.get_running_loop()
        try:
            while not self._closed and self._unflushed:
                delay = self._last_write + self._flush_idle_s - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                    continue
                pending, self._unflushed = self._unflushed, 0  # writes during the flush count anew
                try:
                    await self._flush()
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self._unflushed += pending
                    log.warning("milvus idle flush of %r failed: %s", self.collection, e)
                    return
                self.idle_flush_count += 1
        finally:
            if self._idle_task is asyncio.current_task():
                self._idle_task = None

    async def _insert(self, memory: Memory) -> None:
        await self._write_new_rows([self._layout.row(memory)])
        await self._wrote(1)

    async def _insert_many(self, memories: list[Memory]) -> None:
        # one write per ≤ 1000 rows (idempotent under retries, like _insert)
        for start in range(0, len(memories), 1000):
            rows = [self._layout.row(m) for m in memories[start : start + 1000]]
            await self._write_new_rows(rows)
            await self._wrote(len(rows))

    async def _replace(self, memory: Memory) -> None:
        await self._call(self._replace_rows, [self._layout.row(memory)])
        await self._wrote(1)

    async def _get_many(self, memory_ids: list[str], user_id: str | None = None) -> list[Memory]:
        return await self._call(self._get_decoded_sync, memory_ids, user_id)

    def _get_decoded_sync(self, memory_ids: list[str], user_id: str | None) -> list[Memory]:
        """``_get_sync`` of every field, decoded into ``Memory`` objects on the worker thread:
        a consolidation pass or a listing page reads up to thousands of records, whose
        decoding on the event loop held it ~10–15 ms (``benchmarks/loop_lag.py``)."""
        rows = self._get_sync(memory_ids, _ALL_FIELDS, user_id)
        return decode_rows(rows, _from_row, backend=self.name, row_id=lambda r: r.get("id"))[0]

    async def _owned_ids(self, memory_ids: list[str], user_id: str) -> list[str]:
        rows = await self._call(self._get_sync, memory_ids, ["id"], user_id)
        return [str(r["id"]) for r in rows]

    def _search_sync(self, expr: str, vector: list[float], k: int) -> list[tuple[float, dict[str, Any]]]:
        if self._engine is not None:
            return self._engine.search(self.collection, vector, k, expr, _SCALAR_FIELDS, _VECTOR_FIELD, max(64, k))
        res = self._conn.search(
            self.collection,
            data=[vector],
            anns_field=_VECTOR_FIELD,
            filter=expr,
            limit=k,
            output_fields=_SCALAR_FIELDS,  # the distance is the similarity: no vectors to ship
            search_params={"metric_type": "COSINE", "params": {"ef": max(64, k)}},
            **self._read_level,
        )
        return [(float(hit["distance"]), dict(hit["entity"])) for hit in res[0]]

    async def _search(self, options: RetrieveOptions, vector: list[float]) -> list[ScoredMemory]:
        k = candidate_count(options, _MAX_TOPK)
        hits = await self._call(
            self._search_sync, _filter(options.user_id, options.types, options.project_id, options.states), vector, k
        )
        out = []
        for distance, entity in hits:
            sim = max(-1.0, min(1.0, distance))  # COSINE metric: "distance" is the similarity
            for memory in decode_rows([entity], _from_row, backend=self.name, row_id=lambda r: r.get("id"))[0]:
                out.append(ScoredMemory(memory=memory, score=sim, similarity=sim))
        return out

    async def _touch(self, increments: dict[str, int], when: datetime) -> None:
        # only rows that still exist are rewritten (the base holds the user's write lock)
        rows = await self._call(self._get_sync, list(increments), _ALL_FIELDS)
        if not rows:
            return
        await self._call(self._touch_rows, rows, increments, to_ms(when))
        await self._wrote(len(rows))

    def _touch_rows(self, rows: list[dict[str, Any]], increments: dict[str, int], stamp: int) -> None:
        """Write ``rows`` (as read) again with their access counts raised by ``increments``
        and ``last_accessed`` = ``stamp`` (ms), on the worker thread (the rows' vectors are
        copied to lists of floats there, not on the event loop). Idempotent under ``_call``'s
        retries: each attempt starts again from the rows as read."""
        out = []
        for row in rows:
            r = dict(row)
            r["access_count"] = int(r.get("access_count") or 0) + increments.get(str(r["id"]), 0)
            r["last_accessed"] = stamp
            r[_VECTOR_FIELD] = [float(x) for x in r[_VECTOR_FIELD]]
            self._layout.fit(r)
            out.append(r)
        self._replace_rows(out)

    async def _list(self, user_id, types, project_id, limit, offset, states) -> ListResult:
        ordered = await self._call(self._ids_newest_first_sync, _filter(user_id, types, project_id, states))
        return await self._page(ordered, offset, limit, user_id)

    def _ids_newest_first_sync(self, expr: str) -> list[str]:
        """The ids of the rows matching ``expr``, newest first, read and ordered on the worker
        thread (ordering a user's 100,000 rows on the loop held it ~75 ms a page)."""
        return rows_newest_first(self._query_all(expr, ["id", "created_at"]))

    async def _scope_ids(self, user_id, types, project_id) -> list[str]:
        rows = await self._call(self._query_all, _filter(user_id, types, project_id), ["id"])
        return [str(r["id"]) for r in rows]

    async def _delete(self, memory_ids: list[str], user_id: str) -> None:
        """Delete those of ``memory_ids`` that ``user_id`` owns. Milvus Lite: the owned ids
        are read by key first, then deleted by key (a delete by a filter with the owner walks
        every row there, as ``_get_sync`` says)."""
        for start in range(0, len(memory_ids), 1000):
            batch = memory_ids[start : start + 1000]
            if self._lite:
                owned = [str(r["id"]) for r in await self._call(self._get_sync, batch, ["id"], user_id)]
                if owned and self._engine is not None:
                    await self._call(self._engine.delete, self.collection, owned)
                elif owned:
                    await self._call(self._on_client, "delete", self.collection, filter=_ids_filter(owned))
            else:
                await self._call(self._on_client, "delete", self.collection, filter=_ids_filter(batch, user_id))
            await self._wrote(len(batch))

    async def _check_connection(self) -> bool:
        try:
            await self._call(self._on_client, "has_collection", self.collection)
            return True
        except Exception as e:
            log.warning("milvus health check failed: %s", e)
            return False

    async def _close(self) -> None:
        loop = asyncio.get_running_loop()
        task, self._idle_task = self._idle_task, None
        if task is not None and not task.done():
            task.cancel()  # a flush already handed to the worker thread still runs before close()
            await asyncio.wait({task})  # never raises the task's outcome
        try:
            if self._client is not None:
                await loop.run_in_executor(self._executor, self._client.close)
        finally:
            try:
                if self.server is not None:
                    await loop.run_in_executor(self._executor, self.server.stop)
            finally:
                self._executor.shutdown(wait=True)
