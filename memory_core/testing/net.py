"""Loopback helpers shared by the test rigs, tests and benchmarks: a free TCP port, and
waiting for a service's ``/health``."""

from __future__ import annotations

import contextlib
import random
import socket
import time

import httpx

LOWEST_PORT = 20000
"""The lowest port ``free_port`` hands out: above Ray's worker ports (10002–19999 by default)
and its other defaults (6379, 8000, 8265, 10001)."""
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_handed_out: set[int] = set()


def ephemeral_ports(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """(first, last) of the range the kernel picks a connection's local port from (Linux's
    ``ip_local_port_range``); ``(32768, 60999)``, Linux's default, where it cannot be read."""
    try:
        with open(path) as f:
            first, last = (int(v) for v in f.read().split()[:2])
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


def free_port(attempts: int = 200) -> int:
    """A TCP port free on every interface right now, for a listener that starts later (a
    service, a Ray instance's fixed listeners): a random port between ``LOWEST_PORT`` and the
    kernel's ephemeral range, never one this process handed out before.

    Below the ephemeral range because the kernel gives those ports to every outgoing
    connection (Ray alone opens hundreds): a port picked there (what binding port 0 answers)
    can be taken by a connection between the pick and the service's bind, which once failed
    a benchmark's start (README "Measured", "no user slows another"). Outside it only another
    explicit bind can take it. Where the range leaves no room above ``LOWEST_PORT`` the
    kernel's pick (port 0) answers. Raises ``OSError`` when no port of the range could be
    bound in ``attempts`` tries."""
    first, _ = ephemeral_ports()
    if first - 1 <= LOWEST_PORT:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(attempts):
        port = random.randint(LOWEST_PORT, first - 1)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # the wildcard: refused when any address holds the port
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError(f"no free port between {LOWEST_PORT} and {first - 1} in {attempts} tries")


def wait_healthy(url: str, timeout_s: float = 120.0, interval_s: float = 0.5) -> None:
    """Poll ``{url}/health`` until it answers 200. Raises ``TimeoutError`` after
    ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        time.sleep(interval_s)
    raise TimeoutError(f"{url} did not become healthy within {timeout_s:.0f} s")
