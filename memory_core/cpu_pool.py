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
import logging
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


async def yield_to_loop() -> None:
    """Give the running event loop one turn (``asyncio.sleep(0)``): every task that is ready
    runs before the caller goes on. A coroutine whose awaits can all complete without
    suspending (a held index answering a candidate search, a batch with nothing to judge)
    otherwise keeps the loop for its whole loop over items: a per-item step that a shard's
    write runs 256 times for one maximal batch held the loop that serves every other user
    for 72–130 ms instead of 31–38 (``benchmarks/loop_lag.py``'s maximal batch, 2026-12-06). Call it between items, where the
    work may be interrupted (it is a cancellation point)."""
    await asyncio.sleep(0)


class CpuPool:
    """``await pool.run(fn, *args, **kwargs)`` → ``fn(*args, **kwargs)`` run on one of
    ``threads`` (≥ 1) worker threads named ``{name}_N`` (at ``nice`` when given, see
    ``lower_this_thread``); its exception is raised to the awaiting caller. ``close()`` stops the threads once the queued calls are done (a later
    ``run`` raises ``RuntimeError``). Raises ``ValueError`` when ``threads < 1``."""

    def __init__(self, threads: int = DEFAULT_THREADS, *, name: str = "cpu", nice: int | None = None):
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.threads = threads
        self.nice = nice
        """With a value, each worker thread lowers itself to that ``nice`` level as it starts
        (``lower_this_thread``): work that should yield the cores to the process's other
        threads and to other processes at Ray's level (nice 15)."""
        self._executor = ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix=name,
            initializer=None if nice is None else functools.partial(lower_this_thread, nice),
        )

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
"""The lowest CPU priority a Linux thread can have under the normal policy (``nice`` 19)."""


def lower_this_thread(nice: int) -> int | None:
    """Lower the calling thread's CPU priority to ``nice`` (clamped to ``NICE_MAX``); a thread
    already at that level or lower keeps its own (an unprivileged thread cannot raise it back).
    Returns the thread's level afterwards, or ``None`` where it cannot be read or set (no
    ``setpriority``, a sandbox): the thread then runs as it is, never fails (it is a
    ``ThreadPoolExecutor`` initializer: an exception there would break the pool). Linux only,
    where a thread id names that one thread (``setpriority(2)``, ``PRIO_PROCESS``); elsewhere
    ``None``."""
    import os
    import sys
    import threading

    if not sys.platform.startswith("linux"):  # elsewhere a thread id may name a process
        return None
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        wanted = min(max(nice, current), NICE_MAX)
        if wanted != current:
            os.setpriority(os.PRIO_PROCESS, tid, wanted)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (AttributeError, OSError) as e:
        logging.getLogger(__name__).warning("this thread's CPU priority cannot be lowered (%r): it runs as it is", e)
        return None


class HostIdleMeter:
    """The share of the host's CPU time that was idle between two calls of ``fraction``, read
    from Linux's ``/proc/stat`` (its first line: the ``idle`` and ``iowait`` ticks over all
    ticks, all cores). Where it cannot be read (not Linux, a sandbox) ``available`` is False
    and ``fraction`` answers None; None also when no tick passed between two calls."""

    def __init__(self) -> None:
        self._last = self._ticks()
        self.available = self._last is not None
        """Whether ``/proc/stat`` could be read when the meter was made."""

    @staticmethod
    def _ticks() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        if len(fields) < 5:
            return None
        return fields[3] + fields[4], sum(fields[:8])  # (idle + iowait, user … steal)

    def fraction(self) -> float | None:
        """Idle share (0–1) since the previous call (or since the meter was made); None where
        ``/proc/stat`` cannot be read or no tick passed."""
        now, last = self._ticks(), self._last
        self._last = now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return (now[0] - last[0]) / (now[1] - last[1])


CPU_PRIORITIES = ("normal", "low", "idle")
"""What ``lower_cpu_priority`` can set, from the highest priority: ``normal`` (as the process
started: Ray starts its workers at nice 15), ``low`` (nice 19), ``idle`` (Linux's
``SCHED_IDLE`` policy, and nice 19)."""


def lower_cpu_priority(priority: str) -> str:
    """Lower the CPU priority of every thread of this process to ``priority`` (one of
    ``CPU_PRIORITIES``), so that on a shared host the scheduler favours the other processes'
    runnable threads. Returns the priority applied:

    - ``low``: nice 19. Linux's fair scheduler shares a core by weight: a nice-19 thread gets
      about 15/36 of the share of a nice-15 one (the level Ray starts its workers at).
    - ``idle``: ``SCHED_IDLE`` (``sched(7)``) on top of nice 19, the lowest weight the fair
      scheduler has, and a thread of another policy that wakes up preempts it at once: it
      runs on what the other threads leave, yet still progresses under load. Where the
      platform has no ``SCHED_IDLE`` (macOS) or refuses it (a sandbox that allows nice), the
      answer is ``low``.
    - ``normal``: nothing changes (``normal``).

    Every thread: Ray's own threads in the process too (its RPC and event-loop threads),
    not only the ones doing the work. Threads created later inherit the policy and level of
    the thread that creates them; the pass repeats until it changes no thread, so a thread
    started meanwhile is caught. A thread already lower keeps its priority: an unprivileged
    process can lower its threads' priority, never raise it back (that takes a new process).

    Raises ``ValueError`` for another ``priority``; ``OSError`` when the platform has no
    ``setpriority`` (Windows), when a Linux process cannot list its threads (no
    ``/proc/self/task``), or when a thread's level cannot be changed (a sandbox). Without
    ``/proc`` elsewhere (macOS) the calls name the process (id 0), which there sets all of it.

    The Embedder calls it for ``user_config.cpu_priority`` (``deployments.embedder``, "CPU
    priority"; measured by ``benchmarks.embedder_priority``)."""
    import os
    import sys

    if priority not in CPU_PRIORITIES:
        raise ValueError(f"priority must be one of {', '.join(CPU_PRIORITIES)}")
    if priority == "normal":
        return "normal"
    if not hasattr(os, "setpriority"):
        raise OSError("thread priorities cannot be set on this platform")
    idle = priority == "idle" and hasattr(os, "SCHED_IDLE") and hasattr(os, "sched_setscheduler")
    for _ in range(10):  # a thread made between listing and lowering its creator: next pass
        try:
            threads = [int(t) for t in os.listdir("/proc/self/task")]
        except FileNotFoundError:
            if sys.platform.startswith("linux"):  # id 0 would name the calling thread only
                raise OSError("this process's threads cannot be listed (/proc/self/task)") from None
            threads = [0]
        changed = False
        for tid in threads:  # on Linux a thread id names that one thread
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < NICE_MAX:
                    os.setpriority(os.PRIO_PROCESS, tid, NICE_MAX)
                    changed = True
                if idle and os.sched_getscheduler(tid) != os.SCHED_IDLE:
                    try:
                        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                        changed = True
                    except PermissionError:  # the policy refused: nice 19 for every thread
                        idle = False
            except ProcessLookupError:  # a thread that ended meanwhile
                continue
        if not changed:
            break
    return "idle" if idle else "low"
