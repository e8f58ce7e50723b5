"""``favour_the_event_loop``: a loop shares its process with pool threads running Python."""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time

import pytest

from memory_core.cpu_pool import LOOP_SWITCH_INTERVAL_S, CpuPool, favour_the_event_loop


def test_sets_the_interval_and_returns_the_previous_one():
    before = sys.getswitchinterval()
    try:
        assert favour_the_event_loop(0.002) == before
        assert sys.getswitchinterval() == pytest.approx(0.002)
        assert favour_the_event_loop() == pytest.approx(0.002)
        assert sys.getswitchinterval() == pytest.approx(LOOP_SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_refuses_a_non_positive_interval(bad):
    with pytest.raises(ValueError):
        favour_the_event_loop(bad)


def _busy(stop: threading.Event) -> int:
    """Pure Python until ``stop``: holds the GIL but for the forced switches."""
    n = 0
    while not stop.is_set():
        for _ in range(1000):
            n += 1
    return n


async def _loop_lag_ms(samples: int = 40) -> float:
    """Median ms a 1 ms sleep of the loop overshoots while a pool thread runs Python."""
    pool = CpuPool(1, name="busy")
    stop = threading.Event()
    busy = asyncio.ensure_future(pool.run(_busy, stop))
    await asyncio.sleep(0.01)
    lags = []
    for _ in range(samples):
        started = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append((time.perf_counter() - started) * 1000 - 1.0)
    stop.set()
    await busy
    pool.close()
    return statistics.median(lags)


def test_the_loop_gets_the_gil_back_sooner():
    """The mechanism, as a ratio in one run: with CPython's default 5 ms interval the loop
    waits for the busy thread's switch; with ``LOOP_SWITCH_INTERVAL_S`` it waits ~10× less."""
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        slow = asyncio.run(_loop_lag_ms())
        favour_the_event_loop()
        fast = asyncio.run(_loop_lag_ms())
    finally:
        sys.setswitchinterval(before)
    assert slow > 2 * max(fast, 0.2), (slow, fast)
