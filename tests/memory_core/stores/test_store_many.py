"""``store_many`` mechanics below the conformance suite: one lookup and one bulk write per
batch, lock order, the decorators' write-method rule, the Valkey all-or-nothing script and
the ``StorePoolClient`` route."""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest

from memory_core.errors import DuplicateMemory, InvalidInput
from memory_core.stores import InMemoryStore
from memory_core.stores.base import WRITE_METHODS, MemoryStore, StoreDecorator
from memory_core.stores.cache import CachingStore
from memory_core.stores.hybrid import HybridStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import ListQuery, Memory, MemoryScope
from tests.ids import tid, tnames

# public contract methods that do not change which memories exist or what they contain
NON_WRITE_METHODS = {
    "counts",
    "totals",
    "open",
    "close",
    "check_connection",
    "retrieve",
    "embed_query",
    "embed_documents",
    "same_content",
    "record_access",
    "get",
    "get_many",
    "list",
}


def mem(user: str, content: str, **kw) -> Memory:
    """A memory of ``user``; ``id`` (when given) is a test name, stored as ``tid(id)``."""
    if "id" in kw:
        kw["id"] = tid(kw["id"])
    return Memory(user_id=user, content=content, **kw)


class SpyStore(InMemoryStore):
    """InMemoryStore counting the backend hooks ``store_many`` may use."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.hooks: list[str] = []
        self.get_many_delay = 0.0

    async def _exists(self, memory_id):
        self.hooks.append("_exists")
        return await super()._exists(memory_id)

    async def _get_many(self, memory_ids, user_id=None):
        self.hooks.append("_get_many")
        if self.get_many_delay:
            await asyncio.sleep(self.get_many_delay)
        return await super()._get_many(memory_ids, user_id)

    async def _insert(self, memory):
        self.hooks.append("_insert")
        await super()._insert(memory)


async def test_one_lookup_one_embed_default_insert_many_loops_insert():
    embed = CountingEmbed()
    s = SpyStore(embed=embed, dimension=DIM)
    out = await s.store_many([mem("u", f"memory {i}", id=f"m{i}") for i in range(5)])
    assert tnames(m.id for m in out) == [f"m{i}" for i in range(5)]
    assert embed.calls == 1
    # one existence lookup for the batch; the default _insert_many writes each record
    assert s.hooks == ["_get_many"] + ["_insert"] * 5
    await s.close()


async def test_insert_many_override_receives_whole_batch():
    class Bulk(InMemoryStore):
        batches: list[list[str]] = []

        async def _insert(self, memory):  # pragma: no cover - must not be used
            raise AssertionError("store_many must go through _insert_many")

        async def _insert_many(self, memories):
            self.batches.append(tnames(m.id for m in memories))
            for m in memories:
                self._rows[m.id] = m

    s = Bulk(embed=CountingEmbed(), dimension=DIM)
    await s.store_many([mem("u", "a", id="a"), mem("u", "b", id="b")])
    assert s.batches == [["a", "b"]]
    await s.close()


async def test_batches_in_opposite_id_order_do_not_deadlock():
    """Two users' batches naming the same ids in opposite orders, with the existence check
    slowed down so both are inside their critical sections at once: ids are locked in sorted
    order, so one waits for the other instead of deadlocking."""
    s = SpyStore(embed=CountingEmbed(), dimension=DIM)
    s.get_many_delay = 0.02
    a = s.store_many([mem("alice", "x", id="x"), mem("alice", "y", id="y")])
    b = s.store_many([mem("bob", "y", id="y"), mem("bob", "x", id="x")])
    results = await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), timeout=5)
    assert sum(isinstance(r, list) for r in results) == 1
    assert sum(isinstance(r, DuplicateMemory) for r in results) == 1
    await s.close()


async def test_no_embedder_refuses_batch_without_vectors():
    s = InMemoryStore(embed=None, dimension=DIM)
    with pytest.raises(InvalidInput, match="embedder"):
        await s.store_many([mem("u", "needs a vector")])
    assert (await s.list(ListQuery(user_id="u"))).total == 0
    await s.close()


# ---------------------------------------------------------------------- decorators


def test_contract_methods_are_classified():
    """Every public method of the contract is either a write (decorators must override it)
    or known not to change stored data; StoreDecorator delegates all of them. A new write
    method added to MemoryStore fails here until it is classified."""
    public = {n for n, f in inspect.getmembers(MemoryStore, inspect.iscoroutinefunction) if not n.startswith("_")}
    # ``write`` writes through ``store_many`` (the decorator's own, in a decorator), so a
    # decorator that keeps ``store_many`` in step keeps ``write`` in step
    assert public == set(WRITE_METHODS) | NON_WRITE_METHODS | {"write"}
    for name in public:
        assert name in vars(StoreDecorator), f"StoreDecorator does not delegate {name}"


@pytest.mark.parametrize("cls", [CachingStore, HybridStore])
def test_stateful_decorators_override_every_write(cls):
    for name in WRITE_METHODS:
        assert getattr(cls, name) is not getattr(StoreDecorator, name), f"{cls.__name__}.{name} only delegates"


def test_decorator_missing_a_write_override_is_refused():
    with pytest.raises(TypeError, match="store_many"):

        class Forgetful(StoreDecorator):
            async def store(self, memory):
                return await self.inner.store(memory)

            async def update(self, memory_id, user_id, changes):
                return await self.inner.update(memory_id, user_id, changes)

            async def forget(self, memory_id, user_id):
                await self.inner.forget(memory_id, user_id)

            async def forget_by_scope(self, scope):
                return await self.inner.forget_by_scope(scope)

    class Passthrough(StoreDecorator, passthrough_writes=True):
        pass

    with pytest.raises(TypeError):

        class Sub(Passthrough):  # a subclass must opt out (or override) itself
            pass


async def test_passthrough_decorator_delegates_store_many():
    class Passthrough(StoreDecorator, passthrough_writes=True):
        pass

    inner = InMemoryStore(embed=CountingEmbed(), dimension=DIM)
    d = Passthrough(inner)
    out = await d.store_many([mem("u", "via decorator", id="d1")])
    assert tnames(m.id for m in out) == ["d1"] and (await inner.get(tid("d1"), "u")).content == "via decorator"
    await d.close()


# ---------------------------------------------------------------------- valkey script


async def test_valkey_insert_many_is_all_or_nothing(valkey_server):
    """The script re-checks every key: an id inserted by another process between the base's
    check and the write refuses the whole batch."""
    from memory_core.stores.valkey import ValkeyStore

    name = f"sm_{uuid.uuid4().hex[:8]}"
    s = ValkeyStore(url=valkey_server.url_db(0), prefix=f"{name}:", index=name, embed=CountingEmbed(), dimension=DIM)
    await s.open()
    try:
        first = await s.store(mem("u", "already there", id="v2"))
        batch = [
            m.model_copy(update={"embedding": [1.0] + [0.0] * (DIM - 1), "embedding_identity": None})
            for m in (mem("u", "one", id="v1"), mem("u", "two", id="v2"), mem("u", "three", id="v3"))
        ]
        batch = [s._normalise(m) for m in batch]
        with pytest.raises(DuplicateMemory, match=tid("v2")):
            await s._insert_many(batch)  # what a racing writer would meet
        assert tnames(m.id for m in await s.get_many([tid("v1"), tid("v2"), tid("v3")], "u")) == ["v2"]
        assert (await s.get(tid("v2"), "u")).content == first.content
        assert (await s.list(ListQuery(user_id="u"))).total == 1
        fresh = [s._normalise(m) for m in (b.model_copy(update={"id": tid(f"w{i}")}) for i, b in enumerate(batch))]
        await s._insert_many(fresh)
        lst = await s.list(ListQuery(user_id="u", limit=10))
        assert lst.total == 4 and set(tnames(m.id for m in lst.memories)) == {"v2", "w0", "w1", "w2"}
        assert (await s.get(tid("w1"), "u")).content == "two"
    finally:
        await s.forget_by_scope(MemoryScope(user_id="u"))
        await s.close()
