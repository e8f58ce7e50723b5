"""Direct calls into the Milvus Lite engine of this process, for the store's hot calls.

Milvus Lite 3 (``milvus-lite``) is a Python engine: ``pymilvus.MilvusClient("<file>.db")``
starts it in this process (``milvus_lite.server_manager``) behind a gRPC server on a loopback
port, and every call is encoded to protobuf, sent over TCP to the server's threads, decoded,
run by the engine (``milvus_lite.Collection``), and the answer encoded and decoded back, all
in this process, under its one GIL. Measured on this 2-core machine (5,000 rows of 384
dimensions; ``benchmarks/lite_engine.py``): a read of one id by key 0.81 ms through the client
against 0.017 ms on the engine, an insert of one row 0.96 against 0.10 ms, an owner's filtered
query 198 against 14 ms. Under 32 concurrent chats the store's single Milvus thread was busy
most of the time, and the writes' commits waited in its queue (p50 40 ms, p95 270 ms a call).

``LiteEngine`` calls the same engine object (``milvus_lite.Collection``: its public API)
directly, for the calls the store makes on every write and read of a user: a read by ids, an
upsert of whole rows, a delete by ids, a scalar query, a filtered vector search. It translates values as the gRPC
server's servicer and pymilvus do, so a row reads the same either way (JSON fields come back
parsed; ``tests/memory_core/stores/test_lite_engine.py`` compares both paths). Everything
else (creating, describing, flushing, migrating collections) stays on the client.

Counting (``tally``) reads the engine's columns instead of its rows: the engine's ``query``
builds a whole dict of every field of every matching row (its vector included) before it
projects the fields asked for, and the gRPC server answers ``count(*)`` with such a query of
every field, so counting 15,000 rows took 560–640 ms either way, holding the process's GIL in
Python all along (``benchmarks/lite_engine.py``, rows "counts"). ``tally`` takes the steps of
``Collection.query`` up to its mask of live, matching rows (the engine's filter compiler, its
segment and MemTable snapshot, the filter evaluation of ``assemble_candidates``,
``build_valid_mask``) and counts the fields' values from the segments' Arrow columns: 7 ms for
the same rows. Those steps are the engine's internals, not its API: ``tally`` checks once that
they are all there, and where one is missing or answers in another shape it counts through the
public ``query`` from then on (``milvus-lite`` is pinned
below its next minor version, and the tests compare both ways with the client's answers).
Callers run it on the store's one worker thread: the engine is not safe for concurrent
writes, and neither path adds a lock.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..errors import StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
OWNER_FIELDS = ("user_id", "state", "memory_type")
"""The fields ``LiteEngine.owner_counts`` counts rows by: owner, lifecycle state, memory type."""


class OwnerCounts:
    """How many live rows of one collection each owner holds, by (state, memory type) as
    stored (a missing value is ``None``), and the same for the whole collection: what the
    admin views read. Built once from the columns (as ``LiteEngine.tally`` counts) and then kept by
    the engine's own writes (each row's stored values before and after), so a view costs
    the owners it asks for, not the collection (``benchmarks/lite_engine.py``, row
    "write+counts"). ``seq`` is the collection's sequence number after the last write counted: a
    write that did not go through ``LiteEngine`` moves it, and the counts are built again."""

    def __init__(self, collection: Any, seq: int, by_owner: dict[Any, Counter[tuple[Any, Any]]]):
        self.collection = collection
        self.seq = seq
        self.by_owner = by_owner
        self.total: Counter[tuple[Any, Any]] = Counter()
        for counts in by_owner.values():
            self.total.update(counts)

    def add(self, owner: Any, state: Any, kind: Any, n: int) -> bool:
        """Count ``n`` more (or, negative, fewer) rows of ``owner`` in (``state``, ``kind``);
        False (nothing changed) where that would leave fewer than none: the counts no longer
        match the collection."""
        counts = self.by_owner.setdefault(owner, Counter())
        if counts[(state, kind)] + n < 0:
            if not counts[(state, kind)]:
                del counts[(state, kind)]
            if not counts:
                del self.by_owner[owner]
            return False
        counts[(state, kind)] += n
        self.total[(state, kind)] += n
        if not counts[(state, kind)]:
            del counts[(state, kind)]
            if not counts:
                del self.by_owner[owner]
        if not self.total[(state, kind)]:
            del self.total[(state, kind)]
        return True


def _unavailable_when_down(method: Callable[Concatenate[LiteEngine, P], T]) -> Callable[Concatenate[LiteEngine, P], T]:
    """``method`` raising ``StoreUnavailable`` (HTTP 503 with ``Retry-After``: the caller may
    try again) when the engine is closed under the store (its server released; also when it
    closes during the call) or its files fail (``OSError``: its write-ahead log, its segments).
    ``ConnectionError`` and ``TimeoutError`` pass unchanged: the store's ``_call`` retries them
    as transient, as it did on the client path."""

    @functools.wraps(method)
    def checked(self: LiteEngine, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if getattr(self._db, "closed", False):
            raise StoreUnavailable("the Milvus Lite engine is closed")
        try:
            return method(self, *args, **kwargs)
        except (ConnectionError, TimeoutError):
            raise
        except OSError as e:
            raise StoreUnavailable(f"Milvus Lite engine: {type(e).__name__}: {e}") from e
        except Exception:
            if getattr(self._db, "closed", False):  # closed while the call ran
                raise StoreUnavailable("the Milvus Lite engine is closed") from None
            raise

    return checked


class LiteEngine:
    """The engine (``milvus_lite.MilvusLite``) that this process's Milvus Lite server for
    ``path`` runs on; ``attach`` finds it. Methods take the collection's name and run on the
    caller's thread (the store's worker thread)."""

    def __init__(self, db: Any, database: str | None = None):
        self._db = db
        self._database = database
        self._column_tally: bool | None = None  # the engine internals ``tally`` reads: checked once
        self._json_by_schema: dict[int, tuple[Any, frozenset[str]]] = {}
        self._owner_counts: dict[str, OwnerCounts] = {}

    @classmethod
    def attach(cls, uri: str, database: str | None = None) -> LiteEngine | None:
        """The engine of the Milvus Lite server that ``MilvusClient(uri)`` started in this
        process, or None when there is none (a server, Milvus Lite in a child process, a
        ``milvus-lite`` whose server manager keeps its servers elsewhere): the caller then
        stays on the client for every call."""
        try:
            from milvus_lite.server_manager import server_manager_instance

            # the key the manager files it under: pymilvus hands it the uri as configured
            entry = server_manager_instance._servers.get(os.path.abspath(uri))
        except Exception:  # another milvus-lite: no such manager or registry
            return None
        if not isinstance(entry, tuple) or len(entry) != 3 or not hasattr(entry[1], "get_collection"):
            return None
        return cls(entry[1], database)

    def _collection(self, name: str) -> Any:
        if self._database:
            return self._db.get_collection(name, database_name=self._database)
        return self._db.get_collection(name)

    def _json_fields(self, collection: Any) -> frozenset[str]:
        """The names of ``collection``'s JSON fields, read once per schema object (a
        collection created again under its name brings a new one)."""
        from milvus_lite import DataType

        schema = collection.schema
        known = self._json_by_schema.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        fields = frozenset(f.name for f in schema.fields if f.dtype == DataType.JSON)
        self._json_by_schema[id(schema)] = (schema, fields)
        return fields

    def _parsed(self, collection: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` as pymilvus returns them: JSON fields parsed (the engine keeps their text)."""
        fields = self._json_fields(collection)
        for row in rows:
            for name in fields:
                value = row.get(name)
                if isinstance(value, (str, bytes)):
                    try:
                        row[name] = json.loads(value)
                    except ValueError:  # as the client: a malformed value passes as text
                        pass
        return rows

    @_unavailable_when_down
    def get(self, name: str, ids: Sequence[str], fields: Sequence[str]) -> list[dict[str, Any]]:
        """The rows of ``ids`` that exist (``fields`` of each, the id always), by primary key."""
        collection = self._collection(name)
        return self._parsed(collection, collection.get(list(ids), output_fields=list(fields)))

    @_unavailable_when_down
    def query(self, name: str, expr: str, fields: Sequence[str]) -> list[dict[str, Any]]:
        """Every row matching the filter ``expr`` (``fields`` of each), in primary-key order
        (as the client's query iterator reads them)."""
        collection = self._collection(name)
        return self._parsed(collection, collection.query(expr, output_fields=list(fields), order_by_pk=True))

    @_unavailable_when_down
    def search(
        self, name: str, vector: Sequence[float], k: int, expr: str, fields: Sequence[str], field: str, ef: int
    ) -> list[tuple[float, dict[str, Any]]]:
        """The ``k`` rows nearest ``vector`` by cosine on the vector ``field`` among those
        matching ``expr``: (similarity, ``fields`` of the row and its primary key, as the
        client's hits carry it) each, nearest first (HNSW's ``ef`` as the client's
        ``search_params``)."""
        collection = self._collection(name)
        (hits,) = collection.search(
            query_vectors=[list(vector)],
            top_k=k,
            metric_type=collection.resolve_search_metric(field, "COSINE"),
            expr=expr,
            output_fields=list(fields),
            anns_field=field,
            search_params={"ef": ef},  # the index's own parameters, as the gRPC server hands them on
        )
        pk = collection.pk_field
        entities = self._parsed(collection, [{**(hit.get("entity") or {}), pk: hit["id"]} for hit in hits])
        return [(float(hit["distance"]), entity) for hit, entity in zip(hits, entities, strict=True)]

    @_unavailable_when_down
    def upsert(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Write whole ``rows`` in place of the rows of the same ids (new ids are inserted);
        the owner counts follow (see ``owner_counts``)."""
        collection = self._collection(name)
        self._counted_write(
            name, collection, rows, lambda: collection.upsert([dict(r) for r in rows], partition_name="_default")
        )

    @_unavailable_when_down
    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Delete the rows of ``ids`` (absent ids are no error); the owner counts follow."""
        if ids:
            collection = self._collection(name)
            self._counted_write(
                name,
                collection,
                [{collection.pk_field: i} for i in ids],
                lambda: collection.delete(list(ids)),
                delete=True,
            )

    def _counted_write(
        self, name: str, collection: Any, rows: list[dict[str, Any]], write: Callable[[], Any], delete: bool = False
    ) -> None:
        """Run ``write`` (an upsert of ``rows``, or with ``delete`` a delete of their ids) and
        keep ``name``'s owner counts, where they are kept and current: the rows' stored
        values are read by key before (what the write replaces or removes) and the written
        values counted after (a field a row leaves out keeps its stored value, as the
        engine's upsert merges). The counts are dropped (the next read builds them again
        from the columns) where they could go wrong: a write that raises (it may have landed
        in part), a batch that names an id twice (the engine writes the rows of each
        partition-key bucket in turn, so the last row need not be the one kept), a read
        before the write that fails, a write after which the sequence number is not where
        this write alone puts it (another writer in between), a count that would go below
        none."""
        counts = self._owner_counts.pop(name, None)  # put back only once this write is counted
        start = getattr(collection, "_next_seq", None)
        if counts is None or counts.collection is not collection or counts.seq != start:
            write()
            return
        pk = collection.pk_field
        latest = {row[pk]: row for row in rows}
        try:
            before = {r[pk]: r for r in collection.get(list(latest), output_fields=list(OWNER_FIELDS))}
        except Exception as e:  # e.g. a released collection: its write decides, uncounted
            log.info("owner counts of %s dropped: the rows could not be read before a write (%s)", name, e)
            write()
            return
        write()
        moved = 1 if delete else len(rows)  # a delete takes one sequence number, a row one each
        if (not delete and len(latest) != len(rows)) or collection._next_seq != start + moved:
            return
        for key, row in latest.items():
            old = before.get(key)
            if old is not None and not counts.add(old.get("user_id"), old.get("state"), old.get("memory_type"), -1):
                log.warning("owner counts of %s did not match the collection: counted again on the next read", name)
                return
            if not delete:
                new = {f: row[f] if f in row else (old or {}).get(f) for f in OWNER_FIELDS}
                counts.add(new["user_id"], new["state"], new["memory_type"], 1)
        counts.seq = collection._next_seq
        self._owner_counts[name] = counts

    @_unavailable_when_down
    def owner_counts(self, name: str) -> OwnerCounts:
        """``name``'s live rows counted by owner, state and memory type (``OwnerCounts``):
        kept by this engine's writes, built from the columns on the first read and after
        any write that did not go through it. Callers only read the answer (it is the kept
        object) and run on the store's worker thread, as every write does."""
        collection = self._collection(name)
        seq = getattr(collection, "_next_seq", None)
        counts = self._owner_counts.get(name)
        if counts is not None and counts.collection is collection and seq is not None and counts.seq == seq:
            return counts
        by_owner: dict[Any, Counter[tuple[Any, Any]]] = {}
        for (owner, state, kind), n in self._tally(collection, "", OWNER_FIELDS).items():
            by_owner.setdefault(owner, Counter())[(state, kind)] = n
        counts = OwnerCounts(collection, seq if seq is not None else -1, by_owner)
        if seq is not None:  # an engine without the sequence number: counted on every read
            self._owner_counts[name] = counts
        else:
            self._owner_counts.pop(name, None)
        return counts

    @_unavailable_when_down
    def tally(self, name: str, expr: str, fields: Sequence[str]) -> Counter[tuple[Any, ...]]:
        """How many live rows match the filter ``expr`` ("" for every row), by the values of
        the scalar ``fields`` (a ``Counter`` of value tuples in the order of ``fields``; a
        missing value is ``None``). Read from the engine's columns without building a row
        (see the module docstring); through the public ``query`` where this ``milvus-lite``
        lacks one of the internals it reads. One pass over the collection: the admin views
        read the kept ``owner_counts`` instead."""
        return self._tally(self._collection(name), expr, fields)

    def _tally(self, collection: Any, expr: str, fields: Sequence[str]) -> Counter[tuple[Any, ...]]:
        if self._column_tally is None:
            self._column_tally = _has_column_internals(collection)
            if not self._column_tally:
                log.warning("milvus-lite %s: counting through its query (no column access)", _lite_version())
        if self._column_tally:
            try:
                return _column_tally(collection, expr, list(fields))
            except (TypeError, ValueError, AttributeError, IndexError) as e:
                if getattr(self._db, "closed", False):
                    raise
                # an internal of another shape (a patch release): the public query from now on
                self._column_tally = False
                log.warning("milvus-lite %s: counting through its query (%s: %s)", _lite_version(), type(e).__name__, e)
        rows = collection.query(expr or None, output_fields=list(fields))
        return Counter(tuple(r.get(f) for f in fields) for r in rows)


def _lite_version() -> str:
    try:
        from milvus_lite import __version__

        return str(__version__)
    except Exception:
        return "?"


def _has_column_internals(collection: Any) -> bool:
    """Whether ``collection`` (and its ``milvus-lite``) has every internal ``_column_tally``
    reads, with the shapes it expects."""
    try:
        from milvus_lite.search.bitmap import build_valid_mask  # noqa: F401
        from milvus_lite.search.filter import evaluate_mask  # noqa: F401
        from milvus_lite.search.indexed_filter import evaluate_segment_filter  # noqa: F401
    except ImportError:
        return False
    needed = ("_require_loaded", "_compile_filter", "_indexed_filter_plan", "_read_snapshot", "_memtable")
    return all(hasattr(collection, a) for a in needed) and hasattr(collection._memtable, "to_search_snapshot")


def _column_tally(collection: Any, expr: str, fields: list[str]) -> Counter[tuple[Any, ...]]:
    """``LiteEngine.tally`` from the columns: ``Collection.query``'s steps up to its mask
    (milvus-lite 3.2, ``engine/collection.py``), then the fields' values of the masked rows."""
    import numpy as np
    import pyarrow as pa
    from milvus_lite.search.bitmap import build_valid_mask
    from milvus_lite.search.filter import evaluate_mask
    from milvus_lite.search.indexed_filter import evaluate_segment_filter

    collection._require_loaded()
    compiled = collection._compile_filter(expr) if expr else None
    plan = collection._indexed_filter_plan(compiled) if compiled is not None else None
    segments, deltas = collection._read_snapshot()
    pks: list[Any] = []
    seqs: list[np.ndarray] = []
    matches: list[np.ndarray] = []
    columns: list[list[pa.ChunkedArray | pa.Array]] = []

    def values(table: pa.Table, rows: int) -> list[pa.ChunkedArray | pa.Array]:
        names = set(table.column_names)
        return [table.column(f) if f in names else pa.nulls(rows) for f in fields]

    for seg in segments:
        if seg.num_rows == 0:
            continue
        pks.extend(seg.pks)
        seqs.append(np.asarray(seg.seqs, dtype=np.uint64))
        if compiled is not None:
            matches.append(np.asarray(evaluate_segment_filter(seg, compiled, plan), dtype=bool))
        columns.append(values(seg.table, seg.num_rows))
    # the MemTable's rows and their table, aligned (taken under its lock); no vector is turned
    # into a list (the table still carries every column)
    mt_pks, mt_seqs, _, _, mt_table = collection._memtable.to_search_snapshot(vector_field=None, include_table=True)
    if mt_pks:
        pks.extend(mt_pks)
        seqs.append(np.asarray(mt_seqs, dtype=np.uint64))
        if compiled is not None:
            matches.append(np.asarray(evaluate_mask(compiled, mt_table), dtype=bool))
        columns.append(values(mt_table, len(mt_pks)))
    if not pks:
        return Counter()
    live = build_valid_mask(
        pks,
        np.concatenate(seqs),
        deltas,
        filter_mask=np.concatenate(matches) if compiled is not None else None,
        memtable=collection._memtable,
    )
    keep = pa.array(live)
    merged = [_one_type([c for part in columns for c in _chunks(part[i])]) for i in range(len(fields))]
    table = pa.table({f"f{i}": col for i, col in enumerate(merged)}).filter(keep)
    if table.num_rows == 0:
        return Counter()
    grouped = table.group_by([f"f{i}" for i in range(len(fields))], use_threads=False).aggregate([([], "count_all")])
    keys = [grouped.column(f"f{i}").to_pylist() for i in range(len(fields))]
    counts = grouped.column("count_all").to_pylist()
    return Counter({tuple(k[j] for k in keys): int(n) for j, n in enumerate(counts)})


def _chunks(column: Any) -> list[Any]:
    return list(column.chunks) if hasattr(column, "chunks") else [column]


def _one_type(chunks: list[Any]) -> Any:
    """``chunks`` as one chunked array, each cast to the first type that is not null (a
    field missing from a segment reads as nulls; string and large string may both occur)."""
    import pyarrow as pa

    kind = next((c.type for c in chunks if not pa.types.is_null(c.type)), pa.null())
    return pa.chunked_array([c if c.type == kind else c.cast(kind) for c in chunks], type=kind)
