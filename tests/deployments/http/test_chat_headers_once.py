"""A chat request's headers are normalised once (``sanitize.normalize_headers``) and the
decision rules read that very result: the chat route is called in process, without Ray,
on an ingress instance whose parts are the real access, pipeline and routing code and a
fake store and upstream."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request

from deployments.http.ingress import MemoryIngress
from deployments.upstream import Route, UpstreamReply
from memory_core import sanitize
from memory_core.access import Authenticator
from memory_core.chat import routing
from memory_core.chat.background import BackgroundWrites
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import load_config

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "noted"}}]}


class _Recorder:
    """A metrics sink keeping every count and observation."""

    def __init__(self):
        self.counts: list[tuple[str, dict]] = []

    def count(self, name, tags=None, value=1.0):
        self.counts.append((name, dict(tags or {})))

    def observe(self, name, value, tags=None):
        return None


class _Store:
    """Retrieves nothing, writes nothing."""

    async def retrieve(self, options):
        return []

    async def write(self, memories):
        return []


class _Upstream:
    name = "fake"

    def __init__(self):
        self.bodies: list[dict] = []

    async def chat(self, body, headers):
        self.bodies.append(body)
        return UpstreamReply(200, json.dumps(ANSWER).encode(), "application/json")


class _Upstreams:
    def __init__(self, upstream):
        self.upstream = upstream

    def route(self, decision_name):
        return Route(self.upstream)


def _ingress(config):
    """An ingress instance without ``__init__`` (which needs Ray handles): the attributes the
    chat route reads, set by hand."""
    ingress = object.__new__(MemoryIngress.func_or_class)
    ingress.config = config
    ingress.auth = Authenticator(config.global_.access, None, {})
    ingress.metrics = _Recorder()
    ingress.pipeline = MemoryPipeline(config, store=_Store(), metrics=ingress.metrics)
    ingress.upstreams = _Upstreams(_Upstream())
    ingress.background_writes = BackgroundWrites(per_user=4, total=8)
    return ingress


def _request(headers: dict[str, str]) -> Request:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "my locker code is 4411"}]}).encode()
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


CONFIG = {
    "routing": {
        "decisions": [
            {
                "name": "tenant",
                "match": {"headers": {"X-Tenant": "acme"}},
                "plugins": [{"type": "memory", "configuration": {"enabled": True}}],
            }
        ]
    }
}


@pytest.mark.parametrize(
    "headers",
    [
        {"x-authz-user-id": "alice", "X-Tenant": "acme", "x-project-id": "p1"},
        {"X-Tenant": "acme"},  # no identity: admitted as anonymous (from the gateway's address)
    ],
    ids=["identified", "anonymous"],
)
def test_a_chat_request_normalises_its_headers_once(monkeypatch, headers):
    normalised: list[dict] = []
    real_normalise = sanitize.normalize_headers

    def counting(items):
        out = real_normalise(items)
        normalised.append(out)
        return out

    decided: list = []
    real_select = routing.select_decision

    def spying_select(config, *, model, last_user_message, headers):
        decided.append(headers)
        return real_select(config, model=model, last_user_message=last_user_message, headers=headers)

    monkeypatch.setattr(sanitize, "normalize_headers", counting)
    monkeypatch.setattr("memory_core.chat.pipeline.select_decision", spying_select)
    ingress = _ingress(load_config(CONFIG))

    async def call():
        response = await MemoryIngress.func_or_class.chat_completions(ingress, _request(headers))
        assert await ingress.background_writes.drain(5.0) == 0
        return response

    response = asyncio.run(call())

    assert response.status_code == 200
    assert json.loads(response.body) == ANSWER
    assert response.headers["x-memory-decision"] == "tenant"  # the header rule matched
    assert len(normalised) == 1
    assert len(decided) == 1 and decided[0] is normalised[0]  # the decision rules read that result
