"""The environment of Ray Serve's throughput mode, read from ``serve.env`` (repository root).

Ray Serve chooses its data plane when each Ray process imports it (``ray.serve._private.constants``
reads the environment): the HTTP ingress (Serve's Python proxy actor, or HAProxy routing
straight to the ingress replicas) and how replicas call each other. Those choices therefore
cannot live in ``serve_config.yaml``: they are the environment of the Ray instance, set before
it starts. ``serve.env`` holds them once (``NAME=value`` lines, ``#`` comments); the Makefile
includes it, and the Python entry points that start a Ray instance (the tests' session, the
benchmarks' ``serve run``) apply it with ``apply_serve_env``. README "Serving mode".
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

SERVE_ENV_FILE = Path(__file__).resolve().parents[1] / "serve.env"
"""``serve.env`` at the repository root."""

_LINE = re.compile(r"([A-Z_][A-Z0-9_]*)=([A-Za-z0-9_.:/,+-]*)")


def serve_env(path: Path = SERVE_ENV_FILE) -> dict[str, str]:
    """``NAME → value`` of ``path`` in file order (blank lines and ``#`` comments skipped).
    Raises ``ValueError`` naming the line for anything else (a line the Makefile and a shell
    would read differently), ``FileNotFoundError`` when the file is absent."""
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ValueError(
                f"{path}:{number}: expected NAME=value (no spaces, no quotes, no shell syntax), got {raw!r}"
            )
        out[match.group(1)] = match.group(2)
    return out


def apply_serve_env(environ: MutableMapping[str, str] | None = None, path: Path = SERVE_ENV_FILE) -> dict[str, str]:
    """Set each of ``serve_env(path)`` in ``environ`` (default ``os.environ``) unless it is
    already set there: a value the caller exported (``RAY_SERVE_ENABLE_HA_PROXY=0`` to compare
    with Serve's proxy) wins. Call it before the Ray instance starts. Returns the values now in
    effect for the file's names."""
    env = os.environ if environ is None else environ
    for name, value in serve_env(path).items():
        env.setdefault(name, value)
    return {name: env[name] for name in serve_env(path)}
