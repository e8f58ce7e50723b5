"""A request's headers, interpreted once at the HTTP edge: ``request_context`` turns them
into the typed ``memory_core.sanitize.RequestContext`` (the rules live in ``sanitize``), and
``caller`` requires the caller for the memory endpoints."""

from __future__ import annotations

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from memory_core import sanitize
from memory_core.sanitize import USER_HEADER, RequestContext


def request_context(request: Request) -> RequestContext:
    """The request's ``RequestContext`` (``sanitize.request_context``). Raises
    ``InvalidInput`` (400) for a repeated or malformed memory header."""
    return sanitize.request_context(request.headers.items())


def caller(request: Request) -> str:
    """The trusted caller id from ``x-authz-user-id`` (set by the gateway's auth); 401 if
    absent, 400 if repeated or malformed."""
    user_id = request_context(request).user_id
    if user_id is None:
        raise StarletteHTTPException(401, f"missing {USER_HEADER} header")
    return user_id


def _header(name: str, description: str) -> dict:
    return {"name": name, "in": "header", "required": False, "schema": {"type": "string"}, "description": description}


CALLER_HEADERS = [
    _header(USER_HEADER, "The caller, set by the gateway from its authentication (memory endpoints: required)")
]
"""The OpenAPI parameter every operation declares."""
CHAT_HEADERS = [
    _header(
        sanitize.PROJECT_HEADER, "Project scope of the memories read and written (project id rule, ≤ 256 characters)"
    ),
    _header(sanitize.CONVERSATION_HEADER, "Conversation of the turn (conversation id rule, ≤ 256 characters)"),
    _header(sanitize.DISABLE_HEADER, "true/1/yes: no memory for this request"),
]
"""The OpenAPI parameters of the chat endpoint."""
