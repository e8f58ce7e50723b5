"""``benchmarks.cpu_by_process``: process names and the CPU a process spends between two
snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks.cpu_by_process import cpu_between, cpu_since, process_name, snapshot


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["ray::StoreShard.retrieve"], "ray::StoreShard"),
        (["ray::StoreShard"], "ray::StoreShard"),
        (
            ["ray::ServeReplica:memory-router:MemoryIngress.handle_request", ""],
            "ray::ServeReplica:memory-router:MemoryIngress",
        ),
        (["ray::IDLE"], "ray::IDLE"),
        (["/usr/bin/haproxy", "-f", "/tmp/haproxy-serve/x/haproxy.cfg"], "haproxy"),
        (["/venv/lib/ray/core/src/ray/raylet/raylet", "--node_id=1"], "raylet"),
        (["/venv/bin/python3.11", "-u", "-m", "benchmarks.load", "--users", "32"], "python -m benchmarks.load"),
        (["/venv/bin/python", "/venv/bin/serve", "run", "serve_config.yaml"], "python serve"),
        (["python", "-c", "print(1)"], "python -c"),
        ([""], "?"),
        ([], "?"),
    ],
)
def test_a_process_is_named_by_its_title_without_the_method_it_runs(argv, name):
    assert process_name(argv) == name


def _cpu_of(pid: int) -> float | None:
    """CPU seconds of the live process ``pid`` in a snapshot (``None``: not there)."""
    found = [seconds for (p, _), (_, seconds) in snapshot().items() if p == pid]
    return found[0] if found else None


def test_a_running_child_is_seen_with_its_name_and_its_cpu_and_a_reaped_one_is_not():
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    before = snapshot()
    assert any(pid == os.getpid() for pid, _ in before)
    child = subprocess.Popen([sys.executable, "-c", burn + "import sys\nsys.stdin.read()\n"], stdin=subprocess.PIPE)
    try:
        start = time.monotonic()
        while (_cpu_of(child.pid) or 0.0) < 0.25:
            assert time.monotonic() - start < 60, "the child's CPU was not seen"
            time.sleep(0.05)
        names = {name for (pid, _), (name, _) in snapshot().items() if pid == child.pid}
        assert names == {"python -c"}
        assert cpu_since(before).get("python -c", 0.0) >= 0.25  # it started after ``before``: counted from zero
    finally:
        child.kill()
        child.wait()
    assert _cpu_of(child.pid) is None  # reaped: not seen (documented)


def test_a_process_is_its_pid_and_its_start_time():
    """A pid seen again with another start time is another process: its CPU counts from zero,
    never as the difference with the earlier process of that pid; a renamed process counts its
    difference under its new name."""
    before = {(7, 100): ("ray::IDLE", 5.0), (8, 100): ("raylet", 2.0)}
    after = {(7, 100): ("ray::StoreShard", 7.5), (8, 300): ("python -c", 1.0), (9, 400): ("haproxy", 0.5)}
    assert cpu_between(before, after) == {"ray::StoreShard": 2.5, "python -c": 1.0, "haproxy": 0.5}
