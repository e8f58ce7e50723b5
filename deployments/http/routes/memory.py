"""``MemoryRoutes``: the ``/v1/memory`` REST API — create, search, list, get, update and
delete memories, delete by scope, export and import (JSONL), and the lifecycle (history,
consolidation on demand, restore, unmerge). Every route acts on the memories of one owner
(``IngressBase._owner``: the caller, or another user for an admin)."""

import asyncio
import dataclasses
import time

from fastapi import Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from memory_core.errors import InvalidInput, RequestTooLarge
from memory_core.migration import ImportReport, count_import_lines, import_lines, open_export
from memory_core.sanitize import check_project_id
from memory_core.types import API_CREATED_VIA, ListQuery, Memory, MemoryScope, MemoryState, RetrieveOptions

from ..event_feed import DEFAULT_FEED_PAGE, MAX_FEED_PAGE, EventsOut, feed_page
from ..fastapi_app import app
from ..schemas import (
    NO_SIMILARITY_FLOOR,
    ConsolidationOut,
    CreateMemoriesRequest,
    DeletedOut,
    MemoriesOut,
    MemoryListOut,
    MemoryOut,
    MemoryPage,
    SearchOut,
    SearchRequest,
    UpdateMemoryRequest,
)
from .base import IngressBase, OwnerQuery, parse_states, parse_types, path_memory_id, server_timing


class MemoryRoutes(IngressBase):
    """The memory REST routes (``/v1/memory``)."""

    @app.post("/v1/memory", status_code=201, responses={201: {"model": MemoriesOut}})
    async def create_memories(
        self, body: CreateMemoriesRequest, request: Request, owner: OwnerQuery = None
    ) -> JSONResponse:
        """Write up to ``global.limits.memories_per_request`` memories (413 beyond) for the
        caller (``user_id``: another user's, admin only), each counted against the write limit
        up front; embedded in one batch (a small write by the user's store shard, see
        ``_embed_write``), then validated as a whole and curated one by one.
        201 with each memory, its ``types.WriteOutcome`` and the ids it superseded."""
        principal = self._caller(request)
        most = self.limits.memories_per_request
        if len(body.memories) > most:
            raise RequestTooLarge(
                f"this request holds {len(body.memories)} memories: the limit is {most} per request "
                "(global.limits.memories_per_request)"
            )
        user_id = self._write_as(request, principal, owner, len(body.memories))
        contents = [m.content for m in body.memories]  # cleaned and checked by the body model
        started = time.perf_counter()
        vectors, identity = await self._embed_write(user_id, contents)
        embedded = time.perf_counter()
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
                created_via=API_CREATED_VIA,
                created_by_user_id=principal.user_id,
                embedding=vector,
                embedding_identity=identity,
            )
            for m, content, vector in zip(body.memories, contents, vectors, strict=True)
        ]
        # validated as a whole first (nothing is written when one is refused), then each
        # curated: a fact already held reinforces its record, a new value supersedes
        results = await self.store.write(memories)
        written = time.perf_counter()
        return JSONResponse(
            status_code=201,
            headers={"server-timing": server_timing(embed=embedded - started, write=written - embedded)},
            content={
                "memories": [r.memory.public() for r in results],
                "outcomes": [
                    {"id": r.memory.id, "outcome": r.outcome.value, "superseded": r.superseded} for r in results
                ],
            },
        )

    @app.post("/v1/memory/search", responses={200: {"model": SearchOut}})
    async def search_memories(self, body: SearchRequest, request: Request, owner: OwnerQuery = None) -> JSONResponse:
        """The owner's memories most relevant to ``query`` (active ones unless ``states``
        says otherwise), ranked as ``global.stores.memory.retrieval`` sets, each with its
        ``score`` and ``similarity``; ``threshold`` absent: no similarity floor."""
        user_id = self._owner(request, owner)
        settings = self.config.memory
        started = time.perf_counter()
        results = await self.store.retrieve(
            RetrieveOptions(
                user_id=user_id,
                query=body.query,  # embedded by the store shard, overlapping its lexical search
                project_id=body.project_id,
                types=tuple(body.types) if body.types else None,
                states=tuple(body.states) if body.states else (MemoryState.ACTIVE,),
                limit=body.limit or settings.default_retrieval_limit,
                threshold=NO_SIMILARITY_FLOOR if body.threshold is None else body.threshold,  # see SearchRequest
                **settings.retrieval.ranking_options(),
            )
        )
        done = time.perf_counter()
        return JSONResponse(
            content={
                "memories": [
                    {
                        **r.memory.public(),
                        "score": r.score,
                        "similarity": r.similarity,
                        "resolved_from": r.resolved_from,
                    }
                    for r in results
                ]
            },
            headers={"server-timing": server_timing(retrieve=done - started)},
        )

    @app.get("/v1/memory", response_model=MemoryPage)
    async def list_memories(
        self,
        request: Request,
        limit: int = Query(50, gt=0, le=1000),
        offset: int = Query(0, ge=0),
        type: list[str] | None = Query(None),
        project_id: str | None = Query(None, min_length=1),
        state: list[str] | None = Query(None, description="lifecycle states (default: every state)"),
        owner: OwnerQuery = None,
    ) -> dict:
        """One page (``limit``, ``offset``) of the owner's memories matching ``type``,
        ``project_id`` and ``state``, with ``total`` and the count of rows that could not be
        read (``unreadable``)."""
        user_id = self._owner(request, owner)
        page = await self.store.list(
            ListQuery(
                user_id=user_id,
                types=parse_types(type),
                project_id=project_id,
                limit=limit,
                offset=offset,
                states=parse_states(state),
            )
        )
        return {
            "memories": [m.public() for m in page.memories],
            "total": page.total,
            "limit": limit,
            "offset": offset,
            "unreadable": page.unreadable,
        }

    @app.delete("/v1/memory", response_model=DeletedOut, response_model_exclude_none=True)
    async def delete_scope(
        self,
        request: Request,
        type: list[str] | None = Query(None),
        project_id: str | None = Query(None, min_length=1),
        all: bool = Query(False),
        owner: OwnerQuery = None,
    ) -> dict:
        """Delete the caller's memories matching ``type``/``project_id``; deleting everything
        needs an explicit ``all=true``. Unknown query parameters are rejected (a misspelled
        filter must not turn into "delete everything")."""
        user_id = self._owner(request, owner)
        unknown = set(request.query_params) - {"type", "project_id", "all", "user_id"}
        if unknown:
            raise InvalidInput(f"unknown query parameters: {sorted(unknown)}")
        scope = MemoryScope(user_id=user_id, project_id=project_id, types=parse_types(type))
        if scope.types is None and scope.project_id is None and not all:
            raise InvalidInput("give type and/or project_id, or all=true to delete every memory of the caller")
        return {"deleted": await self.store.forget_by_scope(scope)}

    @app.get(
        "/v1/memory/export",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "JSONL, one memory per line, then the end line "
                '{"end_of_export": {"memories", "unreadable"}}; a failure after the first line ends '
                'the body with {"error": {"code", "message"}} and aborts the transfer',
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            }
        },
    )
    async def export_memories(self, request: Request, owner: OwnerQuery = None) -> StreamingResponse:
        """The caller's memories as JSONL (``migration.memory_to_export_line``, no vectors),
        ending with the ``end_of_export`` line (``migration.open_export``): a failure reading
        the first page is an error status (503); a later one ends the body with an error line
        and aborts the chunked transfer (no end line)."""
        lines = await open_export(self.store, self._owner(request, owner))
        return StreamingResponse(lines, media_type="application/x-ndjson")

    @app.post(
        "/v1/memory/import",
        response_model=ImportReport,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-ndjson": {"schema": {"type": "string", "description": "export lines (JSONL)"}}
                },
            }
        },
    )
    async def import_memories(self, request: Request, owner: OwnerQuery = None) -> dict:
        """Import JSONL export lines into the caller's memories (``user_id``: into another
        user's, admin only). At most ``global.limits.import_lines`` non-blank lines (413
        beyond, nothing imported); each counts against the write limit, all up front."""
        principal = self._caller(request)
        principal.owner(owner)  # 403 before the body is read
        try:
            text = (await request.body()).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput(f"import body must be UTF-8 JSONL: {e}") from e
        # split on "\n" only: str.splitlines() also splits inside JSON strings at U+2028/U+0085
        lines = text.split("\n")
        user_id = self._write_as(request, principal, owner, count_import_lines(lines, self.limits.import_lines))
        report = await import_lines(self.store, lines, user_id=user_id, created_by=principal.user_id)
        return report.model_dump()

    @app.post("/v1/memory/consolidate", response_model=ConsolidationOut)
    async def consolidate(self, request: Request, owner: OwnerQuery = None) -> dict:
        """One consolidation pass now over the memories of ``user_id`` (default: the caller),
        admin only (the consolidation loop does it in the background for users with writes):
        near-duplicates merged, expired purged."""
        principal = self._admin(request, "consolidation on demand")
        report = await self.store.consolidate(principal.owner(owner))
        return dataclasses.asdict(report)

    @app.get("/v1/memory/{memory_id}/history", response_model=MemoryListOut)
    async def memory_history(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        """The versions of the fact ``memory_id`` holds, oldest first (what it superseded or
        merged, what superseded or merged it), every state."""
        user_id = self._owner(request, owner)
        chain = await self.store.history(path_memory_id(memory_id), user_id)
        return {"memories": [m.public() for m in chain]}

    @app.post("/v1/memory/{memory_id}/restore", response_model=MemoryOut)
    async def restore_memory(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        """Make a superseded, consolidated or quarantined memory active again (releasing a
        quarantined one, undoing a supersession); admin only. 400 when it is active already."""
        user_id = self._admin(request, "restoring a memory").owner(owner)
        return (await self.store.restore(path_memory_id(memory_id), user_id)).public()

    @app.post("/v1/memory/{memory_id}/unmerge", response_model=MemoryListOut)
    async def unmerge_memory(
        self,
        memory_id: str,
        request: Request,
        project_id: str | None = Query(None, min_length=1),
        owner: OwnerQuery = None,
    ) -> dict:
        """Undo a consolidation: the originals (the owner's memories consolidated into it)
        become active again and the merged memory is deleted; admin only. ``project_id``: only
        within that project (404 when the merged memory is elsewhere). 400 when ``memory_id``
        is not a merged memory."""
        user_id = self._admin(request, "undoing a consolidation").owner(owner)
        check_project_id(project_id)
        originals = await self.store.unmerge(path_memory_id(memory_id), user_id, project_id)
        return {"memories": [m.public() for m in originals]}

    @app.get("/v1/memory/{memory_id}/events", response_model=EventsOut)
    async def memory_events(
        self,
        memory_id: str,
        request: Request,
        cursor: str | None = Query(None),
        limit: int = Query(DEFAULT_FEED_PAGE, gt=0, le=MAX_FEED_PAGE),
        owner: OwnerQuery = None,
    ) -> dict:
        """The lifecycle events of the memory ``memory_id`` of ``user_id`` (default: the
        caller), oldest first, paginated (``event_feed``); deleted memories keep theirs. The
        feed's SQLite read runs off the event loop."""
        user_id = self._owner(request, owner)
        return await asyncio.to_thread(
            feed_page, self.events, user_id=user_id, memory_id=path_memory_id(memory_id), cursor=cursor, limit=limit
        )

    @app.get("/v1/memory/{memory_id}", response_model=MemoryOut)
    async def get_memory(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        """One memory of the owner, any state; 404 when it is not the owner's."""
        user_id = self._owner(request, owner)
        return (await self.store.get(path_memory_id(memory_id), user_id)).public()

    @app.patch("/v1/memory/{memory_id}", response_model=MemoryOut)
    async def update_memory(
        self, memory_id: str, body: UpdateMemoryRequest, request: Request, owner: OwnerQuery = None
    ) -> dict:
        """Change the given fields of one memory of the owner (``Store.update``); counts one
        write against the caller's write limit; 400 when no field is given."""
        user_id = self._write_as(request, self._caller(request), owner)
        memory_id = path_memory_id(memory_id)
        changes = body.changes()
        if not changes.model_fields_set:
            raise InvalidInput("no fields to update")
        return (await self.store.update(memory_id, user_id, changes)).public()

    @app.delete("/v1/memory/{memory_id}", response_model=DeletedOut)
    async def delete_memory(self, memory_id: str, request: Request, owner: OwnerQuery = None) -> dict:
        """Delete one memory of the owner; 404 when it is not the owner's."""
        user_id = self._owner(request, owner)
        await self.store.forget(path_memory_id(memory_id), user_id)
        return {"deleted": 1, "id": memory_id}
