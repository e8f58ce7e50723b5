"""Store latency benchmark: per backend and collection size, bulk-load synthetic memories,
then time single ``store`` and ``retrieve`` calls through the public contract.

Synthetic data: random L2-normalised vectors (dim 384 by default, numpy seed fixed),
spread over ``--users`` users, so every number is reproducible. ``store`` latency includes
the duplicate check and the write; ``retrieve`` latency includes the user-filtered vector
search, fetching the records and the access-count update. Calls are sequential (one
client), so throughput = calls / wall time of the timed loop.

Usage::

    python benchmarks/stores.py --sizes 10000,100000 --backends milvus,qdrant,valkey,inmemory
    python benchmarks/stores.py --sizes 500 --ops 20          # smoke run

Valkey runs against a throw-away server started like the test fixture
(``memory_core.testing.valkey_server``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memory_core.config import (  # noqa: E402
    MemoryStoreSettings,
    MilvusSettings,
    QdrantSettings,
    RetrievalSettings,
    ValkeySettings,
)
from memory_core.sanitize import scoped_memory_id  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.types import Memory, RetrieveOptions  # noqa: E402

BACKENDS = ("milvus", "qdrant", "valkey", "inmemory")


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` random unit vectors (float32, shape ``(n, dim)``)."""
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def memories(rng, start: int, n: int, dim: int, users: int, t0: datetime) -> list[Memory]:
    """``n`` synthetic memories numbered from ``start`` (round-robin users, one per second)."""
    vecs = unit_rows(rng, n, dim)
    return [
        Memory(
            id=scoped_memory_id(f"user{(start + i) % users:03d}", f"m{start + i:08d}"),
            user_id=f"user{(start + i) % users:03d}",
            content=f"synthetic memory {start + i}",
            created_at=t0 + timedelta(seconds=start + i),
            updated_at=t0 + timedelta(seconds=start + i),
            embedding=vecs[i].tolist(),
        )
        for i in range(n)
    ]


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (nearest rank), in the values' unit."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


BULK_CALL_ROWS = {"valkey": 100}
"""Rows per ``store_many`` call (default 1000, the contract's maximum). Valkey gets 100: the
search module adds every HSET to its HNSW graph as it runs (≈800 rows/s here at 50–100k
rows), and one large write over a large index on a loaded machine can outlast the client's
socket timeout."""


async def bulk_load(store, rows: list[Memory], per_call: int | None = None) -> None:
    """Load ``rows`` through the public bulk path (``store_many``: one user per call)."""
    step = min(per_call or 1000, 1000)
    by_user: dict[str, list[Memory]] = {}
    for m in rows:
        by_user.setdefault(m.user_id, []).append(m)
    for memories in by_user.values():
        for start in range(0, len(memories), step):
            await store.store_many(memories[start : start + step])


async def run_one(backend: str, size: int, args, workdir: Path, valkey_url: str | None) -> dict:
    rng = np.random.default_rng(args.seed)
    name = f"bench_{backend}_{size}_{uuid.uuid4().hex[:6]}"
    settings = MemoryStoreSettings(
        backend=backend,
        milvus=MilvusSettings(uri=str(workdir / f"{name}.db"), collection=name),
        qdrant=QdrantSettings(path=str(workdir / name), collection=name),
        valkey=ValkeySettings(url=valkey_url or "valkey://127.0.0.1:6379/0", prefix=f"{name}:", index=name),
        retrieval=RetrievalSettings(hybrid=False),  # the backends alone
    )
    store = make_store(settings, embed=None, dimension=args.dim, identity=None)
    await store.open()
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    began = time.perf_counter()
    chunk = 2000
    for start in range(0, size, chunk):
        await bulk_load(
            store, memories(rng, start, min(chunk, size - start), args.dim, args.users, t0), BULK_CALL_ROWS.get(backend)
        )
        done = start + min(chunk, size - start)
        if size >= 50_000 and done % 10_000 == 0:  # long loads: show progress
            print(
                f"  {backend}: loaded {done:,} rows ({done / (time.perf_counter() - began):,.0f} rows/s)",
                file=sys.stderr,
                flush=True,
            )
    load_s = time.perf_counter() - began

    extra = memories(rng, size, args.ops, args.dim, args.users, t0)
    store_lat = []
    began = time.perf_counter()
    for m in extra:
        t = time.perf_counter()
        await store.store(m)
        store_lat.append((time.perf_counter() - t) * 1000)
    store_wall = time.perf_counter() - began

    queries = unit_rows(rng, args.ops, args.dim)
    retrieve_lat = []
    found = 0
    began = time.perf_counter()
    for i, q in enumerate(queries):
        opts = RetrieveOptions(user_id=f"user{i % args.users:03d}", embedding=q.tolist(), limit=5, threshold=-1.0)
        t = time.perf_counter()
        res = await store.retrieve(opts)
        retrieve_lat.append((time.perf_counter() - t) * 1000)
        found += len(res)
    retrieve_wall = time.perf_counter() - began
    await store.close()
    return {
        "backend": backend,
        "size": size,
        "load_rows_s": size / load_s if load_s else float("inf"),
        "store_p50": statistics.median(store_lat),
        "store_p95": pct(store_lat, 0.95),
        "store_ops": len(store_lat) / store_wall,
        "retrieve_p50": statistics.median(retrieve_lat),
        "retrieve_p95": pct(retrieve_lat, 0.95),
        "retrieve_ops": len(retrieve_lat) / retrieve_wall,
        "hits_per_query": found / len(retrieve_lat),
    }


def table(rows: list[dict], args) -> Table:
    t = Table(title=f"store latency (dim {args.dim}, {args.users} users, {args.ops} timed calls each, sequential)")
    for col in ("backend", "memories", "bulk load rows/s", "store p50 ms", "store p95 ms", "store ops/s",
                "retrieve p50 ms", "retrieve p95 ms", "retrieve ops/s"):  # fmt: skip
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            r["backend"], f"{r['size']:,}", f"{r['load_rows_s']:,.0f}",
            f"{r['store_p50']:.2f}", f"{r['store_p95']:.2f}", f"{r['store_ops']:,.0f}",
            f"{r['retrieve_p50']:.2f}", f"{r['retrieve_p95']:.2f}", f"{r['retrieve_ops']:,.0f}",
        )  # fmt: skip
    return t


async def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000", help="comma-separated collection sizes (e.g. 10000,100000)")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated subset of " + ",".join(BACKENDS))
    p.add_argument("--ops", type=int, default=200, help="timed store and retrieve calls per run")
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        p.error(f"unknown backends: {sorted(unknown)}")
    console = Console(width=170)
    rows: list[dict] = []
    server = None
    if "valkey" in backends:
        from memory_core.testing.valkey_server import start_valkey_server

        server = start_valkey_server(search=True)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp:
            for size in sizes:
                for backend in backends:
                    console.log(f"{backend} @ {size:,} ...")
                    row = await run_one(backend, size, args, Path(tmp), server.url_db(0) if server else None)
                    console.log(row)
                    rows.append(row)
    finally:
        if server is not None:
            server.stop()
    console.print(table(rows, args))
    return rows


if __name__ == "__main__":
    asyncio.run(main())
