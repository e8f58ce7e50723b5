"""Request bodies of the ``/v1/memory`` REST API and ``/v1/embeddings`` (pydantic), and the
error body every endpoint answers with.

Every field applies the rule of ``memory_core.sanitize`` for its kind (one place for each
rule), so an import line (``migration.parse_import_line``) and ``POST /v1/memory`` refuse the
same values, and every string of a body, at any depth, must be valid Unicode.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from .sanitize import (
    MAX_CONTENT_BYTES,
    MAX_LABEL_CHARS,
    MAX_SCOPE_ID_CHARS,
    check_conversation_id,
    check_json_text,
    check_json_value,
    check_label,
    check_project_id,
    check_text,
    clean_content,
)
from .types import MemoryType

MAX_MEMORIES_PER_REQUEST = 256
MAX_EMBEDDING_INPUTS = 256
MAX_METADATA_BYTES = 16 * 1024
"""Largest ``metadata`` accepted, as compact JSON in UTF-8 bytes (it travels with every read)."""


class ErrorDetail(BaseModel):
    """``{"code", "message"}``: a stable machine-readable code and a human-readable message."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """The body of every error response: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """``metadata`` unchanged if every value is stored losslessly (``sanitize.check_json_value``)
    and it serialises to at most ``MAX_METADATA_BYTES``; raises ``InvalidInput`` (a
    ``ValueError``) naming the offending path otherwise."""
    if metadata is None:
        return None
    check_json_value(metadata, "metadata")
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    return metadata


def check_not_future(when: datetime | None) -> datetime | None:
    """``when`` as an aware UTC-or-offset time (a naive one is taken as UTC); raises
    ``ValueError`` when it lies more than one minute (clock skew) in the future."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if when > datetime.now(timezone.utc) + timedelta(minutes=1):
        raise ValueError("created_at must not be in the future")
    return when


# the field types of request bodies, each checked by its one rule
Content = Annotated[str, AfterValidator(clean_content)]
"""Memory content: visible text, ≤ 16 KB UTF-8 (``sanitize.clean_content``; cleaned)."""
ProjectId = Annotated[str, Field(min_length=1, max_length=MAX_SCOPE_ID_CHARS), AfterValidator(check_project_id)]
ConversationId = Annotated[
    str, Field(min_length=1, max_length=MAX_SCOPE_ID_CHARS), AfterValidator(check_conversation_id)
]
Source = Annotated[str, Field(min_length=1, max_length=MAX_LABEL_CHARS), AfterValidator(lambda v: check_label(v, "source"))]
Metadata = Annotated[dict[str, Any], AfterValidator(check_metadata)]
Text = Annotated[str, AfterValidator(lambda v: check_text(v, "text"))]
PastTime = Annotated[datetime, AfterValidator(check_not_future)]


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
    is taken as UTC; stored at millisecond precision."""


class CreateMemoriesRequest(_Body):
    """``POST /v1/memory``."""

    memories: list[NewMemory] = Field(min_length=1, max_length=MAX_MEMORIES_PER_REQUEST)


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


class UpdateMemoryRequest(_Body):
    """``PATCH /v1/memory/{id}``: fields to change (content re-embeds)."""

    content: Content | None = Field(None, min_length=1)
    type: MemoryType | None = None
    project_id: ProjectId | None = None
    metadata: Metadata | None = None
    importance: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _no_nulls(self) -> "UpdateMemoryRequest":
        nulls = [f for f in ("content", "type", "metadata", "importance") if f in self.model_fields_set and getattr(self, f) is None]
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields the client set (``project_id: null`` removes the project)."""
        return self.model_dump(exclude_unset=True)


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings`` (OpenAI shape; ``input`` a string or a list of strings)."""

    model_config = ConfigDict(extra="allow")

    input: Text | list[Text]
    model: str | None = None
    encoding_format: str | None = Field(None, pattern="^float$")

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


class MemoriesOut(BaseModel):
    """``POST /v1/memory`` → 201."""

    memories: list[MemoryOut]


class SearchHit(MemoryOut):
    """A search result: the memory, its ranking ``score`` and its ``similarity`` (cosine;
    for text the model cannot represent, the lexical coverage of the query, see README)."""

    score: float
    similarity: float


class SearchOut(BaseModel):
    """``POST /v1/memory/search``."""

    memories: list[SearchHit]


class MemoryPage(BaseModel):
    """``GET /v1/memory``."""

    memories: list[MemoryOut]
    total: int
    limit: int
    offset: int


class DeletedOut(BaseModel):
    """``DELETE /v1/memory`` (scope) and ``DELETE /v1/memory/{id}``."""

    deleted: int
    id: str | None = None


class EmbeddingOut(BaseModel):
    """One vector of ``POST /v1/embeddings``."""

    object: str
    index: int
    embedding: list[float]


class EmbeddingsOut(BaseModel):
    """``POST /v1/embeddings`` (OpenAI shape plus ``model_identity`` and ``truncated``)."""

    object: str
    data: list[EmbeddingOut]
    model: str
    model_identity: str
    truncated: list[bool]
    usage: dict[str, int]


class HealthOut(BaseModel):
    """``GET /health``: ``ok`` (200) or ``degraded`` (503) with the checks."""

    model_config = ConfigDict(extra="allow")

    status: str
    store: bool
    embedder: bool
