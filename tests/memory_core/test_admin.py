"""The admin views from aggregate store queries (``memory_core.admin``): ``service_stats`` is
one store call whatever the number of users, ``users_page`` counts the page's users only, in
one ``totals`` call."""

from __future__ import annotations

import threading

import pytest

from memory_core.access import KeyRegistry
from memory_core.admin import MAX_USERS_PAGE, service_stats, users_page
from memory_core.errors import InvalidInput
from memory_core.stores import InMemoryStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import EVERYONE, Memory, MemoryChanges, MemoryState, MemoryType


class CallCounter:
    """A store that counts every call made to it (by method)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: dict[str, int] = {}

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        async def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return await method(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.calls.values())


async def seeded(tmp_path, users: int) -> tuple[CallCounter, KeyRegistry]:
    """A store and a registry with ``users`` users, the first ten holding memories."""
    store = InMemoryStore(embed=CountingEmbed(), dimension=DIM)
    registry = KeyRegistry(tmp_path / f"access-{users}.sqlite")
    for i in range(users):
        registry.note_user(f"user-{i:05d}")
    for i in range(10):
        await store.store(Memory(user_id=f"user-{i:05d}", content=f"my locker code is {1000 + i}"))
        await store.store(
            Memory(user_id=f"user-{i:05d}", content=f"I went hiking on day {i}", type=MemoryType.EPISODIC)
        )
    old = await store.store(Memory(user_id="user-00000", content="my locker code was 1"))
    await store.update(old.id, "user-00000", MemoryChanges(state=MemoryState.SUPERSEDED))
    registry.create("user-00001", "user")
    registry.create("admin", "admin")  # a key's user is a user seen
    return CallCounter(store), registry


@pytest.mark.parametrize("users", [10, 1000])
async def test_stats_are_one_store_call_whatever_the_number_of_users(tmp_path, users):
    store, registry = await seeded(tmp_path, users)
    stats = await service_stats(store, registry)
    assert store.calls == {"counts": 1}  # the previous implementation: 7 list calls per user
    assert stats == {
        "users": users + 1,
        "memories": 21,
        "by_state": {"active": 20, "superseded": 1, "consolidated": 0, "quarantined": 0},
        "by_type": {"semantic": 11, "procedural": 0, "episodic": 10},
        "keys": 2,
    }


async def test_a_users_page_counts_the_pages_users_only_in_one_store_call(tmp_path):
    store, registry = await seeded(tmp_path, 1000)
    page = await users_page(store, registry, limit=50, offset=0)
    assert store.calls == {"totals": 1}
    assert (page["total"], page["limit"], page["offset"], len(page["users"])) == (1001, 50, 0, 50)
    assert page["users"][0] == {"user_id": "admin", "memories": 0, "keys": 1}  # sorted by id
    assert page["users"][1] == {"user_id": "user-00000", "memories": 3, "keys": 0}
    assert page["users"][2] == {"user_id": "user-00001", "memories": 2, "keys": 1}
    last = await users_page(store, registry, limit=MAX_USERS_PAGE, offset=990)
    assert [u["user_id"] for u in last["users"]] == [f"user-{i:05d}" for i in range(989, 1000)]
    beyond = await users_page(store, registry, limit=10, offset=5000)
    assert beyond["users"] == [] and beyond["total"] == 1001
    for limit, offset in ((0, 0), (MAX_USERS_PAGE + 1, 0), (10, -1)):
        with pytest.raises(InvalidInput):
            await users_page(store, registry, limit=limit, offset=offset)


async def test_counts_for_everyone_is_never_a_user_id(tmp_path):
    store, _ = await seeded(tmp_path, 1)
    assert (await store.counts(EVERYONE)).total == 21
    assert (await store.counts("everyone")).total == 0  # a user called "everyone" is just a user


async def test_the_registry_is_read_on_a_worker_thread_not_on_the_event_loop(tmp_path):
    """The key registry's SQLite queries of both views run off the loop that serves every
    other request of the ingress replica."""
    store, registry = await seeded(tmp_path, 20)
    loop_thread = threading.get_ident()
    threads: dict[str, int] = {}
    for name in ("users", "user_count", "active_key_count"):
        real = getattr(registry, name)

        def recording(*args, _real=real, _name=name, **kwargs):
            threads[_name] = threading.get_ident()
            return _real(*args, **kwargs)

        setattr(registry, name, recording)
    await service_stats(store, registry)
    await users_page(store, registry, limit=5)
    assert set(threads) == {"users", "user_count", "active_key_count"}
    assert loop_thread not in threads.values()
