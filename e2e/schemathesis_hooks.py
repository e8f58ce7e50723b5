"""Schemathesis hooks of the fuzz test (loaded through ``SCHEMATHESIS_HOOKS``): how to send
an ``application/x-ndjson`` body (the import endpoint)."""

from __future__ import annotations

import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    """A generated string is sent as is (UTF-8, surrogates passed through so the service sees
    them); anything else as one JSON line."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return (json.dumps(value) + "\n").encode()
