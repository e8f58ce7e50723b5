"""Recording audited requests (``memory_core.audit``) at the HTTP edge, for every route by
construction rather than route by route.

A request is audited when it is an admin action (any ``/v1/admin/*`` route, or a route that
asks ``MemoryIngress._admin`` for the admin role) or acts on another user's memories (a
``user_id`` query parameter naming someone else than the caller). Two pieces:

- ``AuditRecorder.bind``, called where the ingress establishes the caller (``_caller`` and
  ``_admin``): it notes the caller on the request and refuses an audited request with
  ``AuditUnavailable`` (503) before the route does anything while the audit log is failing
  (fail closed: admin powers are not used unaudited);
- ``AuditHook``, plain ASGI middleware around the application: once the answer is sent it
  appends one ``AuditEntry`` with the status and error code. A request refused before any
  route ran (a body over its limit, a cross-site write, a validation error) is recorded too
  when its caller can be identified; a request without identity (401) is not.

"Failing" is learnt from appends, not probed per request (a probe on the request path would
hold the replica's event loop while another process holds the database's lock): an append
that fails after the answer cannot refuse that request any more, so it is counted
(``memory_audit_append_failures``) and the entry is written to the replica's log at ERROR
level; from then on audited requests are refused until a background probe
(``AuditLog.check_writable`` every ``RECOVERY_PROBE_S``) finds the log writable again.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_core.access import Authenticator, Principal
from memory_core.audit import Actor, AuditEntry, AuditLog
from memory_core.errors import AuditUnavailable, InvalidInput, MemoryError_
from memory_core.sanitize import is_memory_id, require_user_id

from ..request_log import current_request_id
from .caller import read_caller
from .headers import route_path

log = logging.getLogger("ray.serve")

ADMIN_PREFIX = "/v1/admin/"
OWNER_PARAMETER = "user_id"
"""The query parameter that names the owner of the memories acted on (``ingress.OwnerQuery``)."""
STATE_KEY = "audit"
"""Where a request's ``AuditNote`` lives in its ASGI scope's ``state``."""
MAX_ERROR_BODY = 4096
"""Bytes of an error answer read for its ``error.code``."""
MAX_ADDRESS_CHARS = 64
RECOVERY_PROBE_S = 1.0
"""Seconds between checks of a failing audit log."""

ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/v1/memory"): "memory.create",
    ("GET", "/v1/memory"): "memory.list",
    ("DELETE", "/v1/memory"): "memory.delete_scope",
    ("POST", "/v1/memory/search"): "memory.search",
    ("GET", "/v1/memory/export"): "memory.export",
    ("POST", "/v1/memory/import"): "memory.import",
    ("POST", "/v1/memory/consolidate"): "memory.consolidate",
    ("GET", "/v1/memory/{memory_id}/history"): "memory.history",
    ("GET", "/v1/memory/{memory_id}/events"): "memory.events",
    ("POST", "/v1/memory/{memory_id}/restore"): "memory.restore",
    ("POST", "/v1/memory/{memory_id}/unmerge"): "memory.unmerge",
    ("GET", "/v1/memory/{memory_id}"): "memory.get",
    ("PATCH", "/v1/memory/{memory_id}"): "memory.update",
    ("DELETE", "/v1/memory/{memory_id}"): "memory.delete",
    ("GET", "/v1/admin/users"): "admin.users.list",
    ("GET", "/v1/admin/stats"): "admin.stats",
    ("POST", "/v1/admin/keys"): "admin.keys.create",
    ("GET", "/v1/admin/keys"): "admin.keys.list",
    ("DELETE", "/v1/admin/keys/{key_id}"): "admin.keys.revoke",
    ("GET", "/v1/admin/audit"): "admin.audit.read",
    ("GET", "/v1/admin/events"): "admin.events.read",
    ("POST", "/mcp"): "mcp.tool_call",  # an MCP tool acting on another user's memories (mcp_server)
}
"""The audit action of each route that can be audited, by (method, path template). A test
holds every ``/v1/memory*`` and ``/v1/admin/*`` route of the ingress to this table; a route
missing from it is still recorded, as ``route:<METHOD> <template>``."""


class Counter(Protocol):
    """Where failures are counted (``deployments.metrics.RayMetrics``; a recorder in tests)."""

    def count(self, name: str, tags: dict[str, str] | None = None, value: float = 1.0) -> None: ...


@dataclass
class AuditNote:
    """What the ingress learnt about a request for its entry: the caller, whether the route
    needs the admin role, and what the route itself names (the user a key is made for, the
    id of a key it created)."""

    principal: Principal | None = None
    admin_only: bool = False
    target_user_id: str | None = None
    target: str | None = None
    requested_owner: str | None = None
    """The owner a route was asked to act for, however it was asked (the ``user_id`` query
    parameter, or an MCP tool's ``user_id`` argument in the JSON-RPC body)."""
    tool_error: str | None = None
    """The error code of a failed MCP tool call (answered with HTTP 200)."""


def _note(scope: Scope) -> AuditNote:
    state = scope.setdefault("state", {})
    note = state.get(STATE_KEY)
    if not isinstance(note, AuditNote):
        note = state[STATE_KEY] = AuditNote()
    return note


def note_tool_error(request: Request, code: str) -> None:
    """Note ``code``, the API error code of an MCP tool call that failed, for the request's
    audit entry (the transport answers a failed tool call with HTTP 200)."""
    _note(request.scope).tool_error = code


def _requested_owner(scope: Scope) -> str | None:
    value = Request(scope).query_params.get(OWNER_PARAMETER)
    return value or None


def _is_admin_path(scope: Scope) -> bool:
    path = route_path(scope)
    return path.startswith(ADMIN_PREFIX) or path == ADMIN_PREFIX.rstrip("/")


def is_audited(scope: Scope, note: AuditNote) -> bool:
    """Whether the request of ``scope`` is audited: an admin path or admin-only route, or
    a ``user_id`` parameter naming another user than the caller."""
    if _is_admin_path(scope) or note.admin_only:
        return True
    requested = note.requested_owner or _requested_owner(scope)
    return requested is not None and note.principal is not None and requested != note.principal.user_id


def _segments_match(template: str, path: str) -> bool:
    wanted, given = template.split("/"), path.split("/")
    return len(wanted) == len(given) and all(
        w == g or (w.startswith("{") and w.endswith("}") and g) for w, g in zip(wanted, given, strict=True)
    )


def action_of(scope: Scope) -> str:
    """The audit action of the request's route (``ACTIONS``), ``route:<METHOD> <template>``
    for a route not in the table. A request refused before routing (by a middleware) is
    matched against the table's templates; ``unmatched_route`` when nothing matches."""
    method = scope.get("method", "")
    template = getattr(scope.get("route"), "path", None)
    if isinstance(template, str):
        return ACTIONS.get((method, template), f"route:{method} {template}")
    path = route_path(scope)
    for (action_method, action_template), action in ACTIONS.items():
        if action_method == method and _segments_match(action_template, path):
            return action
    return "unmatched_route"


def _key_id(value: str) -> bool:
    digits = value.removeprefix("key_")
    return value.startswith("key_") and len(digits) == 16 and all(c in "0123456789abcdef" for c in digits)


def path_target(scope: Scope) -> str | None:
    """The memory or key id in the request's path, when it has the id format (a caller's
    malformed id is not recorded)."""
    params = scope.get("path_params") or {}
    memory_id, key_id = params.get("memory_id"), params.get("key_id")
    if isinstance(memory_id, str) and is_memory_id(memory_id):
        return memory_id
    if isinstance(key_id, str) and _key_id(key_id):
        return key_id
    return None


def _address(value: str | None) -> str | None:
    if not value or len(value) > MAX_ADDRESS_CHARS:
        return None
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


def _valid_user_id(value: str | None) -> str | None:
    """``value`` when it meets the owner id rule (else ``None``: a malformed id the route
    refuses with 400 is not copied into the log)."""
    try:
        return require_user_id(value)
    except InvalidInput:
        return None


def client_address(scope: Scope, auth: Authenticator) -> tuple[str | None, str | None]:
    """``(client, peer)`` of a request: ``peer`` is the TCP peer; ``client`` is the address
    the trusted proxies (``access.trusted_proxies``) report in ``X-Forwarded-For`` (read
    from the right, skipping trusted hops) when the peer is one of them, else the peer.
    A forwarded address from an untrusted peer is never taken."""
    client = scope.get("client")
    peer = str(client[0])[:MAX_ADDRESS_CHARS] if client else None
    if peer is None or not auth.trusted_peer(peer):
        return peer, peer
    forwarded = ",".join(Request(scope).headers.getlist("x-forwarded-for"))
    for hop in reversed(forwarded.split(",") if forwarded else []):
        address = _address(hop)
        if address is None:
            break  # a malformed hop: the chain is not trustworthy beyond it
        if not auth.trusted_peer(address):
            return address, peer
    return peer, peer


def actor_of(principal: Principal) -> Actor:
    """The ``Actor`` of ``principal`` (user id, role, credential, key id; never the key)."""
    return Actor(
        user_id=principal.user_id,
        role=principal.role.value,
        credential=principal.credential,
        key_id=principal.key_id,
    )


class AuditRecorder:
    """The ingress's side of the audit log: ``bind`` and ``note`` from the routes,
    ``entry_for`` and ``record`` from ``AuditHook``. ``log``: the ``AuditLog``; ``auth``: the
    ingress's ``Authenticator`` (trusted proxies; identifying callers refused before any
    route); ``metrics``: where append failures are counted. ``healthy``: whether the last
    append (or recovery probe) succeeded."""

    def __init__(self, log: AuditLog, auth: Authenticator, metrics: Counter | None = None):
        self.log = log
        self.auth = auth
        self.metrics = metrics
        self.healthy = True
        self._recovery: asyncio.Task | None = None

    def bind(self, request: Request, principal: Principal, admin_only: bool = False) -> None:
        """Note ``principal`` as the caller of ``request`` (``admin_only``: the route needs
        the admin role). Raises ``AuditUnavailable`` (503) for an audited request while the
        log is failing (``healthy`` false): the route does nothing."""
        note = _note(request.scope)
        note.principal = principal
        note.admin_only = note.admin_only or admin_only
        if not self.healthy and is_audited(request.scope, note):
            raise AuditUnavailable(
                "the audit log failed its last write: admin actions and access to other users' memories "
                "are refused until it accepts writes again"
            )

    def bind_owner(self, request: Request, principal: Principal, requested: str | None) -> None:
        """Note that ``principal`` asked to act on the memories of ``requested`` (``None``:
        their own), before the owner rule decides (a refused attempt is recorded too); for
        another user, the entry names them. Raises ``AuditUnavailable`` (503) as ``bind``."""
        if requested is not None and requested != principal.user_id:
            _note(request.scope).requested_owner = requested
        self.bind(request, principal)

    def probe(self) -> bool:
        """Check that the log can be written now (``AuditLog.check_writable``); sets and
        returns ``healthy``. Blocks for up to the log's lock timeout: call it off the loop."""
        try:
            self.log.check_writable()
        except AuditUnavailable:
            self.healthy = False
        else:
            self.healthy = True
        return self.healthy

    async def _recover(self) -> None:
        while not self.healthy:
            await asyncio.sleep(RECOVERY_PROBE_S)
            if await asyncio.to_thread(self.probe):
                log.warning("the audit log accepts writes again")

    def _failed(self) -> None:
        self.healthy = False
        if self._recovery is None or self._recovery.done():
            # a fresh context: Serve cancels the tasks of a request's context with the request
            self._recovery = asyncio.get_running_loop().create_task(self._recover(), context=contextvars.Context())

    @staticmethod
    def note(request: Request, target_user_id: str | None = None, target: str | None = None) -> None:
        """What a route knows of its target beyond its path: the user a key is created for or
        revoked from, the id of a created key."""
        note = _note(request.scope)
        note.target_user_id = target_user_id or note.target_user_id
        note.target = target or note.target

    def _fallback_principal(self, scope: Scope) -> Principal | None:
        """The caller of a request no route identified (refused before it ran), for the
        requests that could be audited; ``None`` without a valid identity."""
        if not (_is_admin_path(scope) or _requested_owner(scope) is not None):
            return None
        try:
            return read_caller(Request(scope), self.auth).principal
        except MemoryError_:
            return None

    def entry_for(self, scope: Scope, status: int, error_code: str | None) -> AuditEntry | None:
        """The entry of an answered request, or ``None`` when it is not audited (or its
        caller is unknown)."""
        note = _note(scope)
        if note.principal is None:
            note.principal = self._fallback_principal(scope)
        principal = note.principal
        if principal is None or not is_audited(scope, note):
            return None
        requested = note.requested_owner or _requested_owner(scope)
        target_user = note.target_user_id or (_valid_user_id(requested) if requested != principal.user_id else None)
        client, peer = client_address(scope, self.auth)
        return AuditEntry(
            time=datetime.now(UTC),
            actor=actor_of(principal),
            action=action_of(scope),
            target_user_id=target_user,
            target=note.target or path_target(scope),
            status=status,
            error_code=(error_code or note.tool_error or "")[:64] or None,
            client_address=client,
            peer_address=peer,
            request_id=current_request_id()[:128] or None,
        )

    async def record(self, entry: AuditEntry) -> None:
        """Append ``entry`` off the event loop. A failure is counted, the entry logged at
        ERROR level (the answer is already out) and audited requests refused until the log
        recovers (see the module): never raised."""
        try:
            await asyncio.to_thread(self.log.append, entry)
        except AuditUnavailable as e:
            if self.metrics is not None:
                self.metrics.count("memory_audit_append_failures")
            log.error("audit entry not appended (%s): %s", e, entry.model_dump_json())
            self._failed()


def _error_code(body: bytes) -> str | None:
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


_RECORDER: dict[str, AuditRecorder | None] = {"recorder": None}


def configure_recorder(recorder: AuditRecorder | None) -> None:
    """Make ``recorder`` this process's audit recorder, read by ``AuditHook`` (``None``:
    nothing is recorded). Called by the ingress replica's constructor, as
    ``limits.configure_limits`` is (why a module function: see there)."""
    _RECORDER["recorder"] = recorder


def configured_recorder() -> AuditRecorder | None:
    """The recorder ``configure_recorder`` set (``None`` before)."""
    return _RECORDER["recorder"]


class AuditHook:
    """Plain ASGI middleware (answers pass through unbuffered; only the first
    ``MAX_ERROR_BODY`` bytes of an error answer are kept, for its code): after each request
    ``recorder()`` (default ``configured_recorder``: an ``AuditRecorder``, or ``None``:
    nothing is recorded) appends the request's entry when it is audited. An exception leaving
    the application is recorded as a 500 ``internal_error`` and raised on; a cancelled
    request is not recorded."""

    def __init__(self, app: ASGIApp, recorder: Callable[[], AuditRecorder | None] = configured_recorder):
        self.app = app
        self._recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        recorder: Any = self._recorder()
        if scope["type"] != "http" or not isinstance(recorder, AuditRecorder):
            await self.app(scope, receive, send)
            return
        status = 500
        error_body = bytearray()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and status >= 400 and len(error_body) < MAX_ERROR_BODY:
                error_body.extend(message.get("body", b"")[: MAX_ERROR_BODY - len(error_body)])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:  # not a cancellation: the client left, nothing more runs
            await _record(recorder, scope, 500, "internal_error")
            raise
        await _record(recorder, scope, status, _error_code(bytes(error_body)) if status >= 400 else None)


async def _record(recorder: AuditRecorder, scope: Scope, status: int, error_code: str | None) -> None:
    """The request's entry appended (``AuditRecorder.record``), if it is audited. An entry
    that cannot even be built (a bug: every field is bounded before) is counted and logged
    like a failed append, never raised: the answer is out."""
    try:
        entry = recorder.entry_for(scope, status, error_code)
    except Exception:
        if recorder.metrics is not None:
            recorder.metrics.count("memory_audit_append_failures")
        log.exception("audit entry of %s %s not built", scope.get("method"), route_path(scope)[:200])
        return
    if entry is not None:
        await recorder.record(entry)
