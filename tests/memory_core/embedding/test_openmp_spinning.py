"""``bound_openmp_spinning``: the Embedder's torch threads must not spin away shared cores.

Each case runs in a fresh interpreter: libgomp reads ``GOMP_SPINCOUNT`` once, when torch
loads, so what matters is the environment at that moment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_PROBE = """
import json, os, sys
from memory_core.embedding import OPENMP_SPINCOUNT, bound_openmp_spinning
{before}
applied = bound_openmp_spinning()
print(json.dumps({{"applied": applied, "spincount": os.environ.get("GOMP_SPINCOUNT"),
                  "expected": str(OPENMP_SPINCOUNT)}}))
"""


def _probe(before: str = "", **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(before=before)],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_sets_the_spin_count_before_torch_loads():
    got = _probe()
    assert got["applied"] is True
    assert got["spincount"] == got["expected"]


def test_keeps_an_operators_own_setting():
    assert _probe(GOMP_SPINCOUNT="5")["spincount"] == "5"
    got = _probe(OMP_WAIT_POLICY="PASSIVE")
    assert got["applied"] is True and got["spincount"] is None


def test_says_so_when_torch_is_loaded_already():
    got = _probe(before="import torch")
    assert got["applied"] is False
    assert got["spincount"] is None


def test_the_embedder_module_does_not_load_torch():
    """``Embedder.__init__`` calls it first: importing the deployment must not load torch."""
    code = "import sys, deployments.embedder; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "False"
