"""Every memory_core error reaches an HTTP client with its own status and code, also after
crossing a Ray hop (the wire form of a store shard's answer, or a ``RayTaskError`` raised
in another process); Ray's own failures are 503 with ``Retry-After``, never 500."""

from __future__ import annotations

import json

import pytest
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError

from deployments.ingress import RETRY_AFTER_S, _memory_error, _ray_error
from memory_core.errors import (
    ERROR_CLASSES,
    EmbeddingUnavailable,
    InvalidInput,
    MemoryError_,
    StoreUnavailable,
    error_from_wire,
    error_to_wire,
)

EXPECTED = {
    "InvalidInput": (400, "invalid_request"),
    "MemoryNotFound": (404, "memory_not_found"),
    "DuplicateMemory": (409, "duplicate_memory"),
    "StoreClosed": (503, "store_closed"),
    "StoreUnavailable": (503, "store_unavailable"),
    "EmbeddingIdentityMismatch": (409, "embedding_identity_mismatch"),
    "EmbeddingUnavailable": (503, "embedding_unavailable"),
    "MigrationError": (500, "migration_failed"),
    "ConfigError": (500, "invalid_config"),
}


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_the_registry_holds_every_error_class():
    import memory_core.embedding  # noqa: F401 - modules that once defined their own errors
    import memory_core.migration  # noqa: F401

    concrete = {c for c in _subclasses(MemoryError_) if c.__module__.startswith("memory_core")}
    assert concrete == set(ERROR_CLASSES)
    assert {c.__name__ for c in ERROR_CLASSES} == set(EXPECTED)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
async def test_status_and_code_survive_the_wire_and_the_http_edge(cls):
    status, code = EXPECTED[cls.__name__]
    assert (cls.http_status, cls.code) == (status, code)
    rebuilt = error_from_wire(error_to_wire(cls("boom")))
    assert type(rebuilt) is cls and str(rebuilt) == "boom"
    response = await _memory_error(None, rebuilt)
    assert response.status_code == status
    assert json.loads(response.body) == {"error": {"code": code, "message": "boom"}}
    assert (response.headers.get("retry-after") == str(RETRY_AFTER_S)) == (status == 503)


async def test_ray_failures_are_503_with_retry_after_and_remote_errors_keep_their_status():
    for exc in (ActorDiedError(), ActorUnavailableError("restarting", None)):
        response = await _ray_error(None, exc)
        assert response.status_code == 503 and response.headers["retry-after"] == str(RETRY_AFTER_S)
        assert json.loads(response.body)["error"]["code"] == "service_unavailable"
    for cause in (InvalidInput("bad field"), EmbeddingUnavailable("endpoint down"), StoreUnavailable("gone")):
        remote = RayTaskError("fn", "traceback", cause).as_instanceof_cause()
        assert isinstance(remote, type(cause))
        response = await _ray_error(None, remote)
        assert response.status_code == type(cause).http_status
        assert json.loads(response.body)["error"]["code"] == type(cause).code
