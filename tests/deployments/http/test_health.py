"""``GET /health`` through the real ingress application, without Ray: the store pool and the
Embedder are asked at once, each for at most ``HEALTH_CHECK_TIMEOUT_S``; one that does not
answer in time (a replica restarting, an Embedder at ``cpu_priority: idle`` on a saturated
host) makes a prompt 503 ``degraded`` naming it, not a probe left waiting."""

from __future__ import annotations

import asyncio
import time
import types
from pathlib import Path

import pytest
from ray import serve
from starlette.testclient import TestClient

from deployments.http import ingress
from deployments.http.routes import service
from memory_core.config import RouterConfig


class Call:
    """What a handle method gives: ``.remote()`` → an awaitable answering ``value`` after
    ``delay_s`` (``raises``: raised instead)."""

    def __init__(self, value=None, delay_s: float = 0.0, raises: Exception | None = None):
        self.value, self.delay_s, self.raises = value, delay_s, raises

    async def _answer(self):
        await asyncio.sleep(self.delay_s)
        if self.raises is not None:
            raise self.raises
        return self.value

    def remote(self):
        return self._answer()


@pytest.fixture
def health(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``health(store=Call, embedder=Call)`` → (response, seconds) of ``GET /health``."""
    config = RouterConfig.model_validate(
        {
            "global": {"access": {"mode": "api_key", "api_keys": {"path": str(tmp_path / "access.sqlite")}}},
            "routing": {"decisions": [{"name": "default", "plugins": []}]},
        }
    )
    user_class = ingress.MemoryIngress.func_or_class.__mro__[1]
    instance = object.__new__(user_class)  # the class under Serve's ASGI wrapper
    user_class._build(instance, config, None, None, echo=object())
    monkeypatch.setattr(serve, "get_replica_context", lambda: types.SimpleNamespace(servable_object=instance))
    monkeypatch.setattr(service, "HEALTH_CHECK_TIMEOUT_S", 0.5)
    client = TestClient(user_class.__init__.__globals__["app"], raise_server_exceptions=False)

    def ask(store: Call, embedder: Call):
        instance.store_pool = types.SimpleNamespace(check_connection=store)
        instance.embedder = types.SimpleNamespace(info=embedder)
        started = time.perf_counter()
        response = client.get("/health")
        return response, time.perf_counter() - started

    yield ask
    instance.registry.close()


def test_both_answer(health):
    response, _ = health(Call(True), Call({"identity": "abc"}))
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "store": True, "embedder": True, "model_identity": "abc"}


def test_an_embedder_that_does_not_answer_in_time_is_a_prompt_503(health):
    response, seconds = health(Call(True), Call({"identity": "abc"}, delay_s=30))
    body = response.json()
    assert response.status_code == 503 and body["status"] == "degraded"
    assert body["store"] is True and body["embedder"] is False and "TimeoutError" in body["embedder_error"]
    assert seconds < 5  # the bound (0.5 s here), not the Embedder's 30 s


def test_both_slow_are_asked_at_once(health):
    response, seconds = health(Call(True, delay_s=30), Call({"identity": "abc"}, delay_s=30))
    body = response.json()
    assert response.status_code == 503 and body["store"] is False and body["embedder"] is False
    assert "TimeoutError" in body["store_error"] and "TimeoutError" in body["embedder_error"]
    assert seconds < 5


def test_a_failing_or_false_store_is_degraded(health):
    failing, _ = health(Call(raises=ConnectionError("no shard")), Call({"identity": "abc"}))
    assert failing.status_code == 503 and "ConnectionError('no shard')" in failing.json()["store_error"]
    false, _ = health(Call(False), Call({"identity": "abc"}))
    assert false.status_code == 503 and false.json()["store"] is False and "store_error" not in false.json()
