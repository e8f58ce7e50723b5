"""Request bodies of the ``/v1/memory`` REST API and ``/v1/embeddings`` (pydantic)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .types import MemoryType

MAX_MEMORIES_PER_REQUEST = 256
MAX_EMBEDDING_INPUTS = 256


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NewMemory(_Body):
    """One memory to create; the owner is the caller (``x-authz-user-id``), never the body."""

    content: str = Field(min_length=1)
    type: MemoryType = MemoryType.SEMANTIC
    project_id: str | None = Field(None, min_length=1, max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict)
    importance: float = Field(0.5, ge=0, le=1)
    conversation_id: str | None = Field(None, max_length=256)
    source: str = Field("api", min_length=1, max_length=64)
    created_at: datetime | None = None
    """When the remembered thing happened (backfilling history); default now; not in the
    future (1 minute clock skew allowed); a naive time is taken as UTC."""

    @field_validator("created_at")
    @classmethod
    def _not_future(cls, v: datetime | None) -> datetime | None:
        if v is None:
            return None
        if v.tzinfo is None:
            v = v.replace(tzinfo=timezone.utc)
        if v > datetime.now(timezone.utc) + timedelta(minutes=1):
            raise ValueError("created_at must not be in the future")
        return v


class CreateMemoriesRequest(_Body):
    """``POST /v1/memory``."""

    memories: list[NewMemory] = Field(min_length=1, max_length=MAX_MEMORIES_PER_REQUEST)


class SearchRequest(_Body):
    """``POST /v1/memory/search``; unset ``limit``/``threshold`` use the global defaults."""

    query: str = Field(min_length=1, max_length=16384)
    limit: int | None = Field(None, gt=0, le=100)
    threshold: float | None = Field(None, ge=-1, le=1)
    types: list[MemoryType] | None = None
    project_id: str | None = Field(None, min_length=1, max_length=256)


class UpdateMemoryRequest(_Body):
    """``PATCH /v1/memory/{id}``: fields to change (content re-embeds)."""

    content: str | None = Field(None, min_length=1)
    type: MemoryType | None = None
    project_id: str | None = Field(None, min_length=1, max_length=256)
    metadata: dict[str, Any] | None = None
    importance: float | None = Field(None, ge=0, le=1)

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings`` (OpenAI shape; ``input`` a string or a list of strings)."""

    model_config = ConfigDict(extra="allow")

    input: str | list[str]
    model: str | None = None
    encoding_format: str | None = Field(None, pattern="^float$")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)
