"""Structured logs that carry one request id from the ingress through the Embedder and the
store shards.

Ray Serve gives every HTTP request an id (the client's ``x-request-id`` header when it sends
one, else a fresh UUID; echoed in the response's ``x-request-id``) and carries it through
handle calls: the ingress's and the Embedder's log lines hold it (``logging_config: {encoding:
JSON}`` writes them as JSON with a ``request_id`` field). Store shards are plain Ray actors, out
of Serve's reach, so the ingress hands the id to each shard call and the shard writes one JSON
line per operation with it (``log_event``).
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from typing import Any

_carried: contextvars.ContextVar[str] = contextvars.ContextVar("memory_router_request_id", default="")
"""The request id of work that outlives its request (``context_carrying_request_id``)."""


def current_request_id() -> str:
    """The id of the Serve request being handled, or of the request a background task was
    started for (``context_carrying_request_id``); "" outside both (a test, the loop)."""
    carried = _carried.get()
    if carried:
        return carried
    try:
        from ray.serve.context import _get_serve_request_context

        return _get_serve_request_context().request_id or ""
    except Exception:  # Serve's context is not there (outside a replica)
        return ""


def log_event(logger: logging.Logger, event: str, request_id: str, **fields: Any) -> None:
    """One JSON object per line: ``{"event", "request_id", **fields}`` (values JSON-encoded,
    anything else as its ``str``). Fields must be bounded and free of memory text and user
    ids: logs are read by more people than the data."""
    logger.info(json.dumps({"event": event, "request_id": request_id, **fields}, default=str, sort_keys=True))


def json_lines_logger(name: str) -> logging.Logger:
    """A logger writing each record's message alone on one line to stderr (a Ray actor's
    ``worker-*.err`` log file), at INFO; configured once per process. For processes Serve does
    not configure (the store shards)."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def context_carrying_request_id() -> contextvars.Context:
    """A fresh ``contextvars.Context`` (none of the request's Serve state, so Ray Serve does
    not cancel work started in it when the request ends) that still carries the current
    request id for ``current_request_id``: the turn a chat request stores after answering is
    logged under that request's id."""
    request_id = current_request_id()
    context = contextvars.Context()
    context.run(_carried.set, request_id)
    return context
