"""The MCP route group: ``/mcp``, the MCP server over streamable HTTP (``mcp_server``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..fastapi_app import app
from .base import IngressBase


class McpRoutes(IngressBase):
    """``/mcp``: the Model Context Protocol server whose tools call the memory REST routes'
    methods (README "MCP server"). Needs ``self.mcp`` (``mcp_server.McpEndpoint``), set by
    ``MemoryIngress.__init__``."""

    @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
    async def mcp_transport(self, request: Request) -> Response:
        """MCP over streamable HTTP (``mcp_server``; README "MCP server"): the caller is
        identified first, as for every memory route (401 without identity)."""
        self._caller(request)
        return await self.mcp.answer(request)
