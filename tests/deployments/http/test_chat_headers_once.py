"""A chat request's headers are normalised once (``sanitize.normalize_headers``) and the
decision rules read that very result: the chat route is called in process, without Ray,
on an ingress instance whose parts are the real access, pipeline and routing code and a
fake store and upstream."""

from __future__ import annotations

import asyncio
import json

import pytest

from deployments.http.ingress import MemoryIngress
from memory_core import sanitize
from memory_core.chat import routing
from memory_core.chat.background import BackgroundWrites
from memory_core.config import load_config

from .inprocess_chat import ANSWER, chat_request, hand_built_ingress


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


def _ingress(config):
    return hand_built_ingress(config, _Store(), _Recorder(), BackgroundWrites(per_user=4, total=8))


def _request(headers: dict[str, str]):
    return chat_request(headers)


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
