"""``benchmarks.cpu_by_process``: process names and the CPU a process spends between two
snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks.cpu_by_process import cpu_since, process_name, snapshot


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


def test_the_cpu_a_running_child_spends_is_counted_under_its_name_and_a_reaped_one_is_not():
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    before = snapshot()
    assert os.getpid() in before
    child = subprocess.Popen([sys.executable, "-c", burn + "import sys\nsys.stdin.read()\n"], stdin=subprocess.PIPE)
    try:
        start = time.monotonic()
        while cpu_since(before).get("python -c", 0.0) < 0.25:
            assert time.monotonic() - start < 60, "the child's CPU was not seen"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    assert "python -c" not in cpu_since(before)  # gone before the end: not seen (documented)
