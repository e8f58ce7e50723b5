"""The HTTP edge's header rules other than identity (that is ``caller.read_caller``):
the browser rules every state-changing request meets (``BrowserGuard``), the headers never
forwarded upstream (``forward_exclusions``) and the OpenAPI parameters of the headers the
service reads (``CALLER_HEADERS``, ``CHAT_HEADERS``)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from memory_core import sanitize
from memory_core.access import AUTHORIZATION_HEADER, UNSAFE_METHODS, Authenticator, check_body_type, check_same_origin
from memory_core.errors import MemoryError_
from memory_core.sanitize import ROLE_HEADER, USER_HEADER, parse_origin

from .errors import memory_error

JSON_LINES_PATHS = frozenset({"/v1/memory/import"})
"""The routes whose body is JSON lines (``access.check_body_type``)."""


def _first(value: str | None) -> str | None:
    """The first of a comma-separated header's values (``X-Forwarded-*`` after several proxies)."""
    return value.split(",")[0].strip() if value else None


def own_origins(request: Request) -> set[str]:
    """The service's origins as ``request`` reaches it (``sanitize.parse_origin`` form): the
    request's scheme and ``Host``, and the ``X-Forwarded-Proto``/``X-Forwarded-Host`` a proxy
    in front set (a browser page cannot add these to a cross-origin request without a CORS
    preflight, so they need no trust)."""
    scheme = request.url.scheme
    host = request.headers.get("host")
    candidates = {(scheme, host), (_first(request.headers.get("x-forwarded-proto")) or scheme, host)}
    forwarded = _first(request.headers.get("x-forwarded-host"))
    if forwarded:
        candidates |= {(s, forwarded) for s, _ in candidates}
    origins = {parse_origin(f"{s}://{h}") for s, h in candidates if h}
    return {o for o in origins if o is not None}


def route_path(scope: Scope) -> str:
    """The request's path inside the application (without the Serve route prefix, ``root_path``)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def check_browser_rules(request: Request, allowed_origins: Collection[str]) -> None:
    """The rules every state-changing request meets before any route: the same-origin rule
    (``access.check_same_origin``, 403) and the body type (``access.check_body_type``, 415;
    JSON lines on ``JSON_LINES_PATHS``)."""
    headers = request.headers
    check_same_origin(
        request.method, headers.get("sec-fetch-site"), headers.get("origin"), own_origins(request), allowed_origins
    )
    check_body_type(request.method, headers.get("content-type"), route_path(request.scope) in JSON_LINES_PATHS)


_ALLOWED_ORIGINS: dict[str, frozenset[str]] = {"origins": frozenset()}


def configure_allowed_origins(origins: Collection[str]) -> None:
    """Make ``origins`` (``access.allowed_origins``) this process's allowed cross-origin
    origins, read by ``BrowserGuard``. Called by the ingress replica's constructor, as
    ``limits.configure_limits`` is (why a module function: see there)."""
    _ALLOWED_ORIGINS["origins"] = frozenset(origins)


def configured_allowed_origins() -> frozenset[str]:
    """The origins ``configure_allowed_origins`` set (none before)."""
    return _ALLOWED_ORIGINS["origins"]


class BrowserGuard:
    """Plain ASGI middleware (no response relay, so streamed answers pass untouched):
    ``check_browser_rules`` on every state-changing request before any route, its error in
    the usual shape. ``allowed_origins`` returns the origins allowed besides the service's own
    (default: ``configured_allowed_origins``, set by the ingress from
    ``access.allowed_origins``; none when unset)."""

    def __init__(self, app: ASGIApp, allowed_origins: Callable[[], Collection[str]] = configured_allowed_origins):
        self.app = app
        self._allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in UNSAFE_METHODS:
            request = Request(scope)
            try:
                check_browser_rules(request, self._allowed_origins())
            except MemoryError_ as e:
                response = await memory_error(request, e)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def forward_exclusions(auth: Authenticator) -> frozenset[str]:
    """Request headers never forwarded to an upstream beyond the usual ones: in ``api_key``
    mode the caller's key is this service's credential, not the upstream's."""
    return frozenset({AUTHORIZATION_HEADER}) if auth.api_key_mode else frozenset()


def _header(name: str, description: str) -> dict:
    """The OpenAPI parameter object of an optional string header ``name``."""
    return {"name": name, "in": "header", "required": False, "schema": {"type": "string"}, "description": description}


CALLER_HEADERS = [
    _header(USER_HEADER, "trusted_header mode: the caller, set by the gateway from its authentication"),
    _header(ROLE_HEADER, "trusted_header mode: the caller's role (user, admin), set by the gateway"),
]
"""The OpenAPI parameters every operation declares."""
CHAT_HEADERS = [
    _header(
        sanitize.PROJECT_HEADER, "Project scope of the memories read and written (project id rule, ≤ 256 characters)"
    ),
    _header(sanitize.CONVERSATION_HEADER, "Conversation of the turn (conversation id rule, ≤ 256 characters)"),
    _header(sanitize.DISABLE_HEADER, "true/1/yes: no memory for this request"),
]
"""The OpenAPI parameters of the chat endpoint."""
