"""``headers.BrowserGuard`` (plain ASGI middleware) on a small Starlette application: every
state-changing request is checked for its origin and body type before any route runs, with
the Serve route prefix (``root_path``) taken off the path, the allowed origins read from the
application's state, the service's own origin taken from ``Host`` and the ``X-Forwarded-*``
headers; reads and streamed answers pass untouched. The rules themselves are tested in
``tests/memory_core/test_access.py``; the routes of the real application in
``tests/deployments/test_access.py``."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from deployments.http.headers import BrowserGuard, route_path

JSON = {"content-type": "application/json"}


@pytest.fixture
def app():
    ran: list[str] = []

    async def write(request):
        ran.append(request.url.path)
        return JSONResponse({"ok": True})

    async def stream(request):
        ran.append(request.url.path)

        async def chunks():
            for i in range(3):
                yield f"data: {i}\n\n".encode()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    application = Starlette(
        routes=[
            Route("/v1/memory", write, methods=["GET", "POST", "DELETE"]),
            Route("/v1/memory/import", write, methods=["POST"]),
            Route("/v1/chat/completions", stream, methods=["POST"]),
        ],
        middleware=[Middleware(BrowserGuard, allowed_origins=lambda: allowed)],
    )
    allowed = {"https://review.example"}
    application.state.allowed = allowed
    application.state.ran = ran
    return application


def test_a_request_without_a_json_type_is_415_before_the_route(app):
    client = TestClient(app)
    for method in ("POST", "DELETE"):
        for headers in ({}, {"content-type": "text/plain"}, {"content-type": "multipart/form-data; boundary=x"}):
            r = client.request(method, "/v1/memory", content=b"{}", headers=headers)
            assert r.status_code == 415 and r.json() == {
                "error": {"code": "unsupported_media_type", "message": r.json()["error"]["message"]}
            }
    assert app.state.ran == []
    assert client.post("/v1/memory", content=b"{}", headers=JSON).status_code == 200
    assert client.delete("/v1/memory", headers=JSON).status_code == 200
    assert client.get("/v1/memory").status_code == 200  # a read needs no body type
    assert len(app.state.ran) == 3


@pytest.mark.parametrize("root_path", ["", "/gw"])
def test_the_import_takes_json_lines_under_any_route_prefix(app, root_path):
    client = TestClient(app, root_path=root_path)
    path = root_path + "/v1/memory/import"
    assert client.post(path, content=b"{}\n", headers={"content-type": "application/x-ndjson"}).status_code == 200
    assert client.post(path, content=b"{}\n", headers=JSON).status_code == 415
    assert (
        client.post(
            root_path + "/v1/memory", content=b"{}", headers={"content-type": "application/x-ndjson"}
        ).status_code
        == 415
    )


def test_route_path_takes_the_prefix_off_once():
    assert route_path({"path": "/gw/v1/memory/import", "root_path": "/gw"}) == "/v1/memory/import"
    assert route_path({"path": "/v1/memory/import", "root_path": "/gw"}) == "/v1/memory/import"  # already off
    assert route_path({"path": "/v1/memory/import", "root_path": ""}) == "/v1/memory/import"


def test_origins_own_forwarded_and_allowed(app):
    client = TestClient(app)  # http://testserver
    cases = [
        ({"origin": "http://testserver"}, 200),
        ({"origin": "http://testserver:80"}, 200),
        ({"origin": "https://testserver"}, 403),
        ({"origin": "https://evil.example"}, 403),
        ({"origin": "null"}, 403),
        ({"origin": "https://review.example"}, 200),  # app.state.allowed_origins
        ({"origin": "https://review.example", "sec-fetch-site": "cross-site"}, 200),
        ({"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, 403),
        ({"origin": "https://api.testserver", "sec-fetch-site": "same-site"}, 403),
        ({"sec-fetch-site": "same-origin"}, 200),
        # behind a proxy that terminates TLS and forwards the public host
        ({"origin": "https://memory.example", "x-forwarded-host": "memory.example", "x-forwarded-proto": "https"}, 200),
        ({"origin": "https://memory.example", "x-forwarded-host": "memory.example, internal:8000"}, 403),  # http
        ({"origin": "http://memory.example", "x-forwarded-host": "memory.example, internal:8000"}, 200),
    ]
    for headers, status in cases:
        r = client.post("/v1/memory", content=b"{}", headers=JSON | headers)
        assert r.status_code == status, (headers, r.text)
        if status == 403:
            assert r.json()["error"]["code"] == "forbidden"
    assert client.get("/v1/memory", headers={"origin": "https://evil.example"}).status_code == 200


def test_without_allowed_origins_none_are_allowed(app):
    app.state.allowed.clear()
    r = TestClient(app).post("/v1/memory", content=b"{}", headers=JSON | {"origin": "https://review.example"})
    assert r.status_code == 403


def test_a_streamed_answer_passes_through_whole(app):
    with TestClient(app).stream("POST", "/v1/chat/completions", content=b"{}", headers=JSON) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert list(r.iter_lines()) == ["data: 0", "", "data: 1", "", "data: 2", ""]
