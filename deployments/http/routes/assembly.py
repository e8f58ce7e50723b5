"""``MemoryIngress`` assembled from the route groups and bound by ``@serve.ingress``.

The binding lives in this package, not in a module above it, on purpose: ``@serve.ingress``
gives each route method its ``self`` dependency, and a Serve replica unpickles the routes by
reference, importing a route module (``chat``, ``memory``…) and so this package first, not
necessarily ``deployments.http.ingress``. The package's ``__init__`` imports this module
last, so every import of a route group binds the routes the same way (without it the routes
of such a replica answered 400: ``self`` read as a required query parameter).
``deployments.http.ingress`` re-exports the class.
"""

import os

from ray import serve

from memory_core.access import Authenticator, KeyRegistry, WriteRateLimiter
from memory_core.audit import AuditLog
from memory_core.chat.background import BackgroundWrites
from memory_core.chat.metrics import decision_values
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import RouterConfig
from memory_core.cpu_pool import favour_the_event_loop
from memory_core.curation.llm import http_complete
from memory_core.tracing import setup_tracing

from ...metrics import RayMetrics
from ...serve_env import check_peer_addresses, serve_http_host
from ...store_pool import StorePoolClient
from ...upstream import UpstreamRouter
from ..audit_hook import AuditRecorder, configure_recorder
from ..event_feed import open_feed
from ..fastapi_app import app
from ..headers import configure_allowed_origins
from ..limits import REQUEST_LIMITS, configure_limits
from ..mcp_server import McpEndpoint
from .admin import AdminRoutes
from .chat import ChatRoutes
from .mcp import McpRoutes
from .memory import MemoryRoutes
from .service import ServiceRoutes

__all__ = ["REQUEST_LIMITS", "MemoryIngress", "app"]

DRAIN_TIMEOUT_S = 15.0
"""How long a stopping replica waits for the turns it is still storing. Serve's
``graceful_shutdown_timeout_s`` (40 s for this deployment, ``deployments.app.DEPLOYMENT_OPTIONS``)
counts from the stop and covers the in-flight requests and this drain together: at it the
replica is killed."""


@serve.deployment
@serve.ingress(app)
class MemoryIngress(ChatRoutes, MemoryRoutes, AdminRoutes, ServiceRoutes, McpRoutes):
    """Args: ``config`` (the validated config document), handles of ``Embedder``, ``StorePool``,
    (when ``global.upstream`` has no URL) ``EchoUpstream`` and (with curation on) the
    ``Consolidator`` loop. Each decision's requests go to its upstream (``UpstreamRouter``); a
    missing API key variable fails the replica's start. The routes are those of its route
    groups (``routes``); a new group is one more base class here.

    Overload is refused, not queued without bound: each replica runs at most
    ``max_ongoing_requests`` requests, and beyond ``max_queued_requests`` waiting in the
    proxy's queue Ray Serve answers 429 with ``Retry-After`` (``backpressure_config``; the
    defaults are ``deployments.app.DEPLOYMENT_OPTIONS``, which ``serve_config.yaml``
    overrides)."""

    async def __init__(self, config: RouterConfig, embedder, store_pool, echo=None, consolidator=None, webhooks=None):
        # HAProxy hides peer addresses: refuse a trusted_header service they would decide
        # (reading the HTTP host asks Serve's controller: awaited, not blocking the loop)
        await check_peer_addresses(config.global_.access, serve_http_host, os.environ)
        self._build(config, embedder, store_pool, echo, consolidator, webhooks)

    def _build(self, config: RouterConfig, embedder, store_pool, echo=None, consolidator=None, webhooks=None):
        """The constructor's part that asks nothing of other processes (the unit tests build
        an ingress outside a replica with it)."""
        self.config = config
        setup_tracing(config.global_.tracing, "ingress")  # once per process; off without an OTLP endpoint
        favour_the_event_loop()  # extraction, the gate and injection run Python on pool threads
        self.embedder = embedder
        self.store = StorePoolClient(store_pool)
        self.store_pool = store_pool
        self.upstreams = UpstreamRouter(config, echo)
        self.consolidator = consolidator  # the background loop (deployed with the application)
        self.metrics = RayMetrics(decision_values(config))
        access = config.global_.access
        self.registry = KeyRegistry(access.api_keys.path)
        self.auth = Authenticator(access, self.registry, os.environ)
        self.audit = AuditRecorder(AuditLog(config.global_.audit.path), self.auth, self.metrics)
        # this process's middleware settings, through module functions (limits.configure_limits
        # says why: the served application is a pickled copy of ``app``)
        configure_recorder(self.audit)  # read by audit_hook.AuditHook
        configure_allowed_origins(access.allowed_origins)  # read by headers.BrowserGuard
        self.write_limit = WriteRateLimiter(access.write_rate_limit.limit, access.write_rate_limit.window_s)
        self.limits = config.global_.limits
        configure_limits(self.limits)  # read by limits.BodyLimit
        self._known_users: set[str] = set()
        llm = self.config.memory.extraction.llm
        complete = None
        if llm.enabled:  # the LLM extractor: its own endpoint, or the application's upstream
            complete = http_complete(llm) if llm.base_url else self._complete_upstream
        self.background_writes = BackgroundWrites(self.limits.pending_writes_per_user, self.limits.pending_writes)
        self.pipeline = MemoryPipeline(
            self.config,
            store=self.store,
            metrics=self.metrics,
            complete=complete,
            admit_write=self._admit_chat_write,
            # a remote provider gets a turn's text only after the store's redaction (the
            # shard embeds it then); the local Embedder is part of this service
            embed_stored=self._embed_in_background if self.config.memory.embedding.remote is None else None,
        )
        self.events = open_feed(config)  # the lifecycle event feed (deployments/http/event_feed.py)
        self.webhooks = webhooks  # the WebhookDispatcher (deployed when webhooks are configured)
        self.mcp = McpEndpoint(self)  # the MCP server at /mcp (its tools call the REST routes' methods)

    async def __del__(self):
        """The replica stopping (Serve calls this after its requests drained): the turns of
        answers already sent are still stored, for at most ``DRAIN_TIMEOUT_S``."""
        writes = getattr(self, "background_writes", None)
        if writes is not None:
            await writes.drain(DRAIN_TIMEOUT_S)
