"""Every written copy of the store contract in memory_core takes the typed values:
``list(query: ListQuery)``, ``forget_by_scope(scope: MemoryScope)`` and
``update(memory_id, user_id, changes: MemoryChanges)`` (the store pool's shard and client:
``tests/deployments/test_store_pool.py``). Read from the signatures, so a copy that goes back
to loose arguments fails here."""

from __future__ import annotations

import inspect

import pytest

from memory_core.stores.base import MemoryStore, Store, StoreDecorator
from memory_core.stores.cache import CachingStore
from memory_core.stores.curating import CuratingStore
from memory_core.stores.hybrid import HybridStore
from memory_core.stores.inmemory import InMemoryStore
from memory_core.stores.milvus import MilvusStore
from memory_core.stores.qdrant import QdrantStore
from memory_core.stores.redacting import RedactingStore
from memory_core.stores.valkey import ValkeyStore

TYPED = {
    "list": [("query", "ListQuery")],
    "forget_by_scope": [("scope", "MemoryScope")],
    "update": [("memory_id", "str"), ("user_id", "str"), ("changes", "MemoryChanges")],
}


def contract_params(method) -> list[tuple[str, str]]:
    """``(name, annotation name)`` of ``method``'s parameters after ``self``, up to the first
    one with a default (a shard's ``request_id``; Ray's own tracing keyword)."""
    out = []
    for p in list(inspect.signature(method).parameters.values())[1:]:
        if p.default is not inspect.Parameter.empty or p.kind is not p.POSITIONAL_OR_KEYWORD:
            break
        out.append((p.name, getattr(p.annotation, "__name__", p.annotation)))
    return out


@pytest.mark.parametrize(
    "kind",
    [
        Store,
        MemoryStore,
        StoreDecorator,
        CachingStore,
        HybridStore,
        CuratingStore,
        RedactingStore,
        InMemoryStore,
        MilvusStore,
        QdrantStore,
        ValkeyStore,
    ],
    ids=lambda k: k.__name__,
)
def test_every_copy_of_the_contract_takes_the_typed_values(kind):
    assert {name: contract_params(getattr(kind, name)) for name in TYPED} == TYPED
