"""Memory records and the option/result shapes of the store contract.

Times are timezone-aware UTC ``datetime``; vectors are ``list[float]`` of the embedding
model's dimension, L2-normalised; scores are cosine similarity in [-1, 1].
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def utcnow() -> datetime:
    """Current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def new_memory_id() -> str:
    """A fresh random memory id (UUID4 hex, 32 chars)."""
    return uuid.uuid4().hex


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
    """

    model_config = ConfigDict(use_enum_values=False, validate_assignment=False)

    id: str = Field(default_factory=new_memory_id, min_length=1, max_length=128)
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

    @field_validator("created_at", "updated_at", "last_accessed")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            return v.replace(tzinfo=timezone.utc)
        return v

    def public(self) -> dict[str, Any]:
        """JSON-ready dict for the HTTP API (no vector)."""
        return self.model_dump(mode="json", exclude={"embedding", "embedding_identity"})


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
    lexical_weight: float = 0.3
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
