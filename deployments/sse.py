"""Server-sent events as OpenAI-compatible servers stream chat completions: one event per chunk,
``data: <JSON>`` followed by a blank line, the stream closed by ``data: [DONE]``.

``event`` frames one event; ``EventReader`` turns the lines of a stream back into events,
keeping each event's lines as received so a proxy forwards them unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"
"""The data of the event that ends an OpenAI stream."""
HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
"""Response headers of an event stream: no caching, no buffering by an nginx in front."""


def event(data: Mapping[str, Any] | str) -> bytes:
    """One SSE event, UTF-8: ``data: <compact JSON of data>\\n\\n`` (a string is sent as is,
    e.g. ``DONE``)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


@dataclass
class Event:
    """One received event: its ``lines`` without line ends (``data:``, ``event:``, ``id:``
    fields and ``:`` comments)."""

    lines: list[str] = field(default_factory=list)

    @property
    def data(self) -> str | None:
        """The event's data (its ``data`` fields joined by ``\\n``, one leading space of each
        removed, as the SSE specification reads them); ``None`` when it has none (a comment,
        e.g. a keep-alive)."""
        parts = [line[5:].removeprefix(" ") for line in self.lines if line.startswith("data:") or line == "data"]
        return "\n".join(parts) if parts else None

    def json(self) -> Any:
        """The data parsed as JSON; ``None`` when there is no data, it is ``[DONE]``, or it
        is not JSON."""
        data = self.data
        if data is None or data == DONE:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def encode(self) -> bytes:
        """The event as received (lines joined by ``\\n``, then a blank line)."""
        return ("\n".join(self.lines) + "\n\n").encode()


class EventReader:
    """Assembles events from the lines of a stream (``httpx.Response.aiter_lines``: line ends
    already removed). ``line`` returns the event a blank line completes, else ``None``; lines
    left at the end of the stream are an incomplete event, which the specification discards."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def line(self, line: str) -> Event | None:
        if line:
            self._lines.append(line)
            return None
        if not self._lines:
            return None
        done, self._lines = Event(self._lines), []
        return done

    @property
    def pending(self) -> bool:
        """Whether lines of an unfinished event are held."""
        return bool(self._lines)
