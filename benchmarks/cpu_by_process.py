"""CPU time by process over a benchmark run, read from Linux's ``/proc`` (no profiler): where
a chat turn's CPU goes on a machine that runs the whole service (Ray's workers, HAProxy, the
GCS and raylet, the benchmark client itself).

    before = snapshot()
    ...  # the run
    spent = cpu_since(before)  # {process name: CPU seconds}

A process is named by its title: Ray sets a worker's to ``ray::<Class>.<method now running>``,
so ``ray::StoreShard.retrieve`` and ``ray::StoreShard.write`` count as ``ray::StoreShard``,
and a Serve replica as ``ray::ServeReplica:<application>:<deployment>``; any other process by
its program (``haproxy``, ``raylet``, ``gcs_server``) or, for Python, by its script or module.
Processes started during the run count from zero; processes gone before its end are not seen
(their CPU is missing from the total). Only this user's processes are read. Raises
``OSError`` where there is no ``/proc`` (macOS).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def process_name(argv: list[str]) -> str:
    """A stable name for a process from its ``argv`` (``/proc/<pid>/cmdline`` split at NUL)."""
    if not argv or not argv[0]:
        return "?"
    first = argv[0].strip()
    if first.startswith("ray::"):
        head, _, _ = first.partition(" ")
        return head.split(".", 1)[0]  # the method now running is not part of the name
    program = os.path.basename(first.split(" ", 1)[0])
    if program.startswith("python") and len(argv) > 1:
        if argv[1] == "-c":
            return "python -c"
        rest = [a for a in argv[1:] if not a.startswith("-") or a == "-m"]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"python -m {rest[1]}"
        if rest:
            return f"python {os.path.basename(rest[0])}"
    return program


def snapshot() -> dict[int, tuple[str, float]]:
    """``{pid: (name, CPU seconds so far: user + system)}`` of this user's processes."""
    uid = os.getuid()
    seen: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            stat = (entry / "stat").read_bytes()
            argv = (entry / "cmdline").read_bytes().rstrip(b"\0").decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after the command, which may hold spaces
        seen[int(entry.name)] = (process_name(argv), (int(fields[11]) + int(fields[12])) * _TICK_S)
    return seen


def cpu_since(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each process name used since ``before`` (``snapshot()``), largest first."""
    spent: dict[str, float] = {}
    for pid, (name, seconds) in snapshot().items():
        start = before.get(pid)
        used = seconds - (start[1] if start and start[0] == name else 0.0)
        if used > 0:
            spent[name] = spent.get(name, 0.0) + used
    return dict(sorted(spent.items(), key=lambda kv: -kv[1]))
