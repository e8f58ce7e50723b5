"""``EventRecordingStore``: the store decorator that records every lifecycle change of a
memory as a ``memory_core.events.MemoryEvent`` in an ``EventLog``.

Why here (outermost decorator of the store a shard holds) rather than at the HTTP handlers:
every change passes through it whoever asks for it (the REST API, the chat auto-store, the
consolidation loop calling the shard directly, an import), and it sees what the change did
(the write outcomes, the ids a scope delete removes, the originals a consolidation merged
and the memories it expired), which the callers' return values do not all carry. Each call is
recorded once, after it succeeded. The actor comes from the context
(``events.current_actor``: the store shard sets the caller's for each call); without one a
consolidation is ``consolidation``, retention's deletions are ``expiry``, anything else
``system``.

Recording never fails the change: the append is one local SQLite transaction; an error is
reported to ``on_append("error", n)`` and logged without memory text or user ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import InvalidInput
from ..events import (
    CONSOLIDATION_ACTOR,
    EXPIRY_ACTOR,
    SYSTEM_ACTOR,
    EventKind,
    EventLog,
    MemoryEvent,
    current_actor,
)
from ..types import ListQuery, Memory, MemoryChanges, MemoryScope, MemoryState, WriteOutcome, WriteResult
from .base import MAX_LIST_LIMIT, StoreDecorator, list_pages
from .curating import ConsolidationReport, CuratingStore, WrittenThenCancelled

log = logging.getLogger(__name__)

_WRITE_KINDS = {
    WriteOutcome.CREATED: EventKind.CREATED,
    WriteOutcome.REINFORCED: EventKind.REINFORCED,
    WriteOutcome.REFINED: EventKind.REFINED,
    WriteOutcome.QUARANTINED: EventKind.QUARANTINED,
}
"""Write outcomes that change a memory (``dropped`` stores nothing: no event)."""


def _of(kind: EventKind, memory: Memory, actor: str, **detail: str | list[str]) -> MemoryEvent:
    return MemoryEvent(
        kind=kind,
        memory_id=memory.id,
        user_id=memory.user_id,
        actor=actor,
        outcome=memory.state.value,
        project_id=memory.project_id,
        detail=detail,
    )


def _deleted(kind: EventKind, memory_id: str, user_id: str, actor: str, project_id: str | None = None) -> MemoryEvent:
    return MemoryEvent(
        kind=kind, memory_id=memory_id, user_id=user_id, actor=actor, outcome="deleted", project_id=project_id
    )


def write_events(results: Sequence[WriteResult], actor: str) -> list[MemoryEvent]:
    """The events of one ``write``'s results, in order: the outcome of each memory written
    (none for ``dropped``), then a ``superseded`` event for each memory it superseded."""
    events = []
    for r in results:
        kind = _WRITE_KINDS.get(r.outcome)
        if kind is None:
            continue
        events.append(_of(kind, r.memory, actor, **({"superseded": r.superseded} if r.superseded else {})))
        for old in r.superseded:
            events.append(
                MemoryEvent(
                    kind=EventKind.SUPERSEDED,
                    memory_id=old,
                    user_id=r.memory.user_id,
                    actor=actor,
                    outcome=MemoryState.SUPERSEDED.value,
                    project_id=r.memory.project_id,
                    detail={"superseded_by": r.memory.id},
                )
            )
    return events


class EventRecordingStore(StoreDecorator, passthrough_writes=True):
    """``inner`` (any store; curation's operations when it is a ``CuratingStore``) with each
    lifecycle change appended to ``log`` (module docstring). ``on_append(outcome, n)``:
    ``("ok", n)`` after ``n`` events were appended, ``("error", n)`` when they could not be."""

    def __init__(
        self,
        inner: Any,
        log: EventLog,
        *,
        on_append: Callable[[str, int], None] | None = None,
    ):
        super().__init__(inner)
        self.log = log
        self._on_append = on_append
        if isinstance(inner, CuratingStore):  # a deferred second opinion's supersession, later
            inner.on_later_supersession = self._record_later_supersession
        # one thread, so appends happen in the order the changes were made (a FIFO queue), and
        # a locked events file never takes the threads of the default executor (query embedding)
        self._appender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-events")

    async def close(self) -> None:
        """Close the wrapped store, let the queued appends finish, then close the log."""
        try:
            await self.inner.close()
        finally:
            await asyncio.to_thread(self._appender.shutdown, wait=True)
            self.log.close()

    @property
    def curating(self) -> bool:
        """Whether the wrapped store curates (restore, unmerge, consolidate, history)."""
        return isinstance(self.inner, CuratingStore)

    def _curated(self) -> CuratingStore:
        if not isinstance(self.inner, CuratingStore):
            raise InvalidInput("memory curation is disabled (global.stores.memory.curation.enabled: false)")
        return self.inner

    async def _record(self, events: list[MemoryEvent]) -> None:
        """Append ``events`` to the log on the appender thread (a SQLite commit with a full sync
        must not stall the shard's event loop, which serves every user). Queued at once, in
        call order: the events of one memory keep the order of its changes, whose calls come
        one after another (the curating store's per-user lock). The append runs even when the
        awaiting task is cancelled meanwhile. A failure is counted and logged, never raised."""
        if not events:
            return
        try:
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(self._appender, self.log.append, events))
        except Exception as e:  # never fail the change that happened
            log.warning("could not record %d memory events: %s", len(events), type(e).__name__)
            self._report("error", len(events))
            return
        self._report("ok", len(events))

    def _report(self, outcome: str, n: int) -> None:
        if self._on_append is not None:
            with contextlib.suppress(Exception):
                self._on_append(outcome, n)

    @staticmethod
    def _actor(default: str = SYSTEM_ACTOR) -> str:
        return current_actor() or default

    async def _record_later_supersession(self, old: Memory, new: Memory) -> None:
        """Records ``superseded`` for ``old`` (superseded by ``new`` when a deferred second
        opinion was answered, after the write: ``CuratingStore._apply_rechecked``; actor
        ``system``)."""
        await self._record([_of(EventKind.SUPERSEDED, old, SYSTEM_ACTOR, superseded_by=new.id)])

    # ------------------------------------------------------------------ writes
    async def write(self, memories: Sequence[Memory]) -> list[WriteResult]:
        """``inner.write``, each outcome recorded (``write_events``)."""
        actor = self._actor()
        try:
            results = await self.inner.write(memories)
        except WrittenThenCancelled as e:  # stored although the caller has gone: recorded too
            await self._record(write_events(e.results, actor))
            raise
        await self._record(write_events(results, actor))
        return results

    async def store(self, memory: Memory) -> Memory:
        """``write`` of one memory; the memory that holds the fact."""
        (result,) = await self.write([memory])
        return result.memory

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """``write``; the memories that hold the facts."""
        return [r.memory for r in await self.write(memories)]

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        """``inner.update``, recorded as ``updated`` (``quarantined`` when the change left
        the memory quarantined by a new text or state)."""
        memory = await self.inner.update(memory_id, user_id, changes)
        touched = changes.content is not None or changes.state is not None
        kind = EventKind.QUARANTINED if touched and memory.state == MemoryState.QUARANTINED else EventKind.UPDATED
        await self._record([_of(kind, memory, self._actor())])
        return memory

    async def forget(self, memory_id: str, user_id: str) -> None:
        """``inner.forget``, recorded as ``deleted``."""
        await self.inner.forget(memory_id, user_id)
        await self._record([_deleted(EventKind.DELETED, memory_id, user_id, self._actor())])

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        """``inner.forget_by_scope``, one ``deleted`` event per memory deleted: the scope's
        memories are listed first, under the curating store's lock of the user (so no curated
        write lands between the listing and the delete)."""
        lock = self.inner.user_lock(scope.user_id) if isinstance(self.inner, CuratingStore) else None
        async with lock if lock is not None else contextlib.nullcontext():
            query = ListQuery(
                user_id=scope.user_id,
                types=scope.types,
                project_id=scope.project_id,
                limit=MAX_LIST_LIMIT,
                states=(),  # every state
            )
            listed: list[tuple[str, str | None]] = []
            async for page in list_pages(self.inner, query):
                listed.extend((m.id, m.project_id) for m in page.memories)
            deleted = await self.inner.forget_by_scope(scope)
        actor = self._actor()
        await self._record([_deleted(EventKind.DELETED, i, scope.user_id, actor, p) for i, p in listed])
        return deleted

    # ------------------------------------------------------------------ curation
    async def history(self, memory_id: str, user_id: str) -> list[Memory]:
        """``CuratingStore.history`` (a read: nothing recorded)."""
        return await self._curated().history(memory_id, user_id)

    async def restore(self, memory_id: str, user_id: str) -> Memory:
        """``CuratingStore.restore``, recorded as ``restored`` (outcome ``active``, or
        ``quarantined`` when screening kept it back)."""
        memory = await self._curated().restore(memory_id, user_id)
        await self._record([_of(EventKind.RESTORED, memory, self._actor())])
        return memory

    async def unmerge(self, memory_id: str, user_id: str, project_id: str | None = None) -> list[Memory]:
        """``CuratingStore.unmerge``: ``unmerged`` for each original, then ``deleted`` for
        the merged memory."""
        originals = await self._curated().unmerge(memory_id, user_id, project_id)
        actor = self._actor()
        events = [_of(EventKind.UNMERGED, m, actor, unmerged_from=memory_id) for m in originals]
        events.append(_deleted(EventKind.DELETED, memory_id, user_id, actor, project_id))
        await self._record(events)
        return originals

    async def consolidate(self, user_id: str) -> ConsolidationReport:
        """``CuratingStore.consolidate``: ``expired`` for each memory retention deleted
        (actor ``expiry``), and for each group ``created`` for the merged memory and
        ``consolidated`` for each original (actor: the context's, else ``consolidation``)."""
        report = await self._curated().consolidate(user_id)
        await self._record(await self._consolidation_events(report, user_id))
        return report

    async def _consolidation_events(self, report: ConsolidationReport, user_id: str) -> list[MemoryEvent]:
        events = [_deleted(EventKind.EXPIRED, i, user_id, EXPIRY_ACTOR) for i in report.expired_ids]
        if not report.merged:
            return events
        actor = self._actor(CONSOLIDATION_ACTOR)
        try:
            merged = await self.inner.get_many(report.merged, user_id)
        except Exception as e:  # the merges happened; record what the report alone says
            log.warning("could not read merged memories for their events: %s", type(e).__name__)
            merged = []
        found = {m.id for m in merged}
        for m in merged:
            events.append(_of(EventKind.CREATED, m, actor, merged_from=list(m.merged_from)))
            events.extend(
                MemoryEvent(
                    kind=EventKind.CONSOLIDATED,
                    memory_id=original,
                    user_id=user_id,
                    actor=actor,
                    outcome=MemoryState.CONSOLIDATED.value,
                    project_id=m.project_id,
                    detail={"merged_into": m.id},
                )
                for original in m.merged_from
            )
        for missing in (i for i in report.merged if i not in found):
            events.append(
                MemoryEvent(kind=EventKind.CREATED, memory_id=missing, user_id=user_id, actor=actor, outcome="active")
            )
        return events

    async def purge_expired(self, user_id: str) -> int:
        """``CuratingStore.purge_expired``, each deletion recorded as ``expired``."""
        ids = await self._curated().purge_expired_ids(user_id)
        await self._record([_deleted(EventKind.EXPIRED, i, user_id, EXPIRY_ACTOR) for i in ids])
        return len(ids)

    def take_dirty_users(self, limit: int) -> list[str]:
        """``CuratingStore.take_dirty_users``; ``[]`` when the store does not curate."""
        return self.inner.take_dirty_users(limit) if isinstance(self.inner, CuratingStore) else []
