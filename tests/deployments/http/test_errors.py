"""Every memory_core error reaches an HTTP client with its status (the one table,
``deployments.http.errors.STATUS``) and its code, also after crossing a Ray hop (a store shard
or the Embedder raising it in another process); Ray's own failures are 503 with
``Retry-After``, never 500."""

from __future__ import annotations

import json

import pytest
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError

from deployments.http.errors import RETRY_AFTER_S, STATUS, memory_error, ray_error
from memory_core.errors import ERROR_CLASSES, EmbeddingUnavailable, InvalidInput, MemoryError_, StoreUnavailable

EXPECTED = {
    "InvalidInput": (400, "invalid_request"),
    "MemoryNotFound": (404, "memory_not_found"),
    "DuplicateMemory": (409, "duplicate_memory"),
    "StateConflict": (409, "state_conflict"),
    "StoreClosed": (503, "store_closed"),
    "StoreUnavailable": (503, "store_unavailable"),
    "EmbeddingIdentityMismatch": (409, "embedding_identity_mismatch"),
    "EmbeddingUnavailable": (503, "embedding_unavailable"),
    "MigrationError": (500, "migration_failed"),
    "ConfigError": (500, "invalid_config"),
    "Unauthenticated": (401, "unauthorized"),
    "InvalidApiKey": (401, "invalid_api_key"),
    "Forbidden": (403, "forbidden"),
    "UntrustedIdentity": (403, "untrusted_identity"),
    "KeyNotFound": (404, "key_not_found"),
    "UnsupportedMediaType": (415, "unsupported_media_type"),
    "RateLimited": (429, "rate_limited"),
    "RequestTooLarge": (413, "request_too_large"),
    "AuditUnavailable": (503, "audit_unavailable"),
}


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_the_registry_and_the_status_table_hold_every_error_class():
    import memory_core.embedding
    import memory_core.migration  # noqa: F401

    concrete = {c for c in _subclasses(MemoryError_) if c.__module__.startswith("memory_core")}
    assert concrete == set(ERROR_CLASSES) == set(STATUS)
    assert {c.__name__ for c in ERROR_CLASSES} == set(EXPECTED)
    assert len({c.code for c in ERROR_CLASSES}) == len(ERROR_CLASSES)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
async def test_status_and_code_at_the_http_edge_and_across_a_ray_hop(cls):
    status, code = EXPECTED[cls.__name__]
    assert (STATUS[cls], cls.code) == (status, code)
    for error in (cls("boom"), RayTaskError("fn", "traceback", cls("boom")).as_instanceof_cause()):
        handler = ray_error if isinstance(error, RayTaskError) else memory_error
        response = await handler(None, error)
        assert response.status_code == status
        assert json.loads(response.body) == {"error": {"code": code, "message": "boom"}}
        assert (response.headers.get("retry-after") == str(RETRY_AFTER_S)) == (status in (503, 429))


async def test_ray_failures_are_503_with_retry_after():
    for exc in (ActorDiedError(), ActorUnavailableError("restarting", None)):
        response = await ray_error(None, exc)
        assert response.status_code == 503 and response.headers["retry-after"] == str(RETRY_AFTER_S)
        assert json.loads(response.body)["error"]["code"] == "service_unavailable"
    for cause in (InvalidInput("bad field"), EmbeddingUnavailable("endpoint down"), StoreUnavailable("gone")):
        remote = RayTaskError("fn", "traceback", cause).as_instanceof_cause()
        response = await ray_error(None, remote)
        assert response.status_code == STATUS[type(cause)]
        assert json.loads(response.body)["error"] == {"code": type(cause).code, "message": str(cause)}
