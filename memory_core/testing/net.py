"""Loopback helpers shared by the test rigs, tests and benchmarks: a free TCP port, and
waiting for a service's ``/health``."""

from __future__ import annotations

import contextlib
import socket
import time

import httpx


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
