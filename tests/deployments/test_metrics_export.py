"""The application's metrics on Ray's metrics endpoint: the app under ``serve.run``, some
traffic, then Ray's Prometheus endpoint scraped and parsed (``prometheus_client``) until every
expected series is there (Ray exports application metrics every few seconds)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memory_core.chat.metrics import exported_names
from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration

RAY_LABELS = {
    "Component",
    "NodeAddress",
    "SessionName",
    "Version",
    "WorkerId",
    "JobId",
    "otel_scope_name",
    "otel_scope_schema_url",
    "otel_scope_version",
    "le",
}
"""Labels Ray (or Prometheus, ``le``) adds to every application series."""
EXPECTED = {  # series name (without Ray's prefix) → label values that must appear (among others)
    "llm_memory_retrieval_total": [{"backend": "milvus", "status": "hit"}, {"backend": "milvus", "status": "miss"}],
    "llm_memory_retrieval_latency_seconds_count": [{"backend": "milvus"}],
    "llm_memory_retrieval_results_count": [{"backend": "milvus"}],
    "llm_memory_injected_tokens_count": [{"backend": "milvus"}],
    "llm_memory_store_latency_seconds_count": [
        {"backend": "milvus", "operation": "retrieve"},
        {"backend": "milvus", "operation": "write"},
        {"backend": "milvus", "operation": "consolidate"},
    ],
    "llm_memory_writes_total": [{"backend": "milvus", "outcome": "created"}],
    "llm_memory_embedder_batch_size_count": [{}],
    "llm_memory_embedder_queue_seconds_count": [{}],
    "memory_skipped_total": [{"reason": "no_user"}],
    "memory_extraction_total": [{"outcome": "semantic", "decision": "default"}],
    "memory_injected_count_count": [{}],
    "memory_consolidation_passes_total": [{"outcome": "ok"}],
    "memory_consolidation_pass_seconds_count": [{}],
}


def config(tmp_path) -> dict:
    return {
        "global": {
            "stores": {
                "memory": {
                    "backend": "milvus",
                    "milvus": {"uri": str(tmp_path / "memory.db"), "collection": "metrics_memory"},
                    # a caller's write goes to the Embedder, whose awaited calls export the
                    # queue wait (the shard's own write lane would take a small one)
                    "pool": {"query_embedding": "in_shard", "in_shard_write_texts": 0},
                }
            }
        },
        "routing": {"decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {}}]}]},
    }


@pytest.fixture(scope="module")
def base_url(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_application

    tmp = tmp_path_factory.mktemp("metrics_app")
    # the Consolidator's own loop off: the test's pass, not the loop, takes the user's writes
    loop_off = {"Consolidator": {"user_config": {"enabled": False}}}
    app = build_application({"config": config(tmp)}, overrides=loop_off)
    serve.run(app, name="memory-metrics", route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(url)
    yield url
    serve.delete("memory-metrics")


def chat(url, user_id, text):
    headers = {"x-authz-user-id": user_id} if user_id else {}
    body = {"model": "assistant", "messages": [{"role": "user", "content": text}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r


def scrape(port) -> dict[str, list[dict[str, str]]]:
    """Series name (without Ray's ``ray_`` prefix) → the label sets of its samples, for the
    application's metrics (those in the catalog)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    ours = exported_names()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ours:
                out.setdefault(sample.name.removeprefix("ray_"), []).append(dict(sample.labels))
    return out


def missing(found, expected) -> list[str]:
    gone = []
    for name, wanted in expected.items():
        for labels in wanted:
            if not any(labels.items() <= s.items() for s in found.get(name, [])):
                gone.append(f"{name}{labels}")
    return gone


def test_metrics_on_rays_endpoint(base_url, ray_metrics_port):
    alice = f"user-{uuid.uuid4().hex[:8]}"
    chat(base_url, alice, "Please remember this: my locker code is 4817.")  # miss, then a write
    deadline = time.time() + 30
    while time.time() < deadline:  # the auto-store runs after the answer
        if httpx.get(f"{base_url}/v1/memory", headers={"x-authz-user-id": alice}).json()["total"] >= 1:
            break
        time.sleep(0.2)
    assert int(chat(base_url, alice, "What is my locker code?").headers["x-memory-injected"]) >= 1  # a hit
    r = httpx.post(  # a caller's write: embedded by the Embedder, the caller waiting (queue seconds)
        f"{base_url}/v1/memory",
        headers={"x-authz-user-id": alice},
        json={"memories": [{"content": "My gym is on Baker Street."}]},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    chat(base_url, None, "What is my locker code?")  # skipped: no_user
    from ray import serve

    consolidator = serve.get_deployment_handle("Consolidator", app_name="memory-metrics")
    assert consolidator.run_once.remote().result(timeout_s=60)["users"] >= 1  # alice wrote: a pass
    r = httpx.post(
        f"{base_url}/v1/memory/consolidate",
        headers={"x-authz-user-id": alice, "x-authz-role": "admin"},
        json={},
        timeout=60,
    )
    assert r.status_code == 200, r.text

    deadline = time.time() + 60  # Ray exports application metrics every ~5-10 s
    found: dict[str, list[dict[str, str]]] = {}
    while time.time() < deadline:
        found = scrape(ray_metrics_port)
        if not missing(found, EXPECTED):
            break
        time.sleep(2)
    assert not missing(found, EXPECTED), f"not exported: {missing(found, EXPECTED)}; found {sorted(found)}"

    ours = exported_names()
    for name, samples in found.items():  # every series carries exactly its declared labels
        spec = ours["ray_" + name]
        for labels in samples:
            assert set(labels) - RAY_LABELS == set(spec.labels), f"{name}: {sorted(labels)}"
            for key, declared in spec.labels.items():
                assert declared is None or labels[key] in declared, f"{name}{{{key}={labels[key]!r}}}"
