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

import asyncio
import ipaddress
import os
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path

from memory_core.config import AccessSettings
from memory_core.errors import ConfigError

SERVE_ENV_FILE = Path(__file__).resolve().parents[1] / "serve.env"
"""``serve.env`` at the repository root."""

_LINE = re.compile(r"([A-Z_][A-Z0-9_]*)=([A-Za-z0-9_.:/,+-]*)")


def serve_env(path: Path = SERVE_ENV_FILE) -> dict[str, str]:
    """``NAME → value`` of ``path`` in file order (empty lines and lines starting with ``#``
    skipped). Raises ``ValueError`` naming the line for anything else, indented lines and
    carriage returns included (what the Makefile, a shell's ``read`` loop and this function
    would read differently), ``FileNotFoundError`` when the file is absent."""
    text = path.read_bytes().decode("utf-8")  # as written: read_text would turn "\r\n" into "\n"
    if "\r" in text:
        raise ValueError(f"{path}:1: carriage returns (a shell would keep them in the values)")
    out: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise ValueError(
                f"{path}:{number}: expected NAME=value from the line's first character "
                f"(no spaces, no quotes, no shell syntax), got {line!r}"
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


def _loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


async def check_peer_addresses(
    access: AccessSettings, http_host: Callable[[], Awaitable[str | None]], environ: Mapping[str, str]
) -> None:
    """Refuse a service whose identity check would read a peer address HAProxy hides.

    With ``RAY_SERVE_ENABLE_HA_PROXY=1`` in ``environ`` (the replica's environment) every
    request reaches the ingress from HAProxy, on the loopback address of its node (Ray 2.60's
    HAProxy adds no ``X-Forwarded-For``): the ``trusted_header`` mode's peer check
    (``access.trusted_proxies``) would take any caller for that trusted peer. That is the truth
    only when the HTTP port itself is bound to loopback (``http_host()``, Serve's
    ``http_options.host``: every caller is on the machine; read only when the rest of the
    check needs it, as reading it asks Serve's controller), and harmless when a gateway secret
    (``gateway_secret_env``) or ``api_key`` mode proves the caller instead.

    Raises ``ConfigError`` for HAProxy + ``trusted_header`` without a gateway secret + an HTTP
    host that is not loopback, or unknown (``None``)."""
    if environ.get("RAY_SERVE_ENABLE_HA_PROXY", "0").lower() not in ("1", "true"):
        return
    if access.mode != "trusted_header" or access.gateway_secret_env:
        return
    host = await http_host()
    if _loopback(host):
        return
    raise ConfigError(
        f"global.access: trusted_header mode without gateway_secret_env behind HAProxy "
        f"(RAY_SERVE_ENABLE_HA_PROXY=1) on http_options.host {host!r}: HAProxy hides the "
        "callers' addresses, so any caller could send x-authz-user-id. Bind the HTTP port to "
        "127.0.0.1, set global.access.gateway_secret_env, use access.mode api_key, or turn the "
        'mode off (README "Serving mode")'
    )


CONTROLLER_WAIT_S = 30.0
"""Longest wait (seconds) for the controller's lookup, and again for its answer, in
``serve_http_host`` (then ``None``:
the replica's start is refused, and Serve starts it again)."""


async def serve_http_host() -> str | None:
    """``http_options.host`` of the running Serve instance (from a replica: the controller's
    HTTP config, one awaited call to the controller actor, which the replica's event loop
    does not wait on), or ``None`` when it cannot be read or the controller does not answer
    within ``CONTROLLER_WAIT_S``. Outside a Ray process (no Ray
    instance this process joined) it is ``None`` at once, and no Ray instance is started."""
    try:
        import ray
        from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

        if not ray.is_initialized():
            return None
        # the actor lookup is a blocking call to the GCS: on a thread, off the event loop
        lookup = asyncio.to_thread(ray.get_actor, SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        controller = await asyncio.wait_for(lookup, CONTROLLER_WAIT_S)
        options = await asyncio.wait_for(controller.get_http_config.remote(), CONTROLLER_WAIT_S)
        return str(options.host)
    except Exception:  # any failure means "unknown": check_peer_addresses then refuses HAProxy
        return None
