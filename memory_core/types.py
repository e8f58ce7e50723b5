"""Memory records and the option/result shapes of the store contract.

Times are timezone-aware UTC ``datetime``; vectors are ``list[float]`` of the embedding
model's dimension, L2-normalised; scores are cosine similarity in [-1, 1].
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .config import DEFAULT_LEXICAL_WEIGHT
from .sanitize import new_memory_id


def utcnow() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(UTC)


class MemoryType(str, Enum):
    """Kinds of memory (after the CoALA taxonomy: Sumers et al., 2023).

    - ``semantic``: facts and preferences ("my locker code is 4817").
    - ``procedural``: how-tos and standing instructions.
    - ``episodic``: what happened in a conversation (auto-stored turns).
    """

    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    EPISODIC = "episodic"


class Memory(BaseModel):
    """One memory record, owned by ``user_id`` and optionally scoped by ``project_id``.

    Provenance: ``source`` (where the content came from, e.g. ``conversation``, ``api``),
    ``created_via`` (which pipeline wrote it, e.g. ``auto_store``, ``api``, ``import``),
    ``conversation_id`` and ``created_by_user_id`` (who created it: an operator may write
    on behalf of a user). ``embedding`` is never returned by the HTTP API.

    ``id``: when not given, a fresh id scoped to ``user_id`` (``sanitize.new_memory_id``: 32
    lowercase hex). Stores refuse ids of another format (``sanitize.MEMORY_ID_PATTERN``).
    """

    model_config = ConfigDict(use_enum_values=False, validate_assignment=False)

    id: str = Field(min_length=1, max_length=128)
    type: MemoryType = MemoryType.SEMANTIC
    content: str
    user_id: str
    project_id: str | None = None
    source: str = "api"
    created_via: str = "api"
    conversation_id: str | None = None
    created_by_user_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    access_count: int = Field(default=0, ge=0)
    last_accessed: datetime | None = None
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    embedding: list[float] | None = None
    embedding_identity: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _issue_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and "id" not in data and isinstance(data.get("user_id"), str):
            return {**data, "id": new_memory_id(data["user_id"])}
        return data

    @field_validator("created_at", "updated_at", "last_accessed")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            return v.replace(tzinfo=UTC)
        return v

    def public(self) -> dict[str, Any]:
        """JSON-ready dict for the HTTP API (no vector)."""
        return self.model_dump(mode="json", exclude={"embedding", "embedding_identity"})


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

    ``user_id`` must be non-empty (never "all users"). ``threshold`` is inclusive and applies
    to cosine similarity. ``query`` is the text (used by the lexical side of hybrid retrieval
    and to embed when ``embedding`` is absent). ``hybrid`` enables lexical+vector fusion
    where the store supports it.
    """

    model_config = ConfigDict(frozen=True)

    user_id: str
    query: str = ""
    embedding: list[float] | None = None
    embedding_identity: str | None = None
    project_id: str | None = None
    types: tuple[MemoryType, ...] | None = None
    limit: int = 5
    threshold: float = 0.0
    hybrid: bool = False
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    temporal_boost: bool = False


class ScoredMemory(BaseModel):
    """A retrieved memory. ``score`` is what results are ranked by (cosine similarity for plain
    vector retrieval; the fused score for hybrid retrieval); ``similarity`` is always cosine."""

    memory: Memory
    score: float
    similarity: float


class ListResult(BaseModel):
    """One page of ``MemoryStore.list``: newest first, ``total`` = all matching records."""

    memories: list[Memory]
    total: int
