"""The echo upstream: an offline OpenAI-compatible chat model.

It answers with a deterministic echo of the messages it received, one line per message
(``"<role>: <text>"``), so tests and operators can see exactly what the ingress injected.
With ``stream: true`` the echo comes as ``chat.completion.chunk`` events, split into
word-sized pieces (``stream_options.include_usage`` adds the usage chunk), ending with
``data: [DONE]``.

One implementation, served two ways:

- ``EchoUpstream``, the Serve deployment the ingress calls when no upstream URL is configured;
- ``create_echo_app``, the same echo as an HTTP server (FastAPI), with optional delays that
  make it a slow model: ``python -m deployments.echo --port 8001 --first-chunk-delay-ms 200``
  (tests and ``benchmarks/ttfb.py`` run it as a separate process).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve

from memory_core.chat.inject import content_text
from memory_core.chat.tokens import estimate_tokens

from . import sse

ECHO_MODEL_ID = "echo"
"""The model the echo lists in ``/v1/models`` (it answers whatever ``model`` it is asked for)."""
_PIECE = re.compile(r"\S+\s*|\s+")


def _lines(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages") or []
    return [f"{m.get('role')}: {content_text(m.get('content'))}" for m in messages if isinstance(m, dict)]


def _head(body: dict[str, Any], kind: str) -> dict[str, Any]:
    messages = body.get("messages") or []
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]
    return {
        "id": f"chatcmpl-echo-{digest}",
        "object": kind,
        "created": int(time.time()),
        "model": body.get("model", "echo"),
    }


def _usage(lines: list[str], text: str) -> dict[str, int]:
    prompt_tokens = sum(estimate_tokens(line) for line in lines)
    completion_tokens = estimate_tokens(text)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def echo_completion(body: dict[str, Any]) -> dict[str, Any]:
    """Pure: an OpenAI ``chat.completion`` object echoing ``body["messages"]``.

    ``id`` is a digest of the messages (deterministic); ``usage`` uses the heuristic token
    estimate of ``memory_core.chat.tokens``.
    """
    lines = _lines(body)
    text = "\n".join(lines)
    return {
        **_head(body, "chat.completion"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": _usage(lines, text),
    }


def echo_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Pure: the ``chat.completion.chunk`` objects of the streamed echo: a first chunk with the
    role, one chunk per word-sized piece of ``echo_completion``'s text (whitespace kept, so the
    pieces concatenate to it exactly), a last chunk with ``finish_reason: stop``; when
    ``body["stream_options"]["include_usage"]`` is true, every chunk has ``usage: null`` and a
    final chunk with no choices carries the usage (as OpenAI streams it)."""
    lines = _lines(body)
    text = "\n".join(lines)
    head = _head(body, "chat.completion.chunk")
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    deltas: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant", "content": ""}, None)]
    deltas += [({"content": piece}, None) for piece in _PIECE.findall(text)]
    deltas.append(({}, "stop"))
    chunks = []
    for delta, finish in deltas:
        chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if include_usage:
            chunk["usage"] = None
        chunks.append(chunk)
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(lines, text)})
    return chunks


def echo_events(body: dict[str, Any]) -> list[bytes]:
    """Pure: the SSE stream of the echo (``echo_chunks`` as events, then ``data: [DONE]``)."""
    return [sse.event(chunk) for chunk in echo_chunks(body)] + [sse.event(sse.DONE)]


def echo_models() -> dict[str, Any]:
    """The echo's ``GET /v1/models`` answer (OpenAI ``list`` of ``model`` objects)."""
    return {
        "object": "list",
        "data": [{"id": ECHO_MODEL_ID, "object": "model", "created": 0, "owned_by": "memory-router"}],
    }


async def echo_response(
    body: dict[str, Any], *, first_chunk_delay_s: float = 0.0, chunk_delay_s: float = 0.0
) -> Response:
    """The echo's HTTP answer to a chat completion ``body``, as a model server gives it:
    ``text/event-stream`` for ``stream: true`` (status and headers at once, the first event
    after ``first_chunk_delay_s``, each next one after ``chunk_delay_s`` seconds), else the
    ``chat.completion`` JSON after ``first_chunk_delay_s``."""
    if body.get("stream") is True:

        async def events() -> AsyncIterator[bytes]:
            for i, data in enumerate(echo_events(body)):
                delay = first_chunk_delay_s if i == 0 else chunk_delay_s
                if delay:
                    await asyncio.sleep(delay)
                yield data

        return StreamingResponse(events(), media_type="text/event-stream", headers=sse.HEADERS)
    if first_chunk_delay_s:
        await asyncio.sleep(first_chunk_delay_s)
    return JSONResponse(echo_completion(body))


def openai_error(status: int, message: str, code: str = "invalid_request") -> JSONResponse:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "param": None, "code": code}}
    )


async def read_chat_body(request: Request) -> dict[str, Any] | JSONResponse:
    """A chat completion body as the echo accepts it (a JSON object with a ``messages`` list
    of objects), or the 400 answer."""
    try:
        body = await request.json()
    except ValueError:
        return openai_error(400, "body must be JSON")
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return openai_error(400, "messages must be a list of message objects")
    return body


def create_echo_app(*, first_chunk_delay_s: float = 0.0, chunk_delay_s: float = 0.0) -> FastAPI:
    """The echo as an OpenAI-compatible HTTP server: ``POST /v1/chat/completions``
    (``echo_response``) and ``GET /v1/models`` (``echo_models``). Delays in seconds."""
    api = FastAPI(title="echo upstream")

    @api.post("/v1/chat/completions")
    async def completions(request: Request) -> Response:
        body = await read_chat_body(request)
        if isinstance(body, Response):
            return body
        return await echo_response(body, first_chunk_delay_s=first_chunk_delay_s, chunk_delay_s=chunk_delay_s)

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        return echo_models()

    return api


@serve.deployment
class EchoUpstream:
    """The echo as a Serve deployment: ``chat(body)`` → ``echo_completion(body)``;
    ``chat_stream(body)`` yields the events of ``echo_events(body)`` (call it through a handle
    with ``.options(stream=True)``); ``models()`` → ``echo_models()``."""

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return echo_completion(body)

    async def chat_stream(self, body: dict[str, Any]) -> AsyncIterator[bytes]:
        for data in echo_events(body):
            yield data

    async def models(self) -> dict[str, Any]:
        return echo_models()


def main(argv: list[str] | None = None) -> None:
    """``python -m deployments.echo``: serve ``create_echo_app`` with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--first-chunk-delay-ms", type=float, default=0.0, help="before the first event (prefill)")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0, help="between two events (decode)")
    args = parser.parse_args(argv)
    app = create_echo_app(
        first_chunk_delay_s=args.first_chunk_delay_ms / 1000, chunk_delay_s=args.chunk_delay_ms / 1000
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
