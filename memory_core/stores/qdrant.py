"""Qdrant backend through the official ``qdrant_client.AsyncQdrantClient``: a server by
``url``, else local mode at ``path`` (the async client supports local mode natively).

One point per memory. Point ids are ``uuid5(NAMESPACE, memory id)`` (deterministic; Qdrant
only accepts unsigned ints and UUIDs) and the original id is kept in the payload. The
vector uses COSINE distance, so Qdrant's score is cosine similarity. Payload indexes
(keyword) on ``user_id`` (as the tenant key), ``project_id`` and ``memory_type``; local mode
ignores payload indexes. Timestamps are epoch milliseconds in the payload.

Filters are built by :func:`qdrant_filter` only, as structured ``FieldCondition``s whose
values are data, never parsed: an id like ``x" || user_id != "y`` is one literal value.
"""

from __future__ import annotations

import uuid
import warnings
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, StoreUnavailable
from ..types import ListResult, Memory, MemoryCounts, MemoryState, MemoryType, RetrieveOptions, ScoredMemory
from ._records import decode_rows, memory_from_fields, ordered_off_loop, record_fields, rows_newest_first, to_ms
from .base import MemoryStore, candidate_count
from .credentials import secret_from_env

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient
    from qdrant_client import models as qm

POINT_NAMESPACE = uuid.UUID("6f1d4c1e-3b7a-5c2e-9a43-6d2b8f1e0c55")
_SCROLL_PAGE = 2048
_MAX_TOPK = 16384


def point_id(memory_id: str) -> str:
    """The Qdrant point id (UUID string) of a memory id: ``uuid5(POINT_NAMESPACE, id)``."""
    return str(uuid.uuid5(POINT_NAMESPACE, memory_id))


def qdrant_filter(
    user_id: str,
    types: tuple[MemoryType, ...] | None = None,
    project_id: str | None = None,
    states: tuple[MemoryState, ...] | None = None,
) -> qm.Filter:
    """The one place filters are built: exact ``user_id`` match, plus ``project_id``,
    ``memory_type`` (any of ``types``) and lifecycle ``states`` when given. Values are passed
    as data. A point written before lifecycles has no ``state`` and counts as ``active``: the
    states filter excludes the states not asked for when ``active`` is asked for, and matches
    the ones asked for otherwise."""
    return _filter_of(user_id, types, project_id, states)


def _filter_of(
    user_id: str | None,
    types: tuple[MemoryType, ...] | None = None,
    project_id: str | None = None,
    states: tuple[MemoryState, ...] | None = None,
) -> qm.Filter:
    """``qdrant_filter``, or with ``user_id`` ``None`` the same filter over every user's
    points (``counts(EVERYONE)`` only: numbers, never records)."""
    from qdrant_client import models as qm

    must: list[qm.Condition] = []
    if user_id is not None:
        must.append(qm.FieldCondition(key="user_id", match=qm.MatchValue(value=user_id)))
    must_not: list[qm.Condition] = []
    if project_id is not None:
        must.append(qm.FieldCondition(key="project_id", match=qm.MatchValue(value=project_id)))
    if types:
        must.append(qm.FieldCondition(key="memory_type", match=qm.MatchAny(any=[MemoryType(t).value for t in types])))
    if states:
        wanted = {MemoryState(s) for s in states}
        if MemoryState.ACTIVE in wanted:
            others = [s.value for s in MemoryState if s not in wanted]
            if others:
                must_not.append(qm.FieldCondition(key="state", match=qm.MatchAny(any=others)))
        else:
            must.append(qm.FieldCondition(key="state", match=qm.MatchAny(any=[s.value for s in wanted])))
    return qm.Filter(must=must, must_not=must_not or None)


def _payload(memory: Memory) -> dict[str, Any]:
    return record_fields(memory)


def _vector(memory: Memory) -> list[float]:
    assert memory.embedding is not None  # the base embeds every memory before writing it
    return list(memory.embedding)


def _memory(payload: dict[str, Any] | None, vector: Any) -> Memory:
    assert payload is not None  # every point is read with its payload
    if isinstance(vector, dict):  # named vectors: ours is the unnamed default
        vector = vector.get("") or next(iter(vector.values()), None)
    return memory_from_fields(payload, vector)


class QdrantStore(MemoryStore):
    """Qdrant store.

    Args:
        url: server URL (``http://host:6333``); ``None`` → local mode at ``path``.
        api_key_env: the environment variable holding the server's API key, read when the
            store opens (``ConfigError`` naming ``settings_key.api_key_env`` and the variable
            when it is unset).
        settings_key: the configuration key of these settings, named in errors.
        path: local-mode directory (one process at a time may open it).
        collection: collection name (created when absent).
        embed, dimension, identity: see :class:`MemoryStore`.

    Opening (``await store.open()`` or the first operation) creates the collection and its
    payload indexes, or checks an existing one: ``ConfigError`` when its vector size is not
    ``dimension``; ``StoreUnavailable`` when the server cannot be reached.
    """

    name = "qdrant"

    def __init__(
        self,
        *,
        url: str | None,
        path: str,
        collection: str,
        api_key_env: str | None = None,
        settings_key: str = "global.stores.memory.qdrant",
        **kwargs,
    ):
        import httpx
        from qdrant_client.http.exceptions import ResponseHandlingException

        super().__init__(**kwargs)
        # a server that cannot be reached or times out (REST transport)
        self.unavailable_errors = (ResponseHandlingException, httpx.TransportError, OSError)
        self.url = url
        self.path = path
        self.collection = collection
        self._api_key_env = api_key_env
        self._settings_key = settings_key
        self._client: AsyncQdrantClient | None = None

    @property
    def _conn(self) -> AsyncQdrantClient:
        """The client; ``_open`` creates it, and the base class opens the store before any
        other hook runs."""
        assert self._client is not None, "QdrantStore hook called before _open"
        return self._client

    @property
    def _where(self) -> str:
        return self.url or f"local path {self.path}"

    async def _open(self) -> None:
        from qdrant_client import AsyncQdrantClient
        from qdrant_client import models as qm

        if self._client is None:
            key = (
                secret_from_env(self._api_key_env, f"{self._settings_key}.api_key_env")
                if self.url and self._api_key_env
                else None
            )
            try:
                if self.url:
                    self._client = AsyncQdrantClient(url=self.url, api_key=key)
                else:
                    self._client = AsyncQdrantClient(path=self.path)
            except Exception as e:
                raise StoreUnavailable(f"cannot open Qdrant at {self._where}: {e}") from e
        c = self._client
        try:
            exists = await c.collection_exists(self.collection)
        except Exception as e:
            raise StoreUnavailable(f"cannot reach Qdrant at {self._where}: {e}") from e
        if exists:
            info = await c.get_collection(self.collection)
            vectors = info.config.params.vectors
            size = getattr(vectors, "size", None)
            if size is None:
                raise ConfigError(
                    f"qdrant collection {self.collection!r} at {self._where} has named vectors; it was not "
                    "created by this service (choose another qdrant.collection)"
                )
            if int(size) != self.dimension:
                raise ConfigError(
                    f"qdrant collection {self.collection!r} at {self._where} holds {size}-dimensional vectors "
                    f"but the embedding model produces {self.dimension}; use another qdrant.collection or the "
                    "model that filled it"
                )
            return
        await c.create_collection(
            self.collection, vectors_config=qm.VectorParams(size=self.dimension, distance=qm.Distance.COSINE)
        )
        with warnings.catch_warnings():  # local mode warns that payload indexes do nothing there
            warnings.simplefilter("ignore")
            await c.create_payload_index(
                self.collection, "user_id", qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
            )
            await c.create_payload_index(self.collection, "project_id", qm.PayloadSchemaType.KEYWORD)
            await c.create_payload_index(self.collection, "memory_type", qm.PayloadSchemaType.KEYWORD)
            await c.create_payload_index(self.collection, "state", qm.PayloadSchemaType.KEYWORD)

    # ------------------------------------------------------------------ hooks
    async def _exists(self, memory_id: str) -> bool:
        found = await self._conn.retrieve(self.collection, ids=[point_id(memory_id)], with_payload=False)
        return bool(found)

    async def _counts(self, user_id: str | None) -> MemoryCounts:
        """One exact ``count`` per state and per type (7), filtered by the owner when given (a
        point without ``state`` counts as ``active``, as in every filter)."""

        async def count(flt: qm.Filter) -> int:
            return int((await self._conn.count(self.collection, count_filter=flt, exact=True)).count)

        return MemoryCounts(
            by_state={s: await count(_filter_of(user_id, states=(s,))) for s in MemoryState},
            by_type={t: await count(_filter_of(user_id, types=(t,))) for t in MemoryType},
        )

    async def _upsert(self, memories: list[Memory]) -> None:
        from qdrant_client import models as qm

        points = [qm.PointStruct(id=point_id(m.id), vector=_vector(m), payload=_payload(m)) for m in memories]
        await self._conn.upsert(self.collection, points=points, wait=True)

    async def _insert(self, memory: Memory) -> None:
        await self._upsert([memory])

    async def _insert_many(self, memories: list[Memory]) -> None:
        # one upsert (the base caps a batch at MAX_BATCH = 1000 points)
        await self._upsert(memories)

    async def _replace(self, memory: Memory) -> None:
        await self._upsert([memory])

    async def _get_many(self, memory_ids: list[str], user_id: str | None = None) -> list[Memory]:
        points = await self._conn.retrieve(
            self.collection, ids=[point_id(i) for i in memory_ids], with_payload=True, with_vectors=True
        )
        if user_id is not None:  # the owner from the payload, before decoding
            points = [p for p in points if (p.payload or {}).get("user_id") == user_id]
        return self._decode(points)

    def _decode(self, points: list[Any]) -> list[Memory]:
        """``decode_rows`` of Qdrant points (payload and vector)."""
        return decode_rows(
            points, lambda p: _memory(p.payload, p.vector), backend=self.name, row_id=lambda p: (p.payload or {})["id"]
        )[0]

    async def _owned_ids(self, memory_ids: list[str], user_id: str) -> list[str]:
        points = await self._conn.retrieve(
            self.collection, ids=[point_id(i) for i in memory_ids], with_payload=["id", "user_id"]
        )
        return [str(p.payload["id"]) for p in points if p.payload and p.payload.get("user_id") == user_id]

    async def _search(self, options: RetrieveOptions, vector: list[float]) -> list[ScoredMemory]:
        k = candidate_count(options, _MAX_TOPK)
        res = await self._conn.query_points(
            self.collection,
            query=vector,
            query_filter=qdrant_filter(options.user_id, options.types, options.project_id, options.states),
            limit=k,
            with_payload=True,
            with_vectors=True,
        )
        out: list[ScoredMemory] = []
        for p in res.points:
            sim = max(-1.0, min(1.0, float(p.score)))  # COSINE distance: score = cosine similarity
            out.extend(ScoredMemory(memory=m, score=sim, similarity=sim) for m in self._decode([p]))
        return out

    async def _touch(self, increments: dict[str, int], when: datetime) -> None:
        # set_payload only on points that still exist (the base holds the user's write lock);
        # Qdrant's set_payload never creates a point
        by_point = {point_id(i): n for i, n in increments.items()}
        points = await self._conn.retrieve(self.collection, ids=list(by_point), with_payload=["access_count"])
        stamp = to_ms(when)
        for p in points:
            count = int((p.payload or {}).get("access_count") or 0) + by_point.get(str(p.id), 0)
            await self._conn.set_payload(
                self.collection, payload={"access_count": count, "last_accessed": stamp}, points=[p.id], wait=True
            )

    async def _scroll(self, flt, fields: list[str]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        offset = None
        while True:
            points, offset = await self._conn.scroll(
                self.collection, scroll_filter=flt, limit=_SCROLL_PAGE, offset=offset, with_payload=fields
            )
            rows.extend(p.payload or {} for p in points)
            if offset is None:
                return rows

    async def _list(self, user_id, types, project_id, limit, offset, states) -> ListResult:
        rows = await self._scroll(qdrant_filter(user_id, types, project_id, states), ["id", "created_at"])
        return await self._page(await ordered_off_loop(rows_newest_first, rows), offset, limit, user_id)

    async def _scope_ids(self, user_id, types, project_id) -> list[str]:
        rows = await self._scroll(qdrant_filter(user_id, types, project_id), ["id"])
        return [str(r["id"]) for r in rows]

    async def _delete(self, memory_ids: list[str], user_id: str) -> None:
        from qdrant_client import models as qm

        for start in range(0, len(memory_ids), 1000):
            ids: list[qm.ExtendedPointId] = [point_id(i) for i in memory_ids[start : start + 1000]]
            owned = qdrant_filter(user_id)
            assert isinstance(owned.must, list)  # qdrant_filter always builds a list
            owned.must.append(qm.HasIdCondition(has_id=ids))  # only the owner's points are deleted
            await self._conn.delete(self.collection, points_selector=qm.FilterSelector(filter=owned), wait=True)

    async def _check_connection(self) -> bool:
        try:
            return bool(await self._conn.collection_exists(self.collection))
        except Exception:
            return False

    async def _close(self) -> None:
        if self._client is not None:
            await self._conn.close()
