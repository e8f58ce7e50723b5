"""Application builder: typed args → the bound deployment graph.

``serve_config.yaml`` imports ``deployments.app:build_app`` and passes ``args``:

- ``config``: the configuration document inline (``global``/``routing``), or
- ``config_path``: a YAML file with that document (relative to the working directory).

The embedding model's identity is computed here (reading the model files, not loading the
model) and bound into the ``Embedder`` and ``StorePool`` arguments: Ray 2.60 has no
deployment ``version=``, so a changed model changes the args, which rolls the replicas, and
it selects the physical collection ``<logical>__<short digest>``.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from ray.serve import Application

from memory_core.config import RouterConfig, load_config
from memory_core.embedding import compute_identity

from .echo import EchoUpstream
from .embedder import Embedder
from .ingress import MemoryIngress
from .store_pool import StorePool

log = logging.getLogger("ray.serve")


class AppArgs(BaseModel):
    """``applications[].args`` of ``serve_config.yaml``."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any] | None = None
    config_path: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "AppArgs":
        if self.config is not None and self.config_path is not None:
            raise ValueError("give either args.config or args.config_path, not both")
        return self

    def load(self) -> RouterConfig:
        return load_config(self.config_path if self.config_path is not None else (self.config or {}))


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Build the memory-router application. Raises ``ConfigError`` (naming the key) on an
    invalid configuration, so ``serve run`` fails at start."""
    config = AppArgs.model_validate(args or {}).load()
    settings = config.memory
    identity = compute_identity(settings.embedding)
    if not identity.verifiable:
        log.warning(
            "embedding provider %s cannot prove which model produced its vectors: memory keeps the "
            "configured collection name; changing the remote model requires a migration",
            settings.embedding.remote.base_url if settings.embedding.remote else "?",
        )
    suffix = identity.short if identity.verifiable else None
    embedder = Embedder.bind(settings.embedding.model_dump(mode="json"), identity.digest)
    store_pool = StorePool.bind(settings.model_dump(mode="json"), identity.dimension, identity.digest, suffix, embedder)
    echo = EchoUpstream.bind() if not config.global_.upstream.base_url else None
    return MemoryIngress.bind(config.model_dump(mode="json", by_alias=True), embedder, store_pool, echo)
