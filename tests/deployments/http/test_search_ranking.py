"""``POST /v1/memory/search`` through the real ingress application (its route, validation and
error handlers, without Ray): the options it hands the store carry the configured ranking
(``global.stores.memory.retrieval``, ``RetrievalSettings.ranking_options``) — the hybrid
switch, the lexical weight, the temporal boost, the second hop and the diversity weight —
whatever those settings are, beside the caller's own fields; a weight out of range in the
configuration never reaches a search (the configuration is refused)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from pydantic import ValidationError
from ray import serve
from starlette.testclient import TestClient

from deployments.http import audit_hook, ingress
from memory_core.config import RetrievalSettings, RouterConfig
from memory_core.types import MemoryState, RetrieveOptions


class RecordingStore:
    """A store client that answers every retrieve with no memory and keeps its options."""

    def __init__(self) -> None:
        self.asked: list[RetrieveOptions] = []

    async def retrieve(self, options: RetrieveOptions) -> list:
        self.asked.append(options)
        return []


def _config(retrieval: dict, data: Path | None = None) -> RouterConfig:
    """A configuration with ``retrieval`` as its ranking; its files (keys, audit) under
    ``data``, lifecycle events off."""
    data = data or Path("unused")
    return RouterConfig.model_validate(
        {
            "global": {
                "access": {"mode": "trusted_header", "api_keys": {"path": str(data / "access.sqlite")}},
                "audit": {"path": str(data / "audit.sqlite")},
                "stores": {"memory": {"retrieval": retrieval, "events": {"enabled": False}}},
            },
            "routing": {"decisions": [{"name": "default", "plugins": []}]},
        }
    )


def _search(monkeypatch: pytest.MonkeyPatch, data: Path, retrieval: dict, body: dict) -> tuple[int, RecordingStore]:
    """One search by ``alice`` against an ingress configured with ``retrieval`` (its files in
    ``data``): its status and the store that recorded what it was asked."""
    config = _config(retrieval, data)
    wrapper = ingress.MemoryIngress.func_or_class
    user_class = wrapper.__mro__[1]
    instance = object.__new__(user_class)  # the class under Serve's ASGI wrapper
    user_class._build(instance, config, None, None, echo=object())
    store = RecordingStore()
    instance.store = store
    monkeypatch.setattr(serve, "get_replica_context", lambda: types.SimpleNamespace(servable_object=instance))
    app = user_class.__init__.__globals__["app"]
    try:
        client = TestClient(app, client=("127.0.0.1", 40000), raise_server_exceptions=False)  # a trusted peer
        answer = client.post("/v1/memory/search", json=body, headers={"x-authz-user-id": "alice"})
    finally:
        instance.registry.close()
        instance.audit.log.close()
        audit_hook.configure_recorder(None)  # the process-wide recorder: nothing of this test stays
    return answer.status_code, store


DEFAULTS = RetrievalSettings()
RANKINGS = [
    # (the configured retrieval settings, what the store must be asked: hybrid, lexical
    # weight, temporal boost, second hop, diversity)
    ({}, (True, DEFAULTS.lexical_weight, True, True, DEFAULTS.diversity_weight)),
    (
        {"diversity_weight": 0.55, "hop_weight": 0.2, "lexical_weight": 0.7, "temporal_boost": False},
        (True, 0.7, False, True, 0.55),
    ),
    ({"diversity_weight": 0.0, "hop_weight": 0.0}, (True, DEFAULTS.lexical_weight, True, False, 0.0)),
    # no hop or diversity without hybrid, whatever their weights
    ({"hybrid": False, "diversity_weight": 0.4, "hop_weight": 0.3}, (False, DEFAULTS.lexical_weight, True, False, 0.0)),
]


@pytest.mark.parametrize(("retrieval", "asked"), RANKINGS)
def test_a_search_asks_the_store_for_the_configured_ranking(monkeypatch, tmp_path, retrieval, asked):
    status, store = _search(monkeypatch, tmp_path, retrieval, {"query": "where did I park", "limit": 7})
    assert status == 200
    [options] = store.asked
    fields = ("hybrid", "lexical_weight", "temporal_boost", "second_hop", "diversity")
    assert tuple(getattr(options, k) for k in fields) == asked
    assert set(fields) == set(DEFAULTS.ranking_options())  # every ranking field is checked
    assert (options.user_id, options.query, options.limit) == ("alice", "where did I park", 7)
    assert options.states == (MemoryState.ACTIVE,)


def test_the_defaults_turn_both_on():
    defaults = _config({}).global_.stores.memory.retrieval.ranking_options()
    assert defaults["second_hop"] is True
    assert defaults["diversity"] > 0


@pytest.mark.parametrize("retrieval", [{"diversity_weight": 1.5}, {"diversity_weight": -0.1}, {"hop_weight": -1}])
def test_a_weight_out_of_range_is_refused_with_the_configuration(retrieval):
    with pytest.raises(ValidationError):
        _config(retrieval)
