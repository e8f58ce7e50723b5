"""A small OTLP/HTTP traces receiver (tests, benchmarks): what a collector would get from the
service's ``OTLPSpanExporter``, decoded with ``opentelemetry-proto``.

    with OtlpReceiver() as receiver:          # a free loopback port
        config["global"]["tracing"] = {"otlp_endpoint": receiver.url}
        ...
        spans = receiver.spans()              # every span received so far

It answers ``POST /v1/traces`` (protobuf ``ExportTraceServiceRequest``, gzip or not) with an
empty ``ExportTraceServiceResponse``; anything else is 404. It serves in a thread of the
calling process, so the spans exported by every process of a Ray cluster on this machine
arrive in one place.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as received: ids as lower-case hex (``parent_span_id`` "" for a root),
    ``attributes`` and its process's ``resource`` attributes as plain values, ``status``
    (OTLP status code: 0 unset, 1 ok, 2 error)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    status: int = 0


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    pairs: list[KeyValue] = list(items)
    return {kv.key: _value(kv.value) for kv in pairs}


def decode_spans(body: bytes) -> list[ReceivedSpan]:
    """The spans of one serialized ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest.FromString(body)
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        attributes=_attributes(s.attributes),
                        resource=resource,
                        status=int(s.status.code),
                    )
                )
    return out


class OtlpReceiver:
    """The receiver (module docstring) on ``127.0.0.1:port`` (0: a free port); ``url`` is
    the traces endpoint to configure; ``spans()`` a copy of what arrived; ``requests`` the
    number of export requests; ``close()`` (or leaving the ``with``) stops it."""

    def __init__(self, port: int = 0):
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path != TRACES_PATH:
                    self.send_error(404)
                    return
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                spans = decode_spans(body)
                with receiver._lock:
                    receiver._spans.extend(spans)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The OTLP/HTTP traces endpoint (``http://127.0.0.1:<port>/v1/traces``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}{TRACES_PATH}"

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in arrival order."""
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        """Forget the spans received so far."""
        with self._lock:
            self._spans.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
