"""Batching: grouping texts into forward passes under a count and a padded-token budget, and
an async embed function that merges concurrent calls into shared passes."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInput
from .encoder import Encoder, check_texts

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
    to every caller of that batch. ``query=True``: the texts are searches (e5's ``"query: "``
    prefix), else stored text."""

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
