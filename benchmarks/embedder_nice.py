"""The Embedder's CPU priority (``user_config.nice``) against a victim user, A/B on one service.

    python -m benchmarks.embedder_nice                        # batch, import, all4; 2 rounds
    python -m benchmarks.embedder_nice --ops import --rounds 3 --levels 15,19

One service (the root ``serve_config.yaml`` through ``benchmarks.hostile.started_service``,
the per-user write limit off as in ``benchmarks.lanes``), one victim (600 LoCoMo memories,
searching and chatting: ``benchmarks.hostile.Victim``). Each heavy operation of
``benchmarks.lanes`` runs once at each level per round, the order alternating between rounds;
before each run every thread of the Embedder replica is set to that level from outside
(``setpriority``: lowering a level back needs root or ``CAP_SYS_NICE``, so the script refuses
to start without it). Levels are absolute: Ray starts its workers at nice 15, so 15 is what a
replica gets without ``user_config.nice`` and 19 what it gets with ``nice: 19``.

Prints each run (the victim's window over the operation, as ``benchmarks.lanes``) and, per
operation and level, the victim's requests of all rounds pooled: n, p50, p95 and p95 ÷ idle
p95 (the lanes goal: ≤ 2×). Alternating on one service cancels the drift of a shared machine
that separate runs of ``benchmarks.lanes`` mix into the comparison.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid

import typer
from rich.console import Console

from benchmarks.hostile import Victim, started_service
from benchmarks.lanes import GOAL, Ops, _no_write_limit, seed_victim, victim_and_operation_clients
from memory_core import locomo

app = typer.Typer(add_completion=False)
console = Console(width=160)
OPS = ["batch", "import", "consolidate", "admin", "locomo", "all4"]


def embedder_pid() -> int:
    """The pid of the (one) Embedder replica's process on this machine."""
    out = subprocess.check_output(["pgrep", "-f", "ServeReplica:memory-router:Embedder"], text=True)
    return int(out.split()[0])


def set_level(pid: int, level: int) -> None:
    """Every thread of process ``pid`` at nice ``level`` (raises ``PermissionError`` when
    lowering a level is not allowed here)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), level)
        except ProcessLookupError:
            continue


async def run_ab(url: str, ops: list[str], rounds: int, levels: list[int], victim_memories: int) -> None:
    run = uuid.uuid4().hex[:8]
    samples = locomo.load_samples()
    async with victim_and_operation_clients(url) as (vc, oc):
        victim_user = f"nice-{run}-victim"
        await seed_victim(vc, victim_user, samples, victim_memories)
        o = Ops(oc, run, samples)
        for _ in range(rounds * len(levels) * (ops.count("consolidate") + ops.count("all4"))):
            await o.seed_large(500)
        pid = embedder_pid()
        victim = Victim(vc, victim_user)
        victim.start()
        spans: dict[tuple[str, int], list[tuple[float, float]]] = {}
        try:
            await asyncio.sleep(3)
            t0 = time.monotonic()
            await asyncio.sleep(15)
            idle = victim.window(t0, time.monotonic())
            console.print(f"victim idle: {idle.as_dict()}")
            threshold = max(3 * idle.p95, idle.p95 + 200)
            calls = {"batch": o.batch, "import": o.import_, "consolidate": o.consolidate,
                     "admin": o.admin, "locomo": o.locomo, "all4": o.all4}  # fmt: skip
            for r in range(rounds):
                for op in ops:
                    for level in levels if r % 2 == 0 else levels[::-1]:
                        set_level(pid, level)
                        await asyncio.sleep(1)
                        started = time.monotonic()
                        statuses = await calls[op]()
                        ended = time.monotonic()
                        window = victim.window(started, ended)
                        await victim.settle(ended, threshold, 60.0)
                        spans.setdefault((op, level), []).append((started, ended))
                        console.print(
                            f"round {r + 1} {op} nice {level}: {ended - started:.1f} s {dict(statuses)} "
                            f"victim {window.as_dict()} ratio {window.p95 / idle.p95:.2f}"
                        )
        finally:
            await victim.stop()
    console.print(f"\npooled over {rounds} rounds (idle p95 {idle.p95:.0f} ms; goal ≤ {GOAL:.0f}×)")
    for (op, level), windows in sorted(spans.items()):
        ms = sorted(s.ms for s in victim.samples if any(s.started <= e and s.ended >= b for b, e in windows))
        p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
        console.print(
            f"{op:12s} nice {level:2d}: n={len(ms)} p50 {ms[len(ms) // 2]:.0f} ms p95 {p95:.0f} ms "
            f"ratio {p95 / idle.p95:.2f}"
        )


@app.command()
def main(
    ops: str = typer.Option("batch,import,all4", help=f"operations, comma-separated: {', '.join(OPS)}"),
    rounds: int = typer.Option(2, min=1, help="runs of each operation at each level"),
    levels: str = typer.Option("15,19", help="nice levels to alternate (absolute, 0–19)"),
    victim_memories: int = typer.Option(600, min=1),
) -> None:
    """Alternate the Embedder's nice levels under each operation; print each run and the pooled figures."""
    chosen = [x.strip() for x in ops.split(",") if x.strip()]
    if unknown := set(chosen) - set(OPS):
        raise typer.BadParameter(f"unknown operations {sorted(unknown)}; known: {OPS}")
    picked = [int(x) for x in levels.split(",")]
    if any(not 0 <= x <= 19 for x in picked) or len(set(picked)) < 2:
        raise typer.BadParameter("two or more distinct nice levels within 0..19")
    if os.geteuid() != 0:
        raise typer.BadParameter("setting a process back to a higher priority needs root (or CAP_SYS_NICE)")
    with started_service(_no_write_limit) as url:
        asyncio.run(run_ab(url, chosen, rounds, picked, victim_memories))


if __name__ == "__main__":
    app()
