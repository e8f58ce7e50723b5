"""HybridStore under interleavings: an LRU eviction while a retrieve awaits, and writes
through the decorator landing while a retrieve's read of the store is out (found by review)."""

import asyncio

import pytest

from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.types import MemoryChanges
from tests.ids import tid, tname
from tests.memory_core.stores.test_hybrid import DIM, _turn, fake_embed, fake_vector, found, ids, opts, plain, put


class GatedQueryStore(InMemoryStore):
    """The query embedding of ``gate_user``'s next retrieve waits for ``release``."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.gate_user = None
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()

    async def embed_query(self, options):
        if options.user_id == self.gate_user:
            self.gate_user = None
            self.waiting.set()
            await self.release.wait()
        return await super().embed_query(options)


def zebra_query():
    return opts(query="quantum", embedding=fake_vector("zebra stripes pattern"), limit=2, lexical_weight=0.8)


@pytest.mark.parametrize("held_search_max", [10000, 0])
async def test_lexical_candidates_survive_an_eviction_during_the_query_embedding(held_search_max):
    inner = GatedQueryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(candidate_pool=1, max_users=1, held_search_max=held_search_max))
    await put(h, "a", "zebra stripes pattern")
    await put(h, "b", "quantum flux capacitor")
    await put(h, "c", "zebra stripes")  # the vector pool (2) is a and c: b comes from the lexical side
    await put(h, "x", "other user", user="u2")
    assert ids(await h.retrieve(zebra_query())) == ["b", "a"]
    inner.gate_user = "u1"
    task = asyncio.ensure_future(h.retrieve(zebra_query()))
    await asyncio.wait_for(inner.waiting.wait(), 3)
    await h.retrieve(opts(user="u2", query="other"))  # builds u2's index: evicts u1 (max_users=1)
    assert not h.index.has_user("u1")
    inner.release.set()
    assert ids(await asyncio.wait_for(task, 3)) == ["b", "a"]


class GatedReadStore(InMemoryStore):
    """The next armed ``get_many`` waits for ``before``, reads (a snapshot, as a backend
    returns), signals ``read`` and waits for ``after``."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.armed = False
        self.reached, self.before, self.read, self.after = (asyncio.Event() for _ in range(4))

    async def _get_many(self, memory_ids, user_id=None):
        if not self.armed:
            return await super()._get_many(memory_ids, user_id)
        self.armed = False
        self.reached.set()
        await self.before.wait()
        read = [m.model_copy(deep=True) for m in await super()._get_many(memory_ids, user_id)]
        self.read.set()
        await self.after.wait()
        return read


async def _update_during_a_winner_read(**kw) -> HybridStore:
    inner = GatedReadStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(candidate_pool=1, **kw))
    await put(h, "a", "volcano lair map")
    await put(h, "b", "penguin")
    await h.retrieve(opts(query="volcano"))  # builds the index
    inner.armed = True
    inner.before.set()
    task = asyncio.ensure_future(h.retrieve(opts(query="volcano lair map", limit=1)))
    await asyncio.wait_for(inner.read.wait(), 3)  # the winner "a" was read with its old content
    await h.update(tid("a"), "u1", MemoryChanges(content="penguin colony"))  # through the decorator, done
    inner.after.set()
    await asyncio.wait_for(task, 3)
    return h


async def test_a_read_older_than_an_update_through_the_decorator_does_not_reindex_the_old_version():
    # only without held records does a retrieve read its winners from the store
    loaded_all = await _update_during_a_winner_read(cache_vectors=False)
    assert ids(await loaded_all.retrieve(opts(query="penguin colony", limit=1))) == ["a"]


@pytest.mark.parametrize("held_search_max", [10000, 0])
async def test_forget_then_store_of_the_same_id_during_a_retrieve_keeps_the_new_memory(held_search_max):
    # held records: the winners are taken from the index after the last await of the ranking,
    # so writes through the decorator that land while it awaits are all seen
    inner = GatedQueryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(candidate_pool=1, held_search_max=held_search_max))
    await put(h, "a", "volcano lair map")
    await put(h, "b", "penguin")
    await h.retrieve(opts(query="volcano"))
    inner.gate_user = "u1"
    task = asyncio.ensure_future(h.retrieve(opts(query="volcano lair map", limit=1)))
    await asyncio.wait_for(inner.waiting.wait(), 3)
    await h.forget(tid("a"), "u1")
    await put(h, "a", "penguin colony")  # the id stored again, through the decorator
    inner.release.set()
    got = await asyncio.wait_for(task, 3)
    assert [r.memory.content for r in got if tname(r.memory.id) == "a"] in ([], ["penguin colony"])  # never the old one
    assert "a" in found(h, "u1", "penguin colony")
    assert ids(await h.retrieve(opts(query="penguin colony", limit=1))) == ["a"]


@pytest.mark.parametrize("held_search_max", [10000, 0])
async def test_neighbour_boost_survives_an_eviction_during_the_query_embedding(held_search_max):
    inner = GatedQueryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(neighbor_weight=0.5, max_users=1, held_search_max=held_search_max))
    for t in (
        _turn("t1", "Ann", "what did you research last month?", 0),
        _turn("t2", "Bob", "adoption agencies mostly", 1),
        _turn("t3", "Ann", "nice weather today", 2),
    ):
        await h.store(t)
    await put(h, "x", "other user", user="u2")
    q = opts(query="what did you research", limit=3)
    want = {r.memory.id: r.score for r in await h.retrieve(q, touch=False)}
    inner.gate_user = "u1"
    task = asyncio.ensure_future(h.retrieve(q, touch=False))
    await asyncio.wait_for(inner.waiting.wait(), 3)
    await h.retrieve(opts(user="u2", query="other"))  # evicts u1 (max_users=1)
    assert not h.index.has_user("u1")
    inner.release.set()
    got = {r.memory.id: r.score for r in await asyncio.wait_for(task, 3)}
    assert got == pytest.approx(want, abs=1e-6)


class CountingVectorSearches(InMemoryStore):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.searches = 0

    async def _search(self, options, vector):
        self.searches += 1
        return await super()._search(options, vector)


async def test_a_user_with_no_held_vectors_uses_the_held_search_not_the_backend():
    inner = CountingVectorSearches(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    assert await h.retrieve(opts(user="new", query="anything")) == []
    inner.searches = 0
    assert await h.retrieve(opts(user="new", query="anything")) == []
    assert inner.searches == 0
