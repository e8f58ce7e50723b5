"""``memory_core.testing.haproxy``: a HAProxy on a configuration under Ray's HAProxy directory
whose ``HAProxyManager`` is gone is stopped; one still under its manager, and any other
``haproxy`` (an operator's own), are left alone. Fixed ports are moved to free ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from memory_core.testing.haproxy import (
    DRAIN_VARIABLE,
    FIXED_PORT_VARIABLES,
    assign_free_ports,
    orphaned_haproxies,
    set_local_service_defaults,
    stop_orphaned_haproxies,
)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _haproxy_like(config: str, parent_title: str | None = None) -> subprocess.Popen:
    """A sleeping process whose command line reads ``…/haproxy -db -f <config>`` (an
    interpreter under ``exec -a``); with ``parent_title``, started as the child of a shell
    whose command line is that title (``ray::HAProxyManager``), in a session of its own."""
    sleeper = f'exec -a /opt/bin/haproxy {sys.executable} -c "import time; time.sleep(60)" -db -f {config}'
    if parent_title is None:
        return subprocess.Popen(["bash", "-c", sleeper])
    script = f"exec -a '{parent_title}' bash -c '({sleeper}) & wait'"
    return subprocess.Popen(["bash", "-c", script], start_new_session=True)


def test_only_a_ray_haproxy_without_its_manager_is_stopped(tmp_path):
    ray_dir = tmp_path / "haproxy-serve"
    config = str(ray_dir / "node" / "haproxy.cfg")
    orphan = _haproxy_like(config)
    operators_own = _haproxy_like("/etc/haproxy/haproxy.cfg")
    manager = _haproxy_like(config, parent_title="ray::HAProxyManager")
    try:
        deadline = time.monotonic() + 10
        while not (_children(manager.pid) and len(orphaned_haproxies(str(ray_dir))) == 1):
            assert time.monotonic() < deadline, "the processes did not start"
            time.sleep(0.05)
        (managed,) = _children(manager.pid)
        assert orphaned_haproxies(str(ray_dir)) == [orphan.pid]  # not the managed one, not the operator's
        assert stop_orphaned_haproxies(timeout_s=5, config_dir=str(ray_dir)) == [orphan.pid]
        assert orphan.wait(timeout=5) == -signal.SIGTERM
        os.kill(managed, 0)  # still running
        assert operators_own.poll() is None
    finally:
        for p in (orphan, operators_own):
            p.kill()
            p.wait()
        os.killpg(manager.pid, signal.SIGKILL)
        manager.wait()


def test_the_fixed_ports_become_free_ones_unless_already_set():
    env = {"RAY_SERVE_HAPROXY_STATS_PORT": "18404"}
    got = assign_free_ports(env)
    assert got["RAY_SERVE_HAPROXY_STATS_PORT"] == "18404" and set(got) == set(FIXED_PORT_VARIABLES)
    ports = [int(got[k]) for k in FIXED_PORT_VARIABLES[1:]]
    assert all(1024 < p < 65536 for p in ports) and not {8404, 9101, 8500, 9500} & set(ports)
    assert env == got  # written into the mapping given


def test_local_service_defaults_are_free_ports_and_a_short_drain_unless_already_set():
    env: dict[str, str] = {}
    got = set_local_service_defaults(env)
    assert got[DRAIN_VARIABLE] == "1" and set(got) == {*FIXED_PORT_VARIABLES, DRAIN_VARIABLE}
    assert env == got
    operators = {DRAIN_VARIABLE: "30", "RAY_SERVE_HAPROXY_STATS_PORT": "18404"}
    got = set_local_service_defaults(operators)
    assert got[DRAIN_VARIABLE] == "30" and got["RAY_SERVE_HAPROXY_STATS_PORT"] == "18404"
