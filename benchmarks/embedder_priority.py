"""The Embedder's CPU priority (``user_config.cpu_priority``) against a victim user, A/B on one service.

    python -m benchmarks.embedder_priority                        # batch, import, all4; 2 rounds
    python -m benchmarks.embedder_priority --ops import --rounds 3 --priorities normal,idle

One service (the root ``serve_config.yaml`` through ``benchmarks.hostile.started_service``,
the per-user write limit off as in ``benchmarks.lanes``), one victim (600 LoCoMo memories,
searching and chatting: ``benchmarks.hostile.Victim``). Each heavy operation of
``benchmarks.lanes`` runs once at each priority per round, the order reversed every other
round; before each run every thread of the Embedder replica is set to that priority from
outside: ``normal`` = nice 15 (what Ray gives a worker), ``low`` = nice 19, ``idle`` =
``SCHED_IDLE`` (``memory_core.cpu_pool.CPU_PRIORITIES``). Raising a priority back needs root
or ``CAP_SYS_NICE``, so the script refuses to start without it (``can_raise_priority``).

Prints each run (the victim's window over the operation, as ``benchmarks.lanes``) and, per
operation and priority, the victim's requests of all rounds pooled: n, p50, p95 and p95 ÷
idle p95 (the lanes goal: ≤ 2×), and the operation's seconds. Alternating on one service
cancels the drift of a shared machine that separate runs of ``benchmarks.lanes`` mix into
the comparison.
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
from benchmarks.lanes import GOAL, OPS, Ops, _no_write_limit, idle_window, seed_victim, victim_and_operation_clients
from memory_core import locomo
from memory_core.cpu_pool import CPU_PRIORITIES, NICE_MAX

app = typer.Typer(add_completion=False)
RAY_WORKER_NICE = 15
"""The nice level Ray starts its workers at: ``normal`` here."""
console = Console(width=160)


def embedder_pid() -> int:
    """The pid of the (one) Embedder replica's process on this machine."""
    out = subprocess.check_output(["pgrep", "-f", "ServeReplica:memory-router:Embedder"], text=True)
    return int(out.split()[0])


def set_priority(pid: int, priority: str) -> None:
    """Every thread of process ``pid`` at ``priority`` (``normal``: nice 15, ``low``: nice 19,
    ``idle``: ``SCHED_IDLE``); raises ``PermissionError`` where raising it is not allowed."""
    for tid in map(int, os.listdir(f"/proc/{pid}/task")):
        try:
            if priority == "idle":
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            else:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, tid, NICE_MAX if priority == "low" else RAY_WORKER_NICE)
        except ProcessLookupError:
            continue


def can_raise_priority() -> bool:
    """Whether this process may raise another's CPU priority (root or ``CAP_SYS_NICE``): tried
    on a child started at nice 19."""
    child = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: os.nice(19))
    try:
        os.setpriority(os.PRIO_PROCESS, child.pid, 15)
        return True
    except PermissionError:
        return False
    finally:
        child.kill()
        child.wait()


async def run_ab(url: str, ops: list[str], rounds: int, levels: list[str], victim_memories: int) -> None:
    run = uuid.uuid4().hex[:8]
    samples = locomo.load_samples()
    async with victim_and_operation_clients(url) as (vc, oc):
        victim_user = f"priority-{run}-victim"
        await seed_victim(vc, victim_user, samples, victim_memories)
        o = Ops(oc, run, samples)
        for _ in range(rounds * len(levels) * (ops.count("consolidate") + ops.count("all4"))):
            await o.seed_large(500)
        pid = embedder_pid()
        victim = Victim(vc, victim_user)
        victim.start()
        spans: dict[tuple[str, str], list[tuple[float, float]]] = {}
        seconds: dict[tuple[str, str], list[float]] = {}
        try:
            idle, threshold = await idle_window(victim, 15)
            calls = o.calls()
            for r in range(rounds):
                for op in ops:
                    for level in levels if r % 2 == 0 else levels[::-1]:
                        set_priority(pid, level)
                        await asyncio.sleep(1)
                        started = time.monotonic()
                        statuses = await calls[op]()
                        ended = time.monotonic()
                        window = victim.window(started, ended)
                        await victim.settle(ended, threshold, 60.0)
                        spans.setdefault((op, level), []).append((started, ended))
                        seconds.setdefault((op, level), []).append(round(ended - started, 1))
                        console.print(
                            f"round {r + 1} {op} {level}: {ended - started:.1f} s {dict(statuses)} "
                            f"victim {window.as_dict()} ratio {window.p95 / idle.p95:.2f}"
                        )
        finally:
            await victim.stop()
    console.print(f"\npooled over {rounds} rounds (idle p95 {idle.p95:.0f} ms; goal ≤ {GOAL:.0f}×)")
    for (op, level), windows in sorted(spans.items()):
        ms = sorted(s.ms for s in victim.samples if any(s.started <= e and s.ended >= b for b, e in windows))
        p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
        console.print(
            f"{op:12s} {level:6s}: n={len(ms)} p50 {ms[len(ms) // 2]:.0f} ms p95 {p95:.0f} ms "
            f"ratio {p95 / idle.p95:.2f}; the operation {seconds[(op, level)]} s"
        )


@app.command()
def main(
    ops: str = typer.Option("batch,import,all4", help=f"operations, comma-separated: {', '.join(OPS)}"),
    rounds: int = typer.Option(2, min=1, help="runs of each operation at each level"),
    priorities: str = typer.Option("normal,idle", help=f"priorities to alternate: {', '.join(CPU_PRIORITIES)}"),
    victim_memories: int = typer.Option(600, min=1),
) -> None:
    """Alternate the Embedder's CPU priorities under each operation; print each run and the pooled figures."""
    chosen = [x.strip() for x in ops.split(",") if x.strip()]
    if unknown := set(chosen) - set(OPS):
        raise typer.BadParameter(f"unknown operations {sorted(unknown)}; known: {OPS}")
    picked = [x.strip() for x in priorities.split(",") if x.strip()]
    if set(picked) - set(CPU_PRIORITIES) or len(set(picked)) < 2:
        raise typer.BadParameter(f"two or more distinct priorities of {', '.join(CPU_PRIORITIES)}")
    if not can_raise_priority():
        raise typer.BadParameter("setting a process back to a higher priority needs root (or CAP_SYS_NICE)")
    with started_service(_no_write_limit) as url:
        asyncio.run(run_ab(url, chosen, rounds, picked, victim_memories))


if __name__ == "__main__":
    app()
