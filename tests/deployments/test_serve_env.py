"""``serve.env`` and its reader: the serving mode's environment, one file for every entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.serve_env import SERVE_ENV_FILE, apply_serve_env, check_peer_addresses, serve_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_file_names_rays_throughput_mode_and_haproxy():
    assert serve_env() == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1",
    }


def test_comments_and_blank_lines_are_skipped_and_anything_else_is_refused(tmp_path):
    f = tmp_path / "serve.env"
    f.write_text("# a comment\n\nA_B=1\nC=x")  # the last line without its newline too
    assert serve_env(f) == {"A_B": "1", "C": "x"}
    for bad in ("A = 1", "export A=1", 'A="1"', "a=1", "A=1 2", "  A=1", "A=1 ", "A=1\r"):
        f.write_text(bad + "\n")
        with pytest.raises(ValueError, match="serve.env:1"):
            serve_env(f)


def test_a_value_the_caller_exported_wins(tmp_path):
    f = tmp_path / "serve.env"
    f.write_text("A=1\nB=1\n")
    env = {"B": "0"}
    assert apply_serve_env(env, f) == {"A": "1", "B": "0"}
    assert env == {"A": "1", "B": "0"}


def _make_sees(**env: str) -> dict[str, str]:
    """The ``RAY_SERVE_*`` variables a recipe of the Makefile sees, make run from elsewhere
    with only ``PATH`` and ``env`` in its environment (none of the caller's make flags)."""
    mk = f"include {ROOT / 'Makefile'}\nshow-serve-env:\n\t@env | grep -E '^RAY_SERVE_' | sort\n"
    out = subprocess.run(
        ["make", "-s", "-f", "-", "show-serve-env"],
        input=mk,
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": os.environ["PATH"], **env},
    )
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.split())


def test_the_makefile_exports_what_the_file_says_unless_the_caller_set_it():
    """``make`` reads the same file: what a recipe (``make run``'s ``serve run``) sees."""
    assert _make_sees() == serve_env(SERVE_ENV_FILE)
    assert _make_sees(RAY_SERVE_ENABLE_HA_PROXY="0") == {**serve_env(), "RAY_SERVE_ENABLE_HA_PROXY": "0"}


def test_the_e2e_script_exports_the_file_unless_already_set():
    """e2e/run_against_serve.sh's loop over the file, run alone under the script's shell flags."""
    script = (ROOT / "e2e" / "run_against_serve.sh").read_text()
    loop = script[
        script.index("while IFS='=' read") : script.index('done < "$repo/serve.env"') + len('done < "$repo/serve.env"')
    ]
    out = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nrepo={ROOT}\n{loop}\nenv | grep '^RAY_SERVE_' | sort"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "RAY_SERVE_ENABLE_HA_PROXY": "0"},
    )
    assert out.returncode == 0, out.stderr
    got = dict(line.split("=", 1) for line in out.stdout.split())
    assert got == {**serve_env(), "RAY_SERVE_ENABLE_HA_PROXY": "0"}


def test_the_test_sessions_ray_processes_run_the_mode_make_run_serves(ray_session):
    """The integration tests run the mode ``make run`` serves: Ray Serve in this process read
    it, and the session's Ray workers (where replicas and shards run) have it in their
    environment, the fixed ports moved to free ones (``assign_free_ports``)."""
    from ray.serve._private import constants

    assert constants.RAY_SERVE_THROUGHPUT_OPTIMIZED and constants.RAY_SERVE_ENABLE_HA_PROXY

    @ray_session.remote(num_cpus=0)
    def worker_environment() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k.startswith("RAY_SERVE_")}

    seen = ray_session.get(worker_environment.remote(), timeout=60)
    assert {k: seen.get(k) for k in serve_env()} == serve_env()
    # moved off HAProxy's fixed stats port (this process's environment may have been edited
    # by earlier tests since the session started: the workers' copy is the one that counts)
    assert seen.get("RAY_SERVE_HAPROXY_STATS_PORT", "8404") != "8404"


@pytest.mark.parametrize(
    ("host", "access", "ha", "refused"),
    [
        ("127.0.0.1", {}, "1", False),  # make run: every caller is on the machine
        ("::1", {}, "1", False),
        ("localhost", {}, "1", False),
        ("0.0.0.0", {}, "1", True),  # any caller would pass for HAProxy's loopback address
        ("10.0.0.7", {}, "1", True),
        (None, {}, "1", True),  # unknown: refused, not assumed
        ("0.0.0.0", {"gateway_secret_env": "GATEWAY_SECRET"}, "1", False),  # the secret proves the gateway
        ("0.0.0.0", {"mode": "api_key"}, "1", False),  # keys prove the caller
        ("0.0.0.0", {}, "0", False),  # Serve's proxy: the ingress sees the callers' addresses
    ],
)
async def test_haproxy_in_front_of_a_public_port_needs_more_than_the_peer_address(host, access, ha, refused):
    from memory_core.config import AccessSettings
    from memory_core.errors import ConfigError

    settings = AccessSettings(**access)
    env = {"RAY_SERVE_ENABLE_HA_PROXY": ha}
    reads: list[str | None] = []

    async def http_host() -> str | None:
        reads.append(host)
        return host

    if refused:
        with pytest.raises(ConfigError, match="gateway_secret_env"):
            await check_peer_addresses(settings, http_host, env)
    else:
        await check_peer_addresses(settings, http_host, env)
    # the host is asked of Serve's controller only when the answer decides
    assert len(reads) == (1 if ha == "1" and not access else 0)


def test_reading_the_http_host_outside_ray_starts_no_ray_instance():
    """An ingress built outside a replica (unit tests, tools) reads no host: Serve's client
    would otherwise start a Ray instance of its own to ask (what once started the test
    session's Ray before ``ray_session``, without ``serve.env``'s ports)."""
    code = (
        "import ray\n"
        "import asyncio\n"
        "from deployments.serve_env import serve_http_host\n"
        "assert asyncio.run(serve_http_host()) is None\n"
        "assert not ray.is_initialized(), 'a Ray instance was started'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
