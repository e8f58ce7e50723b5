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

Python code on the pool's threads holds the GIL while it runs, and a thread that wants the GIL
back (the event loop, to answer another user) waits for the holder's switch interval
(``sys.getswitchinterval()``; CPython's default 5 ms) at every such hand-over: a request that
changes hands a dozen times (an await, a worker-thread result, a Ray reply) pays it a dozen
times. ``favour_the_event_loop`` shortens the interval for the whole process; the store shard
and the ingress call it at start (README "Measured": a victim's search/chat p95 during another
user's maximal batch 315 → 88 ms, within 2× of its idle p95).
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

LOOP_SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval of a process whose event loop serves every user while pool threads
run Python (``favour_the_event_loop``). Measured with ``python -m benchmarks.lanes --ops
batch,import`` (a victim's p95 during another user's maximal batch / import, ÷ its idle p95):
5 ms (CPython's default) 6.19× / 6.04×, 1 ms 1.58× / 1.90×, 0.5 ms 1.73× / 2.40× with the
lowest absolute p95 (88 / 121 ms against 116 / 139 and 315 / 308); the operations themselves
took as long (86–105 s and 139–143 s)."""


def favour_the_event_loop(interval_s: float = LOOP_SWITCH_INTERVAL_S) -> float:
    """Set this process's GIL switch interval to ``interval_s`` seconds (``sys.setswitchinterval``),
    so that the event loop waits at most that long for a pool thread running Python to hand
    the GIL over. Returns the previous interval. Raises ``ValueError`` when ``interval_s`` ≤ 0."""
    import sys

    if interval_s <= 0:
        raise ValueError("interval_s must be > 0")
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    return previous


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


NICE_MAX = 19
"""The lowest CPU priority a Linux thread can have (``nice`` 19)."""


def yield_cpu_to_other_processes(nice: int) -> int:
    """Lower the CPU priority of every thread of this process to at least ``nice``
    (0–19, Linux ``nice`` levels: 19 is the lowest priority), so that on a shared host the
    scheduler gives the other processes' runnable threads the cores first. Threads created
    later inherit the level of the thread that creates them. A thread already at ``nice`` or
    lower priority keeps its level (an unprivileged process can lower its priority, never
    raise it back: going back takes a new process).

    Returns the number of threads whose priority changed. Raises ``ValueError`` when
    ``nice`` is outside 0–19. Where threads cannot be listed (no ``/proc/self/task``:
    not Linux) the process's priority is set instead (``setpriority(PRIO_PROCESS, 0)``).

    The Embedder of a CPU host calls it when search queries do not go through it
    (``pool.query_embedding: in_shard``): what it then embeds, stored texts, is work no
    caller waits for at a search or chat (README "Measured", ``benchmarks.lanes``)."""
    import os

    if not 0 <= nice <= NICE_MAX:
        raise ValueError(f"nice must be within 0..{NICE_MAX}")
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
        which = os.PRIO_PROCESS  # on Linux a thread id names that one thread
    except FileNotFoundError:
        threads, which = [0], os.PRIO_PROCESS
    changed = 0
    for tid in threads:
        try:
            if os.getpriority(which, tid) < nice:
                os.setpriority(which, tid, nice)
                changed += 1
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    return changed
