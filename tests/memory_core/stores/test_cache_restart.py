"""A restarted shard never reads what its predecessor cached: it does not know whose cache
invalidation failed before the restart, so an old entry could be stale."""

from __future__ import annotations

from memory_core.stores import InMemoryStore
from memory_core.stores.cache import CachingStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory, RetrieveOptions


async def test_a_new_cache_instance_ignores_entries_of_the_previous_process(valkey_server):
    inner = InMemoryStore(embed=CountingEmbed(), dimension=DIM)
    options = RetrieveOptions(user_id="u", query="tea", limit=5, threshold=-1)
    before = CachingStore(inner, url=valkey_server.url_db(2), prefix="restart:")
    m = await before.store(Memory(user_id="u", content="favourite tea is sencha"))
    assert [r.memory.id for r in await before.retrieve(options)] == [m.id]  # cached now
    # a delete whose invalidation never reached the cache (the cache was down, and then
    # the process that remembered it restarted)
    await inner.forget(m.id, "u")
    assert [r.memory.id for r in await before.retrieve(options)] == [m.id]  # the stale entry
    assert before.counters["hits"] == 1
    after = CachingStore(inner, url=valkey_server.url_db(2), prefix="restart:")
    assert await after.retrieve(options) == []
    assert after.counters["hits"] == 0 and after.counters["misses"] == 1
    await after.close()
