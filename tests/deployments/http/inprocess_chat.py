"""The parts for calling the chat route in process, without Ray: an ingress instance built
without ``__init__`` (which needs Ray handles), a fake upstream that answers every chat with
``ANSWER`` (whole, or streamed as ``chat.completion.chunk`` events), and a chat request
carrying given headers."""

from __future__ import annotations

import json

from starlette.requests import Request

from deployments import sse
from deployments.http.ingress import MemoryIngress
from deployments.upstream import Route, UpstreamReply
from memory_core.access import Authenticator
from memory_core.chat.background import BackgroundWrites
from memory_core.chat.pipeline import MemoryPipeline

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "noted"}}]}
CHUNKS = [
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "no"}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "ted"}}]},
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]
"""``ANSWER`` as the events of a stream (then ``[DONE]``)."""


class FakeStream:
    """An open stream of ``CHUNKS`` then ``[DONE]`` (an ``UpstreamStream``)."""

    headers: list = []

    async def events(self):
        reader = sse.EventReader()
        for data in [*CHUNKS, sse.DONE]:
            for line in sse.event(data).decode().split("\n"):
                done = reader.line(line)
                if done is not None:
                    yield done

    async def aclose(self) -> None:
        """Nothing to close: the events are in memory."""


class FakeUpstream:
    """Answers every chat 200 with ``ANSWER``, whole or streamed; keeps the bodies it was sent."""

    name = "fake"

    def __init__(self):
        self.bodies: list[dict] = []

    async def chat(self, body, headers):
        self.bodies.append(body)
        return UpstreamReply(200, json.dumps(ANSWER).encode(), "application/json")

    async def stream(self, body, headers):
        self.bodies.append(body)
        return FakeStream()


class FakeUpstreams:
    """Every decision routes to ``upstream``."""

    def __init__(self, upstream):
        self.upstream = upstream

    def route(self, decision_name):
        return Route(self.upstream)


def hand_built_ingress(config, store, metrics, background_writes: BackgroundWrites):
    """A ``MemoryIngress`` instance with the attributes the chat route reads, set by hand: the
    real access and pipeline code over ``store``, ``metrics`` and ``background_writes``, and
    a ``FakeUpstream``."""
    ingress = object.__new__(MemoryIngress.func_or_class)
    ingress.config = config
    ingress.auth = Authenticator(config.global_.access, None, {})
    ingress.metrics = metrics
    ingress.pipeline = MemoryPipeline(config, store=store, metrics=metrics)
    ingress.upstreams = FakeUpstreams(FakeUpstream())
    ingress.background_writes = background_writes
    return ingress


def chat_request(headers: dict[str, str], stream: bool = False) -> Request:
    """``POST /v1/chat/completions`` with ``headers`` and one user message stating a fact;
    ``stream`` asks for the answer as an event stream."""
    payload = {"model": "m", "messages": [{"role": "user", "content": "my locker code is 4411"}]}
    body = json.dumps({**payload, "stream": True} if stream else payload).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "query_string": b"",
    }
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(scope, receive)
