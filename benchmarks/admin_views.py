"""The admin views' cost as users grow: ``GET /v1/admin/stats`` and one page of
``GET /v1/admin/users`` (``memory_core.admin``, what the ingress answers with), in process, on
a store of ``--backend`` (Milvus Lite by default) holding ``--per-user`` memories for each of
N users, N from ``--users`` (e.g. 10 and 1,000), side by side with the previous
implementation (one ``list`` count per user and per state, then per type: 7 store calls per
user). Prints, per N: store calls and the median of ``--rounds`` timings for each (one round
of the previous implementation), and the ratio of the largest N to the smallest.

    python benchmarks/admin_views.py --users 10,1000
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.access import KeyRegistry  # noqa: E402
from memory_core.admin import DEFAULT_USERS_PAGE, service_stats, users_page  # noqa: E402
from memory_core.config import CurationSettings, MemoryStoreSettings, MilvusSettings, QdrantSettings  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.testing.fake_embed import DIM, fake_vector  # noqa: E402
from memory_core.types import ListQuery, Memory, MemoryState, MemoryType  # noqa: E402

app = typer.Typer(add_completion=False)
VIEWS = ("stats", "users page", "previous stats")
ADMIN_CONCURRENCY = 8
"""The previous implementation's store calls at once."""


class Counted:
    """The store with a count of the calls made to it."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await method(*args, **kwargs)

        return counted


async def previous_stats(store: Any, registry: KeyRegistry) -> dict[str, Any]:
    """``GET /v1/admin/stats`` as it was: a count per user and state, then per user and type
    (``list(limit=1).total``), at most ``ADMIN_CONCURRENCY`` at once."""
    users = [u for u, _ in registry.users()]
    gate = asyncio.Semaphore(ADMIN_CONCURRENCY)

    async def count(user_id: str, states: Any, types: Any) -> int:
        async with gate:
            return (await store.list(ListQuery(user_id=user_id, limit=1, states=states, types=types))).total

    async def total(states: Any, types: Any) -> int:
        return sum(await asyncio.gather(*(count(u, states, types) for u in users)))

    by_state = {s.value: await total([s], None) for s in MemoryState}
    by_type = {t.value: await total(None, [t]) for t in MemoryType}
    return {"users": len(users), "memories": sum(by_state.values()), "by_state": by_state, "by_type": by_type}


def settings(backend: str, tmp: str, name: str) -> MemoryStoreSettings:
    return MemoryStoreSettings(
        backend=backend,
        milvus=MilvusSettings(uri=f"{tmp}/{name}.db", collection=name),
        qdrant=QdrantSettings(path=f"{tmp}/{name}-qdrant", collection=name),
        curation=CurationSettings(enabled=False),
    )


async def timed(rounds: int, call: Any) -> tuple[float, Any]:
    """The median seconds of ``rounds`` awaits of ``call()`` and its last answer."""
    seconds, answer = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        answer = await call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), answer


async def one(backend: str, users: int, per_user: int, rounds: int, tmp: str, previous: bool) -> dict[str, Any]:
    store = make_store(settings(backend, tmp, f"admin{users}"), embed=None, dimension=DIM, identity=None)
    await store.open()
    registry = KeyRegistry(f"{tmp}/access-{users}.sqlite")
    for u in range(users):
        user_id = f"user-{u:06d}"
        registry.note_user(user_id)
        texts = [f"user {u} fact {i}: my locker number {i} is {u * 100 + i}" for i in range(per_user)]
        await store.store_many(
            [
                Memory(user_id=user_id, content=t, embedding=fake_vector(t), type=list(MemoryType)[i % 3])
                for i, t in enumerate(texts)
            ]
        )
    print(f"  {users} users loaded", flush=True)
    counted = Counted(store)
    out: dict[str, Any] = {"users": users}
    for name, view in (
        ("stats", lambda: service_stats(counted, registry)),
        ("users page", lambda: users_page(counted, registry, DEFAULT_USERS_PAGE, 0)),
        ("previous stats", lambda: previous_stats(counted, registry)),
    ):
        if name == "previous stats" and not previous:
            out[name] = (float("nan"), 0)
            continue
        counted.calls = 0
        times = 1 if name == "previous stats" else rounds  # one round of the slow one is enough
        seconds, answer = await timed(times, view)
        out[name] = (seconds, counted.calls // times)
        print(f"    {name}: {seconds * 1000:.2f} ms, {counted.calls // times} store calls", flush=True)
        if name == "stats":
            assert answer["memories"] == users * per_user, answer
        if name == "previous stats":
            assert answer["memories"] == users * per_user, answer
    await store.close()
    registry.close()
    return out


async def run(backend: str, user_counts: list[int], per_user: int, rounds: int, previous: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = [await one(backend, n, per_user, rounds, tmp, previous) for n in user_counts]
    print(f"backend {backend}, {per_user} memories per user, median of {rounds} rounds")
    for r in results:
        cells = ", ".join(f"{name}: {r[name][0] * 1000:.2f} ms / {r[name][1]} store calls" for name in VIEWS)
        print(f"  {r['users']:>7} users — {cells}")
    small, large = results[0], results[-1]
    for name in VIEWS:
        print(
            f"  {name}: {large['users']} / {small['users']} users = {large[name][0] / small[name][0]:.2f}× the time, "
            f"{large[name][1]} / {small[name][1]} store calls"
        )


@app.command()
def main(
    backend: str = typer.Option("milvus", help="inmemory, milvus (Lite) or qdrant (local)"),
    users: str = typer.Option("10,1000", help="user counts, comma-separated"),
    per_user: int = typer.Option(5, help="memories per user"),
    rounds: int = typer.Option(5, help="timings per view (the median is printed)"),
    previous: bool = typer.Option(True, help="time the previous implementation too (minutes at 1,000 users)"),
) -> None:
    asyncio.run(run(backend, [int(n) for n in users.split(",")], per_user, rounds, previous))


if __name__ == "__main__":
    app()
