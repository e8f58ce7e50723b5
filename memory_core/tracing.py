"""OpenTelemetry traces: one trace per chat request across the service's processes.

Off by default. ``global.tracing.otlp_endpoint`` (an OTLP/HTTP traces URL, e.g. a collector's
or Jaeger's ``http://jaeger:4318/v1/traces``) turns it on: every process of the service (the
ingress replicas, the Embedder replicas, the store shards) calls ``setup_tracing`` once, and
its spans go through a ``BatchSpanProcessor`` to an ``OTLPSpanExporter`` (protobuf over HTTP).

Context crosses process hops as a W3C Trace Context carrier (a plain ``dict`` with
``traceparent`` and maybe ``tracestate``): ``carrier()`` on the caller's side, ``remote_span``
on the callee's. The upstream call carries ``traceparent`` as a header
(``with_trace_headers``).

Attributes are what an operator filters on: decision names, backends, outcomes, counts,
statuses. Never caller text, memory ids, or user ids (``user_attributes`` gives ``enduser.id``
only with ``record_user_ids: true``). An exception ending a span sets its status to ERROR with
``error.type`` (a memory_core error's ``code``, else the exception's class name), never its
message (which may quote caller text).

With tracing off, ``span`` and ``remote_span`` return one shared do-nothing context manager
and ``carrier`` an empty dict: no span objects are made.
"""

from __future__ import annotations

import contextvars
import os
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

T = TypeVar("T")
Carrier = dict[str, str]
"""A W3C Trace Context carrier: ``{"traceparent": ..., "tracestate": ...}`` (lower-case keys)."""
Attributes = Mapping[str, AttributeValue]
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
"""The W3C Trace Context headers (lower case)."""
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class TracingSettings(BaseModel):
    """``global.tracing``.

    - ``otlp_endpoint``: the OTLP/HTTP traces URL (``http(s)://host:4318/v1/traces``); unset
      (the default) turns tracing off.
    - ``service_name``: the ``service.name`` resource attribute (each process adds
      ``memory_router.component``: ``ingress``, ``embedder``, ``store_shard``).
    - ``sample_ratio``: share of new traces sampled (0..1); a request arriving with a
      ``traceparent`` follows its caller's sampled flag (``ParentBased``).
    - ``record_user_ids``: put the caller's user id on the chat span (``enduser.id``); off by
      default.
    - ``headers_env``: the environment variable holding the exporter's headers
      (``key=value,key2=value2``, URL-encoded values, the ``OTEL_EXPORTER_OTLP_HEADERS``
      format), for a collector that wants an API key: secrets never sit in the config.
    - ``export_timeout_s``, ``schedule_delay_ms`` (how long spans wait for the next export
      batch), ``max_queue_size`` (spans held at most; beyond, new spans are dropped, never
      the request): the ``BatchSpanProcessor``'s knobs.
    """

    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = None
    service_name: str = Field(default="memory-router", min_length=1, max_length=200)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    record_user_ids: bool = False
    headers_env: str | None = Field(default=None, pattern=_ENV_NAME)
    export_timeout_s: float = Field(default=10.0, gt=0, le=300)
    schedule_delay_ms: int = Field(default=5000, ge=1, le=600_000)
    max_queue_size: int = Field(default=2048, ge=1, le=1_000_000)

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/@\s]+(/\S*)?$", value):
            raise ValueError(
                "otlp_endpoint must be an http(s) URL without credentials (e.g. http://collector:4318/v1/traces); "
                "put an API key in the variable named by headers_env"
            )
        return value

    @property
    def enabled(self) -> bool:
        """Whether tracing is on (an endpoint is configured)."""
        return self.otlp_endpoint is not None


def exporter_headers(settings: TracingSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """The OTLP exporter's headers from ``environ[settings.headers_env]``
    (``key=value,key2=value2``, values URL-encoded); ``{}`` without ``headers_env``. Raises
    ``ValueError`` when the variable is unset or an item has no ``=`` (the value is never
    echoed: it holds a secret)."""
    if settings.headers_env is None:
        return {}
    raw = environ.get(settings.headers_env)
    if raw is None:
        raise ValueError(f"tracing.headers_env {settings.headers_env} is not set in this process's environment")
    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"tracing.headers_env {settings.headers_env}: every item must be key=value")
        out[name.strip().lower()] = unquote(value.strip())
    return out


class _State:
    """This process's tracing: the tracer (``None``: off), its provider, ``record_user_ids``."""

    def __init__(self) -> None:
        self.tracer: trace.Tracer | None = None
        self.provider: TracerProvider | None = None
        self.record_user_ids = False


_state = _State()
_setup_lock = threading.Lock()
_PROPAGATOR = TraceContextTextMapPropagator()
_NO_SPAN: AbstractContextManager[trace.Span] = nullcontext(trace.INVALID_SPAN)


def setup_tracing(
    settings: TracingSettings,
    component: str,
    *,
    exporter: SpanExporter | None = None,
    environ: Mapping[str, str] = os.environ,
) -> bool:
    """Turn tracing on in this process when ``settings.enabled`` (or an ``exporter`` is given:
    tests pass the SDK's ``InMemorySpanExporter``); once per process, later calls keep the
    first setup. ``component`` names the process kind (resource ``memory_router.component``).
    Returns whether tracing is on. Raises ``ValueError`` for a ``headers_env`` that is unset
    or malformed (``exporter_headers``)."""
    with _setup_lock:
        if _state.tracer is not None:
            return True
        if exporter is None and not settings.enabled:
            return False
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(
                endpoint=settings.otlp_endpoint,
                headers=exporter_headers(settings, environ),
                timeout=settings.export_timeout_s,
            )
        provider = TracerProvider(
            resource=Resource.create(
                {
                    "service.name": settings.service_name,
                    "memory_router.component": component,
                    "process.pid": os.getpid(),
                }
            ),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
        )
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                schedule_delay_millis=settings.schedule_delay_ms,
                max_queue_size=settings.max_queue_size,
                max_export_batch_size=min(512, settings.max_queue_size),
                export_timeout_millis=int(settings.export_timeout_s * 1000),
            )
        )
        _state.provider = provider
        _state.record_user_ids = settings.record_user_ids
        _state.tracer = provider.get_tracer("memory_router")
        return True


def tracing_enabled() -> bool:
    """Whether this process traces (``setup_tracing`` turned it on)."""
    return _state.tracer is not None


def force_flush(timeout_s: float = 10.0) -> bool:
    """Export the spans ended so far now; True when done in time (or tracing is off)."""
    provider = _state.provider
    return True if provider is None else provider.force_flush(int(timeout_s * 1000))


def shutdown_tracing() -> None:
    """Flush and stop this process's tracing; ``setup_tracing`` may turn it on again (tests)."""
    with _setup_lock:
        provider, _state.provider, _state.tracer = _state.provider, None, None
        _state.record_user_ids = False
    if provider is not None:
        provider.shutdown()


@contextmanager
def _recording(
    tracer: trace.Tracer,
    name: str,
    attributes: Attributes | None,
    parent: otel_context.Context | None,
    kind: SpanKind,
) -> Iterator[trace.Span]:
    with tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as e:
            code = getattr(e, "code", None)
            current.set_attribute("error.type", code if isinstance(code, str) else type(e).__name__)
            current.set_status(Status(StatusCode.ERROR, type(e).__name__))
            raise


def span(
    name: str, attributes: Attributes | None = None, *, kind: SpanKind = SpanKind.INTERNAL
) -> AbstractContextManager[trace.Span]:
    """``with span("gate", {...}) as s:`` a child span of the current one, current inside
    the block; ``s.set_attribute`` adds to it. No span outside a trace (work no traced
    request asked for, e.g. a REST write's curation, makes no lone traces: roots are made at
    the edge, ``remote_span(..., new_trace=True)``). With tracing off, or outside a trace: a
    shared no-op context manager (``s`` is the invalid span, which ignores everything)."""
    tracer = _state.tracer
    if tracer is None or not trace.get_current_span().get_span_context().is_valid:
        return _NO_SPAN
    return _recording(tracer, name, attributes, None, kind)


def remote_span(
    name: str,
    parent: Mapping[str, str] | None,
    attributes: Attributes | None = None,
    *,
    kind: SpanKind = SpanKind.SERVER,
    new_trace: bool = False,
) -> AbstractContextManager[trace.Span]:
    """A span whose parent is the caller's span in ``parent`` (a W3C carrier: ``carrier()``
    from the other process, or request headers, read case-insensitively when ``parent`` is
    a header mapping). Without a valid ``traceparent`` in ``parent``: a new trace when
    ``new_trace`` (the request's edge), else no span (a hop outside any trace, e.g. the
    consolidation loop's calls, stays untraced). No-op when tracing is off."""
    tracer = _state.tracer
    if tracer is None:
        return _NO_SPAN
    extracted = _PROPAGATOR.extract(parent) if parent else None
    if not new_trace and (extracted is None or not trace.get_current_span(extracted).get_span_context().is_valid):
        return _NO_SPAN
    return _recording(tracer, name, attributes, extracted, kind)


async def traced(
    name: str,
    work: Awaitable[T],
    attributes: Attributes | None = None,
    *,
    result_attributes: Callable[[T], Attributes] | None = None,
) -> T:
    """``await work`` inside ``span(name, attributes)``; ``result_attributes(result)`` is added
    to the span when given (counts of what came back). ``work`` should be a coroutine (it
    starts running inside the span); raises what it raises."""
    with span(name, attributes) as current:
        result = await work
        if result_attributes is not None and current.is_recording():
            current.set_attributes(result_attributes(result))
        return result


def annotate(attributes: Attributes) -> None:
    """Add ``attributes`` to the current span (nothing when tracing is off or no span)."""
    if _state.tracer is not None:
        trace.get_current_span().set_attributes(attributes)


def carrier() -> Carrier:
    """The current span's W3C carrier for a call to another process (``{}`` when tracing is
    off or no span is current)."""
    if _state.tracer is None:
        return {}
    out: Carrier = {}
    _PROPAGATOR.inject(out)
    return out


def carrier_kwargs() -> dict[str, Carrier]:
    """``{"trace": carrier()}`` for a call of a traced remote method, ``{}`` when there is
    nothing to carry (so untraced calls keep their plain signature)."""
    found = carrier()
    return {"trace": found} if found else {}


def with_trace_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Request headers for an outgoing HTTP call: with tracing on, the client's own
    ``traceparent``/``tracestate`` replaced by the current span's (the callee's parent is
    this service's span, of the client's trace); with tracing off, ``headers`` unchanged (the
    client's pass through). Lower-case names expected."""
    items = list(headers)
    if _state.tracer is None:
        return items
    return [(k, v) for k, v in items if k not in TRACE_HEADERS] + list(carrier().items())


def user_attributes(user_id: str | None) -> dict[str, AttributeValue]:
    """``{"enduser.id": user_id}`` when ``record_user_ids`` is on and there is a user, else
    ``{}``."""
    if _state.record_user_ids and user_id:
        return {"enduser.id": user_id}
    return {}


def carrying_trace(context: contextvars.Context) -> contextvars.Context:
    """``context`` (a fresh ``contextvars.Context`` for work that outlives the request) with
    the current OpenTelemetry context in it, so spans made there join the request's trace.
    ``context`` unchanged when tracing is off."""
    if _state.tracer is not None:
        current = otel_context.get_current()
        context.run(otel_context.attach, current)
    return context
