"""No user slows another: a victim user keeps searching and chatting while another caller
does the heaviest work the API accepts, one operation at a time, then four such callers at
once.

    python -m benchmarks.lanes                          # starts and stops its own service
    python -m benchmarks.lanes --quick                  # a smoke run (small sizes)
    python -m benchmarks.lanes --ops batch,import --json lanes.json
    python -m benchmarks.lanes --victim-writes          # the victim also writes a note a second

The service is the root ``serve_config.yaml`` started by ``benchmarks.hostile.started_service``
(Milvus Lite, one store shard, query embedding in the shard, the echo upstream) in a
temporary directory on a free port, with one change: ``global.access.write_rate_limit`` is
off, so that the seeding of the large users (thousands of memories) does not wait out the
per-user write limit (every heavy operation here is one request of its own user, within the
per-request bounds ``global.limits``, which stay as shipped).

The victim holds ``--victim-memories`` LoCoMo turns (conversation 3) and runs
``benchmarks.hostile.Victim``'s two loops (``POST /v1/memory/search`` and a chat question)
for the whole run. First an idle window gives the idle p50/p95. Then each heavy operation,
``--repeat`` times in a row (each from a fresh user), each as large as the API accepts:

- ``batch``: one ``POST /v1/memory`` of ``memories_per_request`` (256) memories filling the
  1 MiB body bound (~3.9 KB each, distinct texts);
- ``import``: one ``POST /v1/memory/import`` of ``import_lines`` (100) lines of 16,000 bytes
  each (1.6 MB: within the 2 MiB bound);
- ``consolidate``: ``POST /v1/memory/consolidate?user_id=`` (admin) for a user seeded with
  ``--large-memories`` memories (LoCoMo turns, each also as a near-duplicate: consolidation
  has groups to merge; ``curation.consolidation.max_memories`` is 2,000);
- ``admin``: ``GET /v1/admin/stats`` and every page of ``GET /v1/admin/users`` (500 each),
  again and again for ``ADMIN_WINDOW_S`` (an operator's dashboard refreshing as fast as it is
  answered), over ``--admin-users`` more users (one memory each, seeded first);
- ``locomo``: a LoCoMo replay (conversation 1 through ``POST /v1/memory`` batches of 32,
  ``memory_core.locomo.ingest_rest``);
- ``all4``: batch, import, consolidate (another large user) and admin at once.

Per operation: the victim's n / p50 / p95 / max over the requests that overlapped the
operation, p95 ÷ idle p95 (the goal: ≤ 2×), the operation's own seconds and statuses. After
each operation the script waits (``Victim.settle``, ≤ 60 s) until the victim is back to
normal, so one operation's tail does not count against the next. The machine is shared and
noisy: compare the ratios of one run, not absolute figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console

from benchmarks import cpu_by_process
from benchmarks.hostile import ADMIN, VICTIM_TIMEOUT_S, Victim, Window, started_service, user_headers
from memory_core import locomo
from memory_core.config import LimitsSettings

app = typer.Typer(add_completion=False)
console = Console(width=160)
LIMITS = LimitsSettings()
OP_TIMEOUT_S = 600.0
"""Bound of each heavy request (a longer one counts as ``timeout``)."""
GOAL = 2.0
"""The goal: the victim's p95 during an operation ≤ GOAL × its idle p95."""
CPU_TOP = 6
"""How many of the busiest processes each operation's row names (``cpu_by_process``)."""
ADMIN_WINDOW_S = 10.0
"""How long the ``admin`` operation keeps reading the admin views, back to back."""


def _filler(seed: str, size: int) -> str:
    """A distinct text of ``size`` characters (ASCII words), starting with ``seed``."""
    words = f"{seed} " + " ".join(f"w{(zlib.crc32(seed.encode()) + i) % 9973}x{i}" for i in range(size // 6 + 2))
    return words[:size]


def batch_body(tag: str, n: int = LIMITS.memories_per_request, body_bytes: int = LIMITS.memories_body_bytes) -> dict:
    """A ``POST /v1/memory`` body of ``n`` distinct memories filling ~95 % of ``body_bytes``."""
    size = min(16_000, int(body_bytes * 0.95) // n - 40)
    return {"memories": [{"content": _filler(f"{tag} note {i}:", size)} for i in range(n)]}


def import_body(tag: str, n: int = LIMITS.import_lines, body_bytes: int = LIMITS.import_body_bytes) -> bytes:
    """``n`` import lines of distinct contents, ≤ 16,000 bytes each, within ``body_bytes``."""
    size = min(16_000, int(body_bytes * 0.95) // n - 60)
    lines = [json.dumps({"content": _filler(f"{tag} imported {i}:", size)}) for i in range(n)]
    return ("\n".join(lines) + "\n").encode()


def large_user_batches(samples: list[dict], memories: int) -> list[dict]:
    """``POST /v1/memory`` bodies (≤ 256 each) of ``memories`` LoCoMo turns: each turn and a
    near-duplicate of it (episodic: both are kept at write time; consolidation merges them)."""
    items: list[dict] = []
    for sample in samples:
        for turn in locomo.turns(sample):
            body = locomo.memory_body(turn)
            items.append(body)
            items.append({**body, "content": body["content"] + " (I said that again.)"})
    items = items[:memories]
    step = LIMITS.memories_per_request
    return [{"memories": items[i : i + step]} for i in range(0, len(items), step)]


@contextlib.asynccontextmanager
async def victim_and_operation_clients(url: str) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two clients of the service at ``url``: the victim's (``VICTIM_TIMEOUT_S``) and the heavy
    operations' (``OP_TIMEOUT_S``), 64 connections each."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
    async with (
        httpx.AsyncClient(base_url=url, timeout=VICTIM_TIMEOUT_S, limits=limits) as vc,
        httpx.AsyncClient(base_url=url, timeout=OP_TIMEOUT_S, limits=limits) as oc,
    ):
        yield vc, oc


async def seed_victim(client: httpx.AsyncClient, user: str, samples: list[dict], memories: int) -> None:
    """Write ``memories`` LoCoMo turns (conversation 3) for the victim ``user``, in batches
    of ``memories_per_request``; raises ``httpx.HTTPStatusError`` on a refused batch."""
    items = [locomo.memory_body(t) for t in locomo.turns(samples[2])][:memories]
    for i in range(0, len(items), LIMITS.memories_per_request):
        body = {"memories": items[i : i + LIMITS.memories_per_request]}
        (await client.post("/v1/memory", json=body, headers=user_headers(user))).raise_for_status()


async def idle_window(victim: Victim, seconds: float) -> tuple[Window, float]:
    """The started ``victim``'s figures over ``seconds`` of nothing else (after a 3 s
    warm-up), printed, and the ms threshold ``Victim.settle`` waits for after an operation."""
    await asyncio.sleep(3)  # warm-up
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    idle = victim.window(t0, time.monotonic())
    console.print(f"victim idle: {idle.as_dict()}")
    return idle, max(3 * idle.p95, idle.p95 + 200)


class Ops:
    """The heavy operations against ``client``; each returns a Counter of statuses."""

    def __init__(self, client: httpx.AsyncClient, run: str, samples: list[dict]):
        self.client = client
        self.run = run
        self.samples = samples
        self.large_users: list[str] = []
        self._n = 0

    def user(self, kind: str) -> str:
        self._n += 1
        return f"lanes-{self.run}-{kind}-{self._n}"

    async def _send(self, statuses: Counter, method: str, path: str, **kw: Any) -> httpx.Response | None:
        try:
            r = await self.client.request(method, path, timeout=OP_TIMEOUT_S, **kw)
        except httpx.HTTPError as e:
            statuses[type(e).__name__] += 1
            return None
        statuses[r.status_code] += 1
        return r

    def calls(self) -> dict[str, Callable[[], Awaitable[Counter]]]:
        """Each operation of ``OPS`` by name."""
        return {
            "batch": self.batch, "import": self.import_, "consolidate": self.consolidate,
            "admin": self.admin, "locomo": self.locomo, "all4": self.all4,
        }  # fmt: skip

    async def seed_large(self, memories: int) -> str:
        """A user holding ``memories`` memories (seeded outside any measured window)."""
        user = self.user("large")
        for body in large_user_batches(self.samples[3:], memories):
            r = await self.client.post("/v1/memory", json=body, headers=user_headers(user), timeout=OP_TIMEOUT_S)
            r.raise_for_status()
        self.large_users.append(user)
        return user

    async def batch(self) -> Counter:
        c: Counter = Counter()
        u = self.user("batch")
        await self._send(c, "POST", "/v1/memory", json=batch_body(u), headers=user_headers(u))
        return c

    async def import_(self) -> Counter:
        c: Counter = Counter()
        u = self.user("import")
        headers = user_headers(u, **{"content-type": "application/x-ndjson"})
        await self._send(c, "POST", "/v1/memory/import", content=import_body(u), headers=headers)
        return c

    async def consolidate(self) -> Counter:
        c: Counter = Counter()
        user = self.large_users.pop(0)
        headers = {**ADMIN, "content-type": "application/json"}
        await self._send(c, "POST", "/v1/memory/consolidate", params={"user_id": user}, headers=headers)
        return c

    async def seed_admin_users(self, users: int) -> None:
        """``users`` more users holding one memory each (the admin views' pages), 8 at once."""
        gate = asyncio.Semaphore(8)

        async def one(i: int) -> None:
            u = self.user("seen")
            body = {"memories": [{"content": f"I keep note number {i} in the blue folder."}]}
            async with gate:
                r = await self.client.post("/v1/memory", json=body, headers=user_headers(u), timeout=OP_TIMEOUT_S)
            r.raise_for_status()

        await asyncio.gather(*(one(i) for i in range(users)))

    async def admin(self) -> Counter:
        c: Counter = Counter()
        ends = time.monotonic() + ADMIN_WINDOW_S
        while True:
            await self._send(c, "GET", "/v1/admin/stats", headers=ADMIN)
            offset, total = 0, 1
            while offset < total:
                params = {"limit": 500, "offset": offset}
                r = await self._send(c, "GET", "/v1/admin/users", params=params, headers=ADMIN)
                if r is None or r.status_code != 200:
                    break
                total = r.json()["total"]
                offset += 500
            if time.monotonic() >= ends:
                return c

    async def locomo(self) -> Counter:
        c: Counter = Counter()
        u = self.user("locomo")
        try:
            await locomo.ingest_rest(self.client, self.samples[0], headers=user_headers(u), batch=32)
            c[201] += 1
        except httpx.HTTPStatusError as e:
            c[e.response.status_code] += 1
        except httpx.HTTPError as e:
            c[type(e).__name__] += 1
        return c

    async def all4(self) -> Counter:
        parts = await asyncio.gather(self.batch(), self.import_(), self.consolidate(), self.admin())
        return sum(parts, Counter())


OPS = ["batch", "import", "consolidate", "admin", "locomo", "all4"]


async def run_bench(
    url: str,
    ops: list[str],
    repeat: int,
    victim_memories: int,
    large: int,
    idle_s: float,
    admin_users: int = 500,
    victim_writes: bool = False,
) -> dict:
    """Seed, measure the victim idle, run ``ops`` one at a time; the run's figures
    (``victim_writes``: the victim also writes a note a second, timed apart)."""
    run = uuid.uuid4().hex[:8]
    samples = locomo.load_samples()
    async with victim_and_operation_clients(url) as (vc, oc):
        victim_user = f"lanes-{run}-victim"
        await seed_victim(vc, victim_user, samples, victim_memories)
        held = (await vc.get("/v1/memory", headers=user_headers(victim_user))).json()["total"]
        o = Ops(oc, run, samples)
        consolidations = repeat * ops.count("consolidate") + ops.count("all4")
        t = time.monotonic()
        for _ in range(consolidations):
            await o.seed_large(large)
        seen = admin_users if {"admin", "all4"} & set(ops) else 0
        await o.seed_admin_users(seen)
        console.print(
            f"seeded victim ({held}), {consolidations} large users and {seen} more users in {time.monotonic() - t:.0f} s"
        )
        victim = Victim(vc, victim_user, writes=victim_writes)
        victim.start()
        rows = []
        try:
            idle, threshold = await idle_window(victim, idle_s)
            calls = o.calls()
            for op in ops:
                statuses: Counter = Counter()
                seconds = []
                cpu_before = cpu_by_process.snapshot()
                started = time.monotonic()
                for _ in range(1 if op == "all4" else repeat):
                    t = time.monotonic()
                    statuses += await calls[op]()
                    seconds.append(time.monotonic() - t)
                ended = time.monotonic()
                cpu = cpu_by_process.cpu_since(cpu_before)
                window = victim.window(started, ended)
                settled = await victim.settle(ended, threshold, 60.0)
                row = {
                    "op": op,
                    "op_seconds": [round(s, 2) for s in seconds],
                    "op_statuses": {str(k): n for k, n in sorted(statuses.items(), key=str)},
                    "victim": window.as_dict(),
                    "p95_over_idle_p95": round(window.p95 / idle.p95, 2) if idle.p95 else 0.0,
                    "write_p95_over_idle": round(window.write_p95 / idle.write_p95, 2) if idle.write_p95 else 0.0,
                    "settle_s": None if settled is None else round(settled, 1),
                    "cpu_cores": {
                        name: round(sec / (ended - started), 2)
                        for name, sec in sorted(cpu.items(), key=lambda kv: -kv[1])[:CPU_TOP]
                    },
                }
                console.print(row)
                rows.append(row)
        finally:
            await victim.stop()
    return {
        "run": run,
        "victim_memories": held,
        "idle": idle.as_dict(),
        "repeat": repeat,
        "rows": rows,
        "victim_writes": victim_writes,
    }


def _ms(value: float) -> str:
    """A p95 in ms for the table; "–" for 0 (no answer carried ``server-timing``)."""
    return f"{value:.0f}" if value > 0 else "–"


def markdown(report: dict) -> str:
    """The run as a markdown table, with the idle figures in its header line."""
    idle = report["idle"]
    writes = bool(report.get("victim_writes"))
    lines = [
        f"victim: {report['victim_memories']} memories, searching and chatting; idle n={idle['n']} "
        f"p50 {idle['p50_ms']:.0f} ms, p95 {idle['p95_ms']:.0f} ms, max {idle['max_ms']:.0f} ms; "
        f"each operation ×{report['repeat']} (all4 once); goal p95 ≤ {GOAL:.0f}× idle p95; "
        f"the Consolidator's background loop {report.get('consolidation_loop', 'on')}",
        "",
        f"(idle: search p95 {idle['search_p95_ms']:.0f}, chat p95 {idle['chat_p95_ms']:.0f}, server-timing p95 "
        f"{_ms(idle['server_p95_ms'])}, the client's own loop lag p95 {idle['client_lag_p95_ms']:.0f} ms)",
        "",
        "| operation | op seconds | op statuses | victim n | p50 ms | p95 ms | max ms | p95 / idle p95 | goal "
        "| search p95 | chat p95 | server-timing p95 | client loop lag p95 |"
        + (" writes n | write p95 | ÷ idle |" if writes else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if writes else ""),
    ]
    if writes:
        lines.insert(2, f"(the victim also writes a note a second: idle write p95 {idle['write_p95_ms']:.0f} ms, "
                        f"n={idle['write_n']}; not in the search/chat figures)")  # fmt: skip
        lines.insert(3, "")
    for r in report["rows"]:
        v = r["victim"]
        statuses = ", ".join(f"{k}×{n}" for k, n in r["op_statuses"].items())
        seconds = ", ".join(f"{s:.1f}" for s in r["op_seconds"])
        ok = "ok" if r["p95_over_idle_p95"] <= GOAL and v["victim_5xx"] == 0 else "MISSED"
        lines.append(
            f"| {r['op']} | {seconds} | {statuses} | {v['n']} | {v['p50_ms']:.0f} | {v['p95_ms']:.0f} "
            f"| {v['max_ms']:.0f} | {r['p95_over_idle_p95']:.2f}× | {ok} | {v['search_p95_ms']:.0f} "
            f"| {v['chat_p95_ms']:.0f} | {_ms(v['server_p95_ms'])} | {v['client_lag_p95_ms']:.0f} |"
            + (f" {v['write_n']} | {v['write_p95_ms']:.0f} | {r['write_p95_over_idle']:.2f}× |" if writes else "")
        )
    lines += [
        "",
        "CPU during each operation (cores, the busiest processes; the benchmark client is `benchmarks.lanes`):",
        "",
    ]
    for r in report["rows"]:
        busiest = ", ".join(f"{name} {cores:.2f}" for name, cores in r.get("cpu_cores", {}).items())
        lines.append(f"- {r['op']}: {busiest}")
    return "\n".join(lines)


def _no_write_limit(config: dict) -> None:
    args = config["applications"][0]["args"]["config"]["global"]
    args.setdefault("access", {})["write_rate_limit"] = {"limit": 0, "window_s": 60}


def _no_consolidation_loop(config: dict) -> None:
    """``_no_write_limit``, and the Consolidator's background loop off (``enabled: false``)."""
    _no_write_limit(config)
    for deployment in config["applications"][0]["deployments"]:
        if deployment["name"] == "Consolidator":
            deployment.setdefault("user_config", {})["enabled"] = False


@app.command()
def main(
    base_url: str | None = typer.Option(None, help="a running service without write limit (default: start one)"),
    ops: str = typer.Option(",".join(OPS), help=f"operations, comma-separated: {', '.join(OPS)}"),
    quick: bool = typer.Option(False, help="a smoke run: 1 repeat, 300-memory users, 5 s idle"),
    repeat: int | None = typer.Option(None, min=1, help="runs of each operation (2; quick 1)"),
    victim_memories: int = typer.Option(600, min=1),
    large_memories: int | None = typer.Option(None, min=2, help="memories of a consolidated user (2000)"),
    admin_users: int = typer.Option(500, min=0, help="more users, one memory each, for the admin views"),
    idle_seconds: float | None = typer.Option(None, min=1, help="the idle window (20; quick 5)"),
    consolidation_loop: bool = typer.Option(
        True, help="the Consolidator's background loop on, as shipped (off: only the measured operations consolidate)"
    ),
    victim_writes: bool = typer.Option(
        False, "--victim-writes", help="the victim also writes a note a second (POST /v1/memory), timed apart"
    ),
    json_path: Path | None = typer.Option(None, "--json", help="also write the figures as JSON here"),
    markdown_path: Path | None = typer.Option(None, "--markdown", help="also write the table here"),
) -> None:
    """Run the operations and print the table."""
    chosen = [x.strip() for x in ops.split(",") if x.strip()]
    if unknown := set(chosen) - set(OPS):
        raise typer.BadParameter(f"unknown operations {sorted(unknown)}; known: {OPS}")
    n = repeat or (1 if quick else 2)
    large = large_memories or (300 if quick else 2000)
    idle_s = idle_seconds or (5.0 if quick else 20.0)
    if base_url is not None and not consolidation_loop:
        raise typer.BadParameter("--no-consolidation-loop configures the service this script starts, not --base-url")
    if base_url is not None:
        report = asyncio.run(
            run_bench(base_url.rstrip("/"), chosen, n, victim_memories, large, idle_s, admin_users, victim_writes)
        )
    else:
        with started_service(_no_write_limit if consolidation_loop else _no_consolidation_loop) as url:
            report = asyncio.run(run_bench(url, chosen, n, victim_memories, large, idle_s, admin_users, victim_writes))
    report["consolidation_loop"] = "on" if consolidation_loop else "off"
    table = markdown(report)
    print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))
    if markdown_path is not None:
        markdown_path.write_text(table + "\n")


if __name__ == "__main__":
    app()
