"""The audit log through the running application (Ray Serve, ``api_key`` mode): an admin's
work on another user's memories and an admin route are recorded with Serve's request id and
the client address, a user's work on their own memories is not, and no memory content or
query text reaches the audit file."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from memory_core.access import KeyRegistry
from tests.conftest import wait_healthy, wait_until

pytestmark = pytest.mark.integration

SECRET = "The spare key is under the blue flowerpot"
QUERY = "where is the spare key hidden"
JSON = {"content-type": "application/json"}


def test_admin_work_on_another_users_memories_is_recorded_through_the_running_app(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_app

    tmp = tmp_path_factory.mktemp("audit")
    registry = KeyRegistry(tmp / "access.sqlite")
    alice = f"alice-{uuid.uuid4().hex[:6]}"
    admin_key, alice_key = registry.create("ops", "admin")[0], registry.create(alice, "user")[0]
    registry.close()
    config = {
        "global": {
            "stores": {
                "memory": {
                    "backend": "milvus",
                    "milvus": {"uri": str(tmp / "memory.db"), "collection": "audit_memory"},
                    "pool": {"query_embedding": "in_shard"},
                }
            },
            "access": {"mode": "api_key", "api_keys": {"path": str(tmp / "access.sqlite")}},
            "audit": {"path": str(tmp / "audit" / "audit.sqlite")},
        },
        "routing": {"decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {}}]}]},
    }
    serve.run(build_app({"config": config}), name="audit-it", route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}"
    try:
        wait_healthy(url)
        admin = JSON | {"authorization": f"Bearer {admin_key}"}
        own = JSON | {"authorization": f"Bearer {alice_key}"}
        created = httpx.post(
            f"{url}/v1/memory",
            params={"user_id": alice},
            json={"memories": [{"content": SECRET}]},
            headers=admin,
            timeout=60,
        )
        assert created.status_code == 201, created.text
        search = httpx.post(
            f"{url}/v1/memory/search", params={"user_id": alice}, json={"query": QUERY}, headers=admin, timeout=60
        )
        assert search.status_code == 200 and SECRET in search.text
        assert httpx.get(f"{url}/v1/memory", headers=own, timeout=60).status_code == 200  # own: not recorded
        assert httpx.get(f"{url}/v1/admin/stats", headers=admin, timeout=60).status_code == 200

        def recorded():
            page = httpx.get(f"{url}/v1/admin/audit", params={"actor": "ops"}, headers=admin, timeout=60).json()
            entries = list(reversed(page["entries"]))
            return (
                entries
                if [e["action"] for e in entries][:3] == ["memory.create", "memory.search", "admin.stats"]
                else None
            )

        entries = wait_until(recorded, 30, "the three admin requests in the audit log")
        create, searched, stats = entries[:3]
        assert create["target_user_id"] == searched["target_user_id"] == alice and stats["target_user_id"] is None
        assert (create["status"], searched["status"], stats["status"]) == (201, 200, 200)
        assert searched["request_id"] == search.headers["x-request-id"]  # Serve's request id
        assert create["client_address"] == "127.0.0.1" and create["actor"]["key_id"].startswith("key_")
        everyone = httpx.get(f"{url}/v1/admin/audit", headers=admin, timeout=60).json()["entries"]
        assert not any(e["actor"]["user_id"] == alice for e in everyone)
    finally:
        serve.delete("audit-it")
    stored = b"".join(p.read_bytes() for p in Path(tmp / "audit").glob("audit.sqlite*"))
    assert stored and SECRET.encode() not in stored and QUERY.encode() not in stored
    assert admin_key.encode() not in stored
