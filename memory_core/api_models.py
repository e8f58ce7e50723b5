"""Request bodies of the ``/v1/memory`` REST API and ``/v1/embeddings`` (pydantic)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .types import MemoryType

MAX_MEMORIES_PER_REQUEST = 256
MAX_EMBEDDING_INPUTS = 256


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


MAX_METADATA_BYTES = 16 * 1024
"""Largest ``metadata`` accepted, as compact JSON in UTF-8 bytes (it travels with every read)."""


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """``metadata`` unchanged if it serialises to at most ``MAX_METADATA_BYTES``; raises
    ``ValueError`` otherwise (also for non-finite numbers, which JSON cannot carry)."""
    if metadata is None:
        return None
    try:
        size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())
    except ValueError as e:
        raise ValueError(f"metadata is not valid JSON: {e}") from e
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

    _metadata_size = field_validator("metadata")(classmethod(lambda cls, v: check_metadata(v)))

    _not_future = field_validator("created_at")(classmethod(lambda cls, v: check_not_future(v)))


class CreateMemoriesRequest(_Body):
    """``POST /v1/memory``."""

    memories: list[NewMemory] = Field(min_length=1, max_length=MAX_MEMORIES_PER_REQUEST)


NO_SIMILARITY_FLOOR = -1.0
"""The cosine floor of a search that names no ``threshold``: every candidate passes."""


class SearchRequest(_Body):
    """``POST /v1/memory/search``: the caller's top ``limit`` memories for ``query``, ranked.

    Unset ``limit`` → ``default_retrieval_limit``. Unset ``threshold`` → no similarity floor:
    search is a ranking API and every hit reports its cosine ``similarity``, so a client cuts
    where it wants. The configured cosine floors (``default_similarity_threshold``, a
    decision's ``similarity_threshold``) gate what chat requests *inject*, where an irrelevant
    memory costs prompt tokens; applied to search they would hide memories that hybrid
    retrieval finds lexically with a low cosine (README, "Measured")."""

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

    _metadata_size = field_validator("metadata")(classmethod(lambda cls, v: check_metadata(v)))

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

    input: str | list[str]
    model: str | None = None
    encoding_format: str | None = Field(None, pattern="^float$")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)
