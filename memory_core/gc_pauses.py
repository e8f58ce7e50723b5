"""Short pauses of CPython's cyclic garbage collector in a process whose event loop serves
every user (a store shard).

A full collection (generation 2) walks every container object the process tracks, and the
thread that triggers it holds the GIL until it is done: the event loop answers nobody
meanwhile. A store shard tracks ~650,000 objects before it holds a single memory (Ray,
torch and transformers loaded to export the model to ONNX, Milvus Lite's engine), so a full
collection stalled its loop ~270 ms on this 2-core machine, whatever the user being served
(measured 2026-12-06: ``python benchmarks/loop_lag.py``'s consolidation, whose worst stall
was one such collection, 77–118 ms in a process without the model; ``gc.collect()`` after
the shard's imports and model load, 265–280 ms). Such a collection comes whenever the
objects that survived the young generations since the last one reach 25 % of those that
survived it (CPython 3.11's rule, ``Modules/gcmodule.c``), so a service that keeps growing
its indexes meets it again and again.

``LongLivedFreezer`` moves what has lived through a full collection into the permanent
generation (``gc.freeze()``, the pattern of Instagram's "Dismissing Python Garbage
Collection at Instagram", 2017, and of the ``gc`` module's documentation), which no later
collection walks: at start, then every ``every_s`` seconds (a full collection of only what
is new since the last round, then the freeze). What it costs: a reference cycle that was
alive at a freeze and becomes garbage later is not collected while frozen (objects without
cycles are still freed by reference counting, frozen or not), so every ``unfreeze_every``
rounds (at the defaults, 60 × 60 s: once an hour) the freezer unfreezes everything and
runs one full collection, then freezes again; ``stats()`` reports what those full rounds
found among the formerly frozen objects (``reclaimed_by_full``: the frozen cycles that had
died). That round is the one long pause the freezer keeps: its length grows with what the
process holds (~0.4 µs per tracked object on this machine; a shard holding 100,000 memories
in its index tracks millions of objects, a pause of the order of a second, once an hour,
where CPython's own schedule pauses as long at every 25 % of growth and a process that
stops growing may never meet it). Known leak between two full rounds: a reference cycle
alive at a round and dead before the next full one (an asyncio future that holds the
exception raised in the frame that holds it, in flight at the round) stays allocated until
that full round.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)

FREEZE_EVERY_S = 60.0
"""Seconds between two rounds (a collection of what is not frozen, then ``gc.freeze()``)."""
UNFREEZE_EVERY = 60
"""Every this many rounds, a round unfreezes everything first (one full collection of all
the process's objects: what frozen reference cycles became garbage is reclaimed)."""


@dataclass
class FreezeRound:
    """What one round did: ``seconds`` the collections held the GIL, ``collected``
    (unreachable objects found among those not frozen), ``reclaimed`` (a full round: those
    found among the formerly frozen ones, i.e. frozen cycles that had died; else 0),
    ``frozen`` (objects in the permanent generation after it), ``full`` (whether it unfroze
    everything)."""

    seconds: float
    collected: int
    reclaimed: int
    frozen: int
    full: bool


def freeze_round(*, full: bool = False) -> FreezeRound:
    """One round, on the calling thread (it holds the GIL throughout): ``gc.collect()`` (every
    generation: with most objects frozen, only those that are not); when ``full``, then
    ``gc.unfreeze()`` and a second ``gc.collect()`` over everything (what it finds is what
    frozen cycles held); then ``gc.freeze()``. Never raises."""
    started = time.perf_counter()
    collected = gc.collect()
    reclaimed = 0
    if full:
        gc.unfreeze()
        reclaimed = gc.collect()
    gc.freeze()
    return FreezeRound(
        seconds=time.perf_counter() - started,
        collected=collected,
        reclaimed=reclaimed,
        frozen=gc.get_freeze_count(),
        full=full,
    )


class LongLivedFreezer:
    """``start()`` (on the running event loop): a round (``freeze_round``, full), then one
    every ``every_s`` seconds (> 0) on that loop, every ``unfreeze_every``-th (≥ 1) a full one;
    ``close()`` stops them for good (what is frozen stays frozen; a later ``start()`` does
    nothing). ``stats()``: rounds, the last round and the longest, what full rounds reclaimed.
    Each round is logged (``memory_core.gc_pauses``; a full round at INFO, others at DEBUG).
    Raises ``ValueError`` on ``every_s`` ≤ 0 or ``unfreeze_every`` < 1."""

    def __init__(self, every_s: float = FREEZE_EVERY_S, unfreeze_every: int = UNFREEZE_EVERY):
        if every_s <= 0:
            raise ValueError("every_s must be > 0")
        if unfreeze_every < 1:
            raise ValueError("unfreeze_every must be >= 1")
        self.every_s = every_s
        self.unfreeze_every = unfreeze_every
        self.rounds = 0
        self.last: FreezeRound | None = None
        self.longest_s = 0.0
        self.reclaimed_by_full = 0
        self._task: asyncio.Task | None = None
        self._closed = False

    def round(self) -> FreezeRound:
        """Run the next round now (full on the first and every ``unfreeze_every``-th)."""
        result = freeze_round(full=self.rounds % self.unfreeze_every == 0)
        self.rounds += 1
        self.last = result
        self.longest_s = max(self.longest_s, result.seconds)
        if result.full:
            self.reclaimed_by_full += result.reclaimed
        log.log(
            logging.INFO if result.full else logging.DEBUG,
            "gc round %d%s: %.0f ms, %d collected, %d reclaimed from frozen cycles, %d objects frozen",
            self.rounds, " (full)" if result.full else "", result.seconds * 1000, result.collected,
            result.reclaimed, result.frozen,
        )  # fmt: skip
        return result

    def start(self, *, now: bool = True) -> None:
        """The first round, then the periodic ones; nothing while running or once closed. With
        ``now`` the first round runs before this returns (a shard opening: before its first
        request); else it runs on the loop's next turn, outside the caller's own time (a
        shard's first call after a restart). Must be called with an event loop running
        (``RuntimeError`` otherwise)."""
        if self._closed or (self._task is not None and not self._task.done()):
            return
        loop = asyncio.get_running_loop()
        if now:
            self.round()
        self._task = loop.create_task(self._run(first=not now))

    async def _run(self, *, first: bool) -> None:
        if first:
            await asyncio.sleep(0)
            self.round()
        while True:
            await asyncio.sleep(self.every_s)
            try:
                self.round()
            except Exception:  # pragma: no cover - gc.collect/freeze do not raise
                log.exception("gc freeze round failed")

    @property
    def running(self) -> bool:
        """Whether the periodic rounds are scheduled."""
        return self._task is not None and not self._task.done()

    async def close(self) -> None:
        """Stop the periodic rounds for good."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def stats(self) -> dict:
        """``{"rounds", "frozen", "last", "longest_ms", "reclaimed_by_full"}`` (``last``: the
        last round as a dict, seconds in ms, or None)."""
        last = None
        if self.last is not None:
            last = asdict(self.last)
            last["ms"] = round(last.pop("seconds") * 1000, 1)
        return {
            "rounds": self.rounds,
            "frozen": gc.get_freeze_count(),
            "last": last,
            "longest_ms": round(self.longest_s * 1000, 1),
            "reclaimed_by_full": self.reclaimed_by_full,
        }
