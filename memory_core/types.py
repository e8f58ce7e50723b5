"""Memory records and the option/result shapes of the store contract.

Times are timezone-aware UTC ``datetime``; vectors are ``list[float]`` of the embedding
model's dimension, L2-normalised; scores are cosine similarity in [-1, 1].
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from enum import Enum
from typing import Any, ClassVar

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .clock import to_millis as to_millis  # re-exported: the package's one clock (clock.py)
from .clock import utcnow as utcnow
from .config import DEFAULT_LEXICAL_WEIGHT
from .errors import InvalidInput
from .sanitize import (
    check_conversation_id,
    check_instant,
    check_json_value,
    check_label,
    check_project_id,
    clean_content,
    new_memory_id,
    require_memory_id,
    require_user_id,
)

API_CREATED_VIA = "api"
"""``created_via`` of a memory a caller writes through ``POST /v1/memory`` (the default): the
one write a caller waits for memory by memory, so curation serves its second opinion
before background writes' (``curation.opinion_vectors``, lanes)."""

IMPORT_CREATED_VIA = "import"
"""``created_via`` of every memory an import writes for a user (``migration.parse_import_line``);
curation merges such a memory into a record that holds its fact instead of reinforcing it,
so a re-import changes nothing (``stores.curating``)."""

WINDOW_CREATED_VIA = "auto_store_window"
"""``created_via`` of the conversation windows auto-store writes (``chat.extract``); curation
screens them line by line (``curation.screening.screen_window``)."""


class MemoryType(str, Enum):
    """Kinds of memory (after the CoALA taxonomy: Sumers et al., 2023).

    - ``semantic``: facts and preferences ("my locker code is 4817").
    - ``procedural``: how-tos and standing instructions.
    - ``episodic``: what happened in a conversation (auto-stored turns).
    """

    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    EPISODIC = "episodic"


class MemoryState(str, Enum):
    """Where a memory is in its life (only ``active`` memories are injected into chats):

    - ``active``: true as far as the service knows.
    - ``superseded``: a newer memory contradicts it (same subject, new value);
      ``superseded_by`` names that memory and ``valid_to`` when it stopped being true. Kept
      for history; an operator can restore it.
    - ``consolidated``: merged with near-duplicates into one memory (``merged_into``); kept,
      and the merge can be undone.
    - ``quarantined``: its text reads as instructions to the model (a prompt-injection
      shape); never injected, visible to operators, who can release it.
    """

    ACTIVE = "active"
    SUPERSEDED = "superseded"
    CONSOLIDATED = "consolidated"
    QUARANTINED = "quarantined"


class Memory(BaseModel):
    """One memory record, owned by ``user_id`` and optionally scoped by ``project_id``.

    Provenance: ``source`` (where the content came from, e.g. ``conversation``, ``api``),
    ``created_via`` (which pipeline wrote it, e.g. ``auto_store``, ``api``, ``import``),
    ``conversation_id`` and ``created_by_user_id`` (who created it: an operator may write
    on behalf of a user). ``embedding`` is never returned by the HTTP API.

    ``id``: when not given, a fresh id scoped to ``user_id`` (``sanitize.new_memory_id``: 32
    lowercase hex). Stores refuse ids of another format (``sanitize.MEMORY_ID_PATTERN``).

    Lifecycle (see ``MemoryState``): ``state``; ``superseded_by`` (the memory that replaced
    this one) with ``valid_from``/``valid_to`` (when it held: ``valid_from`` defaults to
    ``created_at``); ``merged_into``/``merged_from`` (consolidation); ``state_reason`` (why
    it left ``active``, e.g. the rule that fired); ``expires_at`` (retention: never injected
    after it, purged by the consolidation loop).
    """

    model_config = ConfigDict(use_enum_values=False, validate_assignment=False)

    id: str = Field(min_length=1, max_length=128)
    type: MemoryType = MemoryType.SEMANTIC
    content: str
    user_id: str
    project_id: str | None = None
    source: str = "api"
    created_via: str = API_CREATED_VIA
    conversation_id: str | None = None
    created_by_user_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    access_count: int = Field(default=0, ge=0)
    last_accessed: datetime | None = None
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    state: MemoryState = MemoryState.ACTIVE
    superseded_by: str | None = None
    merged_into: str | None = None
    merged_from: list[str] = Field(default_factory=list)
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None
    state_reason: str | None = None
    embedding: list[float] | None = None
    embedding_identity: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _issue_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "id" not in data and isinstance(data.get("user_id"), str):
            return {**data, "id": new_memory_id(data["user_id"])}
        return data

    @field_validator("created_at", "updated_at", "last_accessed", "valid_from", "valid_to", "expires_at")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            return v.replace(tzinfo=UTC)
        return v

    def public(self) -> dict[str, Any]:
        """JSON-ready dict for the HTTP API (no vector)."""
        return self.model_dump(mode="json", exclude={"embedding", "embedding_identity"})

    def expired(self, now: datetime) -> bool:
        """Whether ``expires_at`` has passed at ``now``."""
        return self.expires_at is not None and self.expires_at <= now

    def injectable(self, now: datetime) -> bool:
        """``active`` and not expired: the only memories a chat request may be given."""
        return self.state == MemoryState.ACTIVE and not self.expired(now)


def as_float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (the precision of stored vectors), as a
    Python float. Every reported similarity is such a value."""
    return float(np.float32(value))


def passes_floor(similarity: float, threshold: float) -> bool:
    """Whether ``similarity`` reaches the inclusive floor ``threshold``, both compared as
    float32: a search repeated with ``threshold`` equal to a similarity it reported keeps
    that memory."""
    return as_float32(similarity) >= as_float32(threshold)


class RetrieveOptions(BaseModel):
    """Options of ``MemoryStore.retrieve``.

    ``user_id`` must be non-empty (never "all users"). ``states``: the lifecycle states
    searched (default ``active`` only; expired memories are never returned). ``threshold`` is
    inclusive and applies to cosine similarity. ``query`` is the text (used by the lexical side of hybrid retrieval
    and to embed when ``embedding`` is absent). ``hybrid`` enables lexical+vector fusion
    where the store supports it. With ``hybrid``: ``second_hop`` runs the store's second hop
    (``retrieval.hop_weight`` > 0, ``memory_core.retrieval.feedback``); ``diversity`` (in
    [0, 1]; 0: off) is the weight of maximal marginal relevance over the best ``2 × limit``
    results (``memory_core.retrieval.diversity``): a near-copy of a better result ranks lower.
    The service sets both from ``retrieval`` for searches and chats; curation's candidate
    search leaves them off: it looks for near-copies of one statement.
    """

    model_config = ConfigDict(frozen=True)

    user_id: str
    query: str = ""
    states: tuple[MemoryState, ...] = (MemoryState.ACTIVE,)
    embedding: list[float] | None = None
    embedding_identity: str | None = None
    project_id: str | None = None
    types: tuple[MemoryType, ...] | None = None
    limit: int = 5
    threshold: float = 0.0
    hybrid: bool = False
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    temporal_boost: bool = False
    second_hop: bool = False
    diversity: float = 0.0

    def admits(self, memory: Memory, now: datetime, states: tuple[MemoryState, ...] | None = None) -> bool:
        """Whether ``memory`` lies in the caller's whole scope: owned by ``user_id``; in
        ``project_id`` when one is given (``None``: every project of the user, and memories of
        no project); of one of ``types`` when given; in ``states`` (default: ``self.states``);
        not expired at ``now`` (UTC). The one rule every search result, and every memory a
        link (``superseded_by``, ``merged_into``) leads a search to, must pass."""
        return (
            memory.user_id == self.user_id
            and (self.project_id is None or memory.project_id == self.project_id)
            and (not self.types or memory.type in self.types)
            and memory.state in (self.states if states is None else states)
            and not memory.expired(now)
        )


MAX_LIST_LIMIT = 1000
"""Most memories one ``ListQuery`` page asks for."""


LIFECYCLE_IDS = ("superseded_by", "merged_into", "merged_from", "state_reason")


def check_lifecycle(fields: dict[str, Any]) -> None:
    """The lifecycle references of a record are memory ids (``superseded_by``,
    ``merged_into``, each of ``merged_from``) and ``state_reason`` is text of at most 4096
    characters. Raises ``InvalidInput``."""
    for key in ("superseded_by", "merged_into"):
        if fields.get(key) is not None:
            require_memory_id(fields[key], key)
    for ref in fields.get("merged_from") or []:
        require_memory_id(ref, "merged_from")
    reason = fields.get("state_reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 4096):
        raise InvalidInput("state_reason must be text of at most 4096 characters")


def _refusal(error: ValidationError, unknown: str) -> InvalidInput:
    """The ``InvalidInput`` a store value's ``ValidationError`` stands for: ``unknown``
    followed by the sorted names of the fields the type does not have, when there are any;
    else the first ``InvalidInput`` a validator raised; else ``<field>: <pydantic message>``."""
    details = error.errors()
    extra = sorted(str(d["loc"][0]) for d in details if d["type"] == "extra_forbidden" and d["loc"])
    if extra:
        return InvalidInput(f"{unknown}: {extra}")
    for d in details:
        cause = (d.get("ctx") or {}).get("error")
        if isinstance(cause, InvalidInput):
            return cause
    first = details[0]
    where = ".".join(str(part) for part in first["loc"])
    return InvalidInput(f"{where}: {first['msg']}" if where else first["msg"])


class _StoreValue(BaseModel):
    """Base of the values a store call takes (``ListQuery``, ``MemoryScope``,
    ``MemoryChanges``): frozen, no field of another name, and constructing one with
    keywords raises ``InvalidInput`` (a memory_core error: HTTP 400 ``invalid_request``),
    never pydantic's ``ValidationError``. They pickle, so they cross the store pool's actor
    hop as they are."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    refused_fields: ClassVar[str] = "unknown fields"
    """How the ``InvalidInput`` message names fields the type does not have."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _refusal(e, type(self).refused_fields) from None


def _kinds(types: Any) -> Any:
    """An empty collection of types (or states) means no filter: ``None``."""
    return None if types is not None and not types else types


class _OwnedScope(_StoreValue):
    """The fields a scope of one user's memories has (``MemoryScope``, ``ListQuery``; two
    classes, so a list query is never taken for a deletion scope):

    - ``user_id``: the owner, a non-empty id (``sanitize.require_user_id``); never "all
      users".
    - ``project_id``: only memories of that project (``sanitize.check_project_id``);
      ``None``: every project and memories of none.
    - ``types``: only memories of one of these types; ``None`` (or empty): every type.
    """

    user_id: str
    project_id: str | None = None
    types: tuple[MemoryType, ...] | None = None

    @field_validator("user_id")
    @classmethod
    def _owner(cls, v: str) -> str:
        return require_user_id(v)

    @field_validator("project_id")
    @classmethod
    def _project(cls, v: str | None) -> str | None:
        return check_project_id(v)

    @field_validator("types", mode="before")
    @classmethod
    def _no_empty(cls, v: Any) -> Any:
        return _kinds(v)


class MemoryScope(_OwnedScope):
    """Which memories of one user ``Store.forget_by_scope`` deletes: ``user_id``'s, of
    ``project_id`` and of ``types`` when given (see ``_OwnedScope``). Raises ``InvalidInput``
    (empty or malformed ids, unknown fields or types)."""


class ListQuery(_OwnedScope):
    """One page of ``Store.list``: the memories of ``user_id`` in the scope (``project_id``,
    ``types``: see ``MemoryScope``) and in one of ``states`` (``None`` or empty: every
    lifecycle state), newest first (``created_at`` descending, then ``id`` descending: the
    only order), ``limit`` of them (1..``MAX_LIST_LIMIT``, default 50) after skipping
    ``offset`` (≥ 0). Raises ``InvalidInput`` (those bounds, and what ``MemoryScope``
    refuses)."""

    states: tuple[MemoryState, ...] | None = None
    limit: int = 50
    offset: int = 0

    @field_validator("states", mode="before")
    @classmethod
    def _every_state(cls, v: Any) -> Any:
        return _kinds(v)

    @field_validator("limit")
    @classmethod
    def _page_size(cls, v: int) -> int:
        if not (0 < v <= MAX_LIST_LIMIT):
            raise InvalidInput(f"limit must be in 1..{MAX_LIST_LIMIT}")
        return v

    @field_validator("offset")
    @classmethod
    def _skip(cls, v: int) -> int:
        if v < 0:
            raise InvalidInput("offset must be ≥ 0")
        return v

    def scope(self) -> MemoryScope:
        """The ``MemoryScope`` of this query (owner, project, types)."""
        return MemoryScope(user_id=self.user_id, project_id=self.project_id, types=self.types)


_NOT_NULL = ("content", "type", "metadata", "importance", "source", "state", "merged_from")
"""``MemoryChanges`` fields a memory always has a value of: ``None`` is refused, not a
removal."""


class MemoryChanges(_StoreValue):
    """The changes ``Store.update`` applies to one memory; only the fields given change
    (``None`` given for ``project_id``, ``conversation_id``, ``superseded_by``,
    ``merged_into``, ``valid_to``, ``expires_at``, ``state_reason`` clears it; the others
    cannot be ``None``). Every rule a changed field must pass is checked here, once:

    - ``content``: cleaned (``sanitize.clean_content``: control characters removed, outer
      whitespace stripped, non-empty, at most ``MAX_CONTENT_BYTES`` UTF-8 bytes); the store
      re-embeds it.
    - ``type``, ``state``: members of ``MemoryType``, ``MemoryState``.
    - ``project_id``, ``conversation_id``: the scope id rule (``sanitize``).
    - ``metadata``: JSON stored losslessly (``sanitize.check_json_value``).
    - ``importance``: in [0, 1].
    - ``source``: a provenance label (``sanitize.check_label``).
    - ``superseded_by``, ``merged_into``, ``merged_from``: memory ids; ``state_reason``: text
      of at most 4096 characters (``check_lifecycle``).
    - ``valid_to``, ``expires_at``: UTC (naive taken as UTC), in the representable range
      (``sanitize.check_instant``), truncated to milliseconds.

    Raises ``InvalidInput``: ``fields not updatable: [...]`` for any other field name, else
    the rule's message.
    """

    refused_fields: ClassVar[str] = "fields not updatable"

    content: str | None = None
    type: MemoryType | None = None
    project_id: str | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = None
    source: str | None = None
    conversation_id: str | None = None
    state: MemoryState | None = None
    superseded_by: str | None = None
    merged_into: str | None = None
    merged_from: tuple[str, ...] | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None
    state_reason: str | None = None

    @field_validator("content")
    @classmethod
    def _clean(cls, v: str | None) -> str | None:
        return None if v is None else clean_content(v)

    @field_validator("project_id", "conversation_id")
    @classmethod
    def _scope_id(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_conversation_id(v) if info.field_name == "conversation_id" else check_project_id(v)

    @field_validator("source")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        return None if v is None else check_label(v, "source")

    @field_validator("metadata")
    @classmethod
    def _json(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if v is None else check_json_value(v)

    @field_validator("importance")
    @classmethod
    def _unit_interval(cls, v: float | None) -> float | None:
        if v is not None and not (0.0 <= v <= 1.0):
            raise InvalidInput("importance must be in [0, 1]")
        return v

    @field_validator("valid_to", "expires_at")
    @classmethod
    def _instant(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        return None if v is None else to_millis(check_instant(v, str(info.field_name)))

    @model_validator(mode="after")
    def _whole(self) -> MemoryChanges:
        nulls = [f for f in _NOT_NULL if f in self.model_fields_set and getattr(self, f) is None]
        if nulls:
            raise InvalidInput(f"{', '.join(nulls)} cannot be null")
        check_lifecycle({k: getattr(self, k) for k in LIFECYCLE_IDS})
        return self

    def as_dict(self) -> dict[str, Any]:
        """The fields given, name → validated value (``merged_from`` as a list), in field
        order: what ``update`` writes over the stored record."""
        return {
            k: (list(v) if k == "merged_from" else v)
            for k in type(self).model_fields
            if k in self.model_fields_set
            for v in (getattr(self, k),)
        }

    def with_changes(self, **fields: Any) -> MemoryChanges:
        """These changes and ``fields`` (which win), validated again. Raises
        ``InvalidInput``."""
        return MemoryChanges(**{**self.as_dict(), **fields})


class ScoredMemory(BaseModel):
    """A retrieved memory. ``score`` is what results are ranked by (cosine similarity for plain
    vector retrieval; the fused score for hybrid retrieval); ``similarity`` is always cosine.
    ``resolved_from``: the id of the superseded (or consolidated) memory that matched the query
    when ``memory`` is the one that replaced it (``CuratingStore.retrieve``); else ``None``."""

    memory: Memory
    score: float
    similarity: float
    resolved_from: str | None = None


class ListResult(BaseModel):
    """One page of ``MemoryStore.list``: newest first, ``total`` = all matching records.
    ``unreadable``: the ids of the page's records that the backend holds but could not be
    read (``stores._records.decode_rows``: e.g. a row written by an older version with a
    value no longer accepted); they are counted in ``total``, left out of ``memories``, and
    can still be deleted by id or by scope. A pager advances by ``rows``."""

    memories: list[Memory]
    total: int
    unreadable: list[str] = Field(default_factory=list)

    @property
    def rows(self) -> int:
        """Records this page covered: ``len(memories) + len(unreadable)`` (the next page's
        ``offset`` is this page's plus ``rows``)."""
        return len(self.memories) + len(self.unreadable)


class Everyone(Enum):
    """The scope of the admin aggregate ``Store.counts(EVERYONE)``: every user's memories in
    the store, as numbers only (no record, no user id leaves the store). An enum member, so it
    keeps its identity across Ray's pickling; any other scope is one user id."""

    EVERYONE = "everyone"


EVERYONE = Everyone.EVERYONE


class MemoryCounts(BaseModel):
    """``Store.counts``: how many memories are in each lifecycle state and of each type
    (every state), every member of both enums present (0 when none). ``total`` = the sum of
    either."""

    by_state: dict[MemoryState, int]
    by_type: dict[MemoryType, int]

    @model_validator(mode="after")
    def _every_member(self) -> MemoryCounts:
        self.by_state = {s: int(self.by_state.get(s, 0)) for s in MemoryState}
        self.by_type = {t: int(self.by_type.get(t, 0)) for t in MemoryType}
        return self

    @property
    def total(self) -> int:
        return sum(self.by_state.values())

    @classmethod
    def of(cls, rows: Iterable[tuple[MemoryState, MemoryType]]) -> MemoryCounts:
        """Counts of ``(state, type)`` pairs (backends that count records client-side)."""
        by_state: dict[MemoryState, int] = {}
        by_type: dict[MemoryType, int] = {}
        for state, kind in rows:
            by_state[state] = by_state.get(state, 0) + 1
            by_type[kind] = by_type.get(kind, 0) + 1
        return cls(by_state=by_state, by_type=by_type)


class WriteOutcome(str, Enum):
    """What a write did with one memory (``Store.write``):

    - ``created``: stored as a new record;
    - ``reinforced``: the owner already held this fact; that record was reinforced (access
      count, last seen, importance) and is returned instead;
    - ``refined``: the owner held this fact with less detail; that record now says what the new
      memory says (same id) and was reinforced;
    - ``quarantined``: stored, but ``quarantined`` (it reads as instructions to the model);
    - ``dropped``: not stored: every sentence held a secret or personal value whose policy is
      ``drop`` (``memory_core.redaction``); the result's memory is the refused one with its
      content withheld (``[redacted]``), and its id holds nothing.
    """

    CREATED = "created"
    REINFORCED = "reinforced"
    REFINED = "refined"
    QUARANTINED = "quarantined"
    DROPPED = "dropped"


class WriteResult(BaseModel):
    """The outcome of writing one memory: the ``memory`` that now holds the fact, the
    ``outcome``, and the ids of the memories it ``superseded`` (now ``superseded``)."""

    memory: Memory
    outcome: WriteOutcome = WriteOutcome.CREATED
    superseded: list[str] = Field(default_factory=list)
