"""Fixtures of the embedding tests: the bundled model settings, one shared LocalEncoder, and
the shared Ray instance of tests/conftest.py (``ray_session``, ``serve_http_port``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from memory_core.config import EmbeddingSettings  # noqa: E402


@pytest.fixture(scope="session")
def bundled_settings() -> EmbeddingSettings:
    return EmbeddingSettings(model="bundled:all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def local_encoder(bundled_settings):
    from memory_core.embedding import LocalEncoder

    return LocalEncoder(bundled_settings)
