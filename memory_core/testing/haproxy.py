"""HAProxy processes a Ray instance left behind (tests and benchmarks that start and stop
services one after another on one machine).

In Ray Serve's throughput mode (``serve.env``, README "Serving mode") each proxy node runs an
``HAProxyManager`` actor that starts ``haproxy`` as its child and stops it on a Serve shutdown.
When the Ray instance goes without one (its processes killed, a test session's interpreter
exiting), the ``haproxy`` outlives its actor, reparented, and keeps its listeners: the HTTP
port and the fixed stats (8404) and metrics (9101) ports, so the next service's HAProxy on
this machine cannot bind them and that service never answers. ``stop_orphaned_haproxies``
finds such processes (a ``haproxy`` run on a configuration under Ray's HAProxy directory whose
parent is not an ``HAProxyManager``) and stops them; any other ``haproxy`` (an operator's own
gateway) is never touched.

Those fixed ports are why the project's tools start every Ray instance with
``set_local_service_defaults`` (``assign_free_ports``, and a short drain of a stopping
ingress replica): two services on one machine (a benchmark's pair, ``make test`` beside a
``make run``) then never contend for them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import MutableMapping
from pathlib import Path

from .net import free_port

_MANAGER = b"ray::HAProxyManager"

RAY_HAPROXY_DIR = "/tmp/haproxy-serve"
"""Where Ray writes each node's HAProxy configuration (``RAY_SERVE_HAPROXY_CONFIG_FILE_LOC``'s
directory, Ray 2.60's default): ``<dir>/<node>/haproxy.cfg``."""

FIXED_PORT_VARIABLES = (
    "RAY_SERVE_HAPROXY_STATS_PORT",  # HAProxy's stats page, 8404, all interfaces
    "RAY_SERVE_HAPROXY_METRICS_PORT",  # HAProxy's Prometheus exporter, 9101, all interfaces
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",  # the head's fallback Python proxy, 8500
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",  # and its gRPC port, 9500
)
"""The throughput mode's listeners on fixed ports, each movable by its variable (Ray 2.60)."""


def assign_free_ports(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set each of ``FIXED_PORT_VARIABLES`` not already set in ``environ`` (default
    ``os.environ``) to a free port of this machine. Call it before the Ray instance starts.
    Returns the values in effect."""
    env = os.environ if environ is None else environ
    for name in FIXED_PORT_VARIABLES:
        env.setdefault(name, str(free_port()))
    return {name: env[name] for name in FIXED_PORT_VARIABLES}


DRAIN_VARIABLE = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"
"""How long (seconds) a stopping ingress replica stays open in the throughput mode so that a
load balancer in front can drop it (Ray 2.60: 30 by default, README "Serving mode")."""
LOCAL_DRAIN_S = "1"
"""The drain of a service the project's tools start and stop on one machine: HAProxy alone
is in front and retries a refused connection, each replica still finishes its requests in
flight. 30 s made every application a test deleted cost 31 s instead of 3 s, and `serve run`
take 30 s longer to stop."""


def set_local_service_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """What every Ray instance the project's tools start (the tests' session, a benchmark's
    ``serve run``, e2e's) needs in ``environ`` (default ``os.environ``), each only where not
    already set: ``assign_free_ports``, and ``DRAIN_VARIABLE`` at ``LOCAL_DRAIN_S``. Call it
    before the Ray instance starts. Returns the values in effect."""
    env = os.environ if environ is None else environ
    ports = assign_free_ports(env)
    env.setdefault(DRAIN_VARIABLE, LOCAL_DRAIN_S)
    return {**ports, DRAIN_VARIABLE: env[DRAIN_VARIABLE]}


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


def _config_under(cmdline: bytes, config_dir: str) -> bool:
    """Whether ``cmdline`` (NUL-separated) runs ``haproxy`` with ``-f`` a file under ``config_dir``."""
    args = cmdline.rstrip(b"\0").split(b"\0")
    if os.path.basename(args[0]) != b"haproxy":
        return False
    prefix = config_dir.rstrip("/").encode() + b"/"
    return any(a == b"-f" and b.startswith(prefix) for a, b in zip(args, args[1:], strict=False))


def orphaned_haproxies(config_dir: str | None = None) -> list[int]:
    """Pids of this user's ``haproxy`` processes run on a configuration under ``config_dir``
    (default: the directory of ``RAY_SERVE_HAPROXY_CONFIG_FILE_LOC``, else ``RAY_HAPROXY_DIR``)
    whose parent is not a live ``HAProxyManager`` actor (Linux ``/proc``; empty elsewhere)."""
    if config_dir is None:
        configured = os.environ.get("RAY_SERVE_HAPROXY_CONFIG_FILE_LOC")
        config_dir = os.path.dirname(configured) if configured else RAY_HAPROXY_DIR
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
        if not cmdline or not _config_under(cmdline, config_dir):
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


def stop_orphaned_haproxies(timeout_s: float = 5.0, config_dir: str | None = None) -> list[int]:
    """SIGTERM each of ``orphaned_haproxies(config_dir)``, SIGKILL those still alive after
    ``timeout_s`` seconds. Returns the pids signalled."""
    pids = orphaned_haproxies(config_dir)
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
