"""``MemoryIngress``: the HTTP surface (FastAPI) — chat completions with memory (streamed or
not) forwarded to each decision's upstream, ``/v1/models``, the ``/v1/memory`` REST API,
``/v1/embeddings`` and ``/health``, assembled from the route groups of ``routes`` (chat,
memory REST, admin, service) on the one application ``fastapi_app.app``.

Thin by design: it validates input, resolves the caller (``caller.read_caller``), and calls
memory_core (``MemoryPipeline``), the ``Embedder``/``StorePool`` handles and the upstreams
(``deployments.upstream``; streams are relayed by ``streaming.relay``). Every error of its own
leaves as ``{"error": {"code", "message"}}`` with a 4xx/5xx status; the upstream's answers,
error statuses included, pass through as the upstream sent them.

The class and its ``@serve.ingress`` binding live in ``routes.assembly`` (why: see there);
this module is the name the application builder and the tests import.
"""

from .fastapi_app import app
from .limits import REQUEST_LIMITS
from .routes import MemoryIngress

__all__ = ["REQUEST_LIMITS", "MemoryIngress", "app"]
