"""What every route group of the ingress shares: ``IngressBase`` (the replica's state and the
caller checks: ``_caller``, ``_owner``, ``_admin``, ``_write_as``; an audit hook of those
checks goes here) and the request-parsing helpers of several groups.

No ``from __future__ import annotations`` in the route modules: FastAPI reads the route
signatures' annotations at import time through Serve's class-based ingress, and needs real
types (``OwnerQuery`` among them).
"""

import json
import logging
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import Response

from memory_core.access import Authenticator, KeyRegistry, Principal, WriteRateLimiter
from memory_core.chat.background import BackgroundWrites
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import LimitsSettings, RouterConfig
from memory_core.errors import MemoryNotFound, StoreUnavailable, Unauthenticated
from memory_core.events import EventLog, set_actor, user_actor
from memory_core.sanitize import is_memory_id
from memory_core.types import MemoryState, MemoryType

from ...embedder import EmbedResponse, embed_through
from ...metrics import RayMetrics
from ...store_pool import StorePoolClient
from ...upstream import UpstreamRouter
from ..audit_hook import AuditRecorder
from ..caller import admit_anonymous, read_caller
from ..query_params import parse_enum_list

log = logging.getLogger(__name__)

OwnerQuery = Annotated[
    str | None,
    Query(
        alias="user_id",
        min_length=1,
        description="The owner of the memories acted on (default: the caller). Another user's id needs the admin role.",
    ),
]
"""The ``user_id`` query parameter of the memory endpoints."""


def server_timing(**seconds: float) -> str:
    """``Server-Timing`` header value (W3C Server Timing): ``name;dur=<ms>`` per step."""
    return ", ".join(f"{name};dur={value * 1000:.1f}" for name, value in seconds.items())


def path_memory_id(memory_id: str) -> str:
    """A memory id from a URL path: returned when it has the memory id format; anything else
    is "not found" (404) before any store call."""
    if not is_memory_id(memory_id):
        raise MemoryNotFound("memory not found")
    return memory_id


def parse_states(values: list[str] | None) -> list[MemoryState] | None:
    """``?state=a,b&state=c`` → lifecycle states; absent → None (every state)."""
    return parse_enum_list(values, MemoryState, "state")


def parse_types(values: list[str] | None) -> list[MemoryType] | None:
    """``?type=a,b&type=c`` → memory types; absent → None (no filter)."""
    return parse_enum_list(values, MemoryType, "type")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_body(data: bytes) -> Any:
    """A request body parsed as strict JSON: ``NaN``/``Infinity`` refused (``json.loads``
    accepts them, no JSON peer does). Raises ``ValueError`` (not JSON) or ``RecursionError``
    (nested too deep)."""
    return json.loads(data, parse_constant=_no_constant)


def with_headers(response: Response, *groups) -> Response:
    """``response`` with each ``(name, value)`` of ``groups`` (lists of pairs or dicts) added;
    a later group replaces an earlier one's header of the same name."""
    for group in groups:
        items = group.items() if isinstance(group, dict) else group
        for name, value in items:
            if name in response.headers and isinstance(group, dict):
                del response.headers[name]
            response.headers.append(name, value)
    return response


class IngressBase:
    """The replica's state every route group reads (set by ``MemoryIngress.__init__``) and
    the caller checks every route starts with. Each check reads the request's caller once
    (``caller.read_caller``)."""

    config: RouterConfig
    embedder: Any  # the Embedder deployment's handle
    store: StorePoolClient
    store_pool: Any  # the StorePool deployment's handle
    upstreams: UpstreamRouter
    consolidator: Any  # the Consolidator loop's handle, or None
    metrics: RayMetrics
    registry: KeyRegistry
    auth: Authenticator
    write_limit: WriteRateLimiter
    limits: LimitsSettings
    pipeline: MemoryPipeline
    _known_users: set[str]
    background_writes: BackgroundWrites
    audit: AuditRecorder  # the audit log of admin actions and cross-user access (audit_hook)
    events: EventLog | None  # the lifecycle event feed (event_feed.open_feed)
    webhooks: Any  # the WebhookDispatcher handle, when webhooks are configured
    mcp: Any  # mcp_server.McpEndpoint (routes.mcp)

    # ------------------------------------------------------------------ identity and access
    def _caller(self, request: Request) -> Principal:
        """The authenticated caller (``caller.read_caller``); 401 without identity."""
        principal = read_caller(request, self.auth).principal
        if principal is None:
            how = "an API key (Authorization: Bearer)" if self.auth.api_key_mode else "the x-authz-user-id header"
            raise Unauthenticated(f"missing caller identity: send {how}")
        set_actor(user_actor(principal.user_id, admin=principal.is_admin))  # the actor of the events recorded
        self.audit.bind(request, principal)  # 503 for an audited request while the audit log fails
        return principal

    def _caller_or_anonymous(self, request: Request) -> Principal | None:
        """The caller (``caller.read_caller``), or ``None`` for a request without identity that
        ``access.anonymous`` admits (``caller.admit_anonymous``: 401 when not, 429 beyond its
        rate limit; always 401 in ``api_key`` mode)."""
        caller = read_caller(request, self.auth)
        if caller.principal is None:
            admit_anonymous(caller, self.auth)
        return caller.principal

    def _owner(self, request: Request, user_id: str | None) -> str:
        """The owner of the memories acted on (``Principal.owner``): the caller, or the
        ``user_id`` query parameter for an admin. 401/403/400 as ``Principal.owner``."""
        principal = self._caller(request)
        self.audit.bind_owner(request, principal, user_id)  # another user's memories: audited (503 while it fails)
        return principal.owner(user_id)

    def _admin(self, request: Request, action: str) -> Principal:
        """The caller, who must be an admin (403 otherwise)."""
        principal = self._caller(request)
        self.audit.bind(request, principal, admin_only=True)
        principal.require_admin(action)
        return principal

    def _write_as(self, request: Request, principal: Principal, user_id: str | None, memories: int = 1) -> str:
        """``Principal.owner`` for a write of ``memories`` memories: counts them against the
        caller's write limit, all up front (429 with ``Retry-After`` when the rest of the
        window cannot hold them, 413 when the whole limit cannot; nothing is counted then)
        and records the owner for the admin user list. ``memories`` 0 counts nothing."""
        self.audit.bind_owner(request, principal, user_id)  # another user's memories: audited (503 while it fails)
        owner = principal.owner(user_id)
        if memories:
            self.write_limit.take(principal.user_id, memories)
        self._note_user(owner)
        return owner

    def _note_user(self, user_id: str) -> None:
        """Record ``user_id`` in the key registry's user list (``/v1/admin/users``), once per
        replica."""
        if user_id not in self._known_users:
            self.registry.note_user(user_id)
            self._known_users.add(user_id)

    def _admit_chat_write(self, user_id: str, memories: int) -> bool:
        """Chat's auto-store asks this before writing a turn's ``memories`` memories (the same
        per-user write limit, counting each; over it the turn is not stored and the answer
        still goes out)."""
        if not self.write_limit.allow(user_id, memories):
            return False
        self._note_user(user_id)
        return True

    async def _embed(self, texts: list[str]) -> EmbedResponse:
        """The Embedder's answer for ``texts``; a Ray failure (the replica restarting) raises
        ``EmbeddingUnavailable`` (503), an error of the Embedder's own keeps its status."""
        return await embed_through(self.embedder, texts)

    async def _embed_write(self, user_id: str, texts: list[str]) -> tuple[list[list[float]], str]:
        """A caller's write's ``texts`` as (n vectors, the model identity digest): by the
        user's store shard's write lane when the write is small enough
        (``pool.in_shard_write_texts``, with ``pool.query_embedding: in_shard``) and the lane
        takes it, else by the Embedder (``_embed``; also when the shard's call fails with
        ``StoreUnavailable``: the write then goes on without the lane). Raises what the
        Embedder raises (503 while it is unavailable) and the lane's own ``MemoryError_``s
        (a bad text is refused by either)."""
        pool = self.config.memory.pool
        if pool.query_embedding == "in_shard" and 0 < len(texts) <= pool.in_shard_write_texts:
            try:
                got = await self.store.embed_write(user_id, texts)
            except StoreUnavailable as e:  # the shard restarting, or its lane failing: the Embedder
                log.warning("a store shard's write lane failed (%s); the Embedder embeds the write", e)
                got = None
            if got is not None:
                return got
        batch = await self._embed(texts)
        return batch.embeddings, batch.identity

    async def _embed_in_background(self, texts: list[str]) -> tuple[list[list[float]], str]:
        """Chat's auto-store (``MemoryPipeline(embed_stored=...)``): ``texts`` embedded as
        background work (``Embedder.embed(..., background=True)``: after the callers who
        wait), with the model identity the Embedder answered with."""
        result = await embed_through(self.embedder, texts, background=True)
        return result.embeddings, result.identity
