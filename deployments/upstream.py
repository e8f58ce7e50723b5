"""Forwarding chat requests to an OpenAI-compatible upstream over HTTP (httpx)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from memory_core.config import UpstreamSettings


@dataclass
class UpstreamResponse:
    """Status code and JSON body of the upstream's answer (returned to the client unchanged)."""

    status_code: int
    body: Any


class UpstreamError(RuntimeError):
    """The upstream could not be reached or did not answer JSON (→ HTTP 502)."""


class HttpUpstream:
    """``POST {base_url}/chat/completions`` with the configured bearer key.

    ``base_url`` includes the API prefix, e.g. ``http://vllm:8000/v1``.
    """

    def __init__(self, settings: UpstreamSettings):
        if not settings.base_url:
            raise ValueError("upstream.base_url is required for HttpUpstream")
        headers = {}
        if settings.api_key_env and os.environ.get(settings.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[settings.api_key_env]}"
        self._client = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/"), headers=headers, timeout=settings.timeout_s
        )

    async def chat(self, body: dict[str, Any]) -> UpstreamResponse:
        """Forward ``body``; raises ``UpstreamError`` on transport errors or a non-JSON body."""
        try:
            response = await self._client.post("/chat/completions", json=body)
        except httpx.HTTPError as e:
            raise UpstreamError(f"upstream unreachable: {e!r}") from e
        try:
            return UpstreamResponse(response.status_code, response.json())
        except ValueError as e:
            raise UpstreamError(f"upstream answered {response.status_code} without JSON") from e

    async def aclose(self) -> None:
        await self._client.aclose()
