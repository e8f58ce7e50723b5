"""e2e fixtures: the service under test is at ``MEMORY_ROUTER_URL`` (default
``http://127.0.0.1:8000``, what ``serve run serve_config.yaml`` listens on)."""

from __future__ import annotations

import os
import uuid

import httpx
import pytest


@pytest.fixture(scope="session")
def base_url() -> str:
    url = os.environ.get("MEMORY_ROUTER_URL", "http://127.0.0.1:8000").rstrip("/")
    try:
        httpx.get(f"{url}/health", timeout=10).raise_for_status()
    except httpx.HTTPError as e:
        pytest.fail(f"no healthy memory-router at {url} ({e!r}); start it with `serve run serve_config.yaml`")
    return url


@pytest.fixture
def new_user():
    """A fresh user id per call, so runs never see each other's memories."""
    return lambda: f"e2e-{uuid.uuid4().hex[:12]}"
