"""How long the writer's loop is held: the store stack a shard builds (``make_store``:
curation, hybrid index, Milvus Lite in a temporary directory) handles the heaviest requests
the API accepts (a maximal batch, a maximal import, the consolidation of a 2,000-memory user,
the first search of a user holding 1,000 notes of 15,000 characters after a restart) while a probe coroutine sleeping 1 ms records how late the event loop wakes it. Every other
user of the shard waits that long. Prints the worst stall of each case (ms).

    python benchmarks/loop_lag.py [--rounds 2] [--cases first-read --cases batch ...]

Each case runs under the shard's garbage-collector policy (``pool.gc_freeze_every_s``,
``memory_core.gc_pauses``) and under CPython's own, alternated, in one run; the process holds
what a shard of the root ``serve_config.yaml`` holds (the in-shard ONNX query encoder,
torch loaded to export it).

On a shared 2-core machine the probe's lateness also holds OS scheduling and the GIL held by
the shard's worker threads: compare the cases of one run, not absolute figures."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Awaitable
from pathlib import Path

import typer

from memory_core.config import LimitsSettings, MemoryStoreSettings
from memory_core.cpu_pool import favour_the_event_loop
from memory_core.migration import import_lines
from memory_core.stores.factory import make_store
from memory_core.testing.fake_embed import fake_vector
from memory_core.types import Memory, MemoryType, RetrieveOptions

LIMITS = LimitsSettings()


class LoopLag:
    """A coroutine that sleeps 1 ms in a loop and records how late it wakes (``worst``, s)."""

    last_took_s = 0.0
    """How long the last measured ``work`` took (s): the heavy request's own time."""

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
        started = time.perf_counter()
        try:
            await work
        finally:
            LoopLag.last_took_s = time.perf_counter() - started
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


LONG_NOTES = 1000
"""Memories of the user ``first_read_of_long_notes`` reads (``MAX_LIST_LIMIT``: one page)."""


async def first_read_of_long_notes(store, directory: Path) -> float:
    """A user holding ``LONG_NOTES`` notes of 15,000 characters (15 MB), written below curation
    (vectors given), on a shard just restarted: its first search builds the user's index (every
    note tokenized, checked and indexed) while the probe runs."""
    user = "lag-long"
    bottom = store
    while getattr(bottom, "inner", None) is not None:
        bottom = bottom.inner
    for start in range(0, LONG_NOTES, 100):
        texts = [_text(f"long note {i}:", 15_000) for i in range(start, start + 100)]
        await bottom.store_many([Memory(user_id=user, content=t, embedding=fake_vector(t, 384)) for t in texts])
    await store.close()
    restarted = await _store(directory)
    try:
        return await LoopLag().measure(
            restarted.retrieve(RetrieveOptions(user_id=user, query="long note", hybrid=True))
        )
    finally:
        await restarted.close()


def _hold_what_a_shard_holds() -> object:
    """The in-shard query encoder a shard of the root ``serve_config.yaml`` loads
    (``pool.query_embedding: in_shard``:
    torch and transformers to export the bundled model to ONNX, ONNX Runtime): the objects a
    shard's garbage collector walks before it holds any memory."""
    from memory_core.config import EmbeddingSettings
    from memory_core.embedding import LocalEncoder
    from memory_core.embedding.onnx import OnnxEncoder

    return OnnxEncoder.from_local(LocalEncoder(EmbeddingSettings()), num_threads=1)


CASES = {
    "batch": ("maximal batch", maximal_batch),
    "import": ("maximal import", maximal_import),
    "consolidation": ("consolidation", consolidation),
    "first-read": ("first read of a long-notes user", first_read_of_long_notes),
}
"""The cases by their ``--cases`` name: (printed name, coroutine function)."""


async def main(rounds: int = 2, cases: list[str] | None = None) -> None:
    """Each case on a fresh store, ``rounds`` times, alternating the shard's garbage-collector
    policy (``pool.gc_freeze_every_s``: a ``memory_core.gc_pauses`` round before the case, as
    the shard's start and periodic rounds leave it) with CPython's own (everything unfrozen);
    prints each run's worst stall and its full (generation-2) collections, then every run's
    worst stall side by side. The process's GIL switch interval is the
    store shard's (``favour_the_event_loop``, which every shard sets at start), and it holds
    the model a shard of the root ``serve_config.yaml`` holds (``_hold_what_a_shard_holds``)."""
    import gc
    import tempfile

    from memory_core.gc_pauses import freeze_round

    favour_the_event_loop()
    full_collections: list[float] = []  # seconds of each generation-2 collection during a case
    started: list[float] = []

    def timed_collection(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            full_collections.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed_collection)
    model = _hold_what_a_shard_holds()
    print(f"objects the collector tracks with the shard's model loaded: {len(gc.get_objects()):,}")
    worst: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name, case in [CASES[c] for c in cases or CASES]:
            for policy in ("frozen", "cpython"):
                with tempfile.TemporaryDirectory() as d:
                    store = await _store(Path(d))
                    try:
                        if policy == "frozen":  # as a shard is after its start and a periodic round
                            freeze_round(full=True)
                            freeze_round()
                        else:
                            gc.unfreeze()
                        full_collections.clear()
                        stall = await (case(store, Path(d)) if case is first_read_of_long_notes else case(store))
                    finally:
                        await store.close()
                worst.setdefault((name, policy), []).append(stall)
                longest = max(full_collections, default=0.0)
                print(
                    f"{name} ({policy}): worst loop stall {stall * 1000:.0f} ms; full (generation 2) collections "
                    f"{len(full_collections)}, longest {longest * 1000:.0f} ms; the request took "
                    f"{LoopLag.last_took_s * 1000:,.0f} ms",
                    flush=True,
                )
    print("worst stall of each run, ms: case | frozen (the shard's policy) | CPython's own | max ratio")
    for name in [CASES[c][0] for c in cases or CASES]:
        f, c = (worst[(name, p)] for p in ("frozen", "cpython"))
        runs = " | ".join(", ".join(f"{x * 1000:.0f}" for x in runs) for runs in (f, c))
        print(f"{name} | {runs} | {max(f) / max(c):.2f}")
    gc.callbacks.remove(timed_collection)
    del model


def cli(
    rounds: int = typer.Option(2, min=1, help="runs of each case under each collector policy"),
    cases: list[str] = typer.Option(list(CASES), help=f"cases to run, of {', '.join(CASES)}"),
) -> None:
    """Runs the cases (see the module docstring)."""
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise typer.BadParameter(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    asyncio.run(main(rounds, cases))


if __name__ == "__main__":
    typer.run(cli)
