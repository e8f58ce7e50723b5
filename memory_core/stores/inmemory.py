"""In-process store (dicts + numpy). The reference implementation of the contract for tests and
single-process use; data does not survive the process.

Per-user layout, so that every per-user operation costs what that user's memories cost,
whatever the total: ``_by_user[user_id]`` holds the ids of the user's records, and
``_held[user_id]`` the user's vectors as one float32 matrix (``HeldVectors``: a search is
one matrix-vector product over the user's rows only). Records are kept without their vector
(``_rows``: id → ``Memory``); reads put the held float32 vector back (as the other backends
return float32 vectors). Memory: about 1.5 KB per memory for the vector at 384 dimensions
(float32) plus the record.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from ..retrieval.held_vectors import HeldVectors
from ..types import ListResult, Memory, MemoryCounts, RetrieveOptions, ScoredMemory
from ._records import decode_rows, memory_from_fields, record_fields
from .base import MemoryStore, list_order_key


def matches(memory: Memory, user_id: str, types, project_id: str | None, states=None) -> bool:
    """True when ``memory`` belongs to ``user_id`` and passes the optional filters."""
    return (
        memory.user_id == user_id
        and (project_id is None or memory.project_id == project_id)
        and (not types or memory.type in types)
        and (not states or memory.state in states)
    )


class InMemoryStore(MemoryStore):
    """Dict-backed store; cosine by exact dot product over the user's normalised vectors."""

    name = "inmemory"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._rows: dict[str, Memory] = {}  # id → record without its vector
        self._by_user: dict[str, set[str]] = {}  # user → ids of the user's records
        self._held: dict[str, HeldVectors] = {}  # user → the user's vectors

    def _put(self, memory: Memory) -> None:
        """Hold ``memory`` (a copy, its vector in the user's matrix), replacing a record of
        the same id."""
        previous = self._rows.get(memory.id)
        if previous is not None and previous.user_id != memory.user_id:
            self._drop(memory.id)
        self._rows[memory.id] = memory.model_copy(update={"embedding": None}).model_copy(deep=True)  # vector not copied
        self._by_user.setdefault(memory.user_id, set()).add(memory.id)
        self._held.setdefault(memory.user_id, HeldVectors()).put(memory.id, memory.embedding)

    def _drop(self, memory_id: str) -> None:
        """Forget record ``memory_id`` and its vector (no-op when absent)."""
        row = self._rows.pop(memory_id, None)
        if row is None:
            return
        ids = self._by_user.get(row.user_id)
        if ids is not None:
            ids.discard(memory_id)
            if not ids:
                del self._by_user[row.user_id]
        vectors = self._held.get(row.user_id)
        if vectors is not None:
            vectors.remove(memory_id)
            if not len(vectors):
                del self._held[row.user_id]

    def _full(self, memory_id: str, vector: bool = True) -> Memory:
        """A copy of record ``memory_id`` with its vector (a list of floats, or None; never
        with ``vector=False``), read
        through the flat record layout of the persistent backends (``record_fields`` →
        ``memory_from_fields``), so a record they could not read fails here too. Raises what
        that decode raises (``_decode`` skips such a record)."""
        row = self._rows[memory_id]
        vectors = self._held.get(row.user_id) if vector else None
        vec = vectors.get(memory_id) if vectors is not None else None
        return memory_from_fields(record_fields(row), None if vec is None else vec.astype(float).tolist())

    def _decode(self, memory_ids: list[str], vector: bool = True) -> tuple[list[Memory], list[str]]:
        """``decode_rows`` of the records ``memory_ids`` (``_full`` each)."""
        return decode_rows(memory_ids, lambda i: self._full(i, vector), backend=self.name, row_id=lambda i: i)

    def _user_rows(self, user_id: str) -> list[Memory]:
        """The records of ``user_id`` (without vectors; not copies)."""
        return [self._rows[i] for i in self._by_user.get(user_id, ())]

    async def _exists(self, memory_id: str) -> bool:
        return memory_id in self._rows

    async def _counts(self, user_id: str | None) -> MemoryCounts:
        rows = self._rows.values() if user_id is None else self._user_rows(user_id)
        return MemoryCounts.of((m.state, m.type) for m in rows)

    async def _insert(self, memory: Memory) -> None:
        self._put(memory)

    async def _replace(self, memory: Memory) -> None:
        self._put(memory)

    async def _get_many(self, memory_ids: list[str], user_id: str | None = None) -> list[Memory]:
        held = [i for i in memory_ids if i in self._rows and (user_id is None or self._rows[i].user_id == user_id)]
        return self._decode(held)[0]

    async def _owned_ids(self, memory_ids: list[str], user_id: str) -> list[str]:
        return [i for i in memory_ids if i in self._rows and self._rows[i].user_id == user_id]

    async def _search(self, options: RetrieveOptions, vector: list[float]) -> list[ScoredMemory]:
        held = self._held.get(options.user_id)
        if held is None:
            return []

        def keep(memory_id: str) -> bool:
            row = self._rows.get(memory_id)
            return row is not None and matches(row, options.user_id, options.types, options.project_id, options.states)

        query = np.asarray(vector, dtype=np.float32)
        top = dict(held.top(query, max(options.limit * 4, 50), keep))
        memories, _ = self._decode(list(top), vector=False)
        return [ScoredMemory(memory=m, score=float(top[m.id]), similarity=float(top[m.id])) for m in memories]

    async def _touch(self, increments: dict[str, int], when: datetime) -> None:
        for i, n in increments.items():
            row = self._rows.get(i)
            if row is not None:
                row.access_count += n
                row.last_accessed = when

    async def _list(self, user_id, types, project_id, limit, offset, states) -> ListResult:
        rows = sorted(
            (m for m in self._user_rows(user_id) if matches(m, user_id, types, project_id, states)),
            key=list_order_key,
            reverse=True,
        )
        page, unreadable = self._decode([m.id for m in rows[offset : offset + limit]])
        return ListResult(memories=page, total=len(rows), unreadable=unreadable)

    async def _scope_ids(self, user_id, types, project_id) -> list[str]:
        return [m.id for m in self._user_rows(user_id) if matches(m, user_id, types, project_id)]

    async def _delete(self, memory_ids: list[str], user_id: str) -> None:
        for i in memory_ids:
            if i in self._rows and self._rows[i].user_id == user_id:
                self._drop(i)
