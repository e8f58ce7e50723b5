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
A process is one pid with one start time (a pid the kernel reuses is another process), so a
Ray worker renamed during the run (``ray::IDLE`` becoming a replica) counts only what it spent
during the run, under the name it has at the end; processes started during the run count from
zero; processes gone before its end are not seen (their CPU is missing from the total). Only
this user's processes are read, each with all its threads. Raises ``OSError`` where there is no
``/proc`` (macOS).
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


Process = tuple[int, int]
"""A process: (pid, start time in clock ticks after boot, ``/proc/<pid>/stat`` field 22)."""


def snapshot() -> dict[Process, tuple[str, float]]:
    """``{(pid, start time): (name, CPU seconds so far: user + system)}`` of this user's
    processes."""
    uid = os.getuid()
    seen: dict[Process, tuple[str, float]] = {}
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
        fields = stat[stat.rfind(b")") + 2 :].split()  # from field 3 on: the command may hold spaces
        key = (int(entry.name), int(fields[19]))  # field 22: start time
        seen[key] = (process_name(argv), (int(fields[11]) + int(fields[12])) * _TICK_S)  # fields 14, 15
    return seen


def cpu_between(before: dict[Process, tuple[str, float]], after: dict[Process, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each process name used from snapshot ``before`` to snapshot ``after``,
    largest first; a process is named by its name in ``after``, and one absent from ``before``
    (started since, or its pid reused) counts from zero."""
    spent: dict[str, float] = {}
    for key, (name, seconds) in after.items():
        start = before.get(key)
        used = seconds - (start[1] if start is not None else 0.0)
        if used > 0:
            spent[name] = spent.get(name, 0.0) + used
    return dict(sorted(spent.items(), key=lambda kv: -kv[1]))


def cpu_since(before: dict[Process, tuple[str, float]]) -> dict[str, float]:
    """``cpu_between(before, snapshot())``."""
    return cpu_between(before, snapshot())
