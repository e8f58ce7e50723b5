"""In-process store (dict + numpy). The reference implementation of the contract for tests and
single-process use; data does not survive the process."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from ..types import ListResult, Memory, RetrieveOptions, ScoredMemory
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
    """Dict-backed store; cosine by exact dot product over normalised vectors."""

    name = "inmemory"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._rows: dict[str, Memory] = {}

    async def _exists(self, memory_id: str) -> bool:
        return memory_id in self._rows

    async def _insert(self, memory: Memory) -> None:
        self._rows[memory.id] = memory.model_copy(deep=True)

    async def _replace(self, memory: Memory) -> None:
        self._rows[memory.id] = memory.model_copy(deep=True)

    async def _get_many(self, memory_ids: list[str], user_id: str | None = None) -> list[Memory]:
        return [
            self._rows[i].model_copy(deep=True)
            for i in memory_ids
            if i in self._rows and (user_id is None or self._rows[i].user_id == user_id)
        ]

    async def _search(self, options: RetrieveOptions, vector: list[float]) -> list[ScoredMemory]:
        rows = [
            m
            for m in self._rows.values()
            if matches(m, options.user_id, options.types, options.project_id, options.states)
        ]
        if not rows:
            return []
        matrix = np.asarray([m.embedding for m in rows], dtype=np.float32)
        sims = np.clip(matrix @ np.asarray(vector, dtype=np.float32), -1.0, 1.0)  # as the other backends
        order = np.argsort(-sims)[: max(options.limit * 4, 50)]
        return [
            ScoredMemory(memory=rows[i].model_copy(deep=True), score=float(sims[i]), similarity=float(sims[i]))
            for i in order
        ]

    async def _touch(self, increments: dict[str, int], when: datetime) -> None:
        for i, n in increments.items():
            row = self._rows.get(i)
            if row is not None:
                row.access_count += n
                row.last_accessed = when

    async def _list(self, user_id, types, project_id, limit, offset, states) -> ListResult:
        rows = sorted(
            (m for m in self._rows.values() if matches(m, user_id, types, project_id, states)),
            key=list_order_key,
            reverse=True,
        )
        return ListResult(memories=[m.model_copy(deep=True) for m in rows[offset : offset + limit]], total=len(rows))

    async def _scope_ids(self, user_id, types, project_id) -> list[str]:
        return [m.id for m in self._rows.values() if matches(m, user_id, types, project_id)]

    async def _delete(self, memory_ids: list[str], user_id: str) -> None:
        for i in memory_ids:
            if i in self._rows and self._rows[i].user_id == user_id:
                del self._rows[i]
