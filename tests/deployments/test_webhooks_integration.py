"""Webhooks end to end: the application under ``serve.run`` records a memory's lifecycle
events and its WebhookDispatcher delivers them to a receiver in this process (an HTTP server
on a free port) that verifies each signature with standardwebhooks' ``Webhook.verify``. The
receiver is down (503) first; the application is deleted and deployed again while events
are still undelivered; every event then arrives, in order per memory."""

from __future__ import annotations

import http.server
import threading
import uuid

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from memory_core.testing.net import free_port
from tests.conftest import wait_healthy, wait_until

pytestmark = pytest.mark.integration
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SECRET_ENV = "IT_WEBHOOK_SECRET"


class Receiver(http.server.ThreadingHTTPServer):
    """Answers 503 while ``down``; else verifies the signature and keeps the payload."""

    def __init__(self, port: int):
        self.down = True
        self.refused = 0
        self.accepted: list[dict] = []
        self.bad_signatures = 0
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            payload = Webhook(SECRET).verify(body, dict(self.headers.items()))
        except Exception:
            self.server.bad_signatures += 1
            self.send_response(400)
            self.end_headers()
            return
        if self.server.down:
            self.server.refused += 1
            self.send_response(503)
        else:
            self.server.accepted.append(payload)
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        return None


@pytest.fixture
def receiver():
    server = Receiver(free_port())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def app(tmp_path, receiver_port: int):
    from deployments.app import build_application

    events = {
        "path": str(tmp_path / "events.sqlite"),
        "poll_interval_s": 0.2,
        "retry": {"initial_delay_s": 0.2, "max_delay_s": 1.0},
        "webhooks": [{"url": f"http://127.0.0.1:{receiver_port}/hook", "secret_env": SECRET_ENV, "name": "it"}],
    }
    config = {"global": {"stores": {"memory": {"backend": "inmemory", "events": events}}}}
    env = {"runtime_env": {"env_vars": {SECRET_ENV: SECRET}}, "num_cpus": 0}
    return build_application({"config": config}, overrides={"WebhookDispatcher": {"ray_actor_options": env}})


def test_events_are_signed_retried_and_survive_a_restart_in_order(serve_http_port, tmp_path, receiver):
    from ray import serve

    url = f"http://127.0.0.1:{serve_http_port}"
    alice = {"x-authz-user-id": f"user-{uuid.uuid4().hex[:8]}"}
    serve.run(app(tmp_path, receiver.server_address[1]), name="webhooks-it", route_prefix="/", blocking=False)
    try:
        wait_healthy(url)
        created = httpx.post(
            f"{url}/v1/memory", json={"memories": [{"content": "My locker code is 4817."}]}, headers=alice
        )
        assert created.status_code == 201, created.text
        memory_id = created.json()["memories"][0]["id"]
        patched = httpx.patch(
            f"{url}/v1/memory/{memory_id}", json={"content": "My locker code is 5000."}, headers=alice
        )
        assert patched.status_code == 200, patched.text
        deleted = httpx.delete(f"{url}/v1/memory/{memory_id}", headers={**alice, "content-type": "application/json"})
        assert deleted.status_code == 200, deleted.text
        own = httpx.get(f"{url}/v1/memory/{memory_id}/events", headers=alice).json()
        assert [e["kind"] for e in own["events"]] == ["created", "updated", "deleted"]
        assert {e["actor"] for e in own["events"]} == {f"user:{alice['x-authz-user-id']}"}
        admin = {"x-authz-user-id": "ops", "x-authz-role": "admin"}
        feed = httpx.get(f"{url}/v1/admin/events", params={"kind": "deleted", "limit": 1}, headers=admin).json()
        assert [e["memory_id"] for e in feed["events"]] == [memory_id]
        assert httpx.get(f"{url}/v1/admin/events", headers=alice).status_code == 403
        wait_until(lambda: receiver.refused >= 2, 60, "the dispatcher retries a receiver that answers 503")
    finally:
        serve.delete("webhooks-it")  # the service goes away with the events undelivered
    assert receiver.accepted == []
    receiver.down = False
    serve.run(app(tmp_path, receiver.server_address[1]), name="webhooks-it", route_prefix="/", blocking=False)
    try:
        wait_until(lambda: len(receiver.accepted) >= 3, 120, "the redeployed dispatcher delivers the outbox")
    finally:
        serve.delete("webhooks-it")
    mine = [p for p in receiver.accepted if p["data"]["memory_id"] == memory_id]
    assert [p["type"] for p in mine] == ["memory.created", "memory.updated", "memory.deleted"]
    assert receiver.bad_signatures == 0
    assert len({p["data"]["event_id"] for p in mine}) == 3
