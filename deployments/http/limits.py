"""Request body bounds at the HTTP edge (``global.limits``, README "Limits").

``BodyLimit`` is a pure ASGI middleware: before the application (FastAPI's body parsing
included) sees a request, it looks up the route's byte limit (``body_limit``), refuses a
``Content-Length`` above it at once, and otherwise reads the body itself, counting the bytes
as they arrive (a chunked body has no length to check) and refusing it as soon as the count
passes the limit. The refusal is 413 ``request_too_large`` whose message names the limit and
its configuration key; the application is not called, so no store work happens. A body within
its limit is handed to the application unchanged (buffered: at most the limit in memory).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from memory_core.config import LimitsSettings

from .errors import error_response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_POST_LIMITS = {
    "/v1/chat/completions": "chat_body_bytes",
    "/v1/memory": "memories_body_bytes",
    "/v1/memory/import": "import_body_bytes",
    "/v1/memory/search": "search_body_bytes",
}
"""``LimitsSettings`` field of each POST route with a limit of their own."""
_MEMORY_PATH = "/v1/memory/"


def body_limit(limits: LimitsSettings, method: str, path: str) -> tuple[int, str]:
    """The byte limit of a request's body and the name of its ``global.limits`` key:
    ``(bytes, key)``. The POST routes of ``_POST_LIMITS`` and ``PATCH /v1/memory/{id}`` have
    limits of their own; every other request has ``other_body_bytes``. Plain string
    comparisons (a trailing slash ignored), no pattern."""
    route = path.rstrip("/")
    key = _POST_LIMITS.get(route) if method == "POST" else None
    if method == "PATCH" and route.startswith(_MEMORY_PATH) and "/" not in route[len(_MEMORY_PATH) :]:
        key = "update_body_bytes"
    key = key or "other_body_bytes"
    return getattr(limits, key), key


def _too_large(method: str, path: str, limit: int, key: str) -> Any:
    return error_response(
        413,
        "request_too_large",
        f"the body of {method} {path} is larger than allowed: the limit is {limit} bytes (global.limits.{key})",
    )


def _declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length`` as a number; ``None`` when absent or malformed (the
    server refuses a malformed one; counting catches any body anyway)."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) <= 20 else None
    return None


class ConfiguredLimits:
    """The ``LimitsSettings`` of this process's ingress (``settings``, ``None`` until it
    starts); calling it returns them (``BodyLimit``'s ``limits``)."""

    def __init__(self) -> None:
        self.settings: LimitsSettings | None = None

    def __call__(self) -> LimitsSettings | None:
        return self.settings


REQUEST_LIMITS = ConfiguredLimits()
"""This process's ``global.limits``, set by the ingress replica (``configure_limits``) and read
by ``BodyLimit``."""


def configure_limits(settings: LimitsSettings) -> None:
    """Make ``settings`` this process's request limits (``REQUEST_LIMITS``). Called by the
    ingress replica's constructor: a function of this module, so that the call reaches this
    module's ``REQUEST_LIMITS`` in the replica's process. Ray Serve serves a pickled copy of
    the FastAPI application and ships the deployment class by value: an object the
    constructor reached through its own globals would be a copy that the served application's
    middleware never reads."""
    REQUEST_LIMITS.settings = settings


class BodyLimit:
    """ASGI middleware bounding request bodies (see the module). ``limits`` returns the
    current ``LimitsSettings`` (default: ``REQUEST_LIMITS``, set when the ingress replica
    starts) or ``None`` before that (then the defaults apply)."""

    def __init__(self, app: ASGIApp, limits: Callable[[], LimitsSettings | None] = REQUEST_LIMITS):
        self.app = app
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope.get("path", "")
        limit, key = body_limit(self._limits() or LimitsSettings(), method, path)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _too_large(method, path, limit, key)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body ended
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(method, path, limit, key)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then what the server has next (a disconnect)

        await self.app(scope, replay, send)
