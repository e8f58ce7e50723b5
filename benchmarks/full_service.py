"""The read path when the service is full: a user's search and chat cost through HTTP as the
service's total memory grows, side by side with the memory-off route, in ONE run.

    python -m benchmarks.full_service [--totals 1000,100000] [--rounds 200]

One Milvus Lite file in a temporary directory. For each total in ``--totals`` (ascending):
the service is stopped, the file is filled up to that total with filler users (random unit
vectors, ``benchmarks.flat_cost.filler``, written through the bare ``MilvusStore`` into the
application's physical collection: what other users' memories cost the measured ones), and
``serve run`` is started again on ``serve_config.yaml`` (only its port, data paths and the
per-user write limit changed: the seeding writes 600 memories at once). Before the first
total, two measured users are seeded through ``POST /v1/memory`` (batches of 100, curation
on): ``one`` with 1 memory, ``many`` with 600 LoCoMo turns.

At each total, after one warm-up request per kind (the first search of a user after a
restart builds that user's index from one backend ``list``), ``--rounds`` rounds, each of:
a ``POST /v1/memory/search`` of each measured user (a LoCoMo question, ``limit`` 5), and a
chat completion of the ``many`` user on the memory route (``model: assistant``: retrieval,
the reflection gate, injection) and the same on the memory-off route (``model: scratch``),
interleaved so both see the same machine. The chat messages are questions, so auto-store
keeps nothing from them (checked: the ``many`` user's count is printed before and after).

Prints per total: search p50/p95 of each user, chat p50/p95 on both routes, and the chat
memory overhead (memory route minus memory-off route, p50 and p95); then the ratios
p95(largest total) / p95(smallest) against the 1.3 goal and the figures at the largest total
against the read-path goals (chat overhead p50 ≤ 12 ms, ``many`` search p95 ≤ 20 ms). Sequential
requests, one client, on loopback; the machine is shared: compare figures of one run.

``--alternate K`` (0: off) measures each total K + 1 times instead, in alternating order. The
Milvus Lite directory of each total is built first (filled; the measured users seeded into the
smallest, through a service started for that and stopped) and kept as a snapshot; then every
phase is a fresh ``serve run`` over a fresh copy of its total's snapshot (so no phase sees
another's access-time writes or a warm index), in passes ascending, descending, ascending, ...:
with two totals and K = 3, 1k, 100k | 100k, 1k | 1k, 100k | 100k, 1k (ABBA). A slow or fast
stretch of the shared machine then falls on both totals alike. Printed: every phase in the
order run (with the ``many`` user's count before/after it), each pair's ratios (the j-th
phase of the largest total over the j-th of the smallest), then the ratios and goals read
from each total's requests of all its phases pooled (a p95 over (K + 1) × ``--rounds``).

``--json`` writes ``{"pooled": {total: figures}, "phases": {total: [figures per phase]},
"order": [[total, phase], ...]}`` (figures: p50/p95/n per request kind, the overhead, the
``many`` count before/after; pooled, the count's total change over the phases).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from benchmarks.flat_cost import filler, load
from benchmarks.hostile import started_service, user_headers
from benchmarks.load import percentile
from memory_core.config import EmbeddingSettings
from memory_core.embedding import compute_identity
from memory_core.embedding.identity import physical_name
from memory_core.locomo import load_samples, turns

app = typer.Typer(add_completion=False)
console = Console()
DIM = 384
GOAL_RATIO = 1.3
GOAL_OVERHEAD_P50_MS = 12.0
GOAL_SEARCH_P95_MS = 20.0
MANY = 600
T = TypeVar("T")


def bare_store(db: Path) -> Any:
    """The bare ``MilvusStore`` over the application's physical collection in ``db`` (not
    opened)."""
    from memory_core.config import MilvusSettings
    from memory_core.stores.milvus import MilvusStore

    identity = compute_identity(EmbeddingSettings(model="bundled:all-MiniLM-L6-v2"))
    return MilvusStore(
        MilvusSettings(uri=str(db), collection=physical_name("agentic_memory", identity.collection_suffix)),
        embed=None,
        dimension=DIM,
        identity=identity.digest,
    )


async def fill_to(db: Path, total: int, have: int, rng: np.random.Generator, per_user: int) -> float:
    """Add filler rows to the application's collection in ``db`` until it holds ``total``
    rows besides the measured users' (``have`` filler rows so far). Returns seconds spent."""
    if total <= have:
        return 0.0
    store = bare_store(db)
    started = time.monotonic()
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    try:
        step = 20_000
        for start in range(have, total, step):
            await load(store, filler(rng, start, min(step, total - start), per_user, t0))
    finally:
        await store.close()
    return time.monotonic() - started


def once_unlocked(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(make())``, again every 2 s while it fails because the Milvus Lite
    directory is locked (``_file_locked``: a stopped service's store actor may hold the lock
    for a while after ``serve run`` exited), for up to 120 s; then its error is raised."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return asyncio.run(make())
        except Exception as e:
            if not _file_locked(e) or time.monotonic() > deadline:
                raise
            time.sleep(2)


def fill_in_process(db: Path, total: int, have: int, seed: int, per_user: int) -> float:
    """``fill_to`` run to completion in this (child) process, once the directory is free
    (``once_unlocked``); seconds spent."""
    return once_unlocked(lambda: fill_to(db, total, have, np.random.default_rng(seed), per_user))


def wait_unlocked(db: Path) -> None:
    """Return once ``db`` (a Milvus Lite directory) opens (``once_unlocked``): the stopped
    service's processes have let go of it, so a copy of it is what they acknowledged. Run in a
    child process (the open takes the lock until its process exits)."""

    async def open_and_close() -> None:
        store = bare_store(db)
        try:
            await store.open()
        finally:
            await store.close()

    once_unlocked(open_and_close)


def in_child(fn, *args: Any) -> Any:
    """``fn(*args)`` in a spawned process of its own (Milvus Lite holds a file's lock until its
    process exits); its result."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _file_locked(error: BaseException) -> bool:
    """``error`` or an exception in its chain says the Milvus Lite file could not be opened
    (the store wraps the client's "Open local milvus failed" as ``StoreUnavailable``; the
    lock held by the stopped service is the cause seen here, logged by milvus_lite, not
    carried in the chain). Any such failure is retried until the deadline."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = repr(e)
        if "holds the lock" in text or "DataDirLocked" in text or "Open local milvus failed" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


def edit_for(work: Path):
    """The config edit of this benchmark: data in ``work``, no per-user write limit."""

    def edit(config: dict[str, Any]) -> None:
        g = config["applications"][0]["args"]["config"]["global"]
        g["stores"]["memory"]["milvus"]["uri"] = str(work / "memory.db")
        g["access"]["api_keys"]["path"] = str(work / "access.sqlite")
        g["access"]["write_rate_limit"] = {"limit": 0}

    return edit


async def seed(url: str, texts: list[str]) -> None:
    """The measured users' memories through ``POST /v1/memory`` (batches of 100)."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        r = await client.post("/v1/memory", json={"memories": [{"content": "I keep my bike in the shed."}]},
                              headers=user_headers("one"))  # fmt: skip
        r.raise_for_status()
        for s in range(0, len(texts), 100):
            batch = [{"content": t, "type": "episodic"} for t in texts[s : s + 100]]
            r = await client.post("/v1/memory", json={"memories": batch}, headers=user_headers("many"))
            r.raise_for_status()


async def count(client: httpx.AsyncClient, user: str) -> int:
    r = await client.get("/v1/memory", params={"limit": 1}, headers=user_headers(user))
    r.raise_for_status()
    return int(r.json()["total"])


KINDS = ("search_one", "search_many", "chat_memory", "chat_off")


def figures(times: dict[str, list[float]], many_count: list[int]) -> dict[str, Any]:
    """p50/p95/n of each kind in ``times`` (ms), the chat memory overhead, the raw samples
    (``samples``: what phases of one total pool) and the ``many`` user's count before/after."""
    out: dict[str, Any] = {
        k: {"p50": percentile(v, 50), "p95": percentile(v, 95), "n": len(v)} for k, v in times.items()
    }
    out["overhead"] = {
        "p50": out["chat_memory"]["p50"] - out["chat_off"]["p50"],
        "p95": out["chat_memory"]["p95"] - out["chat_off"]["p95"],
    }
    out["many_count"] = many_count
    out["samples"] = times
    return out


async def measure(url: str, questions: list[str], rounds: int) -> dict[str, Any]:
    """``rounds`` interleaved rounds (see the module docstring): ``figures`` of them."""
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        before = await count(client, "many")

        async def timed(kind: str, method: str, path: str, body: dict, user: str) -> None:
            started = time.perf_counter()
            r = await client.request(method, path, json=body, headers=user_headers(user))
            spent = (time.perf_counter() - started) * 1000
            r.raise_for_status()
            times[kind].append(spent)

        def chat(model: str, q: str) -> dict:
            return {"model": model, "messages": [{"role": "user", "content": q}]}

        for warm in (True, False):
            for i in range(1 if warm else rounds):
                q = questions[i % len(questions)]
                steps = [
                    ("search_one", "POST", "/v1/memory/search", {"query": q, "limit": 5}, "one"),
                    ("search_many", "POST", "/v1/memory/search", {"query": q, "limit": 5}, "many"),
                    ("chat_memory", "POST", "/v1/chat/completions", chat("assistant", q), "many"),
                    ("chat_off", "POST", "/v1/chat/completions", chat("scratch", q), "many"),
                ]
                random.shuffle(steps)  # no kind always runs right after another
                for step in steps:
                    await timed(*step)
            if warm:
                for v in times.values():
                    v.clear()
        await asyncio.sleep(2)  # auto-stores run after the answers
        after = await count(client, "many")
    return figures(times, [before, after])


def pooled(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """One total's phases as one: ``figures`` of all their requests together; the ``many``
    count as the first phase's before and that plus every phase's change (each phase starts
    from the same snapshot)."""
    times = {k: [x for p in phases for x in p["samples"][k]] for k in KINDS}
    before = phases[0]["many_count"][0]
    return figures(times, [before, before + sum(p["many_count"][1] - p["many_count"][0] for p in phases)])


def shown(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` without its raw samples (what is printed and written)."""
    return {k: v for k, v in result.items() if k != "samples"}


@app.command()
def main(
    totals: str = typer.Option("1000,100000", help="total memories in the service, ascending"),
    rounds: int = typer.Option(200, min=10, help="measured rounds per total"),
    filler_per_user: int = typer.Option(100, min=1, help="memories per filler user"),
    alternate: int = typer.Option(
        0, min=0, help="measure each total K + 1 times from snapshots, in ABBA order (0: once, in order)"
    ),
    json_out: Path | None = typer.Option(None, "--json", help="write the figures here too"),
) -> None:
    wanted = sorted({int(t) for t in totals.split(",")})
    samples = load_samples(os.environ.get("LOCOMO_PATH"))
    texts: list[str] = []
    questions: list[str] = []
    for sample in samples:
        texts += [t.text for t in turns(sample)]
        questions += [q["question"] for q in sample.get("qa", []) if q.get("question")]
    texts = texts[:MANY]
    random.Random(7).shuffle(questions)
    phases: dict[int, list[dict[str, Any]]] = {t: [] for t in wanted}
    order: list[tuple[int, int]] = []  # (total, phase) in the order run
    with tempfile.TemporaryDirectory(prefix="full-service-") as tmp:
        work = Path(tmp)
        db = work / "memory.db"
        have = 0
        for i, total in enumerate(wanted):
            filled = in_child(fill_in_process, db, total - MANY - 1, have, i, filler_per_user)
            have = max(have, total - MANY - 1)
            console.print(f"total {total}: filled in {filled:.0f} s")
            if i == 0 or not alternate:
                with started_service(edit_for(work)) as url:
                    if i == 0:
                        started = time.monotonic()
                        asyncio.run(seed(url, texts))
                        console.print(f"seeded 1 + {len(texts)} memories in {time.monotonic() - started:.0f} s")
                    if not alternate:
                        phases[total].append(asyncio.run(measure(url, questions, rounds)))
                        order.append((total, 0))
                        console.print(json.dumps(shown(phases[total][-1])))
            if alternate:
                in_child(wait_unlocked, db)  # the service (if one ran) has let go of the directory
                shutil.copytree(db, work / f"snapshot-{total}")
        for a in range(alternate + 1 if alternate else 0):
            for total in wanted if a % 2 == 0 else list(reversed(wanted)):
                if db.exists():
                    in_child(wait_unlocked, db)
                    shutil.rmtree(db)
                shutil.copytree(work / f"snapshot-{total}", db)
                os.sync()  # the copy's writes reach the disk before the phase, not during it
                with started_service(edit_for(work)) as url:
                    phases[total].append(asyncio.run(measure(url, questions, rounds)))
                order.append((total, len(phases[total]) - 1))
                console.print(f"total {total}, phase {len(phases[total])}:")
                console.print(json.dumps(shown(phases[total][-1])))
    results = {t: pooled(p) for t, p in phases.items()}
    if alternate:
        report_phases(phases, order, wanted)
    report(results, wanted)
    if json_out is not None:
        json_out.write_text(
            json.dumps(
                {
                    "pooled": {str(k): shown(v) for k, v in results.items()},
                    "phases": {str(k): [shown(p) for p in v] for k, v in phases.items()},
                    "order": order,
                },
                indent=2,
            )
        )


def report_phases(phases: dict[int, list[dict[str, Any]]], order: list[tuple[int, int]], wanted: list[int]) -> None:
    """Each phase's figures in the order run, then the ratios of each pair of phases (the
    j-th of the largest total over the j-th of the smallest)."""
    table = Table(title="each phase, in the order run (ms)")
    for col in ("#", "total", "search 1-memory p50/p95", f"search {MANY}-memory p50/p95", "overhead p50",
                f"{MANY}-memory chat p50/p95", f"{MANY}-user count before/after"):  # fmt: skip
        table.add_column(col)
    for n, (total, j) in enumerate(order, 1):
        r = phases[total][j]
        table.add_row(str(n), str(total), f"{r['search_one']['p50']:.1f} / {r['search_one']['p95']:.1f}",
                      f"{r['search_many']['p50']:.1f} / {r['search_many']['p95']:.1f}", f"{r['overhead']['p50']:.1f}",
                      f"{r['chat_memory']['p50']:.1f} / {r['chat_memory']['p95']:.1f}",
                      "/".join(map(str, r["many_count"])))  # fmt: skip
    console.print(table)
    lo, hi = phases[wanted[0]], phases[wanted[-1]]

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("nan")

    for j in range(min(len(lo), len(hi))):
        one = ratio(hi[j]["search_one"]["p95"], lo[j]["search_one"]["p95"])
        many = ratio(hi[j]["search_many"]["p95"], lo[j]["search_many"]["p95"])
        console.print(
            f"pair {j + 1}: search p95 {wanted[-1]} / {wanted[0]} = {one:.2f}× (1-memory), {many:.2f}× ({MANY}-memory)"
        )


def report(results: dict[int, dict[str, Any]], wanted: list[int]) -> None:
    """Each total's figures (all its phases pooled), the p95 ratios against the 1.3 goal and
    the largest total's read-path figures against theirs."""
    table = Table(title="the read path through HTTP as the service fills (ms; each total's phases pooled)")
    for col in ("total", "search 1-memory p50/p95", f"search {MANY}-memory p50/p95", "chat memory p50/p95",
                "chat memory-off p50/p95", "overhead p50/p95", f"{MANY}-user count before/after"):  # fmt: skip
        table.add_column(col)
    for total in wanted:
        r = results[total]

        def pair(k: str, r: dict = r) -> str:
            return f"{r[k]['p50']:.1f} / {r[k]['p95']:.1f}"

        table.add_row(str(total), pair("search_one"), pair("search_many"), pair("chat_memory"), pair("chat_off"),
                      pair("overhead"), "/".join(map(str, r["many_count"])))  # fmt: skip
    console.print(table)
    lo, hi = results[wanted[0]], results[wanted[-1]]
    for k, name in (("search_one", "1-memory user"), ("search_many", f"{MANY}-memory user")):
        ratio = hi[k]["p95"] / lo[k]["p95"] if lo[k]["p95"] else float("nan")
        verdict = "met" if ratio <= GOAL_RATIO else "missed"
        console.print(f"search p95 {name}: {wanted[-1]} / {wanted[0]} = {ratio:.2f}× (goal ≤ {GOAL_RATIO}: {verdict})")
    o = hi["overhead"]["p50"]
    s = hi["search_many"]["p95"]
    console.print(
        f"at {wanted[-1]}: chat memory overhead p50 {o:.1f} ms (goal ≤ {GOAL_OVERHEAD_P50_MS}: "
        f"{'met' if o <= GOAL_OVERHEAD_P50_MS else 'missed'}), {MANY}-memory search p95 {s:.1f} ms "
        f"(goal ≤ {GOAL_SEARCH_P95_MS}: {'met' if s <= GOAL_SEARCH_P95_MS else 'missed'})"
    )


if __name__ == "__main__":
    app()
