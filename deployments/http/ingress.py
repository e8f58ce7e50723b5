"""``MemoryIngress``: the HTTP surface (FastAPI) — chat completions with memory (streamed or
not) forwarded to each decision's upstream, ``/v1/models``, the ``/v1/memory`` REST API,
``/v1/embeddings`` and ``/health``.

Thin by design: it validates input, resolves the caller, and calls memory_core
(``MemoryPipeline``), the ``Embedder``/``StorePool`` handles and the upstreams
(``deployments.upstream``; streams are relayed by ``streaming.relay``). Every error of its own
leaves as ``{"error": {"code", "message"}}`` with a 4xx/5xx status; the upstream's answers,
error statuses included, pass through as the upstream sent them.
"""


# no ``from __future__ import annotations`` here: FastAPI reads the route signatures'
# annotations at import time through Serve's class-based ingress, and needs real types

import asyncio
import base64
import dataclasses
import json
import logging
import os
import time
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from ray import serve

from memory_core.access import Authenticator, KeyRegistry, Principal, WriteRateLimiter
from memory_core.admin import DEFAULT_USERS_PAGE, MAX_USERS_PAGE, service_stats, users_page
from memory_core.audit import DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE, MAX_SEQUENCE, AuditLog, AuditPage, AuditQuery
from memory_core.chat.metrics import decision_values
from memory_core.chat.pipeline import MemoryPipeline, PreparedChat
from memory_core.config import RouterConfig
from memory_core.curation.llm import http_complete
from memory_core.errors import (
    InvalidInput,
    MemoryNotFound,
    RequestTooLarge,
    Unauthenticated,
)
from memory_core.migration import ImportReport, count_import_lines, import_lines, open_export
from memory_core.sanitize import check_json_text, check_project_id, is_memory_id
from memory_core.types import ListQuery, Memory, MemoryScope, MemoryState, MemoryType, RetrieveOptions

from .. import sse
from ..embedder import EmbedResponse, embed_through
from ..metrics import RayMetrics
from ..request_log import context_carrying_request_id
from ..store_pool import StorePoolClient
from ..upstream import UpstreamError, UpstreamReply, UpstreamRouter, forward_request_headers
from .audit_hook import AuditHook, AuditRecorder
from .errors import DOCUMENTED_ERRORS, UPSTREAM_ERRORS, error_response, install_error_handlers
from .headers import (
    CALLER_HEADERS,
    CHAT_HEADERS,
    BrowserGuard,
    admit_anonymous,
    forward_exclusions,
    identify,
    request_context,
)
from .limits import BodyLimit, ConfiguredLimits
from .openai_schema import ChatCompletionRequest
from .schemas import (
    MAX_EMBEDDING_INPUTS,
    NO_SIMILARITY_FLOOR,
    ConsolidationOut,
    CreatedKeyOut,
    CreateKeyRequest,
    CreateMemoriesRequest,
    DeletedOut,
    EmbeddingsOut,
    EmbeddingsRequest,
    HealthOut,
    KeysOut,
    MemoriesOut,
    MemoryListOut,
    MemoryOut,
    MemoryPage,
    MeOut,
    ModelsOut,
    RevokedOut,
    SearchOut,
    SearchRequest,
    StatsOut,
    UpdateMemoryRequest,
    UsersOut,
)
from .streaming import close_quietly, relay
from .ui import review_page_response

log = logging.getLogger("ray.serve")
app = FastAPI(title="memory-router", version="0.1.0", responses=DOCUMENTED_ERRORS)
install_error_handlers(app)
REQUEST_LIMITS = ConfiguredLimits()
"""This replica's ``global.limits`` (set by ``MemoryIngress.__init__``), read by ``BodyLimit``."""
app.add_middleware(BodyLimit, limits=REQUEST_LIMITS)  # inside the browser guard below
app.add_middleware(BrowserGuard)  # same origin and a JSON body type for every state-changing request
app.add_middleware(AuditHook)  # outermost: appends audited requests' entries after their answer (audit_hook)


_SSE_EVENT_SCHEMA = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": 'a chat.completion.chunk (JSON), an error ({"error": {...}}, ends the stream) or [DONE]',
        },
        "event": {"type": "string"},
    },
}
"""One event of a streamed chat completion, as an SSE parser reads it."""
_CHAT_SCHEMA = ChatCompletionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
_CHAT_DEFS = _CHAT_SCHEMA.pop("$defs", {})


def _openapi_without_422() -> dict:
    """The OpenAPI document without FastAPI's default 422 responses: validation errors are
    answered with 400 and the ``ErrorBody`` shape, which every operation declares. The chat
    request schema (the endpoint reads its body itself, to forward unknown fields) is added
    to the components."""
    if app.openapi_schema:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schema.setdefault("components", {}).setdefault("schemas", {}).update(_CHAT_DEFS)
    for route, path in schema.get("paths", {}).items():
        for operation in path.values():
            if isinstance(operation, dict):
                operation.get("responses", {}).pop("422", None)
                headers = CALLER_HEADERS + (CHAT_HEADERS if route == "/v1/chat/completions" else [])
                operation.setdefault("parameters", []).extend(headers)
    schema["components"]["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "global.access.mode api_key: an API key"}
    }
    schema["security"] = [{"apiKey": []}, {}]  # trusted_header mode: the gateway's headers instead
    for name in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(name, None)
    app.openapi_schema = schema
    return schema


app.openapi = _openapi_without_422


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


E = TypeVar("E", bound=Enum)


def _parse_enum_list(values: list[str] | None, kind: type[E], field: str) -> list[E] | None:
    """``?field=a,b&field=c`` → members of ``kind``; absent → None. An empty or unknown value
    is an ``InvalidInput`` naming ``field``, never "no filter" (a typo must not widen a delete)."""
    if values is None:
        return None
    names = [v.strip() for part in values for v in part.split(",")]
    try:
        if not names or any(not n for n in names):
            raise ValueError
        return [kind(n) for n in names]
    except ValueError as e:
        raise InvalidInput(f"{field} must be one of {[m.value for m in kind]}") from e


def parse_states(values: list[str] | None) -> list[MemoryState] | None:
    """``?state=a,b&state=c`` → lifecycle states; absent → None (every state)."""
    return _parse_enum_list(values, MemoryState, "state")


def parse_types(values: list[str] | None) -> list[MemoryType] | None:
    """``?type=a,b&type=c`` → memory types; absent → None (no filter)."""
    return _parse_enum_list(values, MemoryType, "type")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_body(data: bytes) -> Any:
    """A request body parsed as strict JSON: ``NaN``/``Infinity`` refused (``json.loads``
    accepts them, no JSON peer does). Raises ``ValueError`` (not JSON) or ``RecursionError``
    (nested too deep)."""
    return json.loads(data, parse_constant=_no_constant)


def memory_headers(prepared: PreparedChat) -> dict[str, str]:
    """The response headers that say what memory did for a chat request:
    ``x-memory-injected`` (count), ``x-memory-skipped`` (reason), ``x-memory-decision``,
    ``server-timing`` (``retrieve``, ``gate_inject``)."""
    headers = {"x-memory-injected": str(len(prepared.injected))}
    if prepared.timings_ms:
        headers["server-timing"] = server_timing(**{k: v / 1000 for k, v in prepared.timings_ms.items()})
    if prepared.skipped:
        headers["x-memory-skipped"] = prepared.skipped
    if prepared.policy.decision_name:
        headers["x-memory-decision"] = prepared.policy.decision_name
    return headers


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


@serve.deployment
@serve.ingress(app)
class MemoryIngress:
    """Args: ``config`` (the validated config document), handles of ``Embedder``, ``StorePool``,
    (when ``global.upstream`` has no URL) ``EchoUpstream`` and (with curation on) the
    ``Consolidator`` loop. Each decision's requests go to its upstream (``UpstreamRouter``); a
    missing API key variable fails the replica's start.

    Overload is refused, not queued without bound: each replica runs at most
    ``max_ongoing_requests`` requests, and beyond ``max_queued_requests`` waiting in the
    proxy's queue Ray Serve answers 429 with ``Retry-After`` (``backpressure_config``; the
    defaults are ``deployments.app.DEPLOYMENT_OPTIONS``, which ``serve_config.yaml``
    overrides)."""

    def __init__(self, config: RouterConfig, embedder, store_pool, echo=None, consolidator=None):
        self.config = config
        self.embedder = embedder
        self.store = StorePoolClient(store_pool)
        self.store_pool = store_pool
        self.upstreams = UpstreamRouter(config, echo)
        self.consolidator = consolidator  # the background loop (deployed with the application)
        self.metrics = RayMetrics(decision_values(config))
        access = config.global_.access
        self.registry = KeyRegistry(access.api_keys.path)
        self.auth = Authenticator(access, self.registry, os.environ)
        self.audit = AuditRecorder(AuditLog(config.global_.audit.path), self.auth, self.metrics)
        app.state.audit = self.audit  # read by audit_hook.AuditHook
        app.state.allowed_origins = frozenset(access.allowed_origins)  # read by headers.BrowserGuard
        self.write_limit = WriteRateLimiter(access.write_rate_limit.limit, access.write_rate_limit.window_s)
        self.limits = config.global_.limits
        REQUEST_LIMITS.settings = self.limits
        self._known_users: set[str] = set()
        llm = self.config.memory.extraction.llm
        complete = None
        if llm.enabled:  # the LLM extractor: its own endpoint, or the application's upstream
            complete = http_complete(llm) if llm.base_url else self._complete_upstream
        self.pipeline = MemoryPipeline(
            self.config, store=self.store, metrics=self.metrics, complete=complete, admit_write=self._admit_chat_write
        )
        self._background: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ identity and access
    def _caller(self, request: Request) -> Principal:
        """The authenticated caller (``headers.identify``); 401 without identity."""
        principal = identify(request, self.auth)
        if principal is None:
            how = "an API key (Authorization: Bearer)" if self.auth.api_key_mode else "the x-authz-user-id header"
            raise Unauthenticated(f"missing caller identity: send {how}")
        self.audit.bind(request, principal)  # 503 for an audited request while the audit log fails
        return principal

    def _caller_or_anonymous(self, request: Request) -> Principal | None:
        """The caller (``headers.identify``), or ``None`` for a request without identity that
        ``access.anonymous`` admits (``headers.admit_anonymous``: 401 when not, 429 beyond its
        rate limit; always 401 in ``api_key`` mode)."""
        principal = identify(request, self.auth)
        if principal is None:
            admit_anonymous(request, self.auth)
        return principal

    def _owner(self, request: Request, user_id: str | None) -> str:
        """The owner of the memories acted on (``Principal.owner``): the caller, or the
        ``user_id`` query parameter for an admin. 401/403/400 as ``Principal.owner``."""
        return self._caller(request).owner(user_id)

    def _admin(self, request: Request, action: str) -> Principal:
        """The caller, who must be an admin (403 otherwise)."""
        principal = self._caller(request)
        self.audit.bind(request, principal, admin_only=True)
        principal.require_admin(action)
        return principal

    def _write_as(self, principal: Principal, user_id: str | None, memories: int = 1) -> str:
        """``Principal.owner`` for a write of ``memories`` memories: counts them against the
        caller's write limit, all up front (429 with ``Retry-After`` when the rest of the
        window cannot hold them, 413 when the whole limit cannot; nothing is counted then)
        and records the owner for the admin user list. ``memories`` 0 counts nothing."""
        owner = principal.owner(user_id)
        if memories:
            self.write_limit.take(principal.user_id, memories)
        self._note_user(owner)
        return owner

    def _note_user(self, user_id: str) -> None:
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

    async def _complete_upstream(self, body: dict) -> Any:
        """A chat completion from the default route's upstream (``global.upstream``; the LLM
        extractor's port when it has no ``base_url`` of its own). Raises ``UpstreamError`` (no
        answer), ``RuntimeError`` (a non-2xx answer) or ``ValueError`` (not JSON)."""
        route = self.upstreams.route(None)
        reply = await route.upstream.chat(route.body(body), [])
        if not 200 <= reply.status_code < 300:
            raise RuntimeError(f"the upstream answered {reply.status_code}")
        return reply.json()

    async def _embed(self, texts: list[str]) -> EmbedResponse:
        """The Embedder's answer for ``texts``; a Ray failure (the replica restarting) raises
        ``EmbeddingUnavailable`` (503), an error of the Embedder's own keeps its status."""
        return await embed_through(self.embedder, texts)

    def _in_background(self, coro) -> None:
        """Run ``coro`` (the auto-store of a turn) after the response, outside the request:
        in a fresh context, because Ray Serve cancels the handle calls made in a request's
        context when that request is cancelled (a client closing its connection, e.g. right
        after a stream's ``[DONE]``), which would cancel the store call. The request id stays
        (``request_log.context_carrying_request_id``)."""
        task = asyncio.get_running_loop().create_task(coro, context=context_carrying_request_id())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ chat
    @app.post(
        "/v1/chat/completions",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _CHAT_SCHEMA}},
            }
        },
        responses={
            200: {
                "description": "The upstream's chat.completion, unchanged; with `stream: true` its "
                "chat.completion.chunk events (text/event-stream), relayed one by one",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    # one event (OpenAPI 3.1 reads an event stream's schema per event)
                    "text/event-stream": {"schema": _SSE_EVENT_SCHEMA},
                },
            },
            **UPSTREAM_ERRORS,
        },
    )
    async def chat_completions(self, request: Request) -> Response:
        """OpenAI chat completions with memory (see the README). Unknown fields are forwarded.

        Memory is prepared (retrieved, injected) before the upstream call, streamed or not;
        the turn is stored after the answer is complete (for a stream: after its last event,
        never a partial turn). The upstream's answer passes through with its status; no
        answer is 502/504 (``UpstreamError``)."""
        try:
            raw = parse_json_body(await request.body())
        except (ValueError, RecursionError):
            return error_response(400, "invalid_request", "body must be JSON (UTF-8, reasonably nested)")
        if not isinstance(raw, dict):
            return error_response(400, "invalid_request", "body must be a JSON object")
        check_json_text(raw, "body")  # every string, any field: valid Unicode (else 400)
        try:
            parsed = ChatCompletionRequest.model_validate(raw)
        except ValidationError as e:
            raise RequestValidationError(e.errors()) from e
        try:
            principal = identify(request, self.auth)
            context = request_context(request, self.auth, principal)
        except InvalidInput:
            self.metrics.count("memory_requests_refused", {"reason": "invalid_header"})
            raise
        if principal is None:
            admit_anonymous(request, self.auth)  # 401 in api_key mode or by access.anonymous, 429 beyond its limit
        prepared = await self.pipeline.prepare(raw, context)
        route = self.upstreams.route(prepared.policy.decision_name)
        body = route.body(prepared.body)
        forwarded = forward_request_headers(request.headers.items(), forward_exclusions(self.auth))
        headers = memory_headers(prepared)
        if parsed.stream:
            return await self._stream(route.upstream, body, forwarded, prepared, headers)
        try:
            reply = await route.upstream.chat(body, forwarded)
        except UpstreamError as e:
            return with_headers(error_response(e.status, e.code, str(e)), headers)
        return self._whole_answer(reply, prepared, headers)

    def _whole_answer(self, reply: UpstreamReply, prepared: PreparedChat, headers: dict[str, str]) -> Response:
        """The client's response for a whole upstream answer: a 200 JSON answer unchanged (and
        the turn stored behind it); another status with a JSON body passed through; a body
        that is not JSON: 502 for a 200, else the upstream's status with an error body."""
        try:
            answer = reply.json()
        except ValueError:
            if reply.status_code == 200:
                response = error_response(502, "upstream_error", "the upstream answered 200 without JSON")
            else:
                response = error_response(
                    reply.status_code,
                    "upstream_error",
                    f"the upstream answered {reply.status_code}: {reply.content[:200].decode(errors='replace')}",
                )
            return with_headers(response, reply.headers, headers)
        if reply.status_code == 200:
            self._in_background(self.pipeline.remember(prepared, answer))
        response = Response(reply.content, status_code=reply.status_code, media_type="application/json")
        return with_headers(response, reply.headers, headers)

    async def _stream(self, upstream, body: dict, forwarded, prepared: PreparedChat, headers: dict) -> Response:
        """``stream: true``: open the upstream's stream and wait for its first event, so that a
        failure before it is still an HTTP status (the upstream's own, or 502/504); then relay
        the events (``streaming.relay``)."""
        try:
            opened = await upstream.stream(body, forwarded)
        except UpstreamError as e:
            return with_headers(error_response(e.status, e.code, str(e)), headers)
        if isinstance(opened, UpstreamReply):  # an error status, or a server that does not stream
            return self._whole_answer(opened, prepared, headers)
        events = opened.events()
        try:
            first = await anext(events, None)
        except UpstreamError as e:
            await opened.aclose()
            return with_headers(error_response(e.status, e.code, str(e)), opened.headers, headers)
        except BaseException:  # cancelled (the client left) or the echo failed: no stream to keep
            await close_quietly(opened)
            raise
        if first is None:
            await opened.aclose()
            return with_headers(
                error_response(502, "upstream_error", "the upstream's stream ended before its first event"), headers
            )

        def complete(answer) -> None:
            self._in_background(self.pipeline.remember(prepared, answer.completion()))

        def ended(outcome: str) -> None:
            self.metrics.count("chat_stream_outcomes", {"outcome": outcome})

        response = StreamingResponse(
            relay(opened, first, events, on_complete=complete, on_end=ended), media_type="text/event-stream"
        )
        return with_headers(response, opened.headers, sse.HEADERS, headers)

    # ------------------------------------------------------------------ models
    @app.get("/v1/models", responses={200: {"model": ModelsOut}, **UPSTREAM_ERRORS})
    async def models(self, request: Request) -> Response:
        """The models of the configured upstreams (OpenAI ``list``), merged by id in route
        order. An upstream that fails is left out (logged); when every one fails, the first
        failure is the answer (an upstream's own status and JSON body, or 502/504). In
        ``api_key`` mode it needs a key, as every endpoint but ``/health``; without identity
        in ``trusted_header`` mode, ``access.anonymous`` decides (``headers.admit_anonymous``)."""
        self._caller_or_anonymous(request)
        servers = self.upstreams.servers()
        replies = await asyncio.gather(*(server.models() for server in servers), return_exceptions=True)
        data: list[dict] = []
        seen: set[str] = set()
        failures: list[Response] = []
        for server, reply in zip(servers, replies, strict=True):
            if isinstance(reply, UpstreamError):
                log.warning("models of upstream %s: %s", server.name, reply)
                failures.append(error_response(reply.status, reply.code, str(reply)))
                continue
            if isinstance(reply, BaseException):
                raise reply
            try:
                listed = reply.json()["data"] if reply.status_code == 200 else None
                if not isinstance(listed, list) or not all(isinstance(m, dict) and "id" in m for m in listed):
                    raise ValueError
            except (ValueError, TypeError, KeyError):
                log.warning("models of upstream %s: status %s", server.name, reply.status_code)
                failures.append(self._failed_models(reply))
                continue
            for model in listed:
                if model["id"] not in seen:
                    seen.add(model["id"])
                    data.append(model)
        if failures and not data:
            return failures[0]
        return JSONResponse({"object": "list", "data": data})

    @staticmethod
    def _failed_models(reply: UpstreamReply) -> Response:
        if reply.status_code != 200:
            try:
                reply.json()
                return with_headers(
                    Response(reply.content, status_code=reply.status_code, media_type="application/json"),
                    reply.headers,
                )
            except ValueError:
                pass
        return error_response(502, "upstream_error", f"the upstream answered {reply.status_code} without a model list")

    # ------------------------------------------------------------------ memory REST
    @app.post("/v1/memory", status_code=201, responses={201: {"model": MemoriesOut}})
    async def create_memories(
        self, body: CreateMemoriesRequest, request: Request, owner: OwnerQuery = None
    ) -> JSONResponse:
        principal = self._caller(request)
        most = self.limits.memories_per_request
        if len(body.memories) > most:
            raise RequestTooLarge(
                f"this request holds {len(body.memories)} memories: the limit is {most} per request "
                "(global.limits.memories_per_request)"
            )
        user_id = self._write_as(principal, owner, len(body.memories))
        contents = [m.content for m in body.memories]  # cleaned and checked by the body model
        started = time.perf_counter()
        batch = await self._embed(contents)
        embedded = time.perf_counter()
        memories = [
            Memory(
                content=content,
                type=m.type,
                user_id=user_id,
                project_id=m.project_id,
                metadata=m.metadata,
                importance=m.importance,
                conversation_id=m.conversation_id,
                source=m.source,
                created_at=m.created_at,
                created_via="api",
                created_by_user_id=principal.user_id,
                embedding=vector,
                embedding_identity=batch.identity,
            )
            for m, content, vector in zip(body.memories, contents, batch.embeddings, strict=True)
        ]
        # validated as a whole first (nothing is written when one is refused), then each
        # curated: a fact already held reinforces its record, a new value supersedes
        results = await self.store.write(memories)
        written = time.perf_counter()
        return JSONResponse(
            status_code=201,
            headers={"server-timing": server_timing(embed=embedded - started, write=written - embedded)},
            content={
                "memories": [r.memory.public() for r in results],
                "outcomes": [
                    {"id": r.memory.id, "outcome": r.outcome.value, "superseded": r.superseded} for r in results
                ],
            },
        )

    @app.post("/v1/memory/search", responses={200: {"model": SearchOut}})
    async def search_memories(self, body: SearchRequest, request: Request, owner: OwnerQuery = None) -> JSONResponse:
        user_id = self._owner(request, owner)
        settings = self.config.memory
        started = time.perf_counter()
        results = await self.store.retrieve(
            RetrieveOptions(
                user_id=user_id,
                query=body.query,  # embedded by the store shard, overlapping its lexical search
                project_id=body.project_id,
                types=tuple(body.types) if body.types else None,
                states=tuple(body.states) if body.states else (MemoryState.ACTIVE,),
                limit=body.limit or settings.default_retrieval_limit,
                threshold=NO_SIMILARITY_FLOOR if body.threshold is None else body.threshold,  # see SearchRequest
                hybrid=settings.retrieval.hybrid,
                lexical_weight=settings.retrieval.lexical_weight,
                temporal_boost=settings.retrieval.temporal_boost,
            )
        )
        done = time.perf_counter()
        return JSONResponse(
            content={
                "memories": [
                    {
                        **r.memory.public(),
                        "score": r.score,
                        "similarity": r.similarity,
                        "resolved_from": r.resolved_from,
                    }
                    for r in results
                ]
            },
            headers={"server-timing": server_timing(retrieve=done - started)},
        )

    @app.get("/v1/memory", response_model=MemoryPage)
    async def list_memories(
        self,
        request: Request,
        limit: int = Query(50, gt=0, le=1000),
        offset: int = Query(0, ge=0),
        type: list[str] | None = Query(None),
        project_id: str | None = Query(None, min_length=1),
        state: list[str] | None = Query(None, description="lifecycle states (default: every state)"),
        owner: OwnerQuery = None,
    ) -> dict:
        user_id = self._owner(request, owner)
        page = await self.store.list(
            ListQuery(
                user_id=user_id,
                types=parse_types(type),
                project_id=project_id,
                limit=limit,
                offset=offset,
                states=parse_states(state),
            )
        )
        return {
            "memories": [m.public() for m in page.memories],
            "total": page.total,
            "limit": limit,
            "offset": offset,
            "unreadable": page.unreadable,
        }

    @app.delete("/v1/memory", response_model=DeletedOut, response_model_exclude_none=True)
    async def delete_scope(
        self,
        request: Request,
        type: list[str] | None = Query(None),
        project_id: str | None = Query(None, min_length=1),
        all: bool = Query(False),
        owner: OwnerQuery = None,
    ) -> dict:
        """Delete the caller's memories matching ``type``/``project_id``; deleting everything
        needs an explicit ``all=true``. Unknown query parameters are rejected (a misspelled
        filter must not turn into "delete everything")."""
        user_id = self._owner(request, owner)
        unknown = set(request.query_params) - {"type", "project_id", "all", "user_id"}
        if unknown:
            raise InvalidInput(f"unknown query parameters: {sorted(unknown)}")
        scope = MemoryScope(user_id=user_id, project_id=project_id, types=parse_types(type))
        if scope.types is None and scope.project_id is None and not all:
            raise InvalidInput("give type and/or project_id, or all=true to delete every memory of the caller")
        return {"deleted": await self.store.forget_by_scope(scope)}

    @app.get(
        "/v1/memory/export",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "JSONL, one memory per line, then the end line "
                '{"end_of_export": {"memories", "unreadable"}}; a failure after the first line ends '
                'the body with {"error": {"code", "message"}} and aborts the transfer',
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            }
        },
    )
    async def export_memories(self, request: Request, owner: OwnerQuery = None) -> StreamingResponse:
        """The caller's memories as JSONL (``migration.memory_to_export_line``, no vectors),
        ending with the ``end_of_export`` line (``migration.open_export``): a failure reading
        the first page is an error status (503); a later one ends the body with an error line
        and aborts the chunked transfer (no end line)."""
        lines = await open_export(self.store, self._owner(request, owner))
        return StreamingResponse(lines, media_type="application/x-ndjson")

    @app.post(
        "/v1/memory/import",
        response_model=ImportReport,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-ndjson": {"schema": {"type": "string", "description": "export lines (JSONL)"}}
                },
            }
        },
    )
    async def import_memories(self, request: Request, owner: OwnerQuery = None) -> dict:
        """Import JSONL export lines into the caller's memories (``user_id``: into another
        user's, admin only). At most ``global.limits.import_lines`` non-blank lines (413
        beyond, nothing imported); each counts against the write limit, all up front."""
        principal = self._caller(request)
        principal.owner(owner)  # 403 before the body is read
        try:
            text = (await request.body()).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput(f"import body must be UTF-8 JSONL: {e}") from e
        # split on "\n" only: str.splitlines() also splits inside JSON strings at U+2028/U+0085
        lines = text.split("\n")
        user_id = self._write_as(principal, owner, count_import_lines(lines, self.limits.import_lines))
        report = await import_lines(self.store, lines, user_id=user_id, created_by=principal.user_id)
        return report.model_dump()

    # ------------------------------------------------------------------ the lifecycle
    @app.post("/v1/memory/consolidate", response_model=ConsolidationOut)
    async def consolidate(self, request: Request, owner: OwnerQuery = None) -> dict:
        """One consolidation pass now over the memories of ``user_id`` (default: the caller),
        admin only (the consolidation loop does it in the background for users with writes):
        near-duplicates merged, expired purged."""
        principal = self._admin(request, "consolidation on demand")
        report = await self.store.consolidate(principal.owner(owner))
        return dataclasses.asdict(report)

    @app.get("/v1/memory/{memory_id}/history", response_model=MemoryListOut)
    async def memory_history(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        """The versions of the fact ``memory_id`` holds, oldest first (what it superseded or
        merged, what superseded or merged it), every state."""
        user_id = self._owner(request, owner)
        chain = await self.store.history(path_memory_id(memory_id), user_id)
        return {"memories": [m.public() for m in chain]}

    @app.post("/v1/memory/{memory_id}/restore", response_model=MemoryOut)
    async def restore_memory(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        """Make a superseded, consolidated or quarantined memory active again (releasing a
        quarantined one, undoing a supersession); admin only. 400 when it is active already."""
        user_id = self._admin(request, "restoring a memory").owner(owner)
        return (await self.store.restore(path_memory_id(memory_id), user_id)).public()

    @app.post("/v1/memory/{memory_id}/unmerge", response_model=MemoryListOut)
    async def unmerge_memory(
        self,
        memory_id: str,
        request: Request,
        project_id: str | None = Query(None, min_length=1),
        owner: OwnerQuery = None,
    ) -> dict:
        """Undo a consolidation: the originals (the owner's memories consolidated into it)
        become active again and the merged memory is deleted; admin only. ``project_id``: only
        within that project (404 when the merged memory is elsewhere). 400 when ``memory_id``
        is not a merged memory."""
        user_id = self._admin(request, "undoing a consolidation").owner(owner)
        check_project_id(project_id)
        originals = await self.store.unmerge(path_memory_id(memory_id), user_id, project_id)
        return {"memories": [m.public() for m in originals]}

    @app.get("/v1/memory/{memory_id}", response_model=MemoryOut)
    async def get_memory(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        user_id = self._owner(request, owner)
        return (await self.store.get(path_memory_id(memory_id), user_id)).public()

    @app.patch("/v1/memory/{memory_id}", response_model=MemoryOut)
    async def update_memory(
        self, memory_id: str, body: UpdateMemoryRequest, request: Request, owner: OwnerQuery = None
    ) -> dict:
        user_id = self._write_as(self._caller(request), owner)
        memory_id = path_memory_id(memory_id)
        changes = body.changes()
        if not changes.model_fields_set:
            raise InvalidInput("no fields to update")
        return (await self.store.update(memory_id, user_id, changes)).public()

    @app.delete("/v1/memory/{memory_id}", response_model=DeletedOut)
    async def delete_memory(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        user_id = self._owner(request, owner)
        await self.store.forget(path_memory_id(memory_id), user_id)
        return {"deleted": 1, "id": memory_id}

    # ------------------------------------------------------------------ identity, admin
    @app.get("/v1/me", response_model=MeOut)
    async def me(self, request: Request) -> dict:
        """Who the service takes the caller for: user id, role and the access mode."""
        principal = self._caller(request)
        return {"user_id": principal.user_id, "role": principal.role.value, "mode": self.auth.settings.mode}

    @app.get("/v1/admin/users", response_model=UsersOut)
    async def admin_users(
        self,
        request: Request,
        limit: int = Query(DEFAULT_USERS_PAGE, gt=0, le=MAX_USERS_PAGE),
        offset: int = Query(0, ge=0),
    ) -> dict:
        """One page of the users the service has seen (wrote memories or hold a key), sorted
        by id, with the number of their memories (every state) and active keys, and ``total``
        (every user seen); admin only. Counts the page's users only (``admin.users_page``)."""
        self._admin(request, "listing users")
        return await users_page(self.store, self.registry, limit, offset)

    @app.get("/v1/admin/stats", response_model=StatsOut)
    async def admin_stats(self, request: Request) -> dict:
        """Totals: users seen, every memory by state and by type, active keys; admin only.
        One aggregate store call whatever the number of users (``admin.service_stats``)."""
        self._admin(request, "service statistics")
        return await service_stats(self.store, self.registry)

    @app.post("/v1/admin/keys", status_code=201, response_model=CreatedKeyOut)
    async def create_key(self, body: CreateKeyRequest, request: Request) -> dict:
        """A new API key for ``user_id`` with ``role``; the key is in this answer only (the
        service keeps its SHA-256). Admin only."""
        self._admin(request, "creating API keys")
        key, record = self.registry.create(body.user_id, body.role, body.name)
        self.audit.note(request, target_user_id=record.user_id, target=record.key_id)
        return {"key": key, **record.public()}

    @app.get("/v1/admin/keys", response_model=KeysOut)
    async def list_keys(self, request: Request, owner: OwnerQuery = None) -> dict:
        """Every API key (of ``user_id`` when given), revoked ones included, never the key
        itself. Admin only."""
        self._admin(request, "listing API keys")
        return {"keys": [k.public() for k in self.registry.keys(owner)]}

    @app.delete("/v1/admin/keys/{key_id}", response_model=RevokedOut)
    async def revoke_key(self, key_id: str, request: Request) -> dict:
        """Revoke a key: from now on it is answered 401. Admin only; 404 for an unknown id."""
        self._admin(request, "revoking API keys")
        record = self.registry.revoke(key_id)
        self.audit.note(request, target_user_id=record.user_id)
        return {"revoked": record.key_id, "revoked_at": record.revoked_at}

    @app.get("/v1/admin/audit", response_model=AuditPage)
    async def admin_audit(
        self,
        request: Request,
        actor: str | None = Query(None, min_length=1, max_length=256, description="the actor's user id"),
        target_user: str | None = Query(None, min_length=1, max_length=256),
        action: str | None = Query(None, min_length=1, max_length=128, description="e.g. admin.keys.create"),
        since: datetime | None = Query(None, description="ISO 8601, inclusive (no offset: UTC)"),
        until: datetime | None = Query(None, description="ISO 8601, exclusive (no offset: UTC)"),
        cursor: int | None = Query(None, gt=0, le=MAX_SEQUENCE, description="next_cursor of the previous page"),
        limit: int = Query(DEFAULT_AUDIT_PAGE, gt=0, le=MAX_AUDIT_PAGE),
    ) -> dict:
        """The audit log (``memory_core.audit``), newest first, filtered; admin only, and
        itself audited (``admin.audit.read``)."""
        self._admin(request, "reading the audit log")
        try:
            query = AuditQuery(
                actor=actor,
                target_user=target_user,
                action=action,
                since=since,
                until=until,
                cursor=cursor,
                limit=limit,
            )
        except ValidationError as e:
            raise InvalidInput(f"audit query: {e.errors()[0]['msg']}") from e
        return (await asyncio.to_thread(self.audit.log.query, query)).model_dump(mode="json")

    # ------------------------------------------------------------------ embeddings, health
    @app.post("/v1/embeddings", responses={200: {"model": EmbeddingsOut}})
    async def embeddings(self, body: EmbeddingsRequest, request: Request) -> JSONResponse:
        """OpenAI embeddings. The caller: a key in ``api_key`` mode; in ``trusted_header``
        mode an identity, or a request ``access.anonymous`` admits (``headers.admit_anonymous``)."""
        self._caller_or_anonymous(request)
        texts = body.texts()
        if not texts or len(texts) > MAX_EMBEDDING_INPUTS:
            raise InvalidInput(f"input must hold 1..{MAX_EMBEDDING_INPUTS} strings")
        if any(not t for t in texts):
            raise InvalidInput("input strings must be non-empty")
        result = await self._embed(texts)
        vectors: list = result.embeddings
        if body.encoding_format == "base64":  # what the openai client asks for by default
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        return JSONResponse(
            content={
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "model": result.model,
                "model_identity": result.identity,
                "truncated": result.truncated,
                "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
            },
            headers={"x-model-identity": result.identity},
        )

    @app.get("/health", responses={200: {"model": HealthOut}, 503: {"model": HealthOut}})
    async def health(self) -> JSONResponse:
        checks: dict[str, Any] = {}
        try:
            checks["store"] = bool(await self.store_pool.check_connection.remote())
        except Exception as e:
            checks["store"] = False
            checks["store_error"] = repr(e)
        try:
            info = await self.embedder.info.remote()
            checks["embedder"] = True
            checks["model_identity"] = info.get("identity")
        except Exception as e:
            checks["embedder"] = False
            checks["embedder_error"] = repr(e)
        ok = checks["store"] and checks["embedder"]
        return JSONResponse(status_code=200 if ok else 503, content={"status": "ok" if ok else "degraded", **checks})

    # ------------------------------------------------------------------ the review page
    @app.get("/ui", include_in_schema=False)
    async def review_page(self) -> Response:
        """The memory review page (``deployments/http/ui``): static HTML and JavaScript that sign
        in with an API key and call this API; answered with its Content-Security-Policy."""
        return review_page_response()
