"""The store's hot Milvus Lite calls through pymilvus's client (its in-process gRPC server) and
on the engine directly (``memory_core/stores/lite_engine.py``), side by side in one run.

One ``MilvusStore`` on a temp Milvus Lite file (the store's own schema, HNSW/COSINE,
``--dim``-d random unit vectors), filled with ``--rows`` memories of ``--users`` users; then,
alternating the two paths call by call, ``--calls`` of each operation the store makes on a
user's write or read:

- ``get 1`` / ``get 5``: a read by primary key (the store's ``_get_sync``: the client's
  ``query(id in [...])``, the engine's ``get``);
- ``upsert 1``: one whole row written again (an update, an access count);
- ``owner query``: every id of one user (``user_id == "…"``: a user's first load, ``list``);
- ``search``: the user's 5 nearest by cosine with the owner filter;
- ``counts owner`` / ``counts all``: one user's memories, and everyone's, by state and type
  (``counts``, the admin views): before, the user's rows read (on the engine) and seven
  ``count(*)`` queries through the client; now ``LiteEngine.tally`` from the engine's columns
  (only ``--count-calls`` of these: the old way walks every row);
- ``write+counts``: what an admin view costs while users write (every view follows a write):
  one row written again, then everyone's counts and a page of 50 owners' counts; before, a
  ``tally`` pass over the columns for each (what a write made stale), now the counts the
  engine keeps as it writes (``LiteEngine.owner_counts``; the write reads the row's stored
  values first, and this row's time includes that). Measured before the other rows: their
  client writes make the kept counts stale (built again on the next read).

Prints p50 / p95 (ms) per path and the ratio client ÷ engine of the p50s. One process, one
thread, no other load: what a call costs, not what it waits for in the store's queue under
load (``benchmarks.load``, ``benchmarks.flat_cost`` measure that).

Usage::

    python benchmarks/lite_engine.py                      # 5,000 rows
    python benchmarks/lite_engine.py --rows 100000 --calls 50
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memory_core.config import MilvusSettings
from memory_core.stores.milvus import _SCALAR_FIELDS, _VECTOR_FIELD, MilvusStore, _filter, _ids_filter
from memory_core.types import Memory, MemoryState, MemoryType

STATES = [s.value for s in MemoryState]
TYPES = [t.value for t in MemoryType]


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--count-calls", type=int, default=10)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    rng = np.random.default_rng(7)

    def unit() -> list[float]:
        v = rng.standard_normal(args.dim).astype(np.float32)
        return (v / np.linalg.norm(v)).tolist()

    async def embed(texts):
        return [unit() for _ in texts]

    with tempfile.TemporaryDirectory(prefix="lite_engine_") as tmp:
        store = MilvusStore(
            MilvusSettings(uri=str(Path(tmp) / "m.db"), collection="bench"),
            embed=embed,
            dimension=args.dim,
            identity="bench",
        )
        await store.open()
        engine = store._engine
        if engine is None:
            raise SystemExit("no in-process Milvus Lite engine found: nothing to compare")
        t = time.perf_counter()
        by_user: dict[str, list[str]] = {}
        for start in range(0, args.rows, 500):
            user = f"user-{(start // 500) % args.users}"
            batch = [
                Memory(user_id=user, content=f"memory {i} of {user}", type=MemoryType.SEMANTIC, embedding=unit())
                for i in range(start, min(start + 500, args.rows))
            ]
            await store.store_many(batch)
            by_user.setdefault(user, []).extend(m.id for m in batch)
        print(f"{args.rows:,} rows of {len(by_user)} users loaded in {time.perf_counter() - t:.1f} s")
        users = list(by_user)
        name = store.collection
        conn = store._conn

        def row_of(memory_id: str, user: str) -> dict:
            (row,) = engine.get(name, [memory_id], [*_SCALAR_FIELDS, _VECTOR_FIELD])
            return row

        def ops(i: int):
            user = users[i % len(users)]
            ids = by_user[user]
            one, five = [ids[i % len(ids)]], [ids[(i + k) % len(ids)] for k in range(5)]
            expr = _filter(user, None, None)
            query = unit()
            row = row_of(one[0], user)
            counted = ["state", "memory_type"]

            def seven_counts() -> list[int]:
                clauses = [f'state == "{x}"' for x in STATES] + [f'memory_type == "{x}"' for x in TYPES]
                return [conn.query(name, filter=c, output_fields=["count(*)"])[0]["count(*)"] for c in clauses]

            counts = {
                "counts owner": (lambda: engine.query(name, expr, counted), lambda: engine.tally(name, expr, counted)),
                "counts all": (seven_counts, lambda: engine.tally(name, "", counted)),
            }
            return (counts if i < args.count_calls else {}) | {
                "get 1": (
                    lambda: conn.query(name, filter=_ids_filter(one, None), output_fields=["id", "user_id"], limit=1),
                    lambda: engine.get(name, one, ["id", "user_id"]),
                ),
                "get 5": (
                    lambda: conn.query(name, filter=_ids_filter(five, None), output_fields=_SCALAR_FIELDS, limit=5),
                    lambda: engine.get(name, five, _SCALAR_FIELDS),
                ),
                "upsert 1": (lambda: conn.upsert(name, [dict(row)]), lambda: engine.upsert(name, [row])),
                "owner query": (
                    lambda: list(conn.query_iterator(name, batch_size=4096, filter=expr, output_fields=["id"]).next()),
                    lambda: engine.query(name, expr, ["id"]),
                ),
                "search": (
                    lambda: conn.search(
                        name,
                        data=[query],
                        anns_field=_VECTOR_FIELD,
                        filter=expr,
                        limit=5,
                        output_fields=_SCALAR_FIELDS,
                        search_params={"metric_type": "COSINE", "params": {"ef": 64}},
                    ),
                    lambda: engine.search(name, query, 5, expr, _SCALAR_FIELDS, _VECTOR_FIELD, 64),
                ),
            }

        def write_then_counts(i: int) -> tuple[Callable[[], None], Callable[[], None]]:
            user = users[i % len(users)]
            row = row_of(by_user[user][i % len(by_user[user])], user)
            page = users[i % len(users) : i % len(users) + 50]
            page_expr = "user_id in [" + ", ".join(f'"{u}"' for u in page) + "]"
            counted = ["state", "memory_type"]

            def tally() -> None:
                engine.upsert(name, [row])
                engine.tally(name, "", counted)
                engine.tally(name, page_expr, ["user_id", *counted])

            def kept() -> None:
                engine.upsert(name, [row])
                counts = engine.owner_counts(name)
                dict(counts.total)
                [dict(counts.by_owner.get(u, {})) for u in page]

            return tally, kept

        def measure() -> dict[str, tuple[list[float], list[float]]]:
            out: dict[str, tuple[list[float], list[float]]] = {}
            engine.owner_counts(name)  # built once, as a running store's first admin view does
            for i in range(args.count_calls):  # only engine writes here: the kept counts stay current
                times = out.setdefault("write+counts", ([], []))
                tally, kept = write_then_counts(i)
                for path, fn in ((0, tally), (1, kept)) if i % 2 else ((1, kept), (0, tally)):
                    t0 = time.perf_counter()
                    fn()
                    times[path].append((time.perf_counter() - t0) * 1000)
            for i in range(args.calls):
                for op, (client, direct) in ops(i).items():
                    times = out.setdefault(op, ([], []))
                    for path, fn in ((0, client), (1, direct)) if i % 2 else ((1, direct), (0, client)):
                        t0 = time.perf_counter()
                        fn()
                        times[path].append((time.perf_counter() - t0) * 1000)
            return out

        results = await asyncio.get_running_loop().run_in_executor(store._executor, measure)
        await store.close()
    print(f"\n{'operation':<12} {'client p50':>11} {'p95':>8} {'engine p50':>11} {'p95':>8} {'client ÷ engine':>16}")
    for op, (client, direct) in results.items():
        c50, e50 = _p(client, 50), _p(direct, 50)
        print(f"{op:<12} {c50:>11.3f} {_p(client, 95):>8.3f} {e50:>11.3f} {_p(direct, 95):>8.3f} {c50 / e50:>15.1f}×")


if __name__ == "__main__":
    asyncio.run(main())
