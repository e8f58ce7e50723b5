"""Loopback helpers shared by the test rigs, tests and benchmarks: a free TCP port, and
waiting for a service's ``/health``."""

from __future__ import annotations

import contextlib
import errno
import random
import socket
import time

import httpx

LOWEST_PORT = 20000
"""The lowest port ``free_port`` hands out: above Ray's worker ports (10002–19999 by default)
and its other defaults (6379, 8000, 8265, 10001)."""
HIGHEST_PORT = 29999
"""The highest: below Ray Serve's direct-ingress ports (HTTP 30000–31000, gRPC 40000–41000
in the throughput mode, Ray 2.60), which its replicas bind themselves."""
MIN_CHOICE = 1000
"""Fewest ports the range must offer; with fewer the kernel picks (port 0)."""
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_handed_out: set[int] = set()
_random = random.SystemRandom()  # never a seeded module generator: two processes never pick alike


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
    service, a Ray instance's fixed listeners): a random port from ``LOWEST_PORT`` up to
    ``HIGHEST_PORT`` and below the kernel's ephemeral range, never one this process handed
    out before.

    Outside the ephemeral range because the kernel gives those ports to every outgoing
    connection (Ray alone opens hundreds): a port picked there (what binding port 0 answers)
    can be taken by a connection between the pick and the service's bind, which once failed
    a benchmark's start (README "Measured", "no user slows another"). Outside it and Ray's own
    ranges only another explicit bind can take it. Where the range offers fewer than
    ``MIN_CHOICE`` ports the kernel's pick (port 0) answers. Raises ``OSError``: a bind refused
    for another reason than the port being in use (a sandbox), or no free port in
    ``attempts`` tries."""
    first, _ = ephemeral_ports()
    highest = min(HIGHEST_PORT, first - 1)
    if highest - LOWEST_PORT + 1 < MIN_CHOICE:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(attempts):
        port = _random.randint(LOWEST_PORT, highest)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # the wildcard: refused when any address holds the port
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    continue
                raise
        _handed_out.add(port)
        return port
    raise OSError(f"no free port between {LOWEST_PORT} and {highest} in {attempts} tries")


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
