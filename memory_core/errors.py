"""Errors raised by memory_core. Every one maps to a stable ``code`` used in HTTP error bodies."""

from __future__ import annotations


class MemoryError_(Exception):
    """Base class of memory_core errors; ``code`` is the machine-readable error code."""

    code = "memory_error"
    http_status = 500


class InvalidInput(MemoryError_, ValueError):
    """Input that violates the contract (empty user id, bad limit, oversized content...)."""

    code = "invalid_request"
    http_status = 400


class MemoryNotFound(MemoryError_, KeyError):
    """No memory with that id (or it belongs to another user: indistinguishable on purpose)."""

    code = "memory_not_found"
    http_status = 404

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return str(self.args[0]) if self.args else "memory not found"


class DuplicateMemory(MemoryError_):
    """A memory with this id already exists; the stored original is kept unchanged."""

    code = "duplicate_memory"
    http_status = 409


class StoreClosed(MemoryError_, RuntimeError):
    """The store was closed; no data operation is accepted any more."""

    code = "store_closed"
    http_status = 503


class StoreUnavailable(MemoryError_, RuntimeError):
    """The backend could not be reached (after retries)."""

    code = "store_unavailable"
    http_status = 503


class EmbeddingIdentityMismatch(MemoryError_, ValueError):
    """A vector produced by another embedding model identity was offered to a store."""

    code = "embedding_identity_mismatch"
    http_status = 409


class EmbeddingUnavailable(MemoryError_, RuntimeError):
    """The embedding model could not be reached (a remote endpoint, or the Embedder
    deployment while a replica restarts) or answered an error."""

    code = "embedding_unavailable"
    http_status = 503


class MigrationError(MemoryError_, RuntimeError):
    """A migration could not be completed or verified (e.g. counts differ afterwards)."""

    code = "migration_failed"
    http_status = 500


class ConfigError(MemoryError_, ValueError):
    """Invalid configuration; the message names the offending key."""

    code = "invalid_config"
    http_status = 500


ERROR_CLASSES: tuple[type[MemoryError_], ...] = (
    InvalidInput,
    MemoryNotFound,
    DuplicateMemory,
    StoreClosed,
    StoreUnavailable,
    EmbeddingIdentityMismatch,
    EmbeddingUnavailable,
    MigrationError,
    ConfigError,
)
"""Every concrete error of memory_core: the registry ``error_from_wire`` rebuilds from."""
_BY_CODE = {cls.code: cls for cls in ERROR_CLASSES}


def error_to_wire(error: MemoryError_) -> dict[str, str]:
    """``{"code", "message"}`` of a memory_core error, for crossing process boundaries."""
    return {"code": error.code, "message": str(error)}


def error_from_wire(wire: dict[str, str]) -> MemoryError_:
    """Rebuild the memory_core error a ``error_to_wire`` dict describes."""
    cls = _BY_CODE.get(wire.get("code", ""), MemoryError_)
    return cls(wire.get("message", ""))
