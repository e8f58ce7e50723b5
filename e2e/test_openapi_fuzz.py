"""Schema-driven fuzzing of the running service: schemathesis over its own OpenAPI document,
every operation with a bounded number of generated requests (its examples, coverage, fuzzing
and stateful phases), as a caller with an identity and without one. No response may be a
5xx, and every response must match what the document declares: status codes, content types,
headers, body schemas (the ``{"error": {"code", "message"}}`` shape included).

The schemathesis CLI is run as a subprocess (its pytest plugin does not support this pytest
version); ``FUZZ_MAX_EXAMPLES`` bounds the examples per operation (default 25)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "25"))
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    ]
)


def _schemathesis() -> str:
    exe = Path(sys.executable).with_name("schemathesis")
    return str(exe) if exe.exists() else (shutil.which("schemathesis") or "schemathesis")


@pytest.mark.parametrize("identity", ["fuzz-user", None], ids=["caller", "anonymous"])
def test_no_5xx_and_every_response_as_documented(base_url, identity):
    cmd = [
        _schemathesis(),
        "run",
        f"{base_url}/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--workers",
        "1",
        "--seed",
        os.environ.get("FUZZ_SEED", "20261201"),
    ]
    if identity:
        cmd += ["-H", f"x-authz-user-id: {identity}"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "e2e.schemathesis_hooks", "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    out = done.stdout + done.stderr
    summary = out[out.rfind("SUMMARY") :] if "SUMMARY" in out else out[-3000:]
    print(summary)  # kept in the test log: operations, phases, cases generated
    assert done.returncode == 0, out[-6000:]
