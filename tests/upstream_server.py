"""A test upstream: the echo (``deployments.echo``) as a separate HTTP server process, which
records what it received and misbehaves on request.

    python -m tests.upstream_server --port 8101 [--models a,b]

- ``POST /v1/chat/completions``: the echo's answer (``deployments.echo.echo_response``),
  unless the request carries ``x-fault``: ``;``-separated ``key=value`` items (a request
  header, which the proxy forwards like any end-to-end header):

  ``status=<code>`` answer that status with an OpenAI error body (429 adds ``Retry-After: 7``
  and ``x-ratelimit-remaining-requests: 0``), ``text`` with it: a plain-text body;
  ``delay=<s>`` wait before answering (before the first event of a stream);
  ``chunk_delay=<s>`` wait before each further event; ``error_after=<n>`` stream n events,
  then an error event, then end; ``end_after=<n>`` stream n events, then end the response
  (cleanly, without ``[DONE]``); ``drop_after=<n>`` stream n events, then break the
  connection; ``linger=<s>`` keep the response open that long after ``[DONE]``; ``stall_after=<n>`` stream n events, then stall for 60 s; ``hop_headers``
  answer with hop-by-hop headers, an end-to-end header (``x-upstream-note``) and an
  ``x-request-id``;
  ``json_stream`` answer a stream request with JSON (a server that does not stream).
- ``GET /v1/models``: the echo's list, or ``--models``.
- ``GET /_test/requests?tag=<x-test-tag>``: what was received (path, headers as a list,
  JSON body) and, for streams, ``events_sent`` and ``outcome`` (``completed``,
  ``client_gone``: the connection closed before the last event, ``error``, ``dropped``,
  ``ended``).

Tests start it with ``start_upstream_server`` (a subprocess on a free loopback port, stopped
by its pid).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from deployments import sse
from deployments.echo import echo_events, echo_models, echo_response, openai_error, read_chat_body

ROOT = Path(__file__).resolve().parents[1]


def parse_fault(value: str | None) -> dict[str, str]:
    """``"status=429;text"`` → ``{"status": "429", "text": ""}``."""
    out: dict[str, str] = {}
    for item in (value or "").split(";"):
        if item.strip():
            key, _, val = item.strip().partition("=")
            out[key] = val
    return out


def create_app(models: list[str] | None = None) -> FastAPI:
    """The test upstream's app (see the module); ``models``: the ids ``/v1/models`` lists."""
    api = FastAPI()
    received: deque[dict[str, Any]] = deque(maxlen=1000)

    @api.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        body = await read_chat_body(request)
        record: dict[str, Any] = {
            "path": request.url.path,
            "headers": [[k, v] for k, v in request.headers.items()],
            "tag": request.headers.get("x-test-tag"),
            "body": body if isinstance(body, dict) else None,
        }
        received.append(record)
        if isinstance(body, Response):
            return body
        fault = parse_fault(request.headers.get("x-fault"))
        delay = float(fault.get("delay", 0))
        chunk_delay = float(fault.get("chunk_delay", 0))
        if "status" in fault:
            await asyncio.sleep(delay)
            status = int(fault["status"])
            if "text" in fault:
                return PlainTextResponse(f"upstream says {status}", status_code=status)
            response = openai_error(status, f"fault {status}", code=f"fault_{status}")
            if status == 429:
                response.headers["retry-after"] = "7"
                response.headers["x-ratelimit-remaining-requests"] = "0"
            return response
        if "hop_headers" in fault:
            response = await echo_response(body)
            response.headers["keep-alive"] = "timeout=99"
            response.headers["proxy-authenticate"] = "Basic"
            response.headers["x-secret-hop"] = "1"
            response.headers["connection"] = "x-secret-hop"
            response.headers["x-upstream-note"] = "kept"
            response.headers["x-request-id"] = "upstream-request-1"
            response.headers.append("x-upstream-utf8", "né ✓".encode().decode("latin-1"))  # UTF-8 bytes
            return response
        if "json_stream" in fault:
            return await echo_response({**body, "stream": False})
        if body.get("stream") is not True:
            return await echo_response(body, first_chunk_delay_s=delay)
        events = echo_events(body)
        limit = len(events)
        for key in ("error_after", "drop_after", "stall_after", "end_after"):
            if key in fault:
                limit = int(fault[key])
        record.update(events_total=len(events), events_sent=0, outcome=None)

        async def stream():
            try:
                for i, data in enumerate(events[:limit]):
                    await asyncio.sleep(delay if i == 0 else chunk_delay)
                    yield data
                    record["events_sent"] = i + 1
                if "error_after" in fault:
                    record["outcome"] = "error"
                    yield sse.event({"error": {"message": "the model crashed", "type": "server_error", "code": 500}})
                elif "drop_after" in fault:
                    record["outcome"] = "dropped"
                    raise RuntimeError("dropping the connection mid-stream (test fault)")
                elif "stall_after" in fault:
                    await asyncio.sleep(60)
                elif "end_after" in fault:
                    record["outcome"] = "ended"
                else:
                    await asyncio.sleep(float(fault.get("linger", 0)))
                    record["outcome"] = "completed"
            finally:
                if record["outcome"] is None:
                    record["outcome"] = "client_gone"

        return StreamingResponse(stream(), media_type="text/event-stream", headers=sse.HEADERS)

    @api.get("/v1/models")
    async def list_models(request: Request) -> Any:
        received.append({"path": request.url.path, "headers": [[k, v] for k, v in request.headers.items()]})
        if not models:
            return echo_models()
        return {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"} for m in models]}

    @api.get("/_test/requests")
    async def requests(tag: str | None = None) -> JSONResponse:
        return JSONResponse([r for r in received if tag is None or r.get("tag") == tag])

    return api


@dataclass
class UpstreamServer:
    """A running ``tests.upstream_server`` process."""

    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What a configuration names as ``base_url`` (with the API prefix)."""
        return f"{self.url}/v1"

    def received(self, tag: str | None = None) -> list[dict[str, Any]]:
        import httpx

        return httpx.get(f"{self.url}/_test/requests", params={"tag": tag} if tag else None, timeout=10).json()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def start_upstream_server(port: int, models: list[str] | None = None, timeout: float = 60) -> UpstreamServer:
    """Start ``python -m tests.upstream_server`` on ``port`` (its own process group) and wait
    until it answers ``/v1/models``; raises ``RuntimeError`` when it does not."""
    import httpx

    cmd = [sys.executable, "-m", "tests.upstream_server", "--port", str(port)]
    if models:
        cmd += ["--models", ",".join(models)]
    process = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    server = UpstreamServer(process, port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"upstream server exited with {process.returncode}")
        try:
            if httpx.get(f"{server.base_url}/models", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"upstream server on port {port} did not start within {timeout}s")


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--models", default="")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    uvicorn.run(create_app(models), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
