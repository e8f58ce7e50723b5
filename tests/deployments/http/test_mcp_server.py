"""The MCP server's tools and error mapping without Ray (``deployments.http.mcp_server``):
the tool list and schemas, ``tool_error`` for each kind of failure, and argument errors
answered as tool errors before any ingress method runs. The tools' behaviour through the
running application is ``tests/deployments/test_mcp_integration.py``."""

from __future__ import annotations

import json

import pytest
from ray.exceptions import RayActorError

from deployments.http.errors import STATUS
from deployments.http.mcp_server import TOOL_NAMES, build_server, tool_error
from memory_core.errors import ERROR_CLASSES, MemoryNotFound, RateLimited


class NoIngress:
    """An ingress whose every use fails the test: argument errors must be answered first."""

    def __getattr__(self, name):
        pytest.fail(f"the ingress was used ({name}) for a call with bad arguments")


@pytest.fixture(scope="module")
def server():
    return build_server(NoIngress())


def body(result) -> dict:
    assert result.is_error
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content["error"]


async def test_tools_are_the_documented_ones_with_descriptions_and_no_context_argument(server):
    tools = await server.list_tools()
    assert [t.name for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert tool.description and tool.output_schema, tool.name
        assert "ctx" not in tool.input_schema["properties"], tool.name


@pytest.mark.parametrize("error_class", ERROR_CLASSES)
def test_every_memory_core_error_keeps_its_code(error_class):
    error = error_class("boom") if error_class is not RateLimited else RateLimited("slow down", 7)
    detail = body(tool_error(error))
    assert detail["code"] == error_class.code and error_class in STATUS
    assert detail["message"] == str(error)


def test_rate_limited_says_when_to_retry_and_ray_failures_are_unavailable():
    assert body(tool_error(RateLimited("slow down", 7)))["retry_after_s"] == 7
    assert body(tool_error(RayActorError()))["code"] == "service_unavailable"
    crash = body(tool_error(ValueError("secret detail")))
    assert crash == {"code": "internal_error", "message": "internal error"}


def test_not_found_message_is_plain():
    assert body(tool_error(MemoryNotFound("memory not found")))["message"] == "memory not found"


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("search_memories", {"query": ""}, "query"),
        ("search_memories", {"query": "x", "limit": 101}, "limit"),
        ("search_memories", {"query": "x", "states": []}, "states"),
        ("add_memory", {"content": "a fact", "type": "gossip"}, "type"),
        ("add_memory", {"content": "a fact", "projectid": "p"}, "projectid"),
        ("list_memories", {"offset": -1}, "offset"),
        ("get_memory", {}, "memory_id"),
        ("delete_memory", {"memory_id": "x", "user_id": ""}, "user_id"),
        ("memory_block_for_prompt", {"prompt": "x", "model": ""}, "model"),
    ],
)
async def test_bad_arguments_are_invalid_request_naming_the_field(server, name, arguments, field):
    detail = body(await server.call_tool(name, arguments))
    assert detail["code"] == "invalid_request" and field in detail["message"]


async def test_unknown_tool_is_invalid_request(server):
    detail = body(await server.call_tool("forget_everything", {}))
    assert detail["code"] == "invalid_request" and "forget_everything" in detail["message"]
