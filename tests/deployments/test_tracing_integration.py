"""One trace per chat request across the Ray hops, under ``serve.run`` with tracing on.

The replicas and the store shard are separate processes, so the SDK's in-memory exporter
cannot see their spans: each process exports through the real ``OTLPSpanExporter``
(``global.tracing.otlp_endpoint``) to a receiver in this test process
(``memory_core.testing.otlp_receiver``, decoding OTLP's protobuf), and the test reads the
span tree from what arrived: ingress ``chat`` (the client's ``traceparent`` as its parent) →
``retrieve`` → ``shard.retrieve`` (store shard) → ``embed`` (Embedder); ``gate``, ``inject``,
``forward`` (its traceparent received by the upstream); after the answer ``auto_store`` →
``extract``, ``embed`` (the turn's memories, background work of the Embedder), ``store`` →
``shard.write`` → ``curate``.
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from memory_core.testing.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration

APP = "memory-traced"
FACT = "My locker code is 4817"
TURN = "My bike is a green Gazelle. What is my locker code?"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def url(serve_http_port, upstream_server, receiver):
    from ray import serve

    from deployments.app import build_application

    config = {
        "global": {
            "stores": {"memory": {"backend": "inmemory"}},
            "upstream": {"base_url": upstream_server.base_url, "timeout_s": 5},
            "tracing": {"otlp_endpoint": receiver.url, "schedule_delay_ms": 100, "service_name": "memory-router-test"},
        },
        "routing": {
            "decisions": [{"name": "personal", "plugins": [{"type": "memory", "configuration": {"enabled": True}}]}]
        },
    }
    serve.run(build_application({"config": config}), name=APP, route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(base)
    yield base
    serve.delete(APP)


def trace_of(receiver: OtlpReceiver, trace_id: str, names: set[str], timeout: float = 60) -> list[ReceivedSpan]:
    """The spans of ``trace_id`` once every name in ``names`` has arrived."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = [s for s in receiver.spans() if s.trace_id == trace_id]
        if names <= {s.name for s in spans}:
            return spans
        time.sleep(0.2)
    arrived = sorted({s.name for s in receiver.spans() if s.trace_id == trace_id})
    raise AssertionError(f"trace {trace_id}: {sorted(names - set(arrived))} missing; arrived {arrived}")


def parent_name(spans: list[ReceivedSpan], child: ReceivedSpan) -> str | None:
    by_id = {s.span_id: s.name for s in spans}
    return by_id.get(child.parent_span_id)


def test_a_chat_with_memory_is_one_trace_across_the_ingress_shard_embedder_and_upstream(url, receiver, upstream_server):
    user = f"traced-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{url}/v1/memory", json={"memories": [{"content": FACT}]}, headers={"x-authz-user-id": user})
    assert r.status_code == 201, r.text
    tag = uuid.uuid4().hex
    headers = {
        "x-authz-user-id": user,
        "x-test-tag": tag,
        "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        "tracestate": "client=1",
    }
    body = {"model": "assistant", "messages": [{"role": "user", "content": TURN}]}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200 and int(answer.headers["x-memory-injected"]) == 1

    expected = {"chat", "retrieve", "shard.retrieve", "gate", "inject", "forward", "auto_store", "extract", "store"}
    spans = trace_of(receiver, CLIENT_TRACE, expected | {"shard.write", "curate", "embed"})
    one = {s.name: s for s in spans}
    parents = {s.name: parent_name(spans, s) for s in spans if s.name != "embed"}
    assert parents == {
        "chat": None,  # its parent is the client's span, not in this trace's spans
        "retrieve": "chat",
        "shard.retrieve": "retrieve",
        "gate": "chat",
        "inject": "chat",
        "forward": "chat",
        "auto_store": "chat",
        "extract": "auto_store",
        "store": "auto_store",
        "shard.write": "store",
        "curate": "shard.write",
    }
    # the query's embedding (under the shard's retrieve) and the stored turn's (background work
    # the ingress asks of the Embedder under its auto-store: MemoryPipeline embed_stored)
    assert sorted(parent_name(spans, s) or "" for s in spans if s.name == "embed") == ["auto_store", "shard.retrieve"]
    assert one["chat"].parent_span_id == CLIENT_SPAN
    components = {s.name: s.resource["memory_router.component"] for s in spans}
    assert components["chat"] == components["forward"] == components["auto_store"] == "ingress"
    assert components["shard.retrieve"] == components["curate"] == "store_shard"
    assert components["embed"] == "embedder"
    assert len({s.resource["process.pid"] for s in spans}) == 3  # three processes, one trace
    assert {s.resource["service.name"] for s in spans} == {"memory-router-test"}

    assert one["chat"].attributes["http.response.status_code"] == 200
    assert one["chat"].attributes["memory.decision"] == "personal" and one["chat"].attributes["memory.injected"] == 1
    assert one["shard.retrieve"].attributes["memory.backend"] == "inmemory"
    assert one["store"].attributes["memory.stored"] >= 1

    (seen,) = upstream_server.received(tag)
    sent = dict(seen["headers"])
    assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{one['forward'].span_id}-01"  # the forward span is its parent
    assert sent["tracestate"] == "client=1"

    values = [str(v) for s in spans for v in s.attributes.values()]
    assert not [v for v in values for bad in (user, "4817", "Gazelle", "locker") if bad in v]


def test_a_chat_without_traceparent_starts_its_own_trace(url, receiver):
    before = {s.trace_id for s in receiver.spans()}
    body = {"model": "assistant", "messages": [{"role": "user", "content": "What colour is my bike?"}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"x-authz-user-id": "traced-new"}, timeout=60)
    assert r.status_code == 200
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        roots = [s for s in receiver.spans() if s.name == "chat" and s.trace_id not in before]
        if roots:
            break
        time.sleep(0.2)
    (root,) = roots
    assert root.parent_span_id == "" and root.trace_id != CLIENT_TRACE
    assert trace_of(receiver, root.trace_id, {"retrieve", "shard.retrieve", "forward"})


def test_a_streamed_chat_is_one_trace_with_the_stored_turn_after_the_stream(url, receiver, upstream_server):
    trace_id, parent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
    tag = uuid.uuid4().hex
    headers = {"x-authz-user-id": "traced-stream", "x-test-tag": tag, "traceparent": f"00-{trace_id}-{parent}-01"}
    body = {"model": "assistant", "stream": True, "messages": [{"role": "user", "content": "My cat is called Miso."}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200 and "[DONE]" in r.read().decode()
    spans = trace_of(receiver, trace_id, {"chat", "forward", "auto_store", "store", "shard.write"})
    one = {s.name: s for s in spans}
    assert one["chat"].parent_span_id == parent and one["forward"].attributes["upstream.streamed"] is True
    assert parent_name(spans, one["auto_store"]) == "chat" and parent_name(spans, one["forward"]) == "chat"
    (seen,) = upstream_server.received(tag)
    assert dict(seen["headers"])["traceparent"] == f"00-{trace_id}-{one['forward'].span_id}-01"
