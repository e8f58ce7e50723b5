"""How long the writer's loop is held: the store stack a shard builds (``make_store``:
curation, hybrid index, Milvus Lite in a temporary directory) handles the heaviest requests
the API accepts (a maximal batch, a maximal import, the consolidation of a 2,000-memory user)
while a probe coroutine sleeping 1 ms records how late the event loop wakes it. Every other
user of the shard waits that long. Prints the worst stall of each case (ms).

    python benchmarks/loop_lag.py

On a shared 2-core machine the probe's lateness also holds OS scheduling and the GIL held by
the shard's worker threads: compare the cases of one run, not absolute figures."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Awaitable
from pathlib import Path

from memory_core.config import LimitsSettings, MemoryStoreSettings
from memory_core.migration import import_lines
from memory_core.stores.factory import make_store
from memory_core.testing.fake_embed import fake_vector
from memory_core.types import Memory, MemoryType

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


async def _store(tmp_path: Path):
    settings = MemoryStoreSettings.model_validate(
        {"backend": "milvus", "milvus": {"uri": str(tmp_path / "lag.db"), "collection": "lag"}}
    )
    s = make_store(settings, embed=_embedder, dimension=384)
    await s.open()
    return s


async def maximal_batch(store) -> float:
    n = LIMITS.memories_per_request
    size = min(16_000, LIMITS.memories_body_bytes // n - 100)
    texts = [_text(f"note {i}", size) for i in range(n)]
    # POST /v1/memory: the ingress embeds the batch before the shard sees it
    batch = [Memory(user_id="lag-batch", content=t, embedding=fake_vector(t, 384)) for t in texts]
    return await LoopLag().measure(store.write(batch))


async def maximal_import(store) -> float:
    lines = [json.dumps({"content": _text(f"line {i}", 16_000)}) for i in range(LIMITS.import_lines)]
    return await LoopLag().measure(import_lines(store, lines, user_id="lag-import"))


async def consolidation(store) -> float:
    user = "lag-large"
    for start in range(0, 2000, 250):
        await store.write(
            [
                Memory(user_id=user, type=MemoryType.EPISODIC, content=_text(f"day {i // 2}:", 200) + " !" * (i % 2))
                for i in range(start, start + 250)
            ]
        )
    return await LoopLag().measure(store.consolidate(user))


async def main() -> None:
    """Each case on a fresh store; prints its worst stall."""
    import tempfile

    for name, case in [
        ("maximal batch", maximal_batch),
        ("maximal import", maximal_import),
        ("consolidation", consolidation),
    ]:
        with tempfile.TemporaryDirectory() as d:
            store = await _store(Path(d))
            try:
                worst = await case(store)
            finally:
                await store.close()
        print(f"{name}: worst loop stall {worst * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
