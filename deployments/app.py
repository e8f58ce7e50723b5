"""Application builder: typed args → the bound deployment graph.

``serve_config.yaml`` imports ``deployments.app:build_app`` and passes ``args``:

- ``config``: the configuration document inline (``global``/``routing``), or
- ``config_path``: a YAML file with that document (relative to the working directory).

The embedding model's identity is computed here (reading the model files, not loading the
model) and bound into the ``Embedder`` and ``StorePool`` arguments: Ray 2.60 has no
deployment ``version=``, so a changed model changes the args, which rolls the replicas, and
it selects the physical collection ``<logical>__<short digest>``. Every argument is typed
(settings models, ``ModelIdentity``).

``DEPLOYMENT_OPTIONS`` holds the default options of each deployment, in one place; the
``deployments:`` entries of a Serve config file override them field by field
(``build_application(args, overrides=...)`` does the same for programmatic use).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from ray.serve import Application

from memory_core.config import RouterConfig, load_config
from memory_core.embedding import compute_identity

from .consolidator import Consolidator
from .echo import EchoUpstream
from .embedder import DEFAULT_USER_CONFIG, Embedder
from .http.ingress import MemoryIngress
from .store_pool import StorePool
from .webhooks import WebhookDispatcher

log = logging.getLogger("ray.serve")

DEPLOYMENT_OPTIONS: dict[str, dict[str, Any]] = {
    "Embedder": {
        # ≥ max_batch_size, or batches can never fill (Serve logs a warning)
        "max_ongoing_requests": 256,
        "user_config": DEFAULT_USER_CONFIG,
    },
    "StorePool": {
        "ray_actor_options": {"num_cpus": 0},
        # a shard gone for good fails the check: Serve replaces the pool, whose shards reopen
        "health_check_period_s": 5,
        "health_check_timeout_s": 30,
    },
    "MemoryIngress": {
        "ray_actor_options": {"num_cpus": 0},
        "max_ongoing_requests": 256,
        # overload is refused, not queued without bound: 429 + Retry-After beyond the queue
        "max_queued_requests": 512,
        "backpressure_config": {"status_code": 429, "retry_after_s": 1},
        # a stopping replica first lets its requests finish, then drains the turns it is still
        # storing (routes.assembly.DRAIN_TIMEOUT_S, 15 s) within this one deadline
        "graceful_shutdown_timeout_s": 40,
    },
    "EchoUpstream": {"ray_actor_options": {"num_cpus": 0}},
    "Consolidator": {
        "num_replicas": 1,  # one loop per application
        "ray_actor_options": {"num_cpus": 0},
        "user_config": {"enabled": True, "interval_s": 60.0, "max_users_per_pass": 100},
    },
    "WebhookDispatcher": {"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},  # one delivery loop
}
"""Default options of each deployment (``serve.deployment`` keyword arguments)."""


class AppArgs(BaseModel):
    """``applications[].args`` of ``serve_config.yaml``."""

    model_config = ConfigDict(extra="forbid")

    config: dict[str, Any] | None = None
    config_path: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AppArgs:
        if self.config is not None and self.config_path is not None:
            raise ValueError("give either args.config or args.config_path, not both")
        return self

    def load(self) -> RouterConfig:
        return load_config(self.config_path if self.config_path is not None else (self.config or {}))


def deployment_options(overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """``DEPLOYMENT_OPTIONS`` with ``overrides`` (deployment name → options) merged over them,
    option by option (as a Serve config file's ``deployments:`` entries are). Raises
    ``ValueError`` for an unknown deployment name."""
    unknown = set(overrides or {}) - set(DEPLOYMENT_OPTIONS)
    if unknown:
        raise ValueError(f"unknown deployments {sorted(unknown)}; known: {sorted(DEPLOYMENT_OPTIONS)}")
    return {name: {**opts, **(overrides or {}).get(name, {})} for name, opts in DEPLOYMENT_OPTIONS.items()}


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The application builder ``serve run``/``serve deploy`` call (``import_path:
    deployments.app:build_app``; Serve requires a builder of exactly one parameter): the
    application of ``args`` with ``DEPLOYMENT_OPTIONS``, which the config file's
    ``deployments:`` entries override. Raises ``ConfigError`` (naming the key) on an invalid
    configuration, so ``serve run`` fails at start."""
    return build_application(args)


def build_application(
    args: dict[str, Any] | None = None, *, overrides: dict[str, dict[str, Any]] | None = None
) -> Application:
    """The memory-router application of ``args`` (``AppArgs``) for programmatic use
    (``serve.run``), ``overrides`` (deployment name → options) merged over
    ``DEPLOYMENT_OPTIONS``. Raises ``ConfigError`` (naming the key) on an invalid
    configuration."""
    config = AppArgs.model_validate(args or {}).load()
    settings = config.memory
    identity = compute_identity(settings.embedding)
    if not identity.verifiable:
        log.warning(
            "embedding provider %s cannot prove which model produced its vectors: memory keeps the "
            "configured collection name; changing the remote model requires a migration",
            settings.embedding.remote.base_url if settings.embedding.remote else "?",
        )
    o = deployment_options(overrides)
    tracing = config.global_.tracing  # OpenTelemetry: each process sets it up (memory_core.tracing)
    embedder = Embedder.options(**o["Embedder"]).bind(settings.embedding, identity, tracing=tracing)
    store_pool = StorePool.options(**o["StorePool"]).bind(settings, identity, embedder, tracing=tracing)
    echo = EchoUpstream.options(**o["EchoUpstream"]).bind() if not config.global_.upstream.base_url else None
    consolidator = Consolidator.options(**o["Consolidator"]).bind(store_pool) if settings.curation.enabled else None
    events = settings.events
    webhooks = WebhookDispatcher.options(**o["WebhookDispatcher"]).bind(events) if events.webhooks else None
    return MemoryIngress.options(**o["MemoryIngress"]).bind(config, embedder, store_pool, echo, consolidator, webhooks)
