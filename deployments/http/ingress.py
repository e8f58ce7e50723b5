"""``MemoryIngress``: the HTTP surface (FastAPI) — chat completions with memory (streamed or
not) forwarded to each decision's upstream, ``/v1/models``, the ``/v1/memory`` REST API,
``/v1/embeddings`` and ``/health``, assembled from the route groups of ``routes`` (chat,
memory REST, admin, service) on the one application ``fastapi_app.app``.

Thin by design: it validates input, resolves the caller (``caller.read_caller``), and calls
memory_core (``MemoryPipeline``), the ``Embedder``/``StorePool`` handles and the upstreams
(``deployments.upstream``; streams are relayed by ``streaming.relay``). Every error of its own
leaves as ``{"error": {"code", "message"}}`` with a 4xx/5xx status; the upstream's answers,
error statuses included, pass through as the upstream sent them.
"""

import asyncio
import os

from ray import serve

from memory_core.access import Authenticator, KeyRegistry, WriteRateLimiter
from memory_core.chat.metrics import decision_values
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import RouterConfig
from memory_core.curation.llm import http_complete

from ..metrics import RayMetrics
from ..store_pool import StorePoolClient
from ..upstream import UpstreamRouter
from .fastapi_app import REQUEST_LIMITS, app
from .routes import AdminRoutes, ChatRoutes, MemoryRoutes, ServiceRoutes

__all__ = ["REQUEST_LIMITS", "MemoryIngress", "app"]


@serve.deployment
@serve.ingress(app)
class MemoryIngress(ChatRoutes, MemoryRoutes, AdminRoutes, ServiceRoutes):
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

    def __init__(self, config: RouterConfig, embedder, store_pool, echo=None, consolidator=None):
        self.config = config
        self.embedder = embedder
        self.store = StorePoolClient(store_pool)
        self.store_pool = store_pool
        self.upstreams = UpstreamRouter(config, echo)
        self.consolidator = consolidator  # the background loop (deployed with the application)
        self.metrics = RayMetrics(decision_values(config))
        access = config.global_.access
        self.registry = KeyRegistry(access.api_keys.path)
        self.auth = Authenticator(access, self.registry, os.environ)
        app.state.allowed_origins = frozenset(access.allowed_origins)  # read by headers.BrowserGuard
        self.write_limit = WriteRateLimiter(access.write_rate_limit.limit, access.write_rate_limit.window_s)
        self.limits = config.global_.limits
        REQUEST_LIMITS.settings = self.limits
        self._known_users: set[str] = set()
        llm = self.config.memory.extraction.llm
        complete = None
        if llm.enabled:  # the LLM extractor: its own endpoint, or the application's upstream
            complete = http_complete(llm) if llm.base_url else self._complete_upstream
        self.pipeline = MemoryPipeline(
            self.config, store=self.store, metrics=self.metrics, complete=complete, admit_write=self._admit_chat_write
        )
        self._background: set[asyncio.Task] = set()
