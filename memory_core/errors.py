"""Errors raised by memory_core. Every one has a stable ``code`` (the ``error.code`` of HTTP
error bodies); the HTTP status of each is decided at the edge (``deployments.http.errors``)."""

from __future__ import annotations


class MemoryError_(Exception):
    """Base class of memory_core errors; ``code`` is the machine-readable error code."""

    code = "memory_error"


class InvalidInput(MemoryError_, ValueError):
    """Input that violates the contract (empty user id, bad limit, oversized content...)."""

    code = "invalid_request"


class UnsupportedMediaType(MemoryError_, ValueError):
    """A state-changing request (POST, PUT, PATCH, DELETE) without the body type its endpoint
    takes: JSON, or JSON lines for an import (a plain HTML form, which another site can make a
    browser send, has none of them)."""

    code = "unsupported_media_type"


class MemoryNotFound(MemoryError_, KeyError):
    """No memory with that id (or it belongs to another user: indistinguishable on purpose)."""

    code = "memory_not_found"

    def __str__(self) -> str:  # KeyError quotes its argument; keep the plain message
        return str(self.args[0]) if self.args else "memory not found"


class DuplicateMemory(MemoryError_):
    """A memory with this id already exists; the stored original is kept unchanged."""

    code = "duplicate_memory"


class StateConflict(MemoryError_):
    """The memory's state no longer allows the operation (e.g. an unmerge whose originals
    were all deleted or restored meanwhile); nothing was changed."""

    code = "state_conflict"


class StoreClosed(MemoryError_, RuntimeError):
    """The store was closed; no data operation is accepted any more."""

    code = "store_closed"


class StoreUnavailable(MemoryError_, RuntimeError):
    """The backend could not be reached (after retries)."""

    code = "store_unavailable"


class EmbeddingIdentityMismatch(MemoryError_, ValueError):
    """A vector produced by another embedding model identity was offered to a store."""

    code = "embedding_identity_mismatch"


class EmbeddingUnavailable(MemoryError_, RuntimeError):
    """The embedding model could not be reached (a remote endpoint, or the Embedder
    deployment while a replica restarts) or answered an error."""

    code = "embedding_unavailable"


class MigrationError(MemoryError_, RuntimeError):
    """A migration could not be completed or verified (e.g. counts differ afterwards)."""

    code = "migration_failed"


class ConfigError(MemoryError_, ValueError):
    """Invalid configuration; the message names the offending key."""

    code = "invalid_config"


class Unauthenticated(MemoryError_):
    """No caller identity where one is needed (no ``Authorization`` key in ``api_key`` mode,
    no ``x-authz-user-id`` in ``trusted_header`` mode)."""

    code = "unauthorized"


class InvalidApiKey(Unauthenticated):
    """A malformed, unknown or revoked API key."""

    code = "invalid_api_key"


class Forbidden(MemoryError_, PermissionError):
    """An identified caller asking for what its role does not allow (another user's
    memories, an admin endpoint)."""

    code = "forbidden"


class UntrustedIdentity(Forbidden):
    """Identity headers from a peer that is not one of the trusted proxies."""

    code = "untrusted_identity"


class AuditUnavailable(MemoryError_, RuntimeError):
    """The audit log cannot be written or read (``memory_core.audit.AuditLog``): an admin
    action or an access to another user's memories is refused rather than served unaudited."""

    code = "audit_unavailable"


class KeyNotFound(MemoryError_, KeyError):
    """No API key with that id."""

    code = "key_not_found"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "API key not found"


class RateLimited(MemoryError_):
    """Too many writes by one user; ``retry_after_s``: whole seconds until one is allowed."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # crosses Ray process boundaries intact
        return (type(self), (str(self), self.retry_after_s))


class RequestTooLarge(MemoryError_):
    """A request that asks for more work than one request may (a body over its byte limit,
    more memories or import lines than one request takes, more writes than the whole write
    limit): refused before any store work. The message names the limit and its setting."""

    code = "request_too_large"


ERROR_CLASSES: tuple[type[MemoryError_], ...] = (
    InvalidInput,
    UnsupportedMediaType,
    MemoryNotFound,
    DuplicateMemory,
    StateConflict,
    StoreClosed,
    StoreUnavailable,
    EmbeddingIdentityMismatch,
    EmbeddingUnavailable,
    MigrationError,
    ConfigError,
    Unauthenticated,
    InvalidApiKey,
    Forbidden,
    UntrustedIdentity,
    KeyNotFound,
    RateLimited,
    RequestTooLarge,
    AuditUnavailable,
)
"""Every concrete error of memory_core (``deployments.http.errors.STATUS`` has a status for
each; a test holds the two together)."""
