"""HAProxy processes a Ray instance left behind (tests and benchmarks that start and stop
services one after another on one machine).

In Ray Serve's throughput mode (``serve.env``, README "Serving mode") each proxy node runs an
``HAProxyManager`` actor that starts ``haproxy`` as its child and stops it on a Serve shutdown.
When the Ray instance goes without one (its processes killed, a test session's interpreter
exiting), the ``haproxy`` outlives its actor, reparented, and keeps its listeners: the HTTP
port and the fixed stats (8404) and metrics (9101) ports, so the next service's HAProxy on
this machine cannot bind them and that service never answers. ``stop_orphaned_haproxies``
finds such processes (a ``haproxy`` whose parent is not an ``HAProxyManager``) and stops them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_MANAGER = b"ray::HAProxyManager"


def _read(pid: int, name: str) -> bytes | None:
    try:
        return (Path("/proc") / str(pid) / name).read_bytes()
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    stat = _read(pid, "stat")
    if not stat:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[1]) if len(fields) > 1 else None


def orphaned_haproxies() -> list[int]:
    """Pids of this user's ``haproxy`` processes whose parent is not a live ``HAProxyManager``
    actor (Linux ``/proc``; empty elsewhere)."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    uid = os.getuid()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        cmdline = _read(pid, "cmdline")
        if not cmdline or os.path.basename(cmdline.split(b"\0", 1)[0]) != b"haproxy":
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        parent = _parent(pid)
        parent_cmdline = _read(parent, "cmdline") if parent else None
        if not parent_cmdline or not parent_cmdline.startswith(_MANAGER):
            found.append(pid)
    return sorted(found)


def stop_orphaned_haproxies(timeout_s: float = 5.0) -> list[int]:
    """SIGTERM each of ``orphaned_haproxies()``, SIGKILL those still alive after
    ``timeout_s`` seconds. Returns the pids signalled."""
    pids = orphaned_haproxies()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _read(p, "cmdline")]  # a reaped or exited process has none
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids
