"""Errors at the HTTP edge: the one table from exception to status, and the handlers that
answer every error as ``{"error": {"code", "message"}}``.

``STATUS`` maps each memory_core error class (``memory_core.errors.ERROR_CLASSES``) to its
HTTP status; the ``code`` is the class's own. A 503 carries ``Retry-After``. Ray's own
failures (an actor restarting, a replica replaced) are 503 ``service_unavailable``; an error
of ours raised in another process arrives as a ``RayTaskError`` that is also that error and
keeps its status. Anything else is a 500 ``internal_error`` (logged), which no input may
cause (``e2e/test_openapi_fuzz.py``).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray.exceptions import RayError
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_core.errors import (
    AuditUnavailable,
    ConfigError,
    DuplicateMemory,
    EmbeddingIdentityMismatch,
    EmbeddingUnavailable,
    Forbidden,
    InvalidApiKey,
    InvalidInput,
    KeyNotFound,
    MemoryError_,
    MemoryNotFound,
    MigrationError,
    RateLimited,
    RequestTooLarge,
    StateConflict,
    StoreClosed,
    StoreUnavailable,
    Unauthenticated,
    UnsupportedMediaType,
    UntrustedIdentity,
)

from .schemas import ErrorBody

log = logging.getLogger("ray.serve")

RETRY_AFTER_S = 1
"""``Retry-After`` (seconds) of every 503: a store shard or Embedder replica restarting."""

STATUS: dict[type[MemoryError_], int] = {
    InvalidInput: 400,
    Unauthenticated: 401,
    InvalidApiKey: 401,
    Forbidden: 403,
    UntrustedIdentity: 403,
    MemoryNotFound: 404,  # absent, or another user's: indistinguishable on purpose
    KeyNotFound: 404,
    UnsupportedMediaType: 415,
    DuplicateMemory: 409,
    StateConflict: 409,
    RequestTooLarge: 413,
    RateLimited: 429,
    EmbeddingIdentityMismatch: 409,
    StoreClosed: 503,
    StoreUnavailable: 503,
    EmbeddingUnavailable: 503,
    AuditUnavailable: 503,  # an audited request is refused while the audit log fails (fail closed)
    MigrationError: 500,
    ConfigError: 500,
}
"""HTTP status of each memory_core error (the one table)."""

DOCUMENTED_ERRORS = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "Invalid input (the message names the field)"),
        (
            401,
            "No caller identity (no API key / x-authz-user-id) where one is needed, or an unknown or revoked API key",
        ),
        (
            403,
            "The caller's role does not allow this (another user's memories, an admin endpoint), or a cross-site request",
        ),
        (404, "No such memory of the caller"),
        (409, "Conflict (an id in use, vectors of another model identity, a state that no longer allows the change)"),
        (
            413,
            "The request is larger than one request may be (its body, memories or import lines; the message names the limit)",
        ),
        (415, "A state-changing request without a JSON content type (JSON lines for an import)"),
        (
            429,
            "Too many writes by this user or requests without identity from this address, or the ingress queue is full (Retry-After)",
        ),
        (503, "A store shard, the embedder or the audit log is unavailable for a moment (Retry-After)"),
    )
}
"""The error responses every operation declares in the OpenAPI document."""

UPSTREAM_ERRORS = {
    502: {"model": ErrorBody, "description": "The upstream could not be reached or broke the connection"},
    504: {"model": ErrorBody, "description": "The upstream did not answer within its timeout_s"},
}
"""The further error responses of the operations that call the upstream model (its own error
statuses pass through as it sent them)."""


def status_of(error: MemoryError_) -> int:
    """The HTTP status of ``error`` (its class or nearest registered base in ``STATUS``)."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(status: int, code: str, message: str, retry_after_s: int | None = None) -> JSONResponse:
    """``{"error": {"code", "message"}}`` with ``status``; a 503 carries ``Retry-After``
    (``RETRY_AFTER_S``), as does any response given ``retry_after_s``."""
    if retry_after_s is None and status == 503:
        retry_after_s = RETRY_AFTER_S
    headers = {"retry-after": str(retry_after_s)} if retry_after_s is not None else None
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}}, headers=headers)


async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        msg = str(e.get("msg")).removeprefix("Value error, ")  # our rules' messages name the field
        parts.append(f"{loc}: {msg}" if loc and not msg.startswith(("body.", loc)) else msg)
    return error_response(400, "invalid_request", "; ".join(parts) or "invalid request")


async def memory_error(_: Request | None, exc: MemoryError_) -> JSONResponse:
    """The response of a memory_core error: ``STATUS`` and the error's ``code``."""
    return error_response(status_of(exc), exc.code, str(exc), getattr(exc, "retry_after_s", None))


async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    if exc.status_code == 400:  # e.g. a body Starlette could not parse
        code = "invalid_request"
    return error_response(exc.status_code, code, str(exc.detail))


async def ray_error(request: Request | None, exc: RayError) -> JSONResponse:
    """A Ray failure on the way to a store shard or the Embedder: 503 with ``Retry-After``.
    An error raised by our own code in another process arrives as a ``RayTaskError`` that is
    also that error: it keeps its own status and message."""
    if isinstance(exc, MemoryError_):
        cause = getattr(exc, "cause", None)
        return await memory_error(request, cause if isinstance(cause, MemoryError_) else exc)
    log.warning("backend unavailable: %r", exc)
    return error_response(503, "service_unavailable", f"a backend is unavailable ({type(exc).__name__}); retry")


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error")
    return error_response(500, "internal_error", "internal error")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` as ``{"error": {"code", "message"}}`` (see the module)."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(MemoryError_, memory_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RayError, ray_error)
    app.add_exception_handler(Exception, _unexpected)
