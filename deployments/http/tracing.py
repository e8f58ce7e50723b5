"""Each request's root span (``memory_core.tracing``) at the HTTP edge.

``ChatTracing`` (pure ASGI middleware, outermost) opens the root span (kind SERVER) of each
request, with the client's W3C ``traceparent``/``tracestate`` as its parent when it sends one
(else a new trace), and keeps it open until the response's last byte (a stream's whole
relay): ``chat`` for ``POST /v1/chat/completions``, and for every other route
``<METHOD> <route template>`` (``GET /v1/memory/{memory_id}``: the template, never the path,
which holds memory ids). The store shard and Embedder calls a request makes are its child
spans (the store pool and the Embedder carry the context across the Ray hops). Its
attributes: ``http.request.method``, ``http.route`` (the template), ``http.response.status_code``
and, for chat, what memory did (``chat_attributes``, added by the route). ``/health`` and the
review page's static answer, and every request when tracing is off, pass through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opentelemetry.trace import Status, StatusCode

from memory_core.chat.pipeline import PreparedChat
from memory_core.tracing import remote_span, tracing_enabled, user_attributes

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
CHAT_PATH = "/v1/chat/completions"


def _trace_headers(scope: Scope) -> dict[str, str]:
    """The request's ``traceparent``/``tracestate`` headers (latin-1), first of each."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        key = name.decode("latin-1").lower()
        if key in ("traceparent", "tracestate") and key not in out:
            out[key] = value.decode("latin-1")
    return out


UNTRACED_PATHS = frozenset({"/health", "/ui"})
"""Paths whose requests make no span (health checks every few seconds, a static page)."""


class ChatTracing:
    """ASGI middleware: the root span around each request (module docstring); the status
    code of the response is set on it, and a 5xx marks it as an error."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope.get("type") != "http" or scope.get("path") in UNTRACED_PATHS or not tracing_enabled():
            await self.app(scope, receive, send)
            return
        method = str(scope.get("method", ""))
        chat = method == "POST" and scope.get("path") == CHAT_PATH
        attributes = {"http.request.method": method}
        if chat:
            attributes["http.route"] = CHAT_PATH
        with remote_span("chat" if chat else method, _trace_headers(scope), attributes, new_trace=True) as root:

            async def send_traced(message: Message) -> None:
                if message.get("type") == "http.response.start":
                    status = int(message.get("status", 0))
                    root.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        root.set_attribute("error.type", str(status))
                        root.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, send_traced)
            finally:
                template = getattr(scope.get("route"), "path", None)
                if not chat and isinstance(template, str):  # the route matched: its template names the span
                    root.update_name(f"{method} {template}")
                    root.set_attribute("http.route", template)


def chat_attributes(prepared: PreparedChat) -> dict[str, Any]:
    """What memory did for a chat request, as span attributes: ``memory.decision``,
    ``memory.injected`` (count), ``memory.skipped`` (the reason, when skipped) and, with
    ``tracing.record_user_ids``, ``enduser.id``. Never text or memory ids."""
    out: dict[str, Any] = {
        "memory.decision": prepared.policy.decision_name or "",
        "memory.injected": len(prepared.injected),
    }
    if prepared.skipped:
        out["memory.skipped"] = prepared.skipped
    out.update(user_attributes(prepared.user_id))
    return out
