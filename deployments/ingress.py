"""``MemoryIngress``: the HTTP surface (FastAPI) — chat completions with memory, the
``/v1/memory`` REST API, ``/v1/embeddings`` and ``/health``.

Thin by design: it validates input, resolves the caller, and calls memory_core
(``MemoryPipeline``) and the ``Embedder``/``StorePool``/upstream handles. Every error leaves as
``{"error": {"code", "message"}}`` with a 4xx/5xx status.
"""


import asyncio
import logging
import time
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from memory_core.api_models import (
    NO_SIMILARITY_FLOOR,
    MAX_EMBEDDING_INPUTS,
    CreateMemoriesRequest,
    EmbeddingsRequest,
    SearchRequest,
    UpdateMemoryRequest,
)
from memory_core.config import load_config
from memory_core.errors import InvalidInput, MemoryError_
from memory_core.migration import export_user, import_lines
from memory_core.openai_schema import ChatCompletionRequest
from memory_core.sanitize import clean_content, normalize_headers, require_user_id
from memory_core.service import USER_HEADER, EmbeddingBatch, MemoryPipeline, header
from memory_core.types import Memory, MemoryType, RetrieveOptions
from memory_core.upstream import HttpUpstream, UpstreamError

from .metrics import RayMetrics
from .store_pool import StorePoolClient

log = logging.getLogger("ray.serve")
app = FastAPI(title="memory-router", version="0.1.0")


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}})


@app.exception_handler(RequestValidationError)
async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
    return error_response(400, "invalid_request", "; ".join(parts) or "invalid request")


@app.exception_handler(MemoryError_)
async def _memory_error(_: Request, exc: MemoryError_) -> JSONResponse:
    return error_response(exc.http_status, exc.code, str(exc))


@app.exception_handler(StarletteHTTPException)
async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


@app.exception_handler(Exception)
async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error")
    return error_response(500, "internal_error", "internal error")


def server_timing(**seconds: float) -> str:
    """``Server-Timing`` header value (W3C Server Timing): ``name;dur=<ms>`` per step."""
    return ", ".join(f"{name};dur={value * 1000:.1f}" for name, value in seconds.items())


def request_headers(request: Request) -> dict[str, str]:
    """The request's headers through ``normalize_headers`` (400 on a repeated
    ``x-authz-user-id`` and the other headers this service acts on)."""
    return normalize_headers(request.headers.items())


def caller(request: Request) -> str:
    """The trusted caller id from ``x-authz-user-id`` (set by the gateway's auth); 401 if
    absent, 400 if repeated or malformed."""
    user_id = header(request_headers(request), USER_HEADER)
    if user_id is None:
        raise StarletteHTTPException(401, f"missing {USER_HEADER} header")
    return require_user_id(user_id, USER_HEADER)


def parse_types(values: list[str] | None) -> list[MemoryType] | None:
    """``?type=a,b&type=c`` → memory types; absent → None (no filter). An empty or unknown
    value is an error, never "no filter" (a typo must not widen a delete)."""
    if values is None:
        return None
    names = [v.strip() for part in values for v in part.split(",")]
    try:
        if not names or any(not n for n in names):
            raise ValueError
        return [MemoryType(n) for n in names]
    except ValueError as e:
        raise InvalidInput(f"type must be one of {[t.value for t in MemoryType]}") from e


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
@serve.ingress(app)
class MemoryIngress:
    """Args: ``config`` (the validated config document), handles of ``Embedder``, ``StorePool``
    and (when no upstream URL is configured) ``EchoUpstream``."""

    def __init__(self, config: dict, embedder, store_pool, echo=None):
        self.config = load_config(config)
        self.embedder = embedder
        self.store = StorePoolClient(store_pool)
        self.store_pool = store_pool
        upstream = self.config.global_.upstream
        self.http_upstream = HttpUpstream(upstream) if upstream.base_url else None
        self.echo = echo
        self.metrics = RayMetrics()
        self.pipeline = MemoryPipeline(self.config, store=self.store, metrics=self.metrics)
        self._background: set[asyncio.Task] = set()

    async def _embed(self, texts: list[str]) -> EmbeddingBatch:
        result = await self.embedder.embed.remote(texts)
        return EmbeddingBatch(embeddings=result["embeddings"], identity=result["identity"])

    def _in_background(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ chat
    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        try:
            raw = await request.json()
        except (ValueError, RecursionError):
            return error_response(400, "invalid_request", "body must be JSON (UTF-8, reasonably nested)")
        if not isinstance(raw, dict):
            return error_response(400, "invalid_request", "body must be a JSON object")
        try:
            parsed = ChatCompletionRequest.model_validate(raw)
        except Exception as e:
            raise RequestValidationError(getattr(e, "errors", lambda: [{"msg": str(e)}])()) from e
        if parsed.stream:
            return error_response(400, "unsupported", "stream=true is not supported by this service yet")
        prepared = await self.pipeline.prepare(raw, request_headers(request))
        try:
            if self.http_upstream is not None:
                upstream = await self.http_upstream.chat(prepared.body)
                status, body = upstream.status_code, upstream.body
            else:
                status, body = 200, await self.echo.chat.remote(prepared.body)
        except UpstreamError as e:
            return error_response(502, "upstream_error", str(e))
        if status == 200:
            self._in_background(self.pipeline.remember(prepared, body))
        headers = {"x-memory-injected": str(len(prepared.injected))}
        if prepared.timings_ms:
            headers["server-timing"] = server_timing(**{k: v / 1000 for k, v in prepared.timings_ms.items()})
        if prepared.skipped:
            headers["x-memory-skipped"] = prepared.skipped
        if prepared.policy.decision_name:
            headers["x-memory-decision"] = prepared.policy.decision_name
        return JSONResponse(status_code=status, content=body, headers=headers)

    # ------------------------------------------------------------------ memory REST
    @app.post("/v1/memory", status_code=201)
    async def create_memories(self, body: CreateMemoriesRequest, request: Request) -> JSONResponse:
        user_id = caller(request)
        contents = [clean_content(m.content) for m in body.memories]  # validate all before writing any
        batch = await self._embed(contents)
        memories = [
            Memory(
                content=content,
                type=m.type,
                user_id=user_id,
                project_id=m.project_id,
                metadata=m.metadata,
                importance=m.importance,
                conversation_id=m.conversation_id,
                source=m.source,
                created_at=m.created_at,
                created_via="api",
                created_by_user_id=user_id,
                embedding=vector,
                embedding_identity=batch.identity,
            )
            for m, content, vector in zip(body.memories, contents, batch.embeddings)
        ]
        stored = await self.store.store_many(memories)  # all-or-nothing, one round trip
        return JSONResponse(status_code=201, content={"memories": [m.public() for m in stored]})

    @app.post("/v1/memory/search")
    async def search_memories(self, body: SearchRequest, request: Request) -> JSONResponse:
        user_id = caller(request)
        settings = self.config.memory
        started = time.perf_counter()
        results = await self.store.retrieve(
            RetrieveOptions(
                user_id=user_id,
                query=body.query,  # embedded by the store shard, overlapping its lexical search
                project_id=body.project_id,
                types=tuple(body.types) if body.types else None,
                limit=body.limit or settings.default_retrieval_limit,
                threshold=NO_SIMILARITY_FLOOR if body.threshold is None else body.threshold,  # see SearchRequest
                hybrid=settings.retrieval.hybrid,
                lexical_weight=settings.retrieval.lexical_weight,
                temporal_boost=settings.retrieval.temporal_boost,
            )
        )
        done = time.perf_counter()
        return JSONResponse(
            content={
                "memories": [
                    {**r.memory.public(), "score": r.score, "similarity": r.similarity} for r in results
                ]
            },
            headers={"server-timing": server_timing(retrieve=done - started)},
        )

    @app.get("/v1/memory")
    async def list_memories(
        self,
        request: Request,
        limit: int = Query(50, gt=0, le=1000),
        offset: int = Query(0, ge=0),
        type: list[str] | None = Query(None),
        project_id: str | None = Query(None, min_length=1),
    ) -> dict:
        user_id = caller(request)
        page = await self.store.list(user_id, types=parse_types(type), project_id=project_id, limit=limit, offset=offset)
        return {"memories": [m.public() for m in page.memories], "total": page.total, "limit": limit, "offset": offset}

    @app.delete("/v1/memory")
    async def delete_scope(
        self,
        request: Request,
        type: list[str] | None = Query(None),
        project_id: str | None = Query(None, min_length=1),
        all: bool = Query(False),
    ) -> dict:
        """Delete the caller's memories matching ``type``/``project_id``; deleting everything
        needs an explicit ``all=true``. Unknown query parameters are rejected (a misspelled
        filter must not turn into "delete everything")."""
        user_id = caller(request)
        unknown = set(request.query_params) - {"type", "project_id", "all"}
        if unknown:
            raise InvalidInput(f"unknown query parameters: {sorted(unknown)}")
        types = parse_types(type)
        if types is None and project_id is None and not all:
            raise InvalidInput("give type and/or project_id, or all=true to delete every memory of the caller")
        deleted = await self.store.forget_by_scope(user_id, project_id=project_id, types=types)
        return {"deleted": deleted}

    @app.get("/v1/memory/export")
    async def export_memories(self, request: Request) -> StreamingResponse:
        """The caller's memories as JSONL (``migration.memory_to_export_line``, no vectors)."""
        return StreamingResponse(export_user(self.store, caller(request)), media_type="application/x-ndjson")

    @app.post("/v1/memory/import")
    async def import_memories(self, request: Request) -> dict:
        user_id = caller(request)
        try:
            text = (await request.body()).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput(f"import body must be UTF-8 JSONL: {e}") from e
        # split on "\n" only: str.splitlines() also splits inside JSON strings at U+2028/U+0085
        report = await import_lines(self.store, text.split("\n"), user_id=user_id)
        return report.model_dump()

    @app.get("/v1/memory/{memory_id}")
    async def get_memory(self, memory_id: str, request: Request) -> dict:
        return (await self.store.get(memory_id, caller(request))).public()

    @app.patch("/v1/memory/{memory_id}")
    async def update_memory(self, memory_id: str, body: UpdateMemoryRequest, request: Request) -> dict:
        user_id = caller(request)
        changes = body.changes()
        if not changes:
            raise InvalidInput("no fields to update")
        return (await self.store.update(memory_id, user_id, changes)).public()

    @app.delete("/v1/memory/{memory_id}")
    async def delete_memory(self, memory_id: str, request: Request) -> dict:
        await self.store.forget(memory_id, caller(request))
        return {"deleted": 1, "id": memory_id}

    # ------------------------------------------------------------------ embeddings, health
    @app.post("/v1/embeddings")
    async def embeddings(self, body: EmbeddingsRequest) -> JSONResponse:
        texts = body.texts()
        if not texts or len(texts) > MAX_EMBEDDING_INPUTS:
            raise InvalidInput(f"input must hold 1..{MAX_EMBEDDING_INPUTS} strings")
        if any(not t for t in texts):
            raise InvalidInput("input strings must be non-empty")
        result = await self.embedder.embed.remote(texts)
        return JSONResponse(
            content={
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(result["embeddings"])
                ],
                "model": result["model"],
                "model_identity": result["identity"],
                "truncated": result["truncated"],
                "usage": {"prompt_tokens": result["prompt_tokens"], "total_tokens": result["prompt_tokens"]},
            },
            headers={"x-model-identity": result["identity"]},
        )

    @app.get("/health")
    async def health(self) -> JSONResponse:
        checks: dict[str, Any] = {}
        try:
            checks["store"] = bool(await self.store_pool.check_connection.remote())
        except Exception as e:
            checks["store"] = False
            checks["store_error"] = repr(e)
        try:
            info = await self.embedder.info.remote()
            checks["embedder"] = True
            checks["model_identity"] = info.get("identity")
        except Exception as e:
            checks["embedder"] = False
            checks["embedder_error"] = repr(e)
        ok = checks["store"] and checks["embedder"]
        return JSONResponse(status_code=200 if ok else 503, content={"status": "ok" if ok else "degraded", **checks})
