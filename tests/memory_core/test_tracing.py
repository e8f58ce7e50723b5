"""OpenTelemetry traces of the memory side of a chat (``memory_core.tracing``), read from the
SDK's ``InMemorySpanExporter``: the span tree of a chat with memory (retrieve → gate → inject,
then extract → store → curate in the same trace), the attributes an operator filters on and
never caller text, memory ids or user ids; the W3C carrier across a process hop and the
upstream's headers; off by default, and then no span at all."""

from __future__ import annotations

import contextvars

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import ValidationError

from memory_core import tracing
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import MemoryStoreSettings, load_config
from memory_core.sanitize import RequestContext
from memory_core.stores.factory import make_store
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.tracing import TracingSettings
from memory_core.types import Memory

USER = "alice-7f3a"
FACT = "my locker code is 4817"
STATEMENT = "My bike is a green Gazelle."
CONFIG = {
    "global": {"stores": {"memory": {"backend": "inmemory"}}},
    "routing": {
        "decisions": [
            {
                "name": "personal",
                "plugins": [{"type": "memory", "configuration": {"enabled": True, "similarity_threshold": 0.0}}],
            }
        ]
    },
}


@pytest.fixture
def exported():
    """Tracing on in this process, spans kept in memory; off again afterwards."""
    exporter = InMemorySpanExporter()
    assert tracing.setup_tracing(TracingSettings(schedule_delay_ms=10), "test", exporter=exporter)
    yield exporter
    tracing.shutdown_tracing()


def finished(exporter: InMemorySpanExporter) -> list:
    assert tracing.force_flush()
    return list(exporter.get_finished_spans())


def tree(spans: list) -> dict[str, str | None]:
    """span name → its parent's name (None: a root)."""
    by_id = {s.context.span_id: s.name for s in spans}
    return {s.name: (by_id.get(s.parent.span_id) if s.parent else None) for s in spans}


def store():
    settings = MemoryStoreSettings(backend="inmemory")
    return make_store(settings, embed=CountingEmbed(), dimension=DIM)


def chat_body(text: str) -> dict:
    return {"model": "assistant", "messages": [{"role": "user", "content": text}]}


async def a_chat_with_memory(record_user_ids: bool = False) -> tuple[object, list]:
    """One chat with memory under a root span ``chat``: retrieve and inject the fact, then
    store the turn's statement; returns the memory written before and the statements' ids."""
    memories = store()
    held = await memories.store(Memory(user_id=USER, content=FACT))
    pipeline = MemoryPipeline(load_config(CONFIG), store=memories)
    with tracing.remote_span("chat", {}, new_trace=True):  # the edge's root span
        prepared = await pipeline.prepare(chat_body(f"{STATEMENT} What is my locker code?"), RequestContext(USER))
        tracing.annotate(tracing.user_attributes(prepared.user_id))
        assert [m.content for m in prepared.injected] == [FACT]
        written = await pipeline.remember(prepared, {"choices": [{"message": {"content": "It is 4817."}}]})
    assert written
    return held, [r.memory.id for r in written]


async def test_a_chat_with_memory_is_one_trace_with_the_steps_as_spans(exported):
    await a_chat_with_memory()
    spans = finished(exported)
    assert len(spans) == 7
    assert tree(spans) == {
        "chat": None,
        "retrieve": "chat",
        "gate": "chat",
        "inject": "chat",
        "extract": "chat",
        "store": "chat",
        "curate": "store",
    }
    assert len({s.context.trace_id for s in spans}) == 1
    by_name = {s.name: dict(s.attributes or {}) for s in spans}
    assert by_name["retrieve"]["memory.backend"] == "inmemory" and by_name["retrieve"]["memory.candidates"] >= 1
    assert by_name["gate"]["memory.kept"] == 1
    assert by_name["inject"] == {"memory.injected": 1, "memory.placement": "current_turn"}
    assert by_name["extract"]["memory.extracted"] >= 1
    assert by_name["store"]["memory.stored"] >= 1 and by_name["store"].get("memory.writes.created", 0) >= 1
    assert "enduser.id" not in by_name["chat"]


async def test_no_caller_text_memory_id_or_user_id_in_any_attribute(exported):
    held, written = await a_chat_with_memory()
    values = [str(v) for s in finished(exported) for v in (s.attributes or {}).values()]
    secret = [USER, held.id, *written, "4817", "Gazelle", "locker"]
    assert values and not [v for v in values for bad in secret if bad in v]


async def test_record_user_ids_puts_the_user_on_the_chat_span():
    exporter = InMemorySpanExporter()
    tracing.setup_tracing(TracingSettings(record_user_ids=True), "test", exporter=exporter)
    try:
        await a_chat_with_memory()
        (chat,) = [s for s in finished(exporter) if s.name == "chat"]
        assert chat.attributes["enduser.id"] == USER
    finally:
        tracing.shutdown_tracing()


async def test_off_by_default_no_span_no_carrier_and_client_headers_pass():
    assert TracingSettings().enabled is False
    assert tracing.setup_tracing(load_config(CONFIG).global_.tracing, "test") is False
    assert tracing.tracing_enabled() is False
    await a_chat_with_memory()
    with tracing.remote_span("chat", {}, new_trace=True) as current:
        assert current is trace.INVALID_SPAN and tracing.carrier() == {} and tracing.carrier_kwargs() == {}
    client = [("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01"), ("x-other", "1")]
    assert tracing.with_trace_headers(client) == client


def test_the_carrier_makes_the_remote_span_a_child_in_the_same_trace(exported):
    with tracing.span("outside"):  # no trace yet: no span
        assert tracing.carrier() == {}
    with tracing.remote_span("retrieve", {}, new_trace=True) as caller:
        sent = tracing.carrier()
    assert set(sent) == {"traceparent"}
    with tracing.remote_span("shard.retrieve", sent, {"memory.backend": "inmemory"}):
        pass
    with tracing.remote_span("shard.consolidate", {}):  # no caller's trace: no span
        pass
    spans = finished(exported)
    assert tree(spans) == {"retrieve": None, "shard.retrieve": "retrieve"}
    assert spans[1].context.trace_id == caller.get_span_context().trace_id


def test_the_clients_traceparent_is_the_parent_and_is_replaced_towards_the_upstream(exported):
    client_trace, client_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    incoming = {"traceparent": f"00-{client_trace}-{client_span}-01", "tracestate": "vendor=1"}
    with tracing.remote_span("chat", incoming, new_trace=True), tracing.span("forward") as forwarding:
        headers = tracing.with_trace_headers([*incoming.items(), ("x-other", "1")])
    sent = dict(headers)
    assert sent["x-other"] == "1" and sent["tracestate"] == "vendor=1"
    assert sent["traceparent"] == f"00-{client_trace}-{forwarding.get_span_context().span_id:016x}-01"
    (chat,) = [s for s in finished(exported) if s.name == "chat"]
    assert f"{chat.context.trace_id:032x}" == client_trace and f"{chat.parent.span_id:016x}" == client_span


def test_the_edge_starts_a_new_trace_without_traceparent_and_an_error_is_marked_without_its_message(exported):
    with pytest.raises(ValueError), tracing.remote_span("chat", {}, new_trace=True):
        raise ValueError("user text: my locker code is 4817")
    (chat,) = finished(exported)
    assert chat.parent is None and chat.status.status_code is trace.StatusCode.ERROR
    assert chat.attributes["error.type"] == "ValueError" and "4817" not in (chat.status.description or "")


def test_background_work_joins_the_request_trace(exported):
    with tracing.remote_span("chat", {}, new_trace=True):
        fresh = tracing.carrying_trace(contextvars.Context())

    def background() -> None:
        with tracing.span("auto_store"):
            pass

    fresh.run(background)
    contextvars.Context().run(background)  # a fresh context without the request's trace: no span
    assert tree(finished(exported)) == {"chat": None, "auto_store": "chat"}


def test_settings_validate_the_endpoint_and_read_exporter_headers_from_the_environment():
    on = TracingSettings(otlp_endpoint="http://jaeger:4318/v1/traces", headers_env="OTLP_HEADERS")
    assert on.enabled
    assert tracing.exporter_headers(on, {"OTLP_HEADERS": "api-key=a%20b, x-team=core"}) == {
        "api-key": "a b",
        "x-team": "core",
    }
    with pytest.raises(ValueError, match="not set"):
        tracing.exporter_headers(on, {})
    with pytest.raises(ValueError, match="key=value"):
        tracing.exporter_headers(on, {"OTLP_HEADERS": "nokey"})
    for bad in ("jaeger:4318", "http://user:pw@jaeger:4318/v1/traces", "ftp://x/v1/traces"):
        with pytest.raises(ValidationError):
            TracingSettings(otlp_endpoint=bad)
    with pytest.raises(ValidationError):
        TracingSettings(sample_ratio=1.5)
    with pytest.raises(ValidationError):
        TracingSettings(otlp_endpoint="http://c:4318/v1/traces", endpoint="typo")
    assert load_config({"global": {"tracing": {"otlp_endpoint": "http://c:4318/v1/traces"}}}).global_.tracing.enabled
