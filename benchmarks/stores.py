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

``--flat``: per-user cost as memory grows. Every user holds ``--per-user`` memories (1,000
by default) and the total grows through ``--totals`` (10,000 then 1,000,000 by default: 10
then 1,000 users) in ONE store per backend, loaded through the public bulk path
(``store_many``) with random unit vectors and short texts (no model). At each total, after
the load has settled (Milvus server: segments flushed and the vector index built on every
row), ``--queries`` retrieves of random users (limit 5, vector given, the write-behind access
update off: it is not on the read path) are timed sequentially; the table gives p50/p95 per
total and the ratio of the largest total to the smallest per backend (goal: p95 ratio ≤
1.3). Valkey is timed twice per total: with its KNN pre-filter (the store's default, where
the module parses it) and, as ``valkey (module plan)``, with the module choosing its own
hybrid plan. Backends run one after another; each is closed and its server stopped before the
next. ``milvus_server`` is a standalone Milvus server (``memory_core.testing.milvus_server``,
the ``milvus`` package)::

    python benchmarks/stores.py --flat --backends milvus,milvus_server,valkey,inmemory
    python benchmarks/stores.py --flat --totals 2000,20000 --per-user 200 --queries 50   # smoke
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
    CurationSettings,
    MemoryStoreSettings,
    MilvusSettings,
    QdrantSettings,
    RetrievalSettings,
    ValkeySettings,
)
from memory_core.sanitize import scoped_memory_id  # noqa: E402
from memory_core.stores import MemoryStore, make_store  # noqa: E402
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


FLAT_BACKENDS = ("milvus", "milvus_server", "valkey", "inmemory", "qdrant")


def user_memories(rng: np.random.Generator, user: int, n: int, dim: int, t0: datetime) -> list[Memory]:
    """The ``n`` synthetic memories of user ``user`` (random unit vectors, short texts, one
    per second from ``t0``)."""
    vecs = unit_rows(rng, n, dim)
    uid = f"u{user:06d}"
    return [
        Memory(
            id=scoped_memory_id(uid, f"m{j:06d}"),
            user_id=uid,
            content=f"note {j} of {uid}: item {int(rng.integers(1_000_000))}",
            created_at=t0 + timedelta(seconds=j),
            updated_at=t0 + timedelta(seconds=j),
            embedding=vecs[j].tolist(),
        )
        for j in range(n)
    ]


async def settle(store, backend: str, expected_rows: int, timeout_s: float = 1800.0) -> tuple[float, int]:
    """Wait until the backend has taken in what was loaded; returns the seconds waited and
    the rows the backend holds (``expected_rows`` where it is not checked). Milvus server:
    flush (seal the growing segments) and wait until no row waits for an index build and
    the index covers every sealed row, twice in a row 5 s apart; then count the rows
    (``count(*)``, Strong). Milvus Lite: flush. Others: nothing to wait for (Valkey indexes
    each HSET as it runs). Raises ``TimeoutError`` after ``timeout_s``."""
    began = time.perf_counter()
    if backend not in ("milvus", "milvus_server"):
        return 0.0, expected_rows
    await store._flush()
    if backend == "milvus":
        return time.perf_counter() - began, expected_rows
    client, name = store._conn, store.collection
    deadline = time.monotonic() + timeout_s
    index = await store._call(client.list_indexes, name)
    previous = None
    while time.monotonic() < deadline:
        info = await store._call(client.describe_index, name, index[0])
        state = (
            int(info.get("total_rows", 0)),
            int(info.get("indexed_rows", 0)),
            int(info.get("pending_index_rows", 0)),
        )
        if state[2] == 0 and state[0] == state[1] and state == previous:
            break
        previous = state
        await asyncio.sleep(5.0)
    else:
        raise TimeoutError(f"milvus index still building after {timeout_s} s: {info}")
    rows = await store._call(client.query, name, filter="", output_fields=["count(*)"], consistency_level="Strong")
    held = int(rows[0]["count(*)"])
    print(f"  {backend}: index {info}; rows held {held:,} of {expected_rows:,}", file=sys.stderr, flush=True)
    return time.perf_counter() - began, held


async def flat_one(backend: str, args, workdir: Path) -> list[dict]:
    """Per-user retrieve latency of one backend at each of ``args.totals`` (one store, grown
    in place); a row per total."""
    from memory_core.testing.milvus_server import start_milvus_server
    from memory_core.testing.valkey_server import start_valkey_server

    cap = dict((b, int(n)) for b, n in (c.split("=") for c in args.cap.split(",") if c.strip()))
    totals = sorted(int(t) for t in args.totals.split(",") if int(t) <= cap.get(backend, int(t)))
    name = f"flat_{backend}_{uuid.uuid4().hex[:6]}"
    server = milvus = None
    milvus_settings = MilvusSettings(uri=str(workdir / f"{name}.db"), collection=name)
    if backend == "valkey":
        server = start_valkey_server(search=True)
    if backend == "milvus_server":
        milvus = start_milvus_server(workdir=workdir / f"{name}-server")
        # Session reads: after the load has settled they wait for nothing, so the figure is the
        # search's cost (Strong reads wait for the server's next time tick, ~200 ms here)
        milvus_settings = MilvusSettings(
            uri=milvus.uri, collection=name, num_partitions=args.num_partitions, consistency="Session"
        )
    settings = MemoryStoreSettings(
        backend="milvus" if backend == "milvus_server" else backend,
        milvus=milvus_settings,
        qdrant=QdrantSettings(path=str(workdir / name), collection=name),
        valkey=ValkeySettings(
            url=server.url_db(0) if server else "valkey://127.0.0.1:1/0", prefix=f"{name}:", index=name
        ),
        retrieval=RetrievalSettings(hybrid=False),  # the backend alone: no hybrid index,
        curation=CurationSettings(enabled=False),  # no curation, no cache
    )
    store = make_store(settings, embed=None, dimension=args.dim, identity=None)
    assert isinstance(store, MemoryStore)
    rows: list[dict] = []
    try:
        await store.open()
        rng = np.random.default_rng(args.seed)
        t0 = datetime(2025, 1, 1, tzinfo=UTC)
        users = 0
        for total in totals:
            began = time.perf_counter()
            while users * args.per_user < total:
                await bulk_load(
                    store, user_memories(rng, users, args.per_user, args.dim, t0), BULK_CALL_ROWS.get(backend)
                )
                users += 1
                loaded = users * args.per_user
                if loaded % 50_000 == 0:
                    print(
                        f"  {backend}: {loaded:,} rows ({(loaded - rows[-1]['total'] if rows else loaded) / (time.perf_counter() - began):,.0f} rows/s)",
                        file=sys.stderr,
                        flush=True,
                    )
            load_s = time.perf_counter() - began
            settle_s, held = await settle(store, backend, users * args.per_user)
            plans = [(backend, None)]
            if getattr(store, "knn_prefilter", False):  # Valkey: the module's own plan as well
                plans.append((f"{backend} (module plan)", False))
            for label, prefilter in plans:
                row = await time_retrieves(store, args, total, users, prefilter)
                row.update(backend=label, load_s=load_s, settle_s=settle_s, held=held)
                print(f"  {row}", file=sys.stderr, flush=True)
                rows.append(row)
    finally:
        await store.close()
        if server is not None:
            server.stop()
        if milvus is not None:
            milvus.stop()
    return rows


async def time_retrieves(store, args, total: int, users: int, prefilter: bool | None) -> dict:
    """``args.queries`` timed retrieves of random users (after ``args.warmup`` untimed ones),
    the same queries for a given ``total``; ``prefilter`` (Valkey) sets the store's
    ``knn_prefilter`` for these and restores it. Returns total, users, p50, p95 (ms), hits."""
    qrng = np.random.default_rng(args.seed + total)
    queries = unit_rows(qrng, args.queries + args.warmup, args.dim)
    who = qrng.integers(users, size=len(queries))
    saved = getattr(store, "knn_prefilter", None)
    if prefilter is not None:
        store.knn_prefilter = prefilter
    lat: list[float] = []
    hits = 0
    try:
        for i, (q, u) in enumerate(zip(queries, who, strict=True)):
            opts = RetrieveOptions(user_id=f"u{int(u):06d}", embedding=q.tolist(), limit=5, threshold=-1.0)
            t = time.perf_counter()
            res = await store.retrieve(opts, touch=False)
            if i >= args.warmup:
                lat.append((time.perf_counter() - t) * 1000)
                hits += len(res)
    finally:
        if prefilter is not None:
            store.knn_prefilter = saved
    return {
        "total": users * args.per_user,
        "users": users,
        "p50": statistics.median(lat),
        "p95": pct(lat, 0.95),
        "hits": hits / len(lat),
    }


def flat_table(rows: list[dict], args) -> Table:
    t = Table(
        title=f"per-user retrieve as the total grows ({args.per_user:,} memories per user, dim {args.dim}, "
        f"{args.queries} timed retrieves of random users per total, limit 5, sequential)"
    )
    for col in ("backend", "memories", "held", "users", "load s", "settle s", "p50 ms", "p95 ms", "p50 ratio",
                "p95 ratio", "goal p95 ≤ 1.3×"):  # fmt: skip
        t.add_column(col, justify="right")
    first: dict[str, dict] = {}
    for r in rows:
        base = first.setdefault(r["backend"], r)
        p50r, p95r = r["p50"] / base["p50"], r["p95"] / base["p95"]
        verdict = "" if r is base else ("met" if p95r <= 1.3 else "MISSED")
        t.add_row(
            r["backend"], f"{r['total']:,}", f"{r.get('held', r['total']):,}", f"{r['users']:,}", f"{r['load_s']:,.0f}", f"{r['settle_s']:,.0f}",
            f"{r['p50']:.2f}", f"{r['p95']:.2f}", f"{p50r:.2f}×", f"{p95r:.2f}×", verdict,
        )  # fmt: skip
    return t


async def main_flat(args) -> list[dict]:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(FLAT_BACKENDS)
    if unknown:
        raise SystemExit(f"unknown backends: {sorted(unknown)} (choose from {', '.join(FLAT_BACKENDS)})")
    console = Console(width=170)
    rows: list[dict] = []
    for backend in backends:
        console.log(f"{backend}: totals {args.totals} ...")
        began = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="bench-flat-") as tmp:
            rows += await flat_one(backend, args, Path(tmp))
        console.log(f"{backend}: done in {time.perf_counter() - began:,.0f} s")
    console.print(flat_table(rows, args))
    return rows


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
    p.add_argument("--flat", action="store_true", help="per-user cost as the total grows (see above)")
    p.add_argument("--totals", default="10000,1000000", help="--flat: totals of memories, ascending")
    p.add_argument("--per-user", type=int, default=1000, help="--flat: memories per user")
    p.add_argument("--queries", type=int, default=500, help="--flat: timed retrieves per total")
    p.add_argument("--warmup", type=int, default=20, help="--flat: untimed retrieves before each timing")
    p.add_argument(
        "--cap",
        default="",
        help="--flat: largest total per backend, e.g. milvus=100000 (Milvus Lite loads slowly as it grows)",
    )
    p.add_argument(
        "--num-partitions", type=int, default=None, help="--flat: milvus_server partitions (default: server's)"
    )
    args = p.parse_args(argv)
    if args.flat:
        if args.backends == ",".join(BACKENDS):
            args.backends = "milvus,milvus_server,valkey,inmemory"
        return await main_flat(args)
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
