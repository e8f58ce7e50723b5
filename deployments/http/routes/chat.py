"""``ChatRoutes``: ``POST /v1/chat/completions`` (memory prepared before the upstream call,
the turn stored after the answer, streamed or not) and ``GET /v1/models`` (the upstreams'
models merged)."""

import asyncio
import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from memory_core.chat.pipeline import PreparedChat
from memory_core.errors import InvalidInput
from memory_core.events import CHAT_ACTOR, set_actor
from memory_core.sanitize import check_json_text
from memory_core.tracing import annotate, carrying_trace, traced

from ... import sse
from ...request_log import context_carrying_request_id
from ...upstream import UpstreamError, UpstreamReply, forward_request_headers
from ..caller import admit_anonymous, read_chat_caller
from ..errors import UPSTREAM_ERRORS, error_response
from ..fastapi_app import app
from ..headers import forward_exclusions
from ..openai_schema import ChatCompletionRequest
from ..openapi import CHAT_PATH, CHAT_SCHEMA, SSE_EVENT_SCHEMA
from ..schemas import ModelsOut
from ..streaming import close_quietly, relay
from ..tracing import chat_attributes
from .base import IngressBase, parse_json_body, server_timing, with_headers

log = logging.getLogger("ray.serve")


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


class ChatRoutes(IngressBase):
    """The chat completions and models routes, and the chat side of the replica: the upstream
    the LLM extractor may call (``_complete_upstream``) and the background auto-store."""

    async def _complete_upstream(self, body: dict) -> Any:
        """A chat completion from the default route's upstream (``global.upstream``; the LLM
        extractor's port when it has no ``base_url`` of its own). Raises ``UpstreamError`` (no
        answer), ``RuntimeError`` (a non-2xx answer) or ``ValueError`` (not JSON)."""
        route = self.upstreams.route(None)
        reply = await route.upstream.chat(route.body(body), [])
        if not 200 <= reply.status_code < 300:
            raise RuntimeError(f"the upstream answered {reply.status_code}")
        return reply.json()

    def _in_background(self, prepared: PreparedChat, answer: Any) -> None:
        """Store ``prepared``'s turn (``MemoryPipeline.remember`` with the upstream's
        ``answer``) after the response, counted in ``background_writes`` against its user:
        at that bound the turn is answered but not stored (``memory_extraction{outcome=
        "skipped_writes_pending"}``, ``memory_core.chat.background``). Outside the request,
        in a fresh context, because Ray Serve cancels the handle calls made in a request's
        context when that request is cancelled (a client closing its connection, e.g. right
        after a stream's ``[DONE]``), which would cancel the store call. The request id stays
        (``request_log.context_carrying_request_id``)."""
        if not prepared.stores_turn:
            return
        context = carrying_trace(context_carrying_request_id())  # and the request's trace: span "auto_store"
        context.run(set_actor, CHAT_ACTOR)  # the auto-store's lifecycle events are the chat's
        started = self.background_writes.start(
            prepared.user_id, lambda: traced("auto_store", self.pipeline.remember(prepared, answer)), context
        )
        if started is None:
            decision = prepared.policy.decision_name or ""
            self.metrics.count("memory_extraction", {"outcome": "skipped_writes_pending", "decision": decision})

    # ------------------------------------------------------------------ chat
    @app.post(
        CHAT_PATH,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": CHAT_SCHEMA}},
            }
        },
        responses={
            200: {
                "description": "The upstream's chat.completion, unchanged; with `stream: true` its "
                "chat.completion.chunk events (text/event-stream), relayed one by one",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    # one event (OpenAPI 3.1 reads an event stream's schema per event)
                    "text/event-stream": {"schema": SSE_EVENT_SCHEMA},
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
        try:  # the headers normalised once; everything after reads caller and context
            caller, context = read_chat_caller(request, self.auth)
        except InvalidInput:
            self.metrics.count("memory_requests_refused", {"reason": "invalid_header"})
            raise
        if caller.principal is None:
            admit_anonymous(caller, self.auth)  # 401 in api_key mode or by access.anonymous, 429 beyond its limit
        prepared = await self.pipeline.prepare(raw, context)
        annotate(chat_attributes(prepared))  # on the chat span (deployments.http.tracing)
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
            self._in_background(prepared, answer)
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
            self._in_background(prepared, answer.completion())

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
        """The answer for an upstream whose model list is unusable: its own non-200 status and
        JSON body passed through, else 502 ``upstream_error``."""
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
