"""``GET /v1/memory/export`` as the ingress serves it (``migration.open_export`` in a
``StreamingResponse``, the error handlers of ``deployments.http.errors``), over a real HTTP
server (uvicorn, in a thread) against a store whose ``list`` fails on its Nth page: a failure
before the first byte is a 503; a failure later ends the body with an error line and aborts
the chunked transfer, so no client can take a failed export for a complete (or empty) one."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from deployments.http.errors import install_error_handlers
from memory_core.errors import StoreUnavailable
from memory_core.migration import MigrationError, check_export_end, open_export
from memory_core.stores import InMemoryStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.testing.net import free_port
from memory_core.types import ListQuery, Memory

PAGE = 2


class FailingStore:
    """An in-memory store whose ``list`` raises ``StoreUnavailable`` from page ``fail_at``
    (1-based) of a user's export on (``None``: never)."""

    def __init__(self, fail_at: int | None):
        self.inner = InMemoryStore(embed=CountingEmbed(), dimension=DIM)
        self.fail_at = fail_at

    async def list(self, query: ListQuery):
        if self.fail_at is not None and query.offset // PAGE + 1 >= self.fail_at:
            raise StoreUnavailable("milvus store unavailable: the shard is restarting")
        return await self.inner.list(query)


def app_of(store: FailingStore) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/v1/memory/export")
    async def export() -> StreamingResponse:  # as ``MemoryRouterIngress.export_memories``
        return StreamingResponse(await open_export(store, "alice", page_size=PAGE), media_type="application/x-ndjson")

    return app


@pytest.fixture
def serve() -> Iterator:
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(store: FailingStore) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app_of(store), host="127.0.0.1", port=port, log_level="critical"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


def filled(fail_at: int | None, n: int = 5) -> FailingStore:
    store = FailingStore(fail_at)

    async def fill() -> None:
        for i in range(n):
            await store.inner.store(Memory(user_id="alice", content=f"fact number {i}"))

    asyncio.run(fill())
    return store


def read(url: str) -> tuple[int, list[str], Exception | None]:
    """Status, the lines received, and the transport error that cut the body (or None)."""
    lines: list[str] = []
    with httpx.stream("GET", f"{url}/v1/memory/export", timeout=10) as resp:
        try:
            lines.extend(line for line in resp.iter_lines() if line.strip())
        except httpx.TransportError as e:
            return resp.status_code, lines, e
        return resp.status_code, lines, None


def test_a_complete_export_ends_with_its_end_line(serve):
    status, lines, cut = read(serve(filled(None)))
    assert status == 200 and cut is None and len(lines) == 6
    assert check_export_end(lines[-1], len(lines)) == {"memories": 5, "unreadable": []}
    status, lines, cut = read(serve(filled(None, n=0)))  # an empty account says so
    assert status == 200 and cut is None and lines == ['{"end_of_export":{"memories":0,"unreadable":[]}}']


def test_a_failure_on_the_first_page_is_a_503(serve):
    resp = httpx.get(f"{serve(filled(1))}/v1/memory/export", timeout=10)
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
    assert resp.json()["error"]["code"] == "store_unavailable"


@pytest.mark.parametrize("fail_at", [2, 3])
def test_a_failure_midway_ends_with_an_error_line_and_a_cut_transfer(serve, fail_at):
    status, lines, cut = read(serve(filled(fail_at)))
    assert status == 200  # sent with the first page
    assert isinstance(cut, httpx.RemoteProtocolError)  # the chunked body was not ended
    assert len(lines) == PAGE * (fail_at - 1) + 1
    assert json.loads(lines[-1])["error"]["code"] == "store_unavailable"
    with pytest.raises(MigrationError, match="the export failed: store_unavailable"):
        check_export_end(lines[-1], len(lines))
    with pytest.raises(MigrationError, match="does not end with its end_of_export line"):
        check_export_end(lines[-2], len(lines) - 1)  # a reader that dropped the error line
