"""``ServiceRoutes``: ``/v1/embeddings`` (OpenAI embeddings of the service's model),
``/health`` (store and embedder reachable) and ``/ui`` (the memory review page)."""

import asyncio
import base64
from collections.abc import Awaitable
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from memory_core.errors import InvalidInput

from ..fastapi_app import app
from ..schemas import MAX_EMBEDDING_INPUTS, EmbeddingsOut, EmbeddingsRequest, HealthOut
from ..ui import review_page_response
from .base import IngressBase

HEALTH_CHECK_TIMEOUT_S = 3.0
"""How long ``/health`` waits for each of the store pool and the Embedder (seconds)."""


async def _answer(call: Awaitable[Any]) -> tuple[Any, str | None]:
    """``(result, None)`` when ``call`` answers within ``HEALTH_CHECK_TIMEOUT_S``, else
    ``(None, repr of the error)`` (``TimeoutError`` when it did not answer in time)."""
    try:
        return await asyncio.wait_for(call, HEALTH_CHECK_TIMEOUT_S), None
    except Exception as e:
        return None, repr(e)


class ServiceRoutes(IngressBase):
    """The embeddings, health and review page routes."""

    @app.post("/v1/embeddings", responses={200: {"model": EmbeddingsOut}})
    async def embeddings(self, body: EmbeddingsRequest, request: Request) -> JSONResponse:
        """OpenAI embeddings. The caller: a key in ``api_key`` mode; in ``trusted_header``
        mode an identity, or a request ``access.anonymous`` admits (``headers.admit_anonymous``)."""
        self._caller_or_anonymous(request)
        texts = body.texts()
        if not texts or len(texts) > MAX_EMBEDDING_INPUTS:
            raise InvalidInput(f"input must hold 1..{MAX_EMBEDDING_INPUTS} strings")
        if any(not t for t in texts):
            raise InvalidInput("input strings must be non-empty")
        result = await self._embed(texts)
        vectors: list = result.embeddings
        if body.encoding_format == "base64":  # what the openai client asks for by default
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        return JSONResponse(
            content={
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "model": result.model,
                "model_identity": result.identity,
                "truncated": result.truncated,
                "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
            },
            headers={"x-model-identity": result.identity},
        )

    @app.get("/health", responses={200: {"model": HealthOut}, 503: {"model": HealthOut}})
    async def health(self) -> JSONResponse:
        """Whether the store pool and the Embedder answer (with the model identity): 200
        ``ok`` when both do, else 503 ``degraded`` with each failure's ``repr``. The two are
        asked at once, each for at most ``HEALTH_CHECK_TIMEOUT_S`` (a replica that is
        restarting, or an Embedder at ``cpu_priority: idle`` on a saturated host, is a
        ``TimeoutError`` rather than a probe left waiting). Needs no caller."""
        (connected, store_error), (info, embedder_error) = await asyncio.gather(
            _answer(self.store_pool.check_connection.remote()), _answer(self.embedder.info.remote())
        )
        checks: dict[str, Any] = {"store": store_error is None and bool(connected), "embedder": embedder_error is None}
        if store_error is not None:
            checks["store_error"] = store_error
        if embedder_error is not None:
            checks["embedder_error"] = embedder_error
        else:
            checks["model_identity"] = (info or {}).get("identity")
        ok = checks["store"] and checks["embedder"]
        return JSONResponse(status_code=200 if ok else 503, content={"status": "ok" if ok else "degraded", **checks})

    @app.get("/ui", include_in_schema=False)
    async def review_page(self) -> Response:
        """The memory review page (``deployments/http/ui``): static HTML and JavaScript that sign
        in with an API key and call this API; answered with its Content-Security-Policy."""
        return review_page_response()
