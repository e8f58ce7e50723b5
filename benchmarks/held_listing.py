"""What a listing of a loaded user costs the loop that serves every user: ``HybridStore.list``
answered from the held records of one user of ``--memories`` memories (the in-memory backend
below it, the root settings' hybrid index), the case after a write (each write changes the
user's index) and without one, for the pages a client and consolidation ask for, and a pager
through every active memory. What the user's index holds is frozen first, as a shard's
collector policy leaves it (``memory_core.gc_pauses``). Prints p50 / max ms per case; the whole ``list`` call runs on the event loop (its records are copied
``HELD_RECORDS_PER_TURN`` a turn, so the time is the order plus the copies).

    python -m benchmarks.held_listing [--memories 100000] [--rounds 7]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta

import typer

from memory_core.gc_pauses import freeze_round
from memory_core.stores.hybrid import HybridStore
from memory_core.stores.inmemory import InMemoryStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import ListQuery, Memory, MemoryState, MemoryType, RetrieveOptions

T0 = datetime(2026, 1, 1, tzinfo=UTC)
USER = "large"


async def _loaded(memories: int) -> HybridStore:
    h = HybridStore(InMemoryStore(embed=CountingEmbed(), dimension=DIM))
    batch = []
    for i in range(memories):
        batch.append(
            Memory(
                user_id=USER,
                content=f"note {i} about the garden",
                type=MemoryType.EPISODIC if i % 3 else MemoryType.SEMANTIC,
                project_id="p1" if i % 10 == 0 else None,
                state=MemoryState.SUPERSEDED if i % 7 == 0 else MemoryState.ACTIVE,
                created_at=T0 + timedelta(seconds=i),
                embedding=[1.0] + [0.0] * (DIM - 1),
            )
        )
        if len(batch) == 1000:
            await h.inner.store_many(batch)
            batch = []
    if batch:
        await h.inner.store_many(batch)
    await h.retrieve(RetrieveOptions(user_id=USER, query="garden", hybrid=True))  # builds the user's index
    return h


async def main(memories: int, rounds: int) -> None:
    h = await _loaded(memories)
    freeze_round(full=True)  # as a shard's collector policy leaves what it holds (pool.gc_freeze_every_s)
    cases = {
        "first page of everything (limit 50)": ListQuery(user_id=USER, limit=50),
        "first page of the active memories (limit 1000, consolidation)": ListQuery(
            user_id=USER, limit=1000, states=[MemoryState.ACTIVE]
        ),
        "a page half-way through the active memories (limit 50)": ListQuery(
            user_id=USER, limit=50, offset=memories // 3, states=[MemoryState.ACTIVE]
        ),
        "first page of one project (limit 50)": ListQuery(user_id=USER, limit=50, project_id="p1"),
    }
    print(f"one loaded user of {memories:,} memories; {rounds} rounds per case; ms of one list call")
    for name, query in cases.items():
        for after_write in (True, False):
            times = []
            for r in range(rounds):
                if after_write:  # a write changes the user's index: nothing kept from the last listing
                    await h.store(Memory(user_id=USER, content=f"a new note {r} {name}", created_at=T0))
                t = time.perf_counter()
                await h.list(query)
                times.append((time.perf_counter() - t) * 1000)
            label = "after a write" if after_write else "again, no write"
            print(f"{name}, {label}: p50 {statistics.median(times):.1f} ms, max {max(times):.1f} ms")
    # a pager through every active memory (consolidation's reads, an export), after a write
    walks, worst = [], []
    for r in range(rounds):
        await h.store(Memory(user_id=USER, content=f"a new note {r} before a walk", created_at=T0))
        offset, pages, started = 0, [], time.perf_counter()
        while True:
            t = time.perf_counter()
            page = await h.list(ListQuery(user_id=USER, limit=1000, offset=offset, states=[MemoryState.ACTIVE]))
            pages.append((time.perf_counter() - t) * 1000)
            offset += len(page.memories)
            if not page.memories or offset >= page.total:
                break
        walks.append((time.perf_counter() - started) * 1000)
        worst.append(max(pages))
    print(
        f"every page of the active memories (limit 1000, {len(pages)} pages), after a write: the walk p50 "
        f"{statistics.median(walks):.0f} ms, its slowest page p50 {statistics.median(worst):.1f} ms"
    )
    await h.close()


def cli(
    memories: int = typer.Option(100_000, min=1, help="memories of the loaded user"),
    rounds: int = typer.Option(7, min=1, help="listings per case"),
) -> None:
    """Runs the cases (see the module docstring)."""
    asyncio.run(main(memories, rounds))


if __name__ == "__main__":
    typer.run(cli)
