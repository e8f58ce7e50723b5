"""The service's OpenAPI document: FastAPI's, patched once (``openapi_document``).

FastAPI's default 422 responses are removed (validation errors are answered 400 in the
``ErrorBody`` shape, which every operation declares); every operation declares the caller
headers (``headers.CALLER_HEADERS``; the chat endpoint also ``headers.CHAT_HEADERS``); the
chat request schema (``CHAT_SCHEMA``: the endpoint reads its body itself, to forward unknown
fields) is added to the components; the API key is the security scheme.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .headers import CALLER_HEADERS, CHAT_HEADERS
from .openai_schema import ChatCompletionRequest

CHAT_PATH = "/v1/chat/completions"
"""The operation that also declares ``CHAT_HEADERS``."""
SSE_EVENT_SCHEMA = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": 'a chat.completion.chunk (JSON), an error ({"error": {...}}, ends the stream) or [DONE]',
        },
        "event": {"type": "string"},
    },
}
"""One event of a streamed chat completion, as an SSE parser reads it."""
CHAT_SCHEMA = ChatCompletionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
"""The chat request body's JSON schema; its definitions (``CHAT_DEFS``) go to the components."""
CHAT_DEFS = CHAT_SCHEMA.pop("$defs", {})


def openapi_document(app: FastAPI) -> dict:
    """``app``'s OpenAPI document, patched as the module says; built on the first call and
    kept in ``app.openapi_schema``."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schema.setdefault("components", {}).setdefault("schemas", {}).update(CHAT_DEFS)
    for route, path in schema.get("paths", {}).items():
        for operation in path.values():
            if isinstance(operation, dict):
                operation.get("responses", {}).pop("422", None)
                headers = CALLER_HEADERS + (CHAT_HEADERS if route == CHAT_PATH else [])
                operation.setdefault("parameters", []).extend(headers)
    schema["components"]["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "global.access.mode api_key: an API key"}
    }
    schema["security"] = [{"apiKey": []}, {}]  # trusted_header mode: the gateway's headers instead
    for name in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(name, None)
    app.openapi_schema = schema
    return schema
