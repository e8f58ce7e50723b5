"""Request body bounds (``deployments.http.limits.BodyLimit``, ``global.limits``): a body
above its route's limit is 413 ``request_too_large`` naming the limit and its key, by its
``Content-Length`` or, chunked, as soon as the bytes read pass the limit, and the
application is never called; a body within the limit reaches it unchanged."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request

from deployments.http.limits import BodyLimit, ConfiguredLimits, body_limit
from memory_core.config import LimitsSettings, load_config

LIMITS = LimitsSettings(
    chat_body_bytes=400,
    memories_body_bytes=300,
    import_body_bytes=200,
    update_body_bytes=100,
    search_body_bytes=50,
    other_body_bytes=20,
)


@pytest.fixture
def rig():
    """A FastAPI app behind ``BodyLimit`` that records every body it was given."""
    app = FastAPI()
    seen: list[bytes] = []

    @app.api_route("/{path:path}", methods=["GET", "POST", "PATCH", "DELETE"])
    async def echo(request: Request) -> dict:
        body = await request.body()
        seen.append(body)
        return {"bytes": len(body)}

    limits = ConfiguredLimits()
    limits.settings = LIMITS
    app.add_middleware(BodyLimit, limits=limits)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
    return client, seen


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("POST", "/v1/chat/completions", "chat_body_bytes"),
        ("POST", "/v1/memory", "memories_body_bytes"),
        ("POST", "/v1/memory/", "memories_body_bytes"),
        ("POST", "/v1/memory/import", "import_body_bytes"),
        ("POST", "/v1/memory/search", "search_body_bytes"),
        ("PATCH", "/v1/memory/mem_abc", "update_body_bytes"),
        ("POST", "/v1/embeddings", "other_body_bytes"),
        ("POST", "/v1/admin/keys", "other_body_bytes"),
        ("POST", "/v1/memory/mem_abc/restore", "other_body_bytes"),
        ("GET", "/v1/memory", "other_body_bytes"),
        ("PATCH", "/v1/memory/a/b", "other_body_bytes"),
    ],
)
async def test_each_route_has_its_limit_and_a_body_over_it_is_413_by_content_length(rig, method, path, key):
    client, seen = rig
    limit = getattr(LIMITS, key)
    assert body_limit(LIMITS, method, path) == (limit, key)
    ok = await client.request(method, path, content=b"x" * limit)
    assert ok.status_code == 200 and ok.json() == {"bytes": limit}
    refused = await client.request(method, path, content=b"x" * (limit + 1))
    assert refused.status_code == 413
    error = refused.json()["error"]
    assert error["code"] == "request_too_large"
    assert f"the limit is {limit} bytes (global.limits.{key})" in error["message"]
    assert seen == [b"x" * limit]  # the refused body never reached the application


async def test_a_chunked_body_is_counted_as_it_arrives_and_refused_past_the_limit(rig):
    client, seen = rig
    sent: list[int] = []

    async def chunks(n: int):
        for i in range(n):
            sent.append(i)
            yield b"y" * 64

    # no Content-Length: 64-byte chunks against the import limit of 200 bytes
    refused = await client.post("/v1/memory/import", content=chunks(100))
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large"
    assert len(sent) == 4  # refused at the 4th chunk (256 bytes > 200), the rest never read
    assert seen == []
    sent.clear()
    within = await client.post("/v1/memory/import", content=chunks(3))
    assert within.status_code == 200 and within.json() == {"bytes": 192}
    assert seen == [b"y" * 192]


async def test_the_defaults_apply_before_the_ingress_sets_its_limits():
    app = FastAPI()

    @app.post("/v1/memory/search")
    async def search(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    app.add_middleware(BodyLimit, limits=ConfiguredLimits())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        default = LimitsSettings().search_body_bytes
        assert (await client.post("/v1/memory/search", content=b"z" * default)).status_code == 200
        assert (await client.post("/v1/memory/search", content=b"z" * (default + 1))).status_code == 413


def test_limits_are_configuration_with_documented_defaults():
    limits = load_config({"global": {"limits": {"import_lines": 50}}}).global_.limits
    assert limits.import_lines == 50 and limits.memories_per_request == 256
    assert limits.memories_body_bytes == 1024 * 1024 and limits.chat_body_bytes == 4 * 1024 * 1024
    with pytest.raises(Exception, match="global.limits.memories_per_request"):
        load_config({"global": {"limits": {"memories_per_request": 5000}}})
    with pytest.raises(Exception, match="global.limits.bogus"):
        load_config({"global": {"limits": {"bogus": 1}}})
