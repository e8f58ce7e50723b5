"""The writer's loop stays free: the store stack a shard builds (``make_store``: curation,
hybrid index, Milvus Lite) handles the heaviest requests the API accepts while a probe
coroutine measures how late the event loop wakes it. No single step of that work may hold
the loop longer than ``MAX_STALL_S``: every other user of the shard waits that long.

The bound is structural (one synchronous stretch of the loop), not a timing of the work:
each request may take seconds in all, as long as it yields often."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Awaitable
from pathlib import Path

import pytest

from memory_core.config import LimitsSettings, MemoryStoreSettings
from memory_core.migration import import_lines
from memory_core.stores.factory import make_store
from memory_core.testing.fake_embed import fake_vector
from memory_core.types import Memory, MemoryType

MAX_STALL_S = 0.05
"""The longest the loop may go without running its other tasks during one request (s)."""
LIMITS = LimitsSettings()


class LoopLag:
    """A coroutine that sleeps 1 ms in a loop and records how late it wakes (``worst``, s)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task | None = None

    async def _probe(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            self.worst = max(self.worst, time.perf_counter() - t - 0.001)

    async def measure(self, work: Awaitable) -> float:
        """Runs ``work`` under the probe; the worst lateness seen (s)."""
        self.worst = 0.0
        self._task = asyncio.create_task(self._probe())
        await asyncio.sleep(0.01)
        try:
            await work
        finally:
            self._task.cancel()
        return self.worst


def _text(seed: str, size: int) -> str:
    words = f"{seed} " + " ".join(f"w{(zlib.crc32(seed.encode()) + i) % 9973}x{i}" for i in range(size // 6 + 2))
    return words[:size]


async def _embedder(texts: list[str]) -> list[list[float]]:
    """The Embedder deployment as a shard sees it: vectors computed elsewhere (a thread here)."""
    return await asyncio.to_thread(lambda: [fake_vector(t, 384) for t in texts])


@pytest.fixture
async def store(tmp_path: Path):
    settings = MemoryStoreSettings.model_validate(
        {"backend": "milvus", "milvus": {"uri": str(tmp_path / "lag.db"), "collection": "lag"}}
    )
    s = make_store(settings, embed=_embedder, dimension=384)
    await s.open()
    yield s
    await s.close()


async def test_a_maximal_batch_never_holds_the_loop(store):
    n = LIMITS.memories_per_request
    size = min(16_000, LIMITS.memories_body_bytes // n - 100)
    texts = [_text(f"note {i}", size) for i in range(n)]
    # POST /v1/memory: the ingress embeds the batch before the shard sees it
    batch = [Memory(user_id="lag-batch", content=t, embedding=fake_vector(t, 384)) for t in texts]
    worst = await LoopLag().measure(store.write(batch))
    assert worst < MAX_STALL_S, f"a {n}-memory batch held the loop {worst * 1000:.0f} ms"


async def test_a_maximal_import_never_holds_the_loop(store):
    lines = [json.dumps({"content": _text(f"line {i}", 16_000)}) for i in range(LIMITS.import_lines)]
    worst = await LoopLag().measure(import_lines(store, lines, user_id="lag-import"))
    assert worst < MAX_STALL_S, f"a {len(lines)}-line import held the loop {worst * 1000:.0f} ms"


async def test_consolidating_a_large_user_never_holds_the_loop(store):
    user = "lag-large"
    for start in range(0, 2000, 250):
        await store.write(
            [
                Memory(user_id=user, type=MemoryType.EPISODIC, content=_text(f"day {i // 2}:", 200) + " !" * (i % 2))
                for i in range(start, start + 250)
            ]
        )
    worst = await LoopLag().measure(store.consolidate(user))
    assert worst < MAX_STALL_S, f"consolidating 2,000 memories held the loop {worst * 1000:.0f} ms"
