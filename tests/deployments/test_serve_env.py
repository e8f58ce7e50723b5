"""``serve.env`` and its reader: the serving mode's environment, one file for every entry point."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deployments.serve_env import SERVE_ENV_FILE, apply_serve_env, serve_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_file_names_rays_throughput_mode_and_haproxy():
    assert serve_env() == {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1",
    }


def test_comments_and_blank_lines_are_skipped_and_anything_else_is_refused(tmp_path):
    f = tmp_path / "serve.env"
    f.write_text("# a comment\n\nA_B=1\n  C=x  \n")
    assert serve_env(f) == {"A_B": "1", "C": "x"}
    for bad in ("A = 1", "export A=1", 'A="1"', "a=1", "A=1 2"):
        f.write_text(bad + "\n")
        with pytest.raises(ValueError, match="serve.env:1"):
            serve_env(f)


def test_a_value_the_caller_exported_wins(tmp_path):
    f = tmp_path / "serve.env"
    f.write_text("A=1\nB=1\n")
    env = {"B": "0"}
    assert apply_serve_env(env, f) == {"A": "1", "B": "0"}
    assert env == {"A": "1", "B": "0"}


def test_the_makefile_exports_what_the_file_says():
    """``make`` reads the same file (``include serve.env`` + ``export``): what a recipe sees."""
    mk = f"include {ROOT / 'Makefile'}\nshow-serve-env:\n\t@env | grep -E '^(" + "|".join(serve_env()) + ")=' | sort\n"
    out = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "-f", "-", "show-serve-env"], input=mk, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert dict(line.split("=", 1) for line in out.stdout.split()) == serve_env(SERVE_ENV_FILE)


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
