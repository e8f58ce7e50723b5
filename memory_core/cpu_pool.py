"""``CpuPool``: a small, bounded pool of threads for the pure-CPU work on caller text
(screening, the curation judge, consolidation's grouping and merging, chat extraction and
the reflection gate), so that an event loop that serves every user never runs it itself.

A store shard and an ingress replica each run one asyncio loop for all their users: a rule
run on that loop delays every other user's request by as long as it takes. Awaiting ``CpuPool.run`` instead hands the call to one of ``threads`` worker threads
and keeps the loop serving. The pool is bounded: at most ``threads`` such calls run at once
(the rest wait in the pool's queue, each awaited by its own request), so hostile text cannot
take more than ``threads`` threads. RE2 (``memory_core.linear_re``) releases the GIL while it
matches; Python code and ``re`` hold it, and the loop then gets the GIL back at every switch
interval (``sys.getswitchinterval()``, 5 ms) instead of after the whole call.

Functions run here must be pure or thread-safe (no asyncio objects, no shared mutable state).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_THREADS = 2
"""Worker threads of a pool when none is given (the service's hosts have few cores each)."""


class CpuPool:
    """``await pool.run(fn, *args, **kwargs)`` → ``fn(*args, **kwargs)`` run on one of
    ``threads`` (≥ 1) worker threads named ``{name}_N``; its exception is raised to the
    awaiting caller. ``close()`` stops the threads once the queued calls are done (a later
    ``run`` raises ``RuntimeError``). Raises ``ValueError`` when ``threads < 1``."""

    def __init__(self, threads: int = DEFAULT_THREADS, *, name: str = "cpu"):
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` on a worker thread, awaited without blocking the loop; it
        runs in a copy of the caller's ``contextvars`` context (as ``asyncio.to_thread``), so
        a span it opens is a child of the caller's (``memory_core.tracing``)."""
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        return await loop.run_in_executor(self._executor, functools.partial(context.run, fn, *args, **kwargs))

    def close(self) -> None:
        """Stop the worker threads (without waiting for them)."""
        self._executor.shutdown(wait=False)
