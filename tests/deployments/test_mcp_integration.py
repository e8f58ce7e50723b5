"""The MCP server (``/mcp``) of the real application, driven by the ``mcp`` SDK's own client
over streamable HTTP: the tools listed with their schemas, each tool's happy path, two users
isolated from each other through every tool, bad arguments answered as tool errors with the
API's codes, and a request without identity refused 401 before the MCP layer.

The application runs in ``api_key`` mode (keys created in its key database before it
starts, as ``tests/deployments/test_access.py`` does); the identity code is the REST API's
(``MemoryIngress._caller``), which ``test_access.py`` checks in both modes."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from deployments.http.mcp_server import TOOL_NAMES
from memory_core.access import KeyRegistry
from memory_core.chat.inject import BLOCK_START
from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration

SECRET = "My locker code at the gym is 4817."
UPDATED = "My locker code at the gym is 5902."


@dataclass
class Rig:
    url: str
    keys: dict[str, str]
    users: dict[str, str]


@pytest.fixture(scope="module")
def rig(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_app

    tmp = tmp_path_factory.mktemp("mcp")
    registry = KeyRegistry(tmp / "access.sqlite")
    users = {"alice": f"alice-{uuid.uuid4().hex[:6]}", "bob": f"bob-{uuid.uuid4().hex[:6]}", "admin": "ops"}
    keys = {who: registry.create(user_id, "admin" if who == "admin" else "user")[0] for who, user_id in users.items()}
    config = {
        "global": {
            "stores": {
                "memory": {
                    "backend": "milvus",
                    "milvus": {"uri": str(tmp / "memory.db"), "collection": "mcp_memory"},
                    "pool": {"query_embedding": "in_shard"},
                }
            },
            "access": {"mode": "api_key", "api_keys": {"path": str(tmp / "access.sqlite")}},
        },
        "routing": {
            "decisions": [
                {
                    "name": "off",
                    "match": {"models": ["scratch"]},
                    "plugins": [{"type": "memory", "configuration": {"enabled": False}}],
                },
                {"name": "default", "plugins": [{"type": "memory", "configuration": {"similarity_threshold": 0.2}}]},
            ]
        },
    }
    serve.run(build_app({"config": config}), name="mcp-it", route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(url)
    yield Rig(url, keys, users)
    serve.delete("mcp-it")
    registry.close()


@asynccontextmanager
async def mcp_client(rig: Rig, who: str | None, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The SDK's client connected to ``/mcp`` as ``who`` (a key of ``rig.keys``; None: no identity)."""
    sent = ({"authorization": f"Bearer {rig.keys[who]}"} if who else {}) | (headers or {})
    async with httpx2.AsyncClient(headers=sent, timeout=60) as http:
        async with Client(streamable_http_client(f"{rig.url}/mcp", http_client=http)) as client:
            yield client


def ok(result: CallToolResult) -> dict:
    """The structured answer of a successful call (and its text block says the same)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_code(result: CallToolResult) -> str:
    """The API error code of a failed call; its text block carries the same error body."""
    assert result.is_error, result.structured_content
    body = result.structured_content
    assert body is not None and json.loads(result.content[0].text) == body
    return body["error"]["code"]


async def test_no_identity_is_refused_before_the_mcp_layer(rig):
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"accept": "application/json, text/event-stream"}
    bare = httpx.post(f"{rig.url}/mcp", json=initialize, headers=headers, timeout=30)
    assert bare.status_code == 401 and bare.json()["error"]["code"] == "unauthorized"
    # a client's own identity header is no identity in api_key mode
    claimed = httpx.post(
        f"{rig.url}/mcp", json=initialize, headers=headers | {"x-authz-user-id": rig.users["alice"]}, timeout=30
    )
    assert claimed.status_code == 401
    wrong = httpx.post(
        f"{rig.url}/mcp", json=initialize, headers=headers | {"authorization": "Bearer mr_" + "x" * 43}, timeout=30
    )
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(Exception):  # noqa: B017 - the SDK reports the 401 as its own error type
        async with mcp_client(rig, None) as client:
            await client.list_tools()
    # with a key the same request is served
    served = httpx.post(
        f"{rig.url}/mcp",
        json=initialize,
        headers=headers | {"authorization": f"Bearer {rig.keys['alice']}"},
        timeout=30,
    )
    assert served.status_code == 200, served.text
    assert served.json()["result"]["serverInfo"]["name"] == "memory-router"


async def test_tools_are_listed_with_schemas_and_descriptions(rig):
    async with mcp_client(rig, "alice") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == set(TOOL_NAMES)
    required = {
        "search_memories": ["query"],
        "add_memory": ["content"],
        "list_memories": [],
        "get_memory": ["memory_id"],
        "update_memory": ["memory_id"],
        "delete_memory": ["memory_id"],
        "memory_history": ["memory_id"],
        "memory_block_for_prompt": ["prompt"],
    }
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 20, name
        schema = tool.input_schema
        assert schema["type"] == "object" and sorted(schema.get("required", [])) == required[name], name
        assert "ctx" not in schema["properties"], name  # the SDK's context is not an argument
        assert "user_id" in schema["properties"], name  # the admin's owner override, as ?user_id=
        assert tool.output_schema is not None, name
    add = tools["add_memory"].input_schema["properties"]
    assert "semantic" in json.dumps(tools["add_memory"].input_schema["$defs"]) and "type" in add
    assert tools["search_memories"].input_schema["properties"]["limit"]["anyOf"][0]["maximum"] == 100
    assert tools["delete_memory"].annotations.destructive_hint is True
    assert tools["search_memories"].annotations.read_only_hint is True


async def test_each_tool_does_what_its_rest_route_does(rig):
    async with mcp_client(rig, "alice") as client:
        added = ok(await client.call_tool("add_memory", {"content": SECRET, "metadata": {"via": "mcp"}}))
        memory = added["memories"][0]
        assert added["outcomes"][0]["outcome"] == "created"
        assert memory["user_id"] == rig.users["alice"] and memory["created_via"] == "api"
        memory_id = memory["id"]

        got = ok(await client.call_tool("get_memory", {"memory_id": memory_id}))
        assert got["content"] == SECRET and got["metadata"] == {"via": "mcp"}

        page = ok(await client.call_tool("list_memories", {"limit": 10}))
        assert page["total"] == 1 and [m["id"] for m in page["memories"]] == [memory_id]

        found = ok(await client.call_tool("search_memories", {"query": "What is my gym locker code?", "limit": 3}))
        assert found["memories"][0]["id"] == memory_id and -1 <= found["memories"][0]["similarity"] <= 1

        block = ok(await client.call_tool("memory_block_for_prompt", {"prompt": "What is my gym locker code?"}))
        assert block["skipped"] is None and block["decision"] == "default"
        assert block["block"].startswith(BLOCK_START) and "4817" in block["block"]
        assert [m["id"] for m in block["memories"]] == [memory_id]
        off = ok(await client.call_tool("memory_block_for_prompt", {"prompt": "my locker code?", "model": "scratch"}))
        assert off == {"block": "", "memories": [], "skipped": "plugin_disabled", "decision": "off"}

        updated = ok(await client.call_tool("update_memory", {"memory_id": memory_id, "importance": 0.9}))
        assert updated["importance"] == 0.9 and updated["content"] == SECRET
        updated = ok(await client.call_tool("update_memory", {"memory_id": memory_id, "content": UPDATED}))
        assert updated["content"] == UPDATED

        history = ok(await client.call_tool("memory_history", {"memory_id": memory_id}))
        assert memory_id in [m["id"] for m in history["memories"]]

        deleted = ok(await client.call_tool("delete_memory", {"memory_id": memory_id}))
        assert deleted == {"deleted": 1, "id": memory_id}
        assert error_code(await client.call_tool("get_memory", {"memory_id": memory_id})) == "memory_not_found"
    # the REST API sees what the tools did
    rest = httpx.get(f"{rig.url}/v1/memory", headers={"authorization": f"Bearer {rig.keys['alice']}"}, timeout=30)
    assert rest.json()["total"] == 0


async def test_one_user_never_reaches_another_users_memories(rig):
    async with mcp_client(rig, "alice") as alice:
        memory_id = ok(await alice.call_tool("add_memory", {"content": SECRET}))["memories"][0]["id"]
    # bob sends alice's id as his identity header too: api_key mode ignores it
    async with mcp_client(rig, "bob", {"x-authz-user-id": rig.users["alice"]}) as bob:
        for name, extra in (
            ("get_memory", {}),
            ("update_memory", {"content": "Overwritten by someone else."}),
            ("delete_memory", {}),
            ("memory_history", {}),
        ):
            assert error_code(await bob.call_tool(name, {"memory_id": memory_id, **extra})) == "memory_not_found", name
        found = ok(await bob.call_tool("search_memories", {"query": "gym locker code 4817"}))
        assert memory_id not in [m["id"] for m in found["memories"]] and "4817" not in json.dumps(found)
        assert ok(await bob.call_tool("list_memories", {}))["total"] == 0
        block = ok(await bob.call_tool("memory_block_for_prompt", {"prompt": "What is my gym locker code?"}))
        assert "4817" not in json.dumps(block)
        # naming alice as the owner needs the admin role
        as_alice = {"memory_id": memory_id, "user_id": rig.users["alice"]}
        assert error_code(await bob.call_tool("get_memory", as_alice)) == "forbidden"
        assert error_code(await bob.call_tool("delete_memory", as_alice)) == "forbidden"
        assert error_code(await bob.call_tool("list_memories", {"user_id": rig.users["alice"]})) == "forbidden"
    async with mcp_client(rig, "admin") as admin:
        assert ok(await admin.call_tool("get_memory", as_alice))["content"] == SECRET
        # the admin's own memories do not hold it
        assert error_code(await admin.call_tool("get_memory", {"memory_id": memory_id})) == "memory_not_found"
    async with mcp_client(rig, "alice") as alice:
        assert ok(await alice.call_tool("get_memory", {"memory_id": memory_id}))["content"] == SECRET
        ok(await alice.call_tool("delete_memory", {"memory_id": memory_id}))


async def test_bad_arguments_are_tool_errors_with_the_api_codes(rig):
    async with mcp_client(rig, "bob") as client:
        own = ok(await client.call_tool("add_memory", {"content": "I prefer tea over coffee."}))["memories"][0]["id"]
        cases = [
            ("search_memories", {"query": ""}),
            ("search_memories", {"query": "x", "limit": 0}),
            ("search_memories", {"query": "x", "types": ["gossip"]}),
            ("search_memories", {}),
            ("add_memory", {"content": ""}),
            ("add_memory", {"content": "a fact", "importance": 2}),
            ("add_memory", {"content": "a fact", "surprise": True}),
            ("list_memories", {"limit": 5000}),
            ("update_memory", {"memory_id": own}),  # no field to change
            ("memory_block_for_prompt", {"prompt": "x" * 20000}),
            ("get_memory", {"memory_id": 42}),
            ("no_such_tool", {}),
        ]
        for name, arguments in cases:
            result = await client.call_tool(name, arguments)
            assert error_code(result) == "invalid_request", (name, arguments, result.structured_content)
        named = await client.call_tool("search_memories", {"query": "x", "limit": 0})
        assert "limit" in named.structured_content["error"]["message"]
        # an id of no memory (or of the wrong format) is "not found", as in the REST API
        assert error_code(await client.call_tool("get_memory", {"memory_id": "not-an-id"})) == "memory_not_found"
        assert error_code(await client.call_tool("get_memory", {"memory_id": "x", "user_id": ""})) == "invalid_request"
