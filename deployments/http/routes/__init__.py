"""The ingress's routes in groups, one mixin class each, assembled in
``ingress.MemoryIngress`` (as ``ray.serve.llm``'s ingress assembles its route mixins):

- ``chat.ChatRoutes``: ``/v1/chat/completions``, ``/v1/models``;
- ``memory.MemoryRoutes``: the ``/v1/memory`` REST API;
- ``admin.AdminRoutes``: ``/v1/me`` and the ``/v1/admin`` operator routes;
- ``service.ServiceRoutes``: ``/v1/embeddings``, ``/health``, ``/ui``;
- ``mcp.McpRoutes``: ``/mcp``, the MCP server (``mcp_server``).

Each module registers its routes on ``fastapi_app.app`` when imported; ``@serve.ingress``
then binds every route whose method belongs to a class of ``MemoryIngress``'s MRO. They are
imported here in the order the routes are matched and documented. ``base.IngressBase`` holds
the shared state and the caller checks.
"""

from .chat import ChatRoutes  # isort: split

from .memory import MemoryRoutes  # isort: split

from .admin import AdminRoutes  # isort: split

from .service import ServiceRoutes  # isort: split

from .mcp import McpRoutes

__all__ = ["AdminRoutes", "ChatRoutes", "McpRoutes", "MemoryRoutes", "ServiceRoutes"]

# Last, and on purpose: the assembled class and its ``@serve.ingress`` binding (see
# ``assembly``), so that importing any route group binds every route.
from .assembly import MemoryIngress

__all__ += ["MemoryIngress"]
