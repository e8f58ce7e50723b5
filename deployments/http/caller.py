"""The caller of a request: its headers normalised once, its identity established from them.

``read_caller`` is the one place a request's headers are interpreted
(``sanitize.normalize_headers``, once per request) and its caller identified
(``access.Authenticator.identify``, which applies the owner id rule to the user id); the
chat route's ``read_chat_caller`` adds the memory scope (``sanitize.request_context``) from
the same normalised headers, with the identified user id. Everything after takes the
returned ``Caller`` and ``RequestContext``. In ``api_key`` mode the client's identity
headers are dropped before anything reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import Request

from memory_core import sanitize
from memory_core.access import Authenticator, Principal
from memory_core.sanitize import GATEWAY_SECRET_HEADER, ROLE_HEADER, USER_HEADER, RequestContext

IDENTITY_HEADERS = frozenset({USER_HEADER, ROLE_HEADER, GATEWAY_SECRET_HEADER})
"""The headers a trusted gateway sets; the client's own are dropped in ``api_key`` mode."""


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``principal`` (``None``: no identity), ``headers`` (every header
    by lower-case name, ``sanitize.normalize_headers``; without the identity headers in
    ``api_key`` mode) and ``peer`` (the TCP peer's address, ``None`` when unknown)."""

    principal: Principal | None
    headers: Mapping[str, str]
    peer: str | None

    @property
    def user_id(self) -> str | None:
        """The authenticated user id, ``None`` without identity."""
        return self.principal.user_id if self.principal is not None else None


def read_caller(request: Request, auth: Authenticator) -> Caller:
    """``request``'s headers normalised (once) and its caller identified from them
    (``Authenticator.identify``). Raises ``InvalidInput`` (400: a repeated identity or
    memory header, one that is not UTF-8, a malformed user id or role), ``InvalidApiKey``
    (401) or ``UntrustedIdentity`` (403)."""
    items = request.headers.items()
    if auth.api_key_mode:
        items = [(k, v) for k, v in items if k.lower() not in IDENTITY_HEADERS]
    headers = sanitize.normalize_headers(items)
    peer = request.client.host if request.client else None
    return Caller(principal=auth.identify(headers, peer), headers=headers, peer=peer)


def read_chat_caller(request: Request, auth: Authenticator) -> tuple[Caller, RequestContext]:
    """``read_caller``, and the chat request's ``RequestContext`` read from the same
    normalised headers with the caller's user id (``sanitize.request_context``: the project
    and conversation id rules, the disable flag). Raises as ``read_caller``, and
    ``InvalidInput`` (400) for a malformed ``x-project-id``/``x-conversation-id``."""
    caller = read_caller(request, auth)
    return caller, sanitize.request_context(caller.headers, caller.user_id)


def admit_anonymous(caller: Caller, auth: Authenticator) -> None:
    """``Authenticator.admit_anonymous`` for a caller without identity: 401 when the policy
    ``access.anonymous`` does not let it through (always in ``api_key`` mode), 429 beyond its
    rate limit."""
    auth.admit_anonymous(caller.headers, caller.peer)
