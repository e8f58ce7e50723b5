"""Which of the Embedder's two lanes a store shard's stored texts go to.

The Embedder (``deployments.embedder``) queues texts in two lanes: the caller-awaited one (a
memory write, an import, ``POST /v1/embeddings``) and the background one, whose every batch
runs after the awaited work of the moment. Work that is not a caller's own write (a
consolidation pass: the Consolidator's loop, ``POST /v1/memory/consolidate``) runs inside
``in_background()``, and the shard's embed function reads ``embeds_in_background()``: such a
pass's merged texts (up to ``curation.consolidation.max_groups`` in one call) go after the
callers' embeds instead of running all at once beside them. The pass gets longer for it, and
so does the wait of whoever waits on the pass: the operator's ``POST /v1/memory/consolidate``
and a write of the consolidated user (the pass holds that user's curation lock).

A context variable, so it follows the pass through every await and task it starts, and no
other request of the shard sees it. Kept here, not in the Ray module: a ``ContextVar`` cannot
be pickled, and Ray ships the shard's class by value (this module travels by name)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_BACKGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar("embed_in_background", default=False)


@contextlib.contextmanager
def in_background() -> Iterator[None]:
    """Within it, ``embeds_in_background()`` is True (for this task and those it starts)."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


def embeds_in_background() -> bool:
    """Whether the stored texts embedded now are background work (``in_background``)."""
    return _BACKGROUND.get()
