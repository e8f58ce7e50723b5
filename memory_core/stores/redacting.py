"""``RedactingStore``: secrets and personal data kept out of a store built without curation
(``curation.enabled: false``), where ``CuratingStore`` (which redacts every write) is absent.
The same rules (``memory_core.redaction``), nothing else of curation."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from ..config import RedactionSettings
from ..errors import StoreClosed
from ..redaction import Redactor, redact_changes, redact_memories, withheld
from ..types import Memory, MemoryChanges, WriteOutcome, WriteResult
from .base import StoreDecorator


class RedactingStore(StoreDecorator, passthrough_writes=True):
    """Every write's content redacted (``redaction.redact_memories``) before ``inner``
    stores it; a memory with nothing left is not stored (``write``: outcome ``dropped``;
    ``store``/``store_many``: the memory with its content withheld). ``update``: new content
    redacted, ``InvalidInput`` when nothing is left. ``on_event`` gets
    ``redaction:<kind>:<policy>`` per value found and ``write_<outcome>`` per memory."""

    def __init__(
        self,
        inner,
        settings: RedactionSettings | None = None,
        *,
        on_event: Callable[[str], None] | None = None,
    ):
        super().__init__(inner)
        self._redactor = Redactor(settings or RedactionSettings())
        self._on_event = on_event

    def _count(self, event: str, n: int = 1) -> None:
        if self._on_event is not None:
            with contextlib.suppress(Exception):
                for _ in range(n):
                    self._on_event(event)

    async def write(self, memories: Sequence[Memory]) -> list[WriteResult]:
        """See ``MemoryStore.write``: the kept memories stored in one ``store_many``. Raises
        ``StoreClosed`` when closed (before redacting anything), and what ``inner`` raises."""
        if self.closed:
            raise StoreClosed(f"{self.name} store is closed")
        batch = list(memories)
        written, applied = redact_memories(self._redactor, batch)
        for (kind, policy), n in sorted(applied.items()):
            self._count(f"redaction:{kind}:{policy}", n)
        kept = [m for m in written if m is not None]
        stored = iter(await self.inner.store_many(kept) if kept else [])
        results = [
            WriteResult(memory=withheld(original), outcome=WriteOutcome.DROPPED)
            if m is None
            else WriteResult(memory=next(stored))
            for original, m in zip(batch, written, strict=True)
        ]
        for r in results:
            self._count(f"write_{r.outcome.value}")
        return results

    async def store(self, memory: Memory) -> Memory:
        (result,) = await self.write([memory])
        return result.memory

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """See ``MemoryStore.store_many``."""
        return [r.memory for r in await self.write(memories)]

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        """``inner.update`` with new ``content`` redacted (``redaction.redact_changes``)."""
        if self.closed:
            raise StoreClosed(f"{self.name} store is closed")
        return await self.inner.update(memory_id, user_id, redact_changes(self._redactor, changes, self._count))
