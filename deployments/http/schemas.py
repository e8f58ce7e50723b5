"""Request bodies of the ``/v1/memory`` REST API and ``/v1/embeddings`` (pydantic), and the
error body every endpoint answers with.

Every field has the type of ``memory_core.sanitize`` for its kind (one place for each rule),
so an import line (``memory_core.migration.parse_import_line``) and ``POST /v1/memory``
refuse the same values, and every string of a body, at any depth, must be valid Unicode.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memory_core.sanitize import (
    MAX_CONTENT_BYTES,
    Content,
    ConversationId,
    Metadata,
    PastTime,
    ProjectId,
    Source,
    Text,
    check_json_text,
)
from memory_core.types import MemoryChanges, MemoryState, MemoryType, WriteOutcome

MAX_EMBEDDING_INPUTS = 256


class ErrorDetail(BaseModel):
    """``{"code", "message"}``: a stable machine-readable code and a human-readable message."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """The body of every error response: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class _Body(BaseModel):
    """Base of request bodies: unknown fields are refused, every string must be valid
    Unicode (checked on the raw input, so the error names the field)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return check_json_text(data, "body")


class NewMemory(_Body):
    """One memory to create; the owner is the caller (``x-authz-user-id``), never the body."""

    content: Content = Field(min_length=1, description=f"visible text, at most {MAX_CONTENT_BYTES} bytes UTF-8")
    type: MemoryType = MemoryType.SEMANTIC
    project_id: ProjectId | None = None
    metadata: Metadata = Field(default_factory=dict)
    importance: float = Field(0.5, ge=0, le=1)
    conversation_id: ConversationId | None = None
    source: Source = "api"
    created_at: PastTime | None = None
    """When the remembered thing happened (backfilling history, any date up to now, before
    1970 included); default now; not in the future (1 minute clock skew allowed); a naive time
    is taken as UTC, an aware one converted to UTC, where it must be representable
    (``sanitize.check_instant``); stored at millisecond precision."""


class CreateMemoriesRequest(_Body):
    """``POST /v1/memory``: at most ``global.limits.memories_per_request`` memories (default
    256; 413 beyond, checked by the endpoint: the bound is configuration) in a body of at most
    ``global.limits.memories_body_bytes``."""

    memories: list[NewMemory] = Field(min_length=1)


NO_SIMILARITY_FLOOR = -1.0
"""The cosine floor of a search that names no ``threshold``: every candidate passes."""


class SearchRequest(_Body):
    """``POST /v1/memory/search``: the caller's top ``limit`` memories for ``query``, ranked.

    Unset ``limit`` → ``default_retrieval_limit``. Unset ``threshold`` → no similarity floor:
    search is a ranking API and every hit reports its cosine ``similarity``, so a client cuts
    where it wants. ``threshold`` is inclusive: a memory whose reported ``similarity`` equals
    it is kept (both are compared as float32, the precision of the vectors). The configured
    cosine floors (``default_similarity_threshold``, a decision's ``similarity_threshold``)
    gate what chat requests *inject*, where an irrelevant memory costs prompt tokens; applied
    to search they would hide memories that hybrid retrieval finds lexically with a low cosine
    (README, "Measured")."""

    query: Text = Field(min_length=1, max_length=16384)
    limit: int | None = Field(None, gt=0, le=100)
    threshold: float | None = Field(None, ge=-1, le=1)
    types: list[MemoryType] | None = None
    project_id: ProjectId | None = None
    states: list[MemoryState] | None = Field(
        None, min_length=1, description="lifecycle states searched (default: active only)"
    )


class UpdateMemoryRequest(_Body):
    """``PATCH /v1/memory/{id}``: fields to change (content re-embeds)."""

    content: Content | None = Field(None, min_length=1)
    type: MemoryType | None = None
    project_id: ProjectId | None = None
    metadata: Metadata | None = None
    importance: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _no_nulls(self) -> UpdateMemoryRequest:
        nulls = [
            f
            for f in ("content", "type", "metadata", "importance")
            if f in self.model_fields_set and getattr(self, f) is None
        ]
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null")
        return self

    def changes(self) -> MemoryChanges:
        """The fields the client set (``project_id: null`` removes the project), validated as
        every update is (``MemoryChanges``). Raises ``InvalidInput``."""
        return MemoryChanges(**self.model_dump(exclude_unset=True))


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings`` (OpenAI shape; ``input`` a string or a list of strings)."""

    model_config = ConfigDict(extra="allow")

    input: Text | list[Text]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None
    """``base64``: each vector as the base64 of its little-endian float32 bytes (what the
    ``openai`` client asks for unless told otherwise); default ``float``: a list of numbers."""

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return check_json_text(data, "body")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


# --------------------------------------------------------------------------- response shapes
# (declared in the OpenAPI document; handlers build the JSON directly)
class MemoryOut(BaseModel):
    """A memory as the API returns it (``Memory.public()``: no vector)."""

    id: str
    type: MemoryType
    content: str
    user_id: str
    project_id: str | None = None
    source: str
    created_via: str
    conversation_id: str | None = None
    created_by_user_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    access_count: int
    last_accessed: datetime | None = None
    importance: float
    metadata: dict[str, Any]
    state: MemoryState
    superseded_by: str | None = None
    merged_into: str | None = None
    merged_from: list[str] = []
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None
    state_reason: str | None = None


class WriteOutcomeOut(BaseModel):
    """What a write did with one memory (``created``, ``reinforced``: the fact was already
    held by the record ``id``, ``refined``, ``quarantined``) and which memories it
    ``superseded``."""

    id: str
    outcome: WriteOutcome
    superseded: list[str] = []


class MemoriesOut(BaseModel):
    """``POST /v1/memory`` → 201: the memories that hold the facts (in order) and what each
    write did."""

    memories: list[MemoryOut]
    outcomes: list[WriteOutcomeOut] = []


class MemoryListOut(BaseModel):
    """A list of memories (``/history``: the versions of one fact, oldest first;
    ``/unmerge``: the originals back)."""

    memories: list[MemoryOut]


class ConsolidationOut(BaseModel):
    """``POST /v1/memory/consolidate``: what one pass over the caller did."""

    user_id: str
    examined: int
    groups: int
    merged: list[str]
    consolidated: int
    expired: int
    seconds: float


class SearchHit(MemoryOut):
    """A search result: the memory, its ranking ``score`` and its ``similarity`` (cosine;
    for text the model cannot represent, the lexical coverage of the query, see README).
    ``resolved_from``: the superseded or consolidated memory that matched, when this memory
    replaced it (search of ``active`` memories follows the version chain)."""

    score: float
    similarity: float
    resolved_from: str | None = None


class SearchOut(BaseModel):
    """``POST /v1/memory/search``."""

    memories: list[SearchHit]


class MemoryPage(BaseModel):
    """``GET /v1/memory``. ``unreadable``: ids of this page's records that the store holds but
    cannot read (``ListResult.unreadable``): counted in ``total``, not in ``memories``;
    ``DELETE /v1/memory/{id}`` removes one."""

    memories: list[MemoryOut]
    total: int
    limit: int
    offset: int
    unreadable: list[str] = []


class DeletedOut(BaseModel):
    """``DELETE /v1/memory`` (scope) and ``DELETE /v1/memory/{id}``."""

    deleted: int
    id: str | None = None


class EmbeddingOut(BaseModel):
    """One vector of ``POST /v1/embeddings``: numbers, or base64 (``encoding_format``)."""

    object: str
    index: int
    embedding: list[float] | str


class EmbeddingsOut(BaseModel):
    """``POST /v1/embeddings`` (OpenAI shape plus ``model_identity`` and ``truncated``)."""

    object: str
    data: list[EmbeddingOut]
    model: str
    model_identity: str
    truncated: list[bool]
    usage: dict[str, int]


class ModelOut(BaseModel):
    """One model of ``GET /v1/models`` (OpenAI ``model`` object; upstreams may add fields)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "model"


class ModelsOut(BaseModel):
    """``GET /v1/models``: the models of the configured upstreams."""

    object: str
    data: list[ModelOut]


class HealthOut(BaseModel):
    """``GET /health``: ``ok`` (200) or ``degraded`` (503) with the checks."""

    model_config = ConfigDict(extra="allow")

    status: str
    store: bool
    embedder: bool


# --------------------------------------------------------------------------- identity, admin
class MeOut(BaseModel):
    """``GET /v1/me``: the caller as the service sees it."""

    user_id: str
    role: Literal["user", "admin"]
    mode: Literal["trusted_header", "api_key"]


class UserOut(BaseModel):
    """One user of ``GET /v1/admin/users``: memories in every state, active API keys."""

    user_id: str
    memories: int
    keys: int


class UsersOut(BaseModel):
    """``GET /v1/admin/users``: one page of the users (``limit``/``offset``) and ``total``,
    the number of every user seen."""

    users: list[UserOut]
    total: int
    limit: int
    offset: int


class StatsOut(BaseModel):
    """``GET /v1/admin/stats``: users seen, every memory in the store by state and by type,
    active keys."""

    users: int
    memories: int
    by_state: dict[str, int]
    by_type: dict[str, int]
    keys: int


class CreateKeyRequest(_Body):
    """``POST /v1/admin/keys``: the key's owner, role and an optional label."""

    user_id: str = Field(min_length=1)
    role: Literal["user", "admin"] = "user"
    name: str | None = Field(None, max_length=200)


class KeyOut(BaseModel):
    """An API key's record (never the key): ``GET /v1/admin/keys``."""

    key_id: str
    user_id: str
    role: Literal["user", "admin"]
    name: str | None
    created_at: str
    revoked_at: str | None


class CreatedKeyOut(KeyOut):
    """``POST /v1/admin/keys``: the record and, this once, the key itself."""

    key: str


class KeysOut(BaseModel):
    """``GET /v1/admin/keys``."""

    keys: list[KeyOut]


class RevokedOut(BaseModel):
    """``DELETE /v1/admin/keys/{key_id}``."""

    revoked: str
    revoked_at: str | None
