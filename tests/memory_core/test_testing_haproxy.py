"""``memory_core.testing.haproxy``: a HAProxy whose ``HAProxyManager`` is gone is stopped, one
still under its manager is left alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from memory_core.testing.haproxy import orphaned_haproxies, stop_orphaned_haproxies


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def test_a_haproxy_without_its_manager_is_stopped_and_a_managed_one_is_not(tmp_path):
    fake = tmp_path / "haproxy"  # argv[0] names "haproxy", as Ray's binary does
    fake.symlink_to(shutil.which("sleep"))
    orphan = subprocess.Popen([str(fake), "60"])
    # a parent whose command line is the actor's ("ray::HAProxyManager"), its haproxy a child
    manager = subprocess.Popen(
        ["bash", "-c", f'exec -a "ray::HAProxyManager" bash -c "{fake} 60 & wait"'], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        while not _children(manager.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        (managed,) = _children(manager.pid)
        found = orphaned_haproxies()
        assert orphan.pid in found and managed not in found
        assert orphan.pid in stop_orphaned_haproxies(timeout_s=5)
        assert orphan.wait(timeout=5) == -signal.SIGTERM
        os.kill(managed, 0)  # still running
    finally:
        orphan.kill()
        os.killpg(manager.pid, signal.SIGKILL)
        manager.wait()
