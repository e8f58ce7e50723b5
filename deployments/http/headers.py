"""A request's identity and headers, interpreted once at the HTTP edge.

``identify`` establishes the caller (``memory_core.access.Authenticator``: a trusted
gateway's ``x-authz-user-id``/``x-authz-role``, or an API key); ``request_context`` turns the
headers into the typed ``memory_core.sanitize.RequestContext`` with that caller (the rules
live in ``sanitize``). In ``api_key`` mode the client's identity headers are dropped before
anything reads them."""

from __future__ import annotations

import dataclasses

from starlette.requests import Request

from memory_core import sanitize
from memory_core.access import AUTHORIZATION_HEADER, Authenticator, Principal
from memory_core.errors import Forbidden, InvalidInput
from memory_core.sanitize import GATEWAY_SECRET_HEADER, ROLE_HEADER, USER_HEADER, RequestContext

IDENTITY_HEADERS = frozenset({USER_HEADER, ROLE_HEADER, GATEWAY_SECRET_HEADER})
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
FORM_CONTENT_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})
"""The body types a cross-site HTML form can send without a CORS preflight."""


def _items(request: Request, auth: Authenticator) -> list[tuple[str, str]]:
    """The request's headers; without the client's identity headers in ``api_key`` mode."""
    items = list(request.headers.items())
    if auth.api_key_mode:
        items = [(k, v) for k, v in items if k.lower() not in IDENTITY_HEADERS]
    return items


def identify(request: Request, auth: Authenticator) -> Principal | None:
    """The caller of ``request`` (``Authenticator.identify``), ``None`` without identity.
    Raises ``InvalidApiKey`` (401), ``UntrustedIdentity`` (403) or ``InvalidInput`` (400)."""
    headers = sanitize.normalize_headers(_items(request, auth))
    peer = request.client.host if request.client else None
    return auth.identify(headers, peer)


def request_context(request: Request, auth: Authenticator, principal: Principal | None) -> RequestContext:
    """The request's ``RequestContext`` (``sanitize.request_context``) whose ``user_id`` is
    ``principal``'s. Raises ``InvalidInput`` (400) for a repeated or malformed memory header."""
    context = sanitize.request_context(_items(request, auth))
    return dataclasses.replace(context, user_id=principal.user_id if principal else None)


def refuse_cross_site(request: Request) -> None:
    """Cross-site request forgery guard (a browser signed in to a cookie-based gateway must
    not let another site write, delete or chat): an unsafe method a browser marks
    ``Sec-Fetch-Site: cross-site`` is refused (``Forbidden``, 403), and so is a body of a type
    a plain HTML form can send (``InvalidInput``, 400). Non-browser clients send neither."""
    if request.method not in UNSAFE_METHODS:
        return
    if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
        raise Forbidden("cross-site requests are refused")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in FORM_CONTENT_TYPES:
        raise InvalidInput(f"content-type {content_type} is not accepted (send JSON, or JSONL for an import)")


def forward_exclusions(auth: Authenticator) -> frozenset[str]:
    """Request headers never forwarded to an upstream beyond the usual ones: in ``api_key``
    mode the caller's key is this service's credential, not the upstream's."""
    return frozenset({AUTHORIZATION_HEADER}) if auth.api_key_mode else frozenset()


def _header(name: str, description: str) -> dict:
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
