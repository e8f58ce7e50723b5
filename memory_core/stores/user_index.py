"""Everything ``HybridStore`` holds for one user, as one object, and the LRU that bounds it.

``UserIndex`` (one per loaded user): the BM25 corpus (``retrieval.lexical.BM25Corpus``, with
each memory's attributes: content key, speaker terms, time mention, conversation group,
timestamp, whether the model represents the text), the timeline of each conversation group
(``Timeline``), the held unit vectors (``retrieval.held_vectors.HeldVectors``), the fallback
model's vectors of the memories the model cannot represent (``fallback``, with
``embedding.fallback``: ``memory_core.embedding.fallback``; held only here, never in the
backend) and the texts still waiting for one (``fallback_pending``), the ids of each exact text
(``by_key``: content key → ids; ``same_content``, curation's test for an identical event), the
records (``Memory`` without its vector, when records are held), the write generation (a fresh value
per write applied) and the build state (``building``: writes queued while the index is built
from the store, replayed onto it when the build ends; ``task``: the build).

``UserIndexes``: at most ``max_users`` of them, least recently used dropped first.

Memory (measured, ``benchmarks/flat_cost.py``): see README "Measured". No I/O, no awaits
inside: not thread-safe, one event loop.
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from ..retrieval.held_vectors import HeldVectors
from ..retrieval.lexical import DEFAULT_B, DEFAULT_K1, BM25Corpus, tokenize
from ..retrieval.questions import is_question
from ..retrieval.speaker import speaker_and_body
from ..retrieval.timeparse import has_time_expression
from ..types import Memory, MemoryState, MemoryType
from ._records import to_ms

_MAX_MASKS = 16
"""Most vector masks (``UserIndex.vector_mask``) one user's index keeps, one per scope
searched (project, types, states); all are dropped when a new one would pass this."""


def content_key(content: str) -> str:
    """A short digest of ``content`` (16 hex digits): tells two versions of a text apart."""
    return hashlib.blake2b(content.encode("utf-8"), digest_size=8).hexdigest()


def split_speaker(memory: Memory) -> tuple[str, str | None]:
    """(body, speaker) of ``memory``: the rule of ``memory_core.retrieval.speaker`` (an optional
    ``metadata["speaker"]``, else a leading ``"Name: "`` of the content)."""
    return speaker_and_body(memory.content, memory.metadata)


def group_of(memory: Memory) -> tuple | None:
    """The conversation group of ``memory``: its ``conversation_id``; None (no neighbours)
    when it has none: a note written outside a conversation is nobody's neighbour, however
    close in time. Within a group, neighbours are the memories adjacent by ``created_at``
    (then write order), at most the neighbour gap apart — sessions are told apart by time,
    not by project metadata."""
    if memory.conversation_id is None:
        return None
    return (memory.conversation_id,)


def _time_key(record: Memory) -> tuple[int, str]:
    """``record``'s place in ``UserIndex.by_time``: (``created_at`` in epoch ms, as the
    persistent stores keep it; none: 0, its id)."""
    return (to_ms(record.created_at) or 0, record.id)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What ``UserIndex.put`` reads from one memory's text: its content key, the body the
    BM25 corpus indexes and that body's terms (``tokenize``), the speaker's terms, whether the
    body mentions a time (``has_time_expression``) or asks a question (``is_question``), and
    whether the embedding model represents the content (``represented``, given). Pure CPU on
    the memory alone, and thread-safe: ``HybridStore._build`` makes the entries of a user's
    memories on a worker thread, so that the event loop serving every user only puts them
    into the index (``UserIndex.put_entry``)."""

    key: str
    body: str
    tokens: tuple[str, ...]
    speaker_terms: frozenset[str]
    temporal: bool
    asks: bool
    represented: bool

    @classmethod
    def of(cls, memory: Memory, represented: bool) -> IndexEntry:
        """The entry of ``memory`` (its content, metadata speaker); ``represented`` as given."""
        body, speaker = split_speaker(memory)
        return cls(
            key=content_key(memory.content),
            body=body,
            tokens=tuple(tokenize(body)),
            speaker_terms=frozenset(tokenize(speaker)) if speaker else frozenset(),
            temporal=has_time_expression(body),
            asks=is_question(body),
            represented=represented,
        )


@dataclass
class Timeline:
    """One user's memories ordered by time: within each conversation group (``groups``), and
    all of them together (``everyone``, memories without a conversation included), by
    ``created_at`` (seconds), then write order (``seq``: the index's count of writes when the
    memory was first put; a rebuild from the store puts them in the store's listing order),
    then id."""

    groups: dict[tuple, list[tuple[float, int, str]]] = field(default_factory=dict)
    everyone: list[tuple[float, int, str]] = field(default_factory=list)

    def add(self, group: tuple | None, ts: float, memory_id: str, seq: int = 0) -> None:
        bisect.insort(self.everyone, (ts, seq, memory_id))
        if group is not None:
            bisect.insort(self.groups.setdefault(group, []), (ts, seq, memory_id))

    def remove(self, group: tuple | None, ts: float, memory_id: str, seq: int = 0) -> None:
        _remove_entry(self.everyone, (ts, seq, memory_id))
        if group is None:
            return
        entries = self.groups.get(group)
        if not entries:
            return
        _remove_entry(entries, (ts, seq, memory_id))
        if not entries:
            del self.groups[group]

    def span(self) -> tuple[float, float] | None:
        """(earliest, latest) ``created_at`` seconds of the user's memories; None when none."""
        return (self.everyone[0][0], self.everyone[-1][0]) if self.everyone else None

    def between(self, start: float, end: float) -> list[str]:
        """The ids of the memories created in ``[start, end)`` seconds, oldest first."""
        lo = bisect.bisect_left(self.everyone, (start,))
        hi = bisect.bisect_left(self.everyone, (end,))
        return [e[2] for e in self.everyone[lo:hi]]

    def neighbours(
        self, group: tuple | None, ts: float, memory_id: str, max_gap_s: float, seq: int = 0, radius: int = 1
    ) -> list[str]:
        """The ids of up to ``radius`` memories before and ``radius`` after ``memory_id`` in
        its group, nearest first on each side (before, then after), each step at most
        ``max_gap_s`` seconds: the window stops at a gap longer than that (another session)."""
        if group is None or radius < 1:
            return []
        entries = self.groups.get(group, [])
        i = bisect.bisect_left(entries, (ts, seq, memory_id))
        if i >= len(entries) or entries[i] != (ts, seq, memory_id):
            return []
        out = []
        for step in (-1, 1):
            j, at = i, ts
            for _ in range(radius):
                j += step
                if not 0 <= j < len(entries) or abs(entries[j][0] - at) > max_gap_s:
                    break
                out.append(entries[j][2])
                at = entries[j][0]
        return out


def _remove_entry(entries: list[tuple[float, int, str]], entry: tuple[float, int, str]) -> None:
    i = bisect.bisect_left(entries, entry)
    if i < len(entries) and entries[i] == entry:
        del entries[i]


@dataclass
class UserIndex:
    """One user's index (module docstring). ``hold_records``: keep each memory's record
    (without its vector) in ``records``, so reads of a loaded user need no store round trip;
    ``hold_vectors``: keep each memory's unit vector in ``held``. ``track_fallback`` (a
    fallback model is configured): note each memory the model cannot represent in
    ``fallback_pending`` (id → (content key, text)) until ``put_fallback`` gives it the
    fallback's vector (held in ``fallback``, whatever ``hold_vectors`` says: the index is the
    only place those vectors live) or finds that none can be made."""

    corpus: BM25Corpus
    hold_vectors: bool = True
    hold_records: bool = True
    timeline: Timeline = field(default_factory=Timeline)
    held: HeldVectors = field(default_factory=HeldVectors)
    fallback: HeldVectors = field(default_factory=HeldVectors)
    track_fallback: bool = False
    fallback_pending: dict[str, tuple[str, str]] = field(default_factory=dict)
    records: dict[str, Memory] = field(default_factory=dict)
    # content key → the ids indexed with that exact text (``same_content``)
    by_key: dict[str, set[str]] = field(default_factory=dict)
    gen: int = 0
    writes: int = 0
    # the build met records the store holds but could not read (``ListResult.unreadable``):
    # listings go to the store, which reports them
    unreadable: bool = False
    # a write of unknown outcome happened while it was being built: never installed
    stale: bool = False
    building: list[tuple[str, Any]] | None = None
    task: asyncio.Future | None = None
    # the corpus's version (each put/remove) and the vector masks made at it (``vector_mask``)
    version: int = 0
    _masks: dict[tuple, tuple[int, int, np.ndarray]] = field(default_factory=dict, repr=False)
    # the held records' (created_at ms, id), ascending: listings read them newest first
    # (``newest_first``) without sorting the user's records at each listing
    by_time: SortedList = field(default_factory=SortedList, repr=False)
    # a narrower scope's ids newest first, with the index version and scope they are of
    # (``newest_first``: a pager's later pages)
    _listing: tuple[tuple, list[str]] | None = field(default=None, repr=False)

    @property
    def ready(self) -> bool:
        """Built (``building`` is None): it holds every memory of the user."""
        return self.building is None

    def __len__(self) -> int:
        return len(self.corpus)

    def put(self, memory: Memory, represented: bool) -> None:
        """Index (or re-index) ``memory``; ``represented``: the embedding model can represent
        its content (else its cosine means nothing)."""
        self.put_entry(memory, IndexEntry.of(memory, represented))

    def put_entry(self, memory: Memory, entry: IndexEntry) -> None:
        """``put`` with what its text gives already read (``entry``: ``IndexEntry.of(memory,
        represented)``, made on a worker thread by an index build, ``HybridStore._build``):
        only the index's own structures are changed here."""
        corpus, timeline, held = self.corpus, self.timeline, self.held
        self.version += 1
        old = corpus.attrs(memory.id)
        key = entry.key
        represented = entry.represented
        if old:
            timeline.remove(old.get("group"), old.get("ts", 0.0), memory.id, old.get("seq", 0))
            seq = old.get("seq", 0)
            self._unkey(old.get("key"), memory.id)
        else:
            self.writes += 1
            seq = self.writes
        if represented or not (old and old.get("key") == key):
            self.fallback.remove(memory.id)  # made from another text (or not needed now)
        if represented or not self.track_fallback:
            self.fallback_pending.pop(memory.id, None)
        elif memory.id not in self.fallback:
            self.fallback_pending[memory.id] = (key, memory.content)
        ts = memory.created_at.timestamp() if memory.created_at else 0.0
        group = group_of(memory)
        attrs = {
            "key": key,
            "speaker_terms": entry.speaker_terms,
            "temporal": entry.temporal,
            "asks": entry.asks,
            "group": group,
            "ts": ts,
            "seq": seq,
            "represented": represented,
        }
        corpus.add(
            memory.id,
            entry.body,
            project_id=memory.project_id,
            type=memory.type,
            attrs=attrs,
            tokens=entry.tokens,
            state=memory.state,
        )
        timeline.add(group, ts, memory.id, seq)
        self.by_key.setdefault(key, set()).add(memory.id)
        if self.hold_records:
            held_record = self.records.get(memory.id)
            record = memory.model_copy(update={"embedding": None})
            if held_record is not None:  # counts only grow; a write's record may lag the access log
                record.access_count = max(record.access_count, held_record.access_count)
                if held_record.last_accessed is not None:
                    record.last_accessed = max(
                        record.last_accessed or held_record.last_accessed, held_record.last_accessed
                    )
            if held_record is not None:
                self.by_time.discard(_time_key(held_record))
            self.by_time.add(_time_key(record))
            self.records[memory.id] = record
        if not self.hold_vectors:
            return
        if memory.embedding is not None:
            held.put(memory.id, memory.embedding)  # an unusable vector drops the held one
        elif not (old and old.get("key") == key):
            held.remove(memory.id)  # same content keeps the vector held; new content has none yet

    def remove(self, memory_id: str) -> None:
        """Drop ``memory_id`` from every part of the index (nothing when absent)."""
        self.version += 1
        old = self.corpus.attrs(memory_id)
        if old:
            self.timeline.remove(old.get("group"), old.get("ts", 0.0), memory_id, old.get("seq", 0))
            self._unkey(old.get("key"), memory_id)
        self.corpus.remove(memory_id)
        self.held.remove(memory_id)
        self.fallback.remove(memory_id)
        self.fallback_pending.pop(memory_id, None)
        self._drop_record(memory_id)

    def _drop_record(self, memory_id: str) -> None:
        """Drop the held record of ``memory_id`` and its place in ``by_time`` (if held)."""
        record = self.records.pop(memory_id, None)
        if record is not None:
            self.by_time.discard(_time_key(record))

    def remove_where(self, project_id: str | None, types: tuple[MemoryType, ...] | None) -> None:
        """Drop the memories of ``project_id`` (None: any) and ``types`` (None: any; ``()``:
        none), as ``forget_by_scope`` deletes them."""
        if types == ():
            return
        self.version += 1
        for memory_id in self.corpus.remove_where(project_id, types):
            self.held.remove(memory_id)
            self.fallback.remove(memory_id)
            self.fallback_pending.pop(memory_id, None)
            self._drop_record(memory_id)
        tl = Timeline()
        by_key: dict[str, set[str]] = {}
        for memory_id in self.corpus.ids():
            a = self.corpus.attrs(memory_id)
            assert a is not None  # an id from corpus.ids() is indexed
            tl.add(a.get("group"), a.get("ts", 0.0), memory_id, a.get("seq", 0))
            by_key.setdefault(a["key"], set()).add(memory_id)
        self.timeline = tl
        self.by_key = by_key

    def _unkey(self, key: str | None, memory_id: str) -> None:
        """``memory_id`` no longer under content key ``key`` (nothing when ``key`` is None)."""
        if key is None:
            return
        ids = self.by_key.get(key)
        if ids is not None:
            ids.discard(memory_id)
            if not ids:
                del self.by_key[key]

    def same_content(
        self,
        content: str,
        project_id: str | None,
        types: Iterable[MemoryType] | None,
        states: Iterable[MemoryState] | None,
    ) -> list[str]:
        """The ids of the indexed memories whose content has the ``content_key`` of
        ``content`` (the caller compares the texts themselves), of ``project_id`` (None: any
        project), one of ``types`` and of ``states`` (None: any), in id order. One dict lookup
        and a check per memory with that key, whatever the user holds."""
        corpus = self.corpus
        ids = self.by_key.get(content_key(content), ())
        return sorted(i for i in ids if corpus.passes(i, project_id, types, states))

    def put_fallback(self, memory_id: str, key: str, vector) -> bool:
        """Hold the fallback model's vector of ``memory_id`` (a 1-D float array; ``None``: the
        fallback cannot embed this text, so none will be held), made from the text whose
        ``content_key`` is ``key``: only while that is still the indexed text of a memory the
        model cannot represent (a newer write wins and stays pending). The memory is no
        longer pending either way. Returns whether a vector is held now."""
        attrs = self.corpus.attrs(memory_id)
        if attrs is None or attrs.get("key") != key or attrs.get("represented") is not False:
            return False
        self.version += 1
        self.fallback_pending.pop(memory_id, None)
        if vector is None:
            self.fallback.remove(memory_id)
            return False
        return self.fallback.put(memory_id, vector)

    def apply(self, op: str, arg: Any, represented: Callable[[str], bool]) -> None:
        """One write: ``("add", Memory)``, ``("remove", id)``, ``("scope", (project_id,
        types))`` or ``("fallback", (id, content key, vector))`` (``put_fallback``)."""
        if op == "add":
            self.put(arg, represented(arg.content))
        elif op == "remove":
            self.remove(arg)
        elif op == "scope":
            self.remove_where(*arg)
        elif op == "fallback":
            self.put_fallback(*arg)

    def count_access(self, memory_ids: list[str], when) -> None:
        """One access of each held record among ``memory_ids`` (as ``record_access`` counts
        it in the store): ``access_count`` + 1, ``last_accessed`` = ``when`` (a later one kept)."""
        for memory_id in memory_ids:
            m = self.records.get(memory_id)
            if m is not None:
                m.access_count += 1
                m.last_accessed = when if m.last_accessed is None else max(m.last_accessed, when)

    def vector_mask(
        self,
        project_id: str | None,
        types: Iterable[MemoryType] | None,
        states: Iterable[MemoryState] | None,
        *,
        fallback: bool = False,
    ) -> np.ndarray:
        """The rows of ``held`` (``fallback``: of ``fallback``) that a vector search of this
        scope may return, as ``HeldVectors.top(..., allowed=...)`` takes them: indexed
        memories of ``project_id`` (None: any), ``types`` and ``states``
        (``BM25Corpus.passes``) whose text the model represents (an unrepresentable memory's
        cosine means nothing), or, for ``fallback``, does not. One pass over the held ids
        per scope, kept until the index or the row layout changes (``version``,
        ``HeldVectors.version``): the candidate searches of a batch's memories, and the
        searches between two writes, reuse it."""
        key = (project_id, tuple(types) if types else None, tuple(states) if states else None, fallback)
        vectors = self.fallback if fallback else self.held
        cached = self._masks.get(key)
        if cached is not None and cached[0] == self.version and cached[1] == vectors.version:
            return cached[2]
        corpus = self.corpus
        in_scope = corpus.scope_test(project_id, key[1], key[2])

        def keep(memory_id: str) -> bool:
            attrs = corpus.attrs(memory_id)
            return attrs is not None and (attrs.get("represented") is False) == fallback and in_scope(memory_id)

        mask = vectors.mask(keep)
        if len(self._masks) >= _MAX_MASKS:
            self._masks.clear()
        self._masks[key] = (self.version, vectors.version, mask)
        return mask

    def newest_first(
        self,
        project_id: str | None,
        types: Iterable[MemoryType] | None,
        states: Iterable[MemoryState] | None,
        offset: int,
        limit: int,
    ) -> tuple[list[str], int]:
        """One page of the ids of the held records of ``project_id`` (None: any project),
        ``types`` and ``states`` (None or empty: any), newest first as the stores list them
        (``created_at`` in epoch milliseconds, ``_records.to_ms``, as stored; none: 0; then the
        id, both descending): (the ``limit`` ids after the first ``offset``, how many there are
        in all). Nothing is sorted at a listing (ordering a 100,000-memory user's records at
        each listing held the loop ~100 ms): the records are kept in that order as they are
        written (``by_time``), the total comes from the corpus's tally per scope, and

        - a page of a scope that holds every record is cut by position (O(log n + limit));
        - the first page of a narrower scope walks from the newest record until it is full;
        - a later page of a narrower scope is cut from the scope's ids, listed once by one walk
          of every record and kept until the index changes (``version``), so a pager's pages
          cost one walk, not one each.

        ``([], 0)`` without held records."""
        wanted_types = frozenset(types) if types else None
        wanted_states = frozenset(states) if states else None
        if not self.hold_records:
            return [], 0
        total = self.corpus.count(project_id, wanted_types, wanted_states)
        if limit <= 0 or offset >= total:
            return [], total
        by_time = self.by_time
        if total == len(by_time):  # the scope holds every record: cut by position
            end = len(by_time) - offset
            return [i for _, i in reversed(by_time[max(end - limit, 0) : end])], total
        test = self.corpus.scope_test(project_id, wanted_types, wanted_states)
        if offset == 0:
            page: list[str] = []
            for _, memory_id in reversed(by_time):
                if test(memory_id):
                    page.append(memory_id)
                    if len(page) == limit:
                        break
            return page, total
        key = (self.version, project_id, wanted_types, wanted_states)
        if self._listing is None or self._listing[0] != key:
            self._listing = (key, [i for _, i in reversed(by_time) if test(i)])
        return self._listing[1][offset : offset + limit], total

    def record(self, memory_id: str) -> Memory | None:
        """A copy of the held record of ``memory_id`` with its held vector (as a list, the
        store's shape), None when the index lacks it (or holds no records)."""
        m = self.records.get(memory_id)
        if m is None:
            return None
        vec = self.held.get(memory_id)
        # the record's only mutable parts copied (its other fields are strings, numbers,
        # datetimes and enums): what a caller does to the copy never reaches the index,
        # at a fraction of a deep copy's cost (a curation write reads 8 records a memory)
        return m.model_copy(
            update={
                "embedding": None if vec is None else vec.tolist(),
                "metadata": copy.deepcopy(m.metadata) if m.metadata else {},
                "merged_from": list(m.merged_from),
            }
        )


class UserIndexes:
    """At most ``max_users`` ``UserIndex`` objects by user id (LRU; ``on_evict(user_id)``
    called for each one dropped). ``k1``/``b``: the BM25 parameters of new corpora."""

    def __init__(
        self,
        max_users: int = 1024,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        on_evict: Callable[[str], None] | None = None,
    ):
        if max_users < 1:
            raise ValueError("max_users must be ≥ 1")
        BM25Corpus(k1, b)  # validates
        self.max_users, self.k1, self.b = max_users, k1, b
        self._users: OrderedDict[str, UserIndex] = OrderedDict()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._users)

    def has_user(self, user_id: str) -> bool:
        """A built index of ``user_id`` is held."""
        ui = self._users.get(user_id)
        return ui is not None and ui.ready

    def get(self, user_id: str) -> UserIndex | None:
        """The user's index, built or being built (marks it recently used), else None."""
        ui = self._users.get(user_id)
        if ui is not None:
            self._users.move_to_end(user_id)
        return ui

    def ready(self, user_id: str) -> UserIndex | None:
        """The user's built index (marks it recently used), else None."""
        ui = self.get(user_id)
        return ui if ui is not None and ui.ready else None

    def corpus(self, user_id: str) -> BM25Corpus | None:
        """The corpus of the user's built index, else None."""
        ui = self.ready(user_id)
        return ui.corpus if ui is not None else None

    def put(self, user_id: str, ui: UserIndex) -> None:
        """Hold ``ui`` as ``user_id``'s, replacing any; drops the least recently used beyond
        ``max_users``."""
        self._users[user_id] = ui
        self._users.move_to_end(user_id)
        while len(self._users) > self.max_users:
            evicted, _ = self._users.popitem(last=False)
            if self._on_evict is not None:
                self._on_evict(evicted)

    def drop_user(self, user_id: str) -> None:
        """Forget the user's index (rebuilt from the store on next use)."""
        if self._users.pop(user_id, None) is not None and self._on_evict is not None:
            self._on_evict(user_id)

    def search(
        self, user_id: str, query: str, limit: int = 10, project_id: str | None = None, types=None
    ) -> list[tuple[str, float]]:
        """Top ``limit`` ``(memory_id, bm25_score)`` of a loaded user for ``query``, best
        first; ``[]`` when the user is not loaded."""
        corpus = self.corpus(user_id)
        if corpus is None or limit <= 0:
            return []
        return corpus.search(query, limit, project_id, types)
