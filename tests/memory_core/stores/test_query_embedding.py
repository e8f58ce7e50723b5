"""``embed_query``: query texts may be embedded by another function than documents (the
store shard's own copy of the model, ``pool.query_embedding: in_shard``)."""

import pytest
from pydantic import ValidationError

from memory_core.config import MemoryStoreSettings
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory, MemoryChanges, RetrieveOptions
from tests.ids import tid


@pytest.mark.parametrize("hybrid", [False, True])
async def test_queries_use_embed_query_and_documents_use_embed(hybrid):
    documents, queries = CountingEmbed(), CountingEmbed()
    store = InMemoryStore(embed=documents, embed_query=queries, dimension=DIM)
    if hybrid:
        store = HybridStore(store)
    await store.store(Memory(id=tid("a"), user_id="u", content="the spare key hangs behind the blue door"))
    await store.update(tid("a"), "u", MemoryChanges(content="the spare key hangs behind the red door"))
    assert (documents.calls, queries.calls) == (2, 0)
    (hit,) = await store.retrieve(RetrieveOptions(user_id="u", query="spare key door", hybrid=hybrid))
    assert hit.memory.id == tid("a")
    assert (documents.calls, queries.calls) == (2, 1)


async def test_without_embed_query_queries_use_embed():
    embed = CountingEmbed()
    store = InMemoryStore(embed=embed, dimension=DIM)
    await store.store(Memory(id=tid("a"), user_id="u", content="blue door"))
    await store.retrieve(RetrieveOptions(user_id="u", query="door"))
    assert embed.calls == 2


def test_in_shard_query_embedding_needs_a_local_model():
    MemoryStoreSettings.model_validate({"pool": {"query_embedding": "in_shard"}})
    with pytest.raises(ValidationError, match="in_shard needs a local model"):
        MemoryStoreSettings.model_validate(
            {
                "pool": {"query_embedding": "in_shard"},
                "embedding": {"remote": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "dimension": 8}},
            }
        )
