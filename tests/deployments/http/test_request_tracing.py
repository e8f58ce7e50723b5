"""``deployments.http.tracing.ChatTracing`` on a small Starlette application: every request but
the health check is one trace, its root span named by the route's template (never the path,
which holds memory ids), with the work the route does as child spans."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from deployments.http.tracing import ChatTracing
from memory_core import tracing
from memory_core.tracing import TracingSettings

MEMORY_ID = "876f1f3a9539d61670fe2de30f0bf90c"


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    assert tracing.setup_tracing(TracingSettings(schedule_delay_ms=10), "test", exporter=exporter)
    yield exporter
    tracing.shutdown_tracing()


async def get_memory(request):
    with tracing.span("shard.get", {"memory.backend": "inmemory"}):  # what the store pool opens
        return JSONResponse({"id": request.path_params["memory_id"]})


async def health(request):
    return JSONResponse({"status": "ok"})


async def broken(request):
    return JSONResponse({"error": {"code": "internal_error", "message": "x"}}, status_code=500)


APP = Starlette(
    routes=[
        Route("/v1/memory/{memory_id}", get_memory),
        Route("/health", health),
        Route("/v1/admin/stats", broken),
    ],
    middleware=[Middleware(ChatTracing)],
)


def spans(exporter):
    assert tracing.force_flush()
    return list(exporter.get_finished_spans())


def test_a_rest_request_is_one_trace_named_by_its_route_template(exported):
    client = TestClient(APP)
    assert client.get(f"/v1/memory/{MEMORY_ID}").status_code == 200
    found = {s.name: s for s in spans(exported)}
    root = found["GET /v1/memory/{memory_id}"]
    assert root.parent is None and found["shard.get"].parent.span_id == root.context.span_id
    assert root.attributes["http.route"] == "/v1/memory/{memory_id}"
    assert root.attributes["http.response.status_code"] == 200
    assert all(MEMORY_ID not in str(v) for s in found.values() for v in s.attributes.values())


def test_the_health_check_makes_no_span_and_a_5xx_marks_the_root_an_error(exported):
    client = TestClient(APP)
    client.get("/health")
    client.get("/v1/admin/stats")
    (root,) = spans(exported)
    assert root.name == "GET /v1/admin/stats" and root.attributes["error.type"] == "500"


def test_a_clients_traceparent_is_the_parent_of_a_rest_request(exported):
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    TestClient(APP).get(f"/v1/memory/{MEMORY_ID}", headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
    root = next(s for s in spans(exported) if s.name.startswith("GET "))
    assert f"{root.context.trace_id:032x}" == trace_id and f"{root.parent.span_id:016x}" == span_id
