"""Work for a caller who has gone stops: a client that disconnects from a long import leaves
no store shard working for nobody. The application under ``serve.run``; an import of many
lines is started over HTTP and dropped once its first memories are stored. Serve cancels the
ingress request; ``StorePoolClient`` cancels the shard's calls (``ray.cancel``), which the
shard counts in ``memory_store_cancelled``. Checked: the user's memories stop growing far
below the import's size, and the shard's counter says it was cancelled."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration

APP = "memory-cancel"
LINES = 3000


@pytest.fixture(scope="module")
def base_url(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_application

    tmp = tmp_path_factory.mktemp("cancel")
    config = {
        "global": {
            "stores": {"memory": {"backend": "milvus", "milvus": {"uri": str(tmp / "m.db"), "collection": "cancel"}}},
            "access": {"write_rate_limit": {"limit": 0}},
            "limits": {"import_lines": LINES, "import_body_bytes": 8 * 1024 * 1024},
        },
        "routing": {"decisions": [{"name": "default", "plugins": []}]},
    }
    serve.run(build_application({"config": config}), name=APP, route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(url, timeout=240)
    yield url
    serve.delete(APP)


def _total(url: str, user: str) -> int:
    return httpx.get(f"{url}/v1/memory", headers={"x-authz-user-id": user}, timeout=30).json()["total"]


def _cancelled(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.removeprefix("ray_").startswith("memory_store_cancelled")
        and s.labels.get("operation") == "write"
        and not s.name.endswith("_created")
    )


def test_a_dropped_import_stops_the_shard(base_url, ray_metrics_port):
    user = f"cancel-{uuid.uuid4().hex[:8]}"
    body = "\n".join(
        json.dumps({"content": f"Imported note {i}: the parcel for flat {i} went to the locker {i * 7}."})
        for i in range(LINES)
    )
    before = _cancelled(ray_metrics_port)

    async def dropped() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
            headers = {"x-authz-user-id": user, "content-type": "application/x-ndjson"}
            task = asyncio.create_task(client.post("/v1/memory/import", content=body.encode(), headers=headers))
            deadline = time.monotonic() + 120
            while _total(base_url, user) < 5:  # the import is under way
                assert not task.done(), f"the import ended before it could be dropped: {task.result().text[:200]}"
                assert time.monotonic() < deadline, "the import stored nothing within 120 s"
                await asyncio.sleep(0.2)
            task.cancel()  # the client goes away: httpx closes the connection
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(dropped())
    time.sleep(3)  # what was under way when the client left ends
    stopped_at = _total(base_url, user)
    time.sleep(5)
    assert _total(base_url, user) == stopped_at, "the shard went on importing for a client who had gone"
    assert stopped_at < LINES / 2, stopped_at
    deadline = time.time() + 60  # Ray exports application metrics every ~5-10 s
    while _cancelled(ray_metrics_port) <= before and time.time() < deadline:
        time.sleep(2)
    assert _cancelled(ray_metrics_port) > before, "no shard call was cancelled"
