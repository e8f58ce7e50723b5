"""The upstream models: where chat requests go after memory, and what comes back.

- ``HttpUpstream``: an OpenAI-compatible server over HTTP (httpx): ``POST
  {base_url}/chat/completions`` (JSON or an event stream) and ``GET {base_url}/models``.
- ``EchoClient``: the ``EchoUpstream`` deployment behind the same interface (offline).
- ``UpstreamRouter``: each route's upstream (``RouterConfig.upstream_of``: the decision's own,
  else ``global.upstream``) and its model name override; one client per distinct server.

Headers. The client's end-to-end headers are forwarded (``Authorization`` included, unless
the route's ``api_key_env`` names a key, which then replaces it); not forwarded: hop-by-hop
headers (RFC 9110 §7.6.1: ``HOP_BY_HOP`` and any header the ``Connection`` header names),
``Host``, the body's framing and encoding (the body is re-encoded), ``Cookie``, and this
service's own memory headers (``x-authz-user-id``, ``x-project-id``, ``x-conversation-id``,
``x-disable-router-memory``). The upstream's response headers come back the same way (no
hop-by-hop, no framing, no ``Set-Cookie``, ``Date``, ``Server``; ``x-request-id`` renamed
``x-upstream-request-id``), so ``Retry-After``, ``x-ratelimit-*`` and the like reach the client.

Errors: a connection that fails or breaks is ``UpstreamError`` 502 ``upstream_error``; no
answer within ``timeout_s`` (connect, headers, or the next chunk) is 504 ``upstream_timeout``.
An upstream that answers, whatever its status, is passed through by the ingress.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from opentelemetry.trace import SpanKind

from memory_core.config import RouterConfig, UpstreamSettings
from memory_core.sanitize import CONTROLLED_HEADERS
from memory_core.tracing import span, with_trace_headers

from .sse import Event, EventReader

log = logging.getLogger("ray.serve")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""Headers of one connection, never forwarded (RFC 9110 §7.6.1; ``proxy-connection`` too)."""
NOT_FORWARDED_UPSTREAM = (
    HOP_BY_HOP
    | CONTROLLED_HEADERS
    | {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "accept-encoding",
        "expect",
        "cookie",
    }
)
"""Request headers of the client that the upstream never sees (besides those ``Connection``
names)."""
NOT_FORWARDED_BACK = HOP_BY_HOP | {"content-length", "content-type", "content-encoding", "date", "server", "set-cookie"}
"""Response headers of the upstream that the client never sees (besides those ``Connection``
names); the content type is set by the ingress from the upstream's."""

Headers = list[tuple[str, str]]


def _connection_named(headers: Iterable[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
        if token.strip()
    }


def forward_request_headers(headers: Iterable[tuple[str, str]], also_dropped: frozenset[str] = frozenset()) -> Headers:
    """The client's request headers that go to the upstream (see the module), in order, with
    lower-case names; repeated headers stay repeated. ``also_dropped``: further lower-case
    names to keep back (``authorization`` when it is this service's API key)."""
    items = [(name.lower(), value) for name, value in headers]
    dropped = NOT_FORWARDED_UPSTREAM | also_dropped | _connection_named(items)
    return [(name, value) for name, value in items if name not in dropped]


def latin1_headers(response: httpx.Response) -> Headers:
    """``response``'s headers as the bytes it sent, read as latin-1 text (what an ASGI server
    writes back unchanged), repeated headers kept."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]


def forward_response_headers(headers: Iterable[tuple[str, str]]) -> Headers:
    """The upstream's response headers that go back to the client (see the module); its
    ``x-request-id`` comes back as ``x-upstream-request-id`` (Ray Serve sets ``x-request-id``
    on every response: the id of the request to this service)."""
    items = [(name.lower(), value) for name, value in headers]
    dropped = NOT_FORWARDED_BACK | _connection_named(items)
    return [
        ("x-upstream-request-id" if name == "x-request-id" else name, value)
        for name, value in items
        if name not in dropped
    ]


class UpstreamError(Exception):
    """The upstream could not be reached, broke the connection, or did not answer in time.
    ``status``: 502 (``code`` ``upstream_error``) or 504 (``upstream_timeout``)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code


def _transport_error(e: httpx.HTTPError, what: str, timeout_s: float) -> UpstreamError:
    if isinstance(e, httpx.TimeoutException):
        return UpstreamError(504, "upstream_timeout", f"the upstream did not {what} within {timeout_s:g} s")
    return UpstreamError(502, "upstream_error", f"the upstream failed to {what}: {type(e).__name__}: {e}")


@dataclass
class UpstreamReply:
    """A whole answer of the upstream: ``status_code``, raw ``content``, its ``media_type``
    and the ``headers`` to pass back (already filtered)."""

    status_code: int
    content: bytes
    media_type: str | None = None
    headers: Headers = field(default_factory=list)

    def json(self) -> Any:
        """The content parsed as JSON; raises ``ValueError`` when it is not JSON."""
        return json.loads(self.content)


class UpstreamStream(Protocol):
    """An open event stream (the upstream answered 200 ``text/event-stream``)."""

    headers: Headers

    def events(self) -> AsyncIterator[Event]:
        """The events as they arrive; raises ``UpstreamError`` if the stream breaks, stalls
        past the timeout, or ends inside an event."""
        ...

    async def aclose(self) -> None:
        """Stop reading and cancel the upstream request (closes its connection)."""
        ...


class Upstream(Protocol):
    """What the ingress needs of an upstream model server."""

    name: str

    async def chat(self, body: dict[str, Any], headers: Headers) -> UpstreamReply: ...

    async def stream(self, body: dict[str, Any], headers: Headers) -> UpstreamReply | UpstreamStream: ...

    async def models(self) -> UpstreamReply: ...


# ---------------------------------------------------------------------------- HTTP
class _HttpStream:
    def __init__(self, response: httpx.Response, timeout_s: float):
        self._response = response
        self._timeout_s = timeout_s
        self.headers = forward_response_headers(latin1_headers(response))

    async def events(self) -> AsyncIterator[Event]:
        reader = EventReader()
        try:
            async for line in self._response.aiter_lines():
                done = reader.line(line)
                if done is not None:
                    yield done
        except httpx.HTTPError as e:
            raise _transport_error(e, "send the next chunk", self._timeout_s) from e
        if reader.pending:
            raise UpstreamError(502, "upstream_error", "the upstream's stream ended inside an event")

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpUpstream:
    """An OpenAI-compatible server at ``settings.base_url`` (which includes the API prefix,
    e.g. ``http://vllm:8000/v1``), with the key of ``settings.api_key_env`` when set.

    Raises ``ValueError`` at construction when ``base_url`` is missing or the key's
    environment variable is not set in this process (a configured key is never silently
    dropped)."""

    def __init__(self, settings: UpstreamSettings):
        if not settings.base_url:
            raise ValueError("upstream.base_url is required for HttpUpstream")
        self.name = settings.base_url
        self._timeout_s = settings.timeout_s
        self._auth: str | None = None
        if settings.api_key_env:
            key = os.environ.get(settings.api_key_env)
            if not key:
                raise ValueError(
                    f"upstream {settings.base_url}: api_key_env {settings.api_key_env} is not set in the "
                    "ingress's environment (give it to the MemoryIngress replicas, e.g. runtime_env.env_vars)"
                )
            self._auth = f"Bearer {key}"
        self._client = httpx.AsyncClient(
            base_url=settings.base_url,
            timeout=httpx.Timeout(settings.timeout_s),
            # the ingress bounds concurrency (max_ongoing_requests); the pool must not queue
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    def _request(self, method: str, path: str, headers: Headers, body: dict[str, Any] | None) -> httpx.Request:
        # with tracing on, the client's traceparent is replaced by the forward span's
        out = [(k, v) for k, v in with_trace_headers(headers) if not (self._auth and k == "authorization")]
        if self._auth:
            out.append(("authorization", self._auth))
        content = None
        if body is not None:
            # allow_nan=False: the ingress refuses NaN/Infinity at the edge; JSON has no such numbers
            content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
            out.append(("content-type", "application/json"))
        # as bytes: the client's header bytes go on unchanged (ASGI servers hand them over as
        # latin-1 text, which httpx would refuse to encode beyond ASCII)
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out]
        return self._client.build_request(method, path, headers=raw, content=content)

    async def _whole(self, request: httpx.Request) -> UpstreamReply:
        try:
            response = await self._client.send(request)
        except httpx.HTTPError as e:
            raise _transport_error(e, "answer", self._timeout_s) from e
        return UpstreamReply(
            response.status_code,
            response.content,
            response.headers.get("content-type"),
            forward_response_headers(latin1_headers(response)),
        )

    async def chat(self, body: dict[str, Any], headers: Headers) -> UpstreamReply:
        """``POST /chat/completions`` with ``body`` and the forwarded ``headers``
        (``forward_request_headers``); the whole answer, whatever its status. Raises
        ``UpstreamError`` (502/504) when there is no answer. Span ``forward``."""
        with span("forward", {"upstream.streamed": False}, kind=SpanKind.CLIENT) as forwarding:
            reply = await self._whole(self._request("POST", "/chat/completions", headers, body))
            forwarding.set_attribute("http.response.status_code", reply.status_code)
            return reply

    async def stream(self, body: dict[str, Any], headers: Headers) -> UpstreamReply | UpstreamStream:
        """``POST /chat/completions`` for a streamed answer: an open ``UpstreamStream`` once
        the upstream answered 200 with ``text/event-stream``; any other answer (an error
        status, or JSON from a server that does not stream) is read whole and returned as an
        ``UpstreamReply``. Raises ``UpstreamError`` when there is no answer. Span ``forward``
        (until the answer's headers: the stream's relay is in the ``chat`` span)."""
        with span("forward", {"upstream.streamed": True}, kind=SpanKind.CLIENT) as forwarding:
            request = self._request("POST", "/chat/completions", headers, body)
            try:
                response = await self._client.send(request, stream=True)
            except httpx.HTTPError as e:
                raise _transport_error(e, "answer", self._timeout_s) from e
            forwarding.set_attribute("http.response.status_code", response.status_code)
        media_type = response.headers.get("content-type", "")
        if response.status_code == 200 and media_type.startswith("text/event-stream"):
            return _HttpStream(response, self._timeout_s)
        try:
            content = await response.aread()
        except httpx.HTTPError as e:
            raise _transport_error(e, "answer", self._timeout_s) from e
        finally:
            await response.aclose()
        return UpstreamReply(
            response.status_code, content, media_type or None, forward_response_headers(latin1_headers(response))
        )

    async def models(self) -> UpstreamReply:
        """``GET /models``; raises ``UpstreamError`` when there is no answer."""
        return await self._whole(self._request("GET", "/models", [], None))

    async def aclose(self) -> None:
        await self._client.aclose()


# ---------------------------------------------------------------------------- echo
class _EchoStream:
    def __init__(self, generator):
        self._generator = generator
        self.headers: Headers = []

    async def events(self) -> AsyncIterator[Event]:
        reader = EventReader()
        async for data in self._generator:
            for line in data.decode().split("\n"):
                done = reader.line(line)
                if done is not None:
                    yield done

    async def aclose(self) -> None:
        self._generator.cancel()


class EchoClient:
    """The ``EchoUpstream`` deployment (a Serve handle) as an ``Upstream``; headers are not
    used. A Ray failure reaching it propagates (the ingress answers 503, a replica is
    restarting)."""

    name = "echo"

    def __init__(self, handle):
        self._handle = handle

    async def chat(self, body: dict[str, Any], headers: Headers) -> UpstreamReply:
        with span("forward", {"upstream.streamed": False, "upstream.echo": True}, kind=SpanKind.CLIENT):
            answer = await self._handle.chat.remote(body)
        return UpstreamReply(200, json.dumps(answer, ensure_ascii=False).encode(), "application/json")

    async def stream(self, body: dict[str, Any], headers: Headers) -> UpstreamStream:
        return _EchoStream(self._handle.options(stream=True).chat_stream.remote(body))

    async def models(self) -> UpstreamReply:
        answer = await self._handle.models.remote()
        return UpstreamReply(200, json.dumps(answer).encode(), "application/json")


# ---------------------------------------------------------------------------- routes
@dataclass(frozen=True)
class Route:
    """Where one decision's requests go: the ``upstream`` and the ``model`` name sent in place
    of the request's (``None``: the request's own)."""

    upstream: Upstream
    model: str | None = None

    def body(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as sent upstream (the model name overridden when the route says so)."""
        return body if self.model is None else {**body, "model": self.model}


class UpstreamRouter:
    """Every route's upstream (``RouterConfig.upstreams``): one ``HttpUpstream`` per distinct
    server settings, the ``EchoClient`` (``echo``, a handle of ``EchoUpstream``) for routes
    without a URL. Raises ``ValueError`` when a route needs the echo and none is given, or a
    key's environment variable is missing (``HttpUpstream``)."""

    def __init__(self, config: RouterConfig, echo=None):
        self._upstreams: dict[tuple, Upstream] = {}
        self._routes: dict[str | None, Route] = {}
        for name, settings in config.upstreams().items():
            key = (settings.base_url, settings.api_key_env, settings.timeout_s)
            if key not in self._upstreams:
                if settings.base_url:
                    self._upstreams[key] = HttpUpstream(settings)
                elif echo is not None:
                    self._upstreams[key] = EchoClient(echo)
                else:
                    raise ValueError(f"route {name!r} has no upstream URL and no echo upstream was given")
            self._routes[name] = Route(self._upstreams[key], settings.model)

    def route(self, decision_name: str | None) -> Route:
        """The route of the decision named ``decision_name`` (``None``: no decision matched)."""
        return self._routes.get(decision_name, self._routes[None])

    def servers(self) -> list[Upstream]:
        """The distinct upstream servers (the echo counted once), for ``/v1/models``."""
        seen: dict[str, Upstream] = {}
        for upstream in self._upstreams.values():
            seen.setdefault(upstream.name, upstream)
        return list(seen.values())

    async def aclose(self) -> None:
        for upstream in self._upstreams.values():
            if isinstance(upstream, HttpUpstream):
                await upstream.aclose()
