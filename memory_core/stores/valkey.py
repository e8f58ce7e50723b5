"""Valkey backend with a search module (FT.* commands: valkey-search, or RediSearch in
tests), through the official ``valkey`` asyncio client.

Keys (``P`` = the configured prefix):

- ``P m:<id>``: one HASH per memory; FT index ``index`` over the prefix ``P m:`` with only
  the field types valkey-search implements: TAG ``user_tag``/``project_tag``/``memory_type``
  (CASESENSITIVE), NUMERIC ``created_at``, VECTOR ``embedding`` (FLAT by default, or HNSW;
  COSINE, FLOAT32).
- ``P u:<user_id>``: one ZSET per user, member = memory id, score = ``created_at`` (epoch
  ms), written in the same atomic step as the HASH.

Retrieval is a hybrid KNN query ``(@user_tag:{..} ...)=>[KNN k @embedding $vec AS __dist]``
with DIALECT 2; the COSINE distance is converted to similarity (``1 - distance``).

Per-user cost. Every search is filtered to one user, so the store never needs a graph over
all users' vectors: the default vector index is FLAT, scored only on the rows the filter
selects (valkey-search always pre-filters a FLAT index: ``UsePreFiltering`` in its
``src/query/planner.cc``; RediSearch's own plan on FLAT stayed flat too in the
measurement). With ``knn_prefilter`` (the default) a FLAT index's KNN clause also asks for
``HYBRID_POLICY ADHOC_BF`` where the module parses it (RediSearch; probed when the store
opens; the valkey-search 1.x planner we read does not parse it), so no module heuristic can
fall back to scanning the whole index. A user's search then costs what that user's
memories cost, whatever the total (``benchmarks/stores.py --flat``; figures in the README's
"Measured").
``vector_index: hnsw`` (new indexes; an existing index keeps its algorithm, read from
FT.INFO) suits users holding far more memories each than a scan of their own rows serves
(≫ 100,000); on HNSW the module plans the hybrid query (``EF_RUNTIME``), no pre-filter.

TAG values: valkey-search splits TAG strings on a separator (punctuation only), strips
whitespace and folds case unless CASESENSITIVE, so a raw user id like ``" a"`` or ``"a,b"``
would collide with others. User and project ids are therefore indexed as the lowercase hex
of their UTF-8 bytes (``tag_value``), exact and separator-free, and every value that goes
into a TAG clause also passes :func:`tag_escape` (backslash before every character that is
not an ASCII letter, digit or ``_``). The raw ids are kept in non-indexed HASH fields.

Listing (newest first, exact total) and scope deletion read the per-user ZSET, not FT
queries: valkey-search indexes asynchronously and its non-vector query and SORTBY support
depends on the module version, while the ZSET is exact, consistent with the last write and
sorted server-side (ZREVRANGE orders equal scores by member descending, which is the
contract's tie-break). Filters by type/project on a listing are applied client-side over
the user's ids (HMGET of the two fields).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ..errors import ConfigError, DuplicateMemory, StoreUnavailable
from ..types import ListResult, Memory, MemoryCounts, MemoryState, MemoryType, RetrieveOptions, ScoredMemory
from ._records import (
    decode_rows,
    memory_from_fields,
    newest_first,
    ordered_off_loop,
    record_fields,
    to_ms,
)
from .base import MemoryStore, candidate_count
from .credentials import valkey_client

if TYPE_CHECKING:
    from valkey.asyncio import Valkey
    from valkey.commands.core import AsyncScript

    from ..config import ValkeyConnectionSettings

log = logging.getLogger(__name__)

_NOT_PARSED = ("hybrid_policy", "argument", "parsing", "syntax", "unexpected", "unknown", "invalid")
"""Words of a search module's reply to a KNN clause it cannot parse (RediSearch: "Unknown
argument", "Error parsing vector similarity parameters"; others: "Unexpected"/"Invalid")."""

_MAX_TOPK = 10000
LEGACY_UPGRADE_SUFFIX = "_l2"
"""Suffix of the index that replaces an index from before memory lifecycles (same prefix)."""

# KEYS[1] record key, KEYS[2] user zset; ARGV[1] created_at ms, ARGV[2] id, ARGV[3..] field/value
_INSERT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
"""
# KEYS[1..n] record keys, KEYS[n+1] user zset; ARGV per record: created_at ms, id, c, then c
# field/value items. Writes all records or none; returns 0 when all were written, else the
# (1-based) position of the first record key that exists.
_INSERT_MANY_LUA = """
local n = #KEYS - 1
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return i end
end
local p = 1
for i = 1, n do
  local c = tonumber(ARGV[p + 2])
  redis.call('HSET', KEYS[i], unpack(ARGV, p + 3, p + 2 + c))
  redis.call('ZADD', KEYS[n + 1], ARGV[p], ARGV[p + 1])
  p = p + 3 + c
end
return 0
"""
# KEYS[1] record key; ARGV[1] last_accessed ms
_TOUCH_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'access_count', ARGV[2])
redis.call('HSET', KEYS[1], 'last_accessed', ARGV[1])
return 1
"""


def tag_value(value: str) -> str:
    """Canonical TAG form of a user/project id: lowercase hex of its UTF-8 bytes."""
    return value.encode("utf-8").hex()


def tag_escape(value: str) -> str:
    """``value`` escaped for a TAG clause ``@field:{...}``: a backslash before every
    character that is not an ASCII letter, digit or underscore."""
    return "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "\\" + c for c in value)


def _query_filter(
    user_id: str,
    types: tuple[MemoryType, ...] | None,
    project_id: str | None,
    states: tuple[MemoryState, ...] | None = None,
) -> str:
    parts = [f"@user_tag:{{{tag_escape(tag_value(user_id))}}}"]
    if project_id is not None:
        parts.append(f"@project_tag:{{{tag_escape(tag_value(project_id))}}}")
    if types:
        parts.append("@memory_type:{" + " | ".join(tag_escape(MemoryType(t).value) for t in types) + "}")
    if states:
        parts.append("@state:{" + " | ".join(tag_escape(MemoryState(s).value) for s in states) + "}")
    return "(" + " ".join(parts) + ")"


@overload
def _s(v: None) -> None: ...
@overload
def _s(v: bytes | str) -> str: ...
@overload
def _s(v: bytes | str | None) -> str | None: ...
def _s(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    if isinstance(x, dict):
        return [y for k, v in x.items() for y in (_s(k), *_flatten(v))]
    return [x]


class ValkeyStore(MemoryStore):
    """Valkey + search module store.

    Args:
        url: ``valkey://host:port/db`` (``redis://`` works too).
        prefix: key prefix of this store's keys.
        index: FT index name (created when absent).
        connection: credentials and TLS (``ValkeyConnectionSettings``; its ``url`` is used
            in place of ``url``); ``None``: ``url`` alone, no credentials.
        settings_key: the configuration key of ``connection``, named in errors.
        embed, dimension, identity: see :class:`MemoryStore`.

    Opening (``await store.open()`` or the first operation) reads the password from the
    environment variable ``connection.password_env`` names, then creates the index or checks
    it with FT.INFO: ``ConfigError`` when the variable is missing, the server refuses the
    credentials (or asks for some and none are configured), or the index's vector dimension
    is not ``dimension``; ``StoreUnavailable`` when the server cannot be reached or has no
    search module.
    """

    name = "valkey"

    def __init__(
        self,
        *,
        url: str,
        prefix: str,
        index: str,
        connection: ValkeyConnectionSettings | None = None,
        settings_key: str = "global.stores.memory.valkey",
        knn_prefilter: bool = True,
        vector_index: str = "flat",
        **kwargs,
    ):
        from valkey.exceptions import ConnectionError as ValkeyConnectionError
        from valkey.exceptions import TimeoutError as ValkeyTimeoutError

        from ..config import ValkeyConnectionSettings

        super().__init__(**kwargs)
        # AuthenticationError is a ConnectionError: only reachability errors are "unavailable"
        self.unavailable_errors = (ValkeyConnectionError, ValkeyTimeoutError, OSError)
        self._connection = connection if connection is not None else ValkeyConnectionSettings(url=url)
        self._settings_key = settings_key
        url = self._connection.url
        self.url = url
        self.prefix = prefix
        self.index = index
        self._record_prefix = f"{prefix}m:"
        self._client: Valkey | None = None
        self._insert_script: AsyncScript | None = None
        self._insert_many_script: AsyncScript | None = None
        self._touch_script: AsyncScript | None = None
        self._want_prefilter = knn_prefilter
        if vector_index not in ("flat", "hnsw"):
            raise ConfigError(f"valkey vector_index must be 'flat' or 'hnsw', not {vector_index!r}")
        self.vector_index = vector_index
        self._index_is_hnsw = vector_index == "hnsw"  # of the index in use: read from FT.INFO on open
        self.knn_prefilter = False
        """Whether searches ask the module for the pre-filter (set when the store opens)."""

    @property
    def _conn(self) -> Valkey:
        """The client; ``_open`` creates it, and the base class opens the store before any
        other hook runs."""
        assert self._client is not None, "ValkeyStore hook called before _open"
        return self._client

    # ------------------------------------------------------------------ keys / codec
    def _key(self, memory_id: str) -> str:
        return self._record_prefix + memory_id

    def _user_key(self, user_id: str) -> str:
        return f"{self.prefix}u:{user_id}"

    def _fields(self, memory: Memory) -> dict[str, Any]:
        """The record HASH of ``memory``: the shared record (``_records.record_fields``)
        without its ``None`` fields, ``metadata`` and ``merged_from`` as JSON, ``importance``
        as ``repr`` of the float, the vector as little-endian float32 bytes, and the TAG
        fields the index filters on (``user_tag``, ``project_tag``: ``tag_value``)."""
        record = record_fields(memory)
        f: dict[str, Any] = {k: v for k, v in record.items() if v is not None}
        f["importance"] = repr(record["importance"])
        f["metadata"] = json.dumps(record["metadata"], ensure_ascii=False)
        f["merged_from"] = json.dumps(record["merged_from"])
        f["embedding"] = np.asarray(memory.embedding, dtype="<f4").tobytes()
        f["user_tag"] = tag_value(memory.user_id)
        if memory.project_id is not None:
            f["project_tag"] = tag_value(memory.project_id)
        return f

    @staticmethod
    def _memory(h: dict[bytes, bytes]) -> Memory:
        """The ``Memory`` of a record HASH (``_fields``' inverse, through
        ``_records.memory_from_fields``); an empty ``importance`` reads as the default."""
        fields: dict[str, Any] = {k.decode(): _s(v) for k, v in h.items() if k != b"embedding"}
        fields["metadata"] = json.loads(fields.get("metadata") or "{}")
        fields["merged_from"] = json.loads(fields.get("merged_from") or "[]")
        if not fields.get("importance"):
            fields.pop("importance", None)
        vector = h.get(b"embedding")
        return memory_from_fields(fields, np.frombuffer(vector, dtype="<f4") if vector is not None else None)

    # ------------------------------------------------------------------ open
    async def _open(self) -> None:
        await self._open_index()
        info = await self._conn.execute_command("FT.INFO", self.index)
        self._index_is_hnsw = (self._index_algorithm(info) or self.vector_index) == "hnsw"
        # on HNSW the module plans (EF_RUNTIME): a brute-force pre-filter would bypass the graph
        self.knn_prefilter = self._want_prefilter and not self._index_is_hnsw and await self._module_parses_prefilter()

    async def _module_parses_prefilter(self) -> bool:
        """Whether the search module accepts ``HYBRID_POLICY ADHOC_BF`` in a KNN clause (one
        query on the index whose filter matches nothing). A reply that says the query could
        not be parsed means no; any other error of the server (permissions, a loading index)
        is raised."""
        from valkey.exceptions import ResponseError

        probe = np.zeros(self.dimension, dtype="<f4")
        probe[0] = 1.0
        try:
            await self._conn.execute_command(
                "FT.SEARCH", self.index,
                f"(@user_tag:{{{tag_escape(tag_value('probe'))}}} @state:{{none}})"
                "=>[KNN 1 @embedding $vec HYBRID_POLICY ADHOC_BF AS __dist]",
                "PARAMS", "2", "vec", probe.tobytes(), "LIMIT", "0", "1", "DIALECT", "2",
            )  # fmt: skip
        except ResponseError as e:
            text = str(e).lower()
            if not any(w in text for w in _NOT_PARSED):
                raise
            log.info("valkey search module does not parse HYBRID_POLICY (%s): it plans hybrid KNN itself", e)
            return False
        return True

    async def _open_index(self) -> None:
        from valkey.exceptions import AuthenticationError, ResponseError, ValkeyError

        if self._client is None:
            # explicit timeouts: a bulk write script on a large index can outlast the default
            self._client = valkey_client(
                self._connection, self._settings_key, socket_timeout=30.0, socket_connect_timeout=5.0
            )
            self._insert_script = self._client.register_script(_INSERT_LUA)
            self._insert_many_script = self._client.register_script(_INSERT_MANY_LUA)
            self._touch_script = self._client.register_script(_TOUCH_LUA)
        c = self._client
        try:
            await c.ping()
        except AuthenticationError as e:  # refused or missing credentials (NOAUTH, WRONGPASS)
            raise ConfigError(
                f"Valkey at {self.url} refused the connection's credentials ({e}); check "
                f"{self._settings_key}.username and .password_env"
            ) from e
        except (ValkeyError, OSError) as e:
            raise StoreUnavailable(f"cannot reach Valkey at {self.url}: {e}") from e
        try:
            info = await c.execute_command("FT.INFO", self.index)
        except ResponseError as e:
            text = str(e).lower()
            if "unknown command" in text:
                raise StoreUnavailable(f"Valkey at {self.url} has no search module (FT.* commands)") from e
            if not any(w in text for w in ("unknown index", "no such index", "not found", "does not exist")):
                raise
            info = None
        if info is not None and not self._index_has(info, "state"):
            # an index of the record layout before lifecycles: records get ``state`` (HSETNX
            # active, once: a marker key remembers it), and a second index over the same
            # prefix, ``<index>_l2``, holds the state TAG; the old index is left as it is
            await self._upgrade_legacy(info)
            return
        if info is not None:
            dim = self._index_dimension(info)
            if dim is None:
                raise ConfigError(
                    f"valkey index {self.index!r} at {self.url} has no 'embedding' vector field; it was not "
                    "created by this service (choose another valkey.index)"
                )
            self._check_dimension(dim)
            return
        await self._create_index(self.index)

    def _check_dimension(self, dim: int | None) -> None:
        """Raise ``ConfigError`` unless an existing index's vector dimension ``dim`` is the
        embedding model's (``self.dimension``)."""
        if dim != self.dimension:
            raise ConfigError(
                f"valkey index {self.index!r} at {self.url} holds {dim}-dimensional vectors but the "
                f"embedding model produces {self.dimension}; use another valkey.index/prefix or the model "
                "that filled it"
            )

    async def _create_index(self, name: str) -> None:
        await self._conn.execute_command(
            "FT.CREATE", name, "ON", "HASH", "PREFIX", "1", self._record_prefix,
            "SCHEMA",
            "user_tag", "TAG", "CASESENSITIVE",
            "project_tag", "TAG", "CASESENSITIVE",
            "memory_type", "TAG", "CASESENSITIVE",
            "state", "TAG", "CASESENSITIVE",
            "created_at", "NUMERIC",
            "embedding", "VECTOR", *self._vector_spec(),
        )  # fmt: skip

    def _vector_spec(self) -> list[str]:
        """The ``VECTOR`` attribute's algorithm and parameters for ``FT.CREATE``."""
        common = ["TYPE", "FLOAT32", "DIM", str(self.dimension), "DISTANCE_METRIC", "COSINE"]
        if self.vector_index == "hnsw":
            return ["HNSW", "10", *common, "M", "16", "EF_CONSTRUCTION", "200"]
        return ["FLAT", "6", *common]

    async def _upgrade_legacy(self, info: Any) -> None:
        """Use ``<index>_l2`` (with the state TAG) in place of a legacy index ``info``
        describes, after giving every record of the prefix a ``state`` (``active``) once."""
        from valkey.exceptions import ResponseError

        self._check_dimension(self._index_dimension(info))
        c = self._conn
        marker = f"{self.prefix}layout"
        if await c.get(marker) != b"2":
            keys = [key async for key in c.scan_iter(match=f"{self._record_prefix}*", count=1000)]
            for start in range(0, len(keys), 1000):
                async with c.pipeline(transaction=False) as p:
                    for key in keys[start : start + 1000]:
                        p.hsetnx(key, "state", MemoryState.ACTIVE.value)
                    await p.execute()
            await c.set(marker, b"2")
        self.index = f"{self.index}{LEGACY_UPGRADE_SUFFIX}"
        try:
            await c.execute_command("FT.INFO", self.index)
        except ResponseError:
            await self._create_index(self.index)

    @staticmethod
    def _index_has(info: Any, attribute: str) -> bool:
        """Whether an FT.INFO reply names ``attribute`` among the index's fields."""
        return attribute in [_s(x) if isinstance(x, bytes) else x for x in _flatten(info)]

    @staticmethod
    def _index_dimension(info: Any) -> int | None:
        """Vector dimension of the ``embedding`` attribute in an FT.INFO reply (RediSearch
        and valkey-search shape their replies differently; both name it dim/dimensions)."""
        dim = ValkeyStore._embedding_param(info, ("dim", "dimensions"))
        return None if dim is None else int(dim)

    @staticmethod
    def _index_algorithm(info: Any) -> str | None:
        """``"flat"`` or ``"hnsw"``: the ``embedding`` attribute's algorithm in an FT.INFO
        reply (RediSearch: ``algorithm FLAT``; valkey-search: ``algorithm name FLAT``), or
        None when the reply does not say."""
        flat = ValkeyStore._embedding_items(info)
        for i, item in enumerate(flat):
            if isinstance(item, str) and item.lower() == "algorithm":
                for value in flat[i + 1 : i + 3]:
                    if isinstance(value, str) and value.lower() in ("flat", "hnsw"):
                        return value.lower()
        return None

    @staticmethod
    def _embedding_items(info: Any) -> list[Any]:
        """The flattened FT.INFO reply from the ``embedding`` attribute on."""
        flat = [_s(x) if isinstance(x, bytes) else x for x in _flatten(info)]
        try:
            start = flat.index("attributes")
        except ValueError:
            start = 0
        for i in range(start, len(flat)):
            if flat[i] == "embedding":
                return flat[i:]
        return []

    @staticmethod
    def _embedding_param(info: Any, names: tuple[str, ...]) -> Any:
        """The value after the first of ``names`` in the ``embedding`` attribute, or None."""
        flat = ValkeyStore._embedding_items(info)
        for i in range(len(flat) - 1):
            if isinstance(flat[i], str) and flat[i].lower() in names:
                return flat[i + 1]
        return None

    # ------------------------------------------------------------------ hooks
    async def _exists(self, memory_id: str) -> bool:
        return bool(await self._conn.exists(self._key(memory_id)))

    async def _counts(self, user_id: str | None) -> MemoryCounts:
        """A user: the user's ZSET and each record's ``state``/``memory_type`` (HMGET in one
        pipeline; exact, as listing). Every user: one ``FT.SEARCH <tag clause> LIMIT 0 0``
        per state and per type (7; the module's count of matching keys: valkey-search indexes
        asynchronously, so a write of the last moment may not be counted yet)."""
        if user_id is not None:
            members = await self._conn.zrange(self._user_key(user_id), 0, -1)
            async with self._conn.pipeline(transaction=False) as p:
                for member in members:
                    p.hmget(self._key(_s(member)), ["state", "memory_type"])
                fields = await p.execute()
            states = {s.value: s for s in MemoryState}
            kinds = {t.value: t for t in MemoryType}
            return MemoryCounts.of(
                (states[_s(state) or MemoryState.ACTIVE.value], kinds[_s(kind)])
                for state, kind in fields
                if kind is not None and _s(kind) in kinds and (_s(state) or MemoryState.ACTIVE.value) in states
            )

        async def count(clause: str) -> int:
            reply = await self._conn.execute_command(
                "FT.SEARCH", self.index, clause, "LIMIT", "0", "0", "DIALECT", "2"
            )  # fmt: skip
            if isinstance(reply, dict):  # RESP3
                return int(reply.get(b"total_results") or reply.get("total_results") or 0)
            return int(reply[0])

        return MemoryCounts(
            by_state={s: await count("@state:{" + tag_escape(s.value) + "}") for s in MemoryState},
            by_type={t: await count("@memory_type:{" + tag_escape(t.value) + "}") for t in MemoryType},
        )

    async def _insert(self, memory: Memory) -> None:
        fields = self._fields(memory)
        args: list[Any] = [to_ms(memory.created_at), memory.id]
        for k, v in fields.items():
            args += [k, v]
        assert self._insert_script is not None  # registered by _open, which runs before any hook
        ok = await self._insert_script(keys=[self._key(memory.id), self._user_key(memory.user_id)], args=args)
        if not ok:  # another process inserted this id between the check and the write
            raise DuplicateMemory(f"memory {memory.id!r} already exists")

    async def _insert_many(self, memories: list[Memory]) -> None:
        """One script call: checks that no record key exists, then writes every HASH and the
        user ZSET entries, atomically (all or nothing, also against other processes)."""
        keys = [self._key(m.id) for m in memories] + [self._user_key(memories[0].user_id)]
        args: list[Any] = []
        for m in memories:
            items: list[Any] = []
            for k, v in self._fields(m).items():
                items += [k, v]
            args += [to_ms(m.created_at), m.id, len(items), *items]
        assert self._insert_many_script is not None  # registered by _open, which runs before any hook
        first = await self._insert_many_script(keys=keys, args=args)
        if first:  # another process inserted one of the ids between the check and the write
            raise DuplicateMemory(f"memories already exist: [{memories[int(first) - 1].id!r}]")

    async def _replace(self, memory: Memory) -> None:
        key = self._key(memory.id)
        assert memory.created_at is not None  # a stored record keeps the created_at set by _normalise
        async with self._conn.pipeline(transaction=True) as p:
            p.delete(key)  # drops fields that became None (e.g. project_id)
            p.hset(key, mapping=self._fields(memory))
            p.zadd(self._user_key(memory.user_id), {memory.id: to_ms(memory.created_at)})
            await p.execute()

    async def _hgetall(self, memory_ids: list[str]) -> list[dict[bytes, bytes]]:
        async with self._conn.pipeline(transaction=False) as p:
            for i in memory_ids:
                p.hgetall(self._key(i))
            return await p.execute()

    async def _get_many(self, memory_ids: list[str], user_id: str | None = None) -> list[Memory]:
        held = [h for h in await self._hgetall(memory_ids) if h]
        if user_id is not None:  # the owner from the stored field, before decoding
            owner = user_id.encode("utf-8")
            held = [h for h in held if h.get(b"user_id") == owner]
        return self._decode(held)

    def _decode(self, hashes: list[dict[bytes, bytes]]) -> list[Memory]:
        """``decode_rows`` of record HASHes."""
        return decode_rows(hashes, self._memory, backend=self.name, row_id=lambda h: _s(h[b"id"]))[0]

    async def _owned_ids(self, memory_ids: list[str], user_id: str) -> list[str]:
        async with self._conn.pipeline(transaction=False) as p:
            for i in memory_ids:
                p.hget(self._key(i), "user_id")
            owners = await p.execute()
        owner = user_id.encode("utf-8")
        return [i for i, held in zip(memory_ids, owners, strict=True) if held == owner]

    async def _search(self, options: RetrieveOptions, vector: list[float]) -> list[ScoredMemory]:
        k = candidate_count(options, _MAX_TOPK)
        if self.knn_prefilter:
            plan = "HYBRID_POLICY ADHOC_BF"
        else:  # the module plans; EF_RUNTIME is an HNSW parameter (a FLAT index refuses it)
            plan = f"EF_RUNTIME {max(k, 64)}" if self._index_is_hnsw else ""
        query = (
            f"{_query_filter(options.user_id, options.types, options.project_id, options.states)}"
            f"=>[KNN {k} @embedding $vec {plan} AS __dist]"
        )
        reply = await self._conn.execute_command(
            "FT.SEARCH", self.index, query,
            "PARAMS", "2", "vec", np.asarray(vector, dtype="<f4").tobytes(),
            "RETURN", "1", "__dist",
            "LIMIT", "0", str(k),
            "DIALECT", "2",
        )  # fmt: skip
        hits: list[tuple[str, float]] = []
        for j in range(1, len(reply) - 1, 2):
            key = _s(reply[j])
            attrs = reply[j + 1]
            fields = {_s(attrs[n]): _s(attrs[n + 1]) for n in range(0, len(attrs) - 1, 2)}
            hits.append((key[len(self._record_prefix) :], float(fields["__dist"])))
        if not hits:
            return []
        records = await self._hgetall([h[0] for h in hits])
        out: list[ScoredMemory] = []
        for (_mid, dist), h in zip(hits, records, strict=True):
            if not h:  # deleted between the index answer and the read
                continue
            sim = max(-1.0, min(1.0, 1.0 - dist))  # COSINE distance = 1 - cosine similarity
            out.extend(ScoredMemory(memory=m, score=sim, similarity=sim) for m in self._decode([h]))
        return out

    async def _touch(self, increments: dict[str, int], when: datetime) -> None:
        assert self._touch_script is not None  # registered by _open, which runs before any hook
        stamp = to_ms(when)
        for i, n in increments.items():
            await self._touch_script(keys=[self._key(i)], args=[stamp, n])

    async def _user_ids_filtered(self, user_id: str, types, project_id, states=None) -> list[tuple[int, str]]:
        pairs = await self._conn.zrange(self._user_key(user_id), 0, -1, withscores=True)
        items = [(int(score), _s(member)) for member, score in pairs]
        if not types and project_id is None and not states:
            return items
        async with self._conn.pipeline(transaction=False) as p:
            for _, mid in items:
                p.hmget(self._key(mid), ["memory_type", "project_id", "state"])
            fields = await p.execute()
        wanted = {MemoryType(t).value for t in types} if types else None
        wanted_states = {MemoryState(s).value for s in states} if states else None
        out = []
        for item, (mtype, proj, state) in zip(items, fields, strict=True):
            if mtype is None:
                continue
            if wanted is not None and _s(mtype) not in wanted:
                continue
            if project_id is not None and _s(proj) != project_id:
                continue
            if wanted_states is not None and (_s(state) or MemoryState.ACTIVE.value) not in wanted_states:
                continue
            out.append(item)
        return out

    async def _list(self, user_id, types, project_id, limit, offset, states) -> ListResult:
        if not types and project_id is None and not states:
            ukey = self._user_key(user_id)
            async with self._conn.pipeline(transaction=True) as p:
                p.zcard(ukey)
                p.zrevrange(ukey, offset, offset + limit - 1)
                total, members = await p.execute()
            page = [_s(m) for m in members]
        else:
            ordered = await ordered_off_loop(
                newest_first, await self._user_ids_filtered(user_id, types, project_id, states)
            )
            total = len(ordered)
            page = ordered[offset : offset + limit]
        return await self._page_records(page, int(total), user_id)

    async def _scope_ids(self, user_id, types, project_id) -> list[str]:
        return [mid for _, mid in await self._user_ids_filtered(user_id, types, project_id)]

    async def _delete(self, memory_ids: list[str], user_id: str) -> None:
        async with self._conn.pipeline(transaction=False) as p:
            for i in memory_ids:
                p.hget(self._key(i), "user_id")
            owners = await p.execute()
        async with self._conn.pipeline(transaction=True) as p:
            for i, owner in zip(memory_ids, owners, strict=True):
                if owner is not None and _s(owner) != user_id:
                    continue  # another user's record is never deleted
                p.delete(self._key(i))
                p.zrem(self._user_key(user_id), i)
            await p.execute()

    async def _check_connection(self) -> bool:
        try:
            return bool(await self._conn.ping())
        except Exception:
            return False

    async def _close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
