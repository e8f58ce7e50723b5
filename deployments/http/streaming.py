"""Relaying a streamed chat completion from the upstream to the client, event by event.

``relay`` forwards each upstream event as it arrives (nothing is buffered beyond one event),
assembles the answer of choice 0 for the auto-store (``StreamedAnswer``), ends the stream
with an OpenAI-shaped error event when the upstream breaks mid-stream, and always closes the
upstream stream: when the client disconnects, Ray Serve cancels the request, the relay is
interrupted at its next ``await``/``yield`` and the upstream request is cancelled (its
connection closed). ``on_complete`` runs only for a stream the upstream finished and whose
events up to its end (``[DONE]``) were handed on to the client: a partial turn is never stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from .. import sse
from ..sse import Event
from ..upstream import UpstreamError, UpstreamStream

log = logging.getLogger("ray.serve")

OUTCOMES = ("completed", "incomplete", "upstream_error", "client_disconnected")
"""How a relayed stream ends (the ``outcome`` of ``relay``'s ``on_end``): ``completed`` (the
upstream finished, every event was sent), ``incomplete`` (the upstream closed its stream
without finishing: no ``[DONE]``, no ``finish_reason``), ``upstream_error`` (an error event:
the upstream's own or ours for a broken or stalled stream), ``client_disconnected``."""


class StreamedAnswer:
    """What a stream said so far: the text of choice 0 from its ``delta.content`` pieces,
    whether it finished (``[DONE]`` or a ``finish_reason`` on choice 0) and whether an error
    event came (``{"error": ...}``, as OpenAI-compatible servers report errors mid-stream)."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self.done = False
        self.finished = False
        self.error = False

    def add(self, event: Event) -> None:
        """Account for one event (comments and unparsable data are ignored)."""
        if event.data == sse.DONE:
            self.done = True
            return
        chunk = event.json()
        if not isinstance(chunk, dict):
            return
        if chunk.get("error"):
            self.error = True
            return
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str):
                self._pieces.append(content)
            if choice.get("finish_reason"):
                self.finished = True

    @property
    def complete(self) -> bool:
        """The upstream finished the answer without an error."""
        return (self.done or self.finished) and not self.error

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def completion(self) -> dict[str, Any]:
        """The assembled answer in the shape of a ``chat.completion`` (what the auto-store
        reads: the first choice's message)."""
        return {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": "stop"}],
        }


def error_event(code: str, message: str) -> bytes:
    """The event that ends a stream the upstream broke: ``{"error": {"message", "type",
    "param", "code"}}`` (OpenAI's shape, which the ``openai`` client raises as ``APIError``;
    ``code`` and ``message`` as in every error of this service)."""
    return sse.event({"error": {"message": message, "type": code, "param": None, "code": code}})


async def close_quietly(stream: UpstreamStream) -> None:
    """Close ``stream`` even while the caller is being cancelled (the close is shielded and
    finishes on its own)."""
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.shield(stream.aclose())


DRAIN_AFTER_DONE_S = 1.0
"""How long the relay keeps reading after ``[DONE]`` for the upstream to end its response (so
its connection can be reused); a server that keeps it open longer is cut off."""


async def relay(
    stream: UpstreamStream,
    first: Event,
    events: AsyncIterator[Event],
    *,
    on_complete: Callable[[StreamedAnswer], None],
    on_end: Callable[[str], None],
) -> AsyncIterator[bytes]:
    """The bytes to send the client: ``first`` (already read from ``events``), then every
    further event of ``events`` unchanged, up to ``[DONE]``. A broken or stalled upstream
    (``UpstreamError``, or any failure of the echo deployment) ends the stream with
    ``error_event``. ``on_complete(answer)`` is called once the answer is complete and every
    event before its end was handed on: when ``[DONE]`` is about to be sent (a client such
    as the ``openai`` client stops reading at ``[DONE]`` and may close the connection at
    once), or when the upstream ends its stream after a ``finish_reason`` without ``[DONE]``.
    ``on_end(outcome)`` is called always (one of ``OUTCOMES``); ``stream`` is closed in every
    case."""
    answer = StreamedAnswer()
    outcome = "client_disconnected"  # unless the stream gets to its end

    def settle() -> str:
        if answer.complete:
            on_complete(answer)
            return "completed"
        return "upstream_error" if answer.error else "incomplete"

    try:
        answer.add(first)
        if answer.done:
            outcome = settle()
        yield first.encode()
        if answer.done:
            return
        try:
            async for event in events:
                answer.add(event)
                if answer.done:
                    outcome = settle()
                    yield event.encode()
                    break
                yield event.encode()
            else:
                outcome = settle()  # the upstream ended its stream without [DONE]
                return
        except Exception as e:  # UpstreamError from HTTP; a Ray error from the echo deployment
            code = e.code if isinstance(e, UpstreamError) else "upstream_error"
            log.warning("upstream stream broke: %r", e)
            outcome = "upstream_error"
            yield error_event(code, str(e) or type(e).__name__)
            return
        # after [DONE]: let the upstream end its response, so its connection can be reused
        with contextlib.suppress(Exception):
            async with asyncio.timeout(DRAIN_AFTER_DONE_S):
                async for _ in events:
                    pass
    finally:
        await close_quietly(stream)
        on_end(outcome)
