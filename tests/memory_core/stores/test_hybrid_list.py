"""HybridStore.list: a loaded user's pages come from the held records, page for page what the
inner store lists (ids, order, totals, records), without a store call; the store answers
for a user not loaded and for one whose build met unreadable records."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.errors import DuplicateMemory, MemoryNotFound, StoreUnavailable
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HELD_RECORDS_PER_TURN, HybridStore
from memory_core.types import (
    ListQuery,
    ListResult,
    Memory,
    MemoryChanges,
    MemoryScope,
    MemoryState,
    MemoryType,
    RetrieveOptions,
)
from tests.ids import tid, tname
from tests.memory_core.stores.test_conformance import Q, rig  # noqa: F401 (rig: a fixture)
from tests.memory_core.stores.test_hybrid import DIM, fake_embed, plain

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROJECTS = [None, "p1", "p2"]


class CountingStore(InMemoryStore):
    """The in-memory store, counting its ``list`` calls of user u1."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.lists = 0

    async def list(self, query: ListQuery) -> ListResult:
        self.lists += query.user_id == "u1"
        return await super().list(query)


def _comparable(page: ListResult) -> tuple:
    """A page as ids in order, total, unreadable and each record without its vector (the held
    vector is the stored one as float32)."""
    records = [m.model_dump(exclude={"embedding"}) for m in page.memories]
    return [m.id for m in page.memories], page.total, page.unreadable, records


memory_specs = st.lists(
    st.tuples(
        st.integers(0, 5),  # created_at: a few distinct milliseconds, so ties are ordered by id
        st.sampled_from(list(MemoryType)),
        st.sampled_from(PROJECTS),
        st.sampled_from(["u1", "u2"]),
    ),
    min_size=1,
    max_size=25,
)
writes = st.lists(
    st.tuples(st.sampled_from(["state", "forget", "scope", "content"]), st.integers(0, 24), st.sampled_from(PROJECTS)),
    max_size=8,
)
queries = st.lists(
    st.builds(
        lambda project, types, states, limit, offset: ListQuery(
            user_id="u1", project_id=project, types=types, states=states, limit=limit, offset=offset
        ),
        st.sampled_from(PROJECTS),
        st.one_of(st.none(), st.lists(st.sampled_from(list(MemoryType)), max_size=2, unique=True)),
        st.one_of(st.none(), st.lists(st.sampled_from(list(MemoryState)), max_size=3, unique=True)),
        st.integers(1, 30),
        st.integers(0, 26),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=memory_specs, changes=writes, asked=queries)
def test_a_loaded_users_pages_are_the_stores_pages(specs, changes, asked):
    async def run() -> None:
        inner = CountingStore(embed=fake_embed, dimension=DIM)
        h = HybridStore(inner, **plain())
        stored = []
        for i, (ms, kind, project, user) in enumerate(specs):
            m = Memory(
                id=tid(f"m{i}"),
                user_id=user,
                content=f"note {i} about otters",
                type=kind,
                project_id=project,
                created_at=T0 + timedelta(milliseconds=ms),
            )
            stored.append(await h.store(m))
        await h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True, limit=3))  # loads u1
        for op, n, project in changes:  # writes through the decorator keep the held records
            target = stored[n % len(stored)]
            try:
                if op == "state":
                    await h.update(target.id, target.user_id, MemoryChanges(state=MemoryState.SUPERSEDED))
                elif op == "content":
                    await h.update(target.id, target.user_id, MemoryChanges(content=f"otters swim {n}"))
                elif op == "forget":
                    await h.forget(target.id, target.user_id)
                else:
                    await h.forget_by_scope(MemoryScope(user_id="u1", project_id=project, types=[target.type]))
            except MemoryNotFound:  # forgotten by an earlier write
                pass
        if not h.index.has_user("u1"):
            return  # u1 stored nothing: no index to serve from
        for q in asked:
            before = inner.lists
            held = await h.list(q)
            assert inner.lists == before  # answered from the held records
            assert _comparable(held) == _comparable(await inner.list(q)), q

    asyncio.run(run())


async def test_a_user_not_loaded_is_listed_by_the_store():
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await h.store(Memory(id=tid("a"), user_id="u1", content="otters hold hands"))
    assert not h.index.has_user("u1")
    page = await h.list(ListQuery(user_id="u1"))
    assert inner.lists == 1 and [m.id for m in page.memories] == [tid("a")]


async def test_a_build_that_met_unreadable_records_leaves_listing_to_the_store():
    class WithUnreadable(CountingStore):
        async def list(self, query: ListQuery) -> ListResult:
            page = await super().list(query)
            return page.model_copy(update={"unreadable": [tid("odd")], "total": page.total + 1})

    inner = WithUnreadable(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await h.store(Memory(id=tid("a"), user_id="u1", content="otters hold hands"))
    await h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True))
    assert h.index.has_user("u1")
    before = inner.lists
    page = await h.list(ListQuery(user_id="u1"))
    assert inner.lists == before + 1 and page.unreadable == [tid("odd")] and page.total == 2


async def test_a_long_page_is_copied_over_several_loop_turns_and_an_eviction_hands_it_to_the_store():
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, max_users=1, **plain())
    n = 8 * HELD_RECORDS_PER_TURN
    await h.store_many(
        [
            Memory(id=tid(f"m{i}"), user_id="u1", content=f"otter {i}", created_at=T0 + timedelta(seconds=i))
            for i in range(n)
        ]
    )
    await h.store(Memory(id=tid("b"), user_id="u2", content="badgers dig"))
    await h.retrieve(RetrieveOptions(user_id="u1", query="otter", hybrid=True))
    expected = _comparable(await inner.list(ListQuery(user_id="u1", limit=n)))
    assert expected[0][0] == tid(f"m{n - 1}")  # newest first

    turns = 0

    async def other_user() -> None:  # runs after the page's first turn, and evicts u1
        nonlocal turns
        turns += 1
        await h.retrieve(RetrieveOptions(user_id="u2", query="badgers", hybrid=True))

    before = inner.lists
    page, _ = await asyncio.gather(h.list(ListQuery(user_id="u1", limit=n)), other_user())
    assert turns == 1 and not h.index.has_user("u1")
    assert inner.lists == before + 1  # the page went to the store once u1 was evicted
    assert _comparable(page) == expected


class FailingAfter(CountingStore):
    """Raises ``StoreUnavailable`` from the next ``store`` after writing it (a timeout after the
    commit), or from the next ``forget`` before deleting."""

    fail_store = fail_forget = False

    async def store(self, memory: Memory) -> Memory:
        stored = await super().store(memory)
        if self.fail_store:
            raise StoreUnavailable("timed out after the commit")
        return stored

    async def forget(self, memory_id: str, user_id: str) -> None:
        if self.fail_forget:
            raise StoreUnavailable("the delete did not reach the backend")
        await super().forget(memory_id, user_id)


async def _loaded(inner: CountingStore) -> HybridStore:
    h = HybridStore(inner, **plain())
    await h.store(Memory(id=tid("a"), user_id="u1", content="otters hold hands", created_at=T0))
    await h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True))
    assert h.index.has_user("u1")
    return h


async def test_a_write_of_unknown_outcome_makes_the_store_list_again():
    inner = FailingAfter(embed=fake_embed, dimension=DIM)
    h = await _loaded(inner)
    inner.fail_store = True
    late = Memory(id=tid("b"), user_id="u1", content="otters sleep afloat", created_at=T0 + timedelta(seconds=1))
    with pytest.raises(StoreUnavailable):
        await h.store(late)
    assert not h.index.has_user("u1")  # dropped: the store holds "b", the index does not know it
    assert [m.id for m in (await h.list(ListQuery(user_id="u1"))).memories] == [tid("b"), tid("a")]
    inner.fail_store = False

    await h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True))  # built again, with "b"
    inner.fail_forget = True
    with pytest.raises(StoreUnavailable):
        await h.forget(tid("a"), "u1")
    assert not h.index.has_user("u1")  # "a" is still in the store
    await h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True))
    before = inner.lists
    page = await h.list(ListQuery(user_id="u1"))
    assert inner.lists == before and [m.id for m in page.memories] == [tid("b"), tid("a")]


async def test_a_refused_write_keeps_the_index():
    inner = FailingAfter(embed=fake_embed, dimension=DIM)
    h = await _loaded(inner)
    with pytest.raises(MemoryNotFound):
        await h.forget(tid("nothing"), "u1")
    with pytest.raises(DuplicateMemory):
        await h.store(Memory(id=tid("a"), user_id="u1", content="otters again"))
    assert h.index.has_user("u1")


async def test_an_index_built_across_a_write_of_unknown_outcome_is_not_installed():
    inner = FailingAfter(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await h.store(Memory(id=tid("a"), user_id="u1", content="otters hold hands", created_at=T0))
    gate = asyncio.Event()
    listed = inner.list

    async def slow_list(query: ListQuery) -> ListResult:
        page = await listed(query)
        await gate.wait()
        return page

    inner.list = slow_list  # type: ignore[method-assign]
    search = asyncio.ensure_future(h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True)))
    await asyncio.sleep(0.01)  # the build has read the store and waits
    inner.fail_store = True
    with pytest.raises(StoreUnavailable):
        await h.store(
            Memory(id=tid("b"), user_id="u1", content="otters sleep afloat", created_at=T0 + timedelta(seconds=1))
        )
    # a read after the failed write does not join that build: it starts one of its own
    later = asyncio.ensure_future(h.retrieve(RetrieveOptions(user_id="u1", query="otters", hybrid=True)))
    await asyncio.sleep(0.01)
    gate.set()
    assert "a" in [tname(r.memory.id) for r in await search]  # the first search still answers
    await later
    assert h.index.has_user("u1")  # the later build is installed, and it read the store after the write
    assert [m.id for m in (await h.list(ListQuery(user_id="u1"))).memories] == [tid("b"), tid("a")]


def _hybrid_of(store) -> HybridStore:
    while not isinstance(store, HybridStore):
        store = store.inner
    return store


async def test_on_each_hybrid_rig_a_loaded_users_pages_are_the_backends(rig):  # noqa: F811
    """The same comparison over the conformance suite's hybrid rigs (the in-memory store and
    Milvus Lite, each bare and behind the hot cache): the held records' pages against the
    backend's own, with created_at values that tie at the millisecond."""
    if not rig.hybrid:
        pytest.skip("hybrid rigs only")
    store = rig.open()
    h = _hybrid_of(store)
    rng = random.Random(7)
    written = []
    for i in range(40):
        m = Memory(
            id=tid(f"r{i}"),
            user_id="alice",
            content=f"note {i} about otters and tea",
            created_at=T0 + timedelta(milliseconds=rng.randint(0, 6)),
            project_id=rng.choice(PROJECTS),
            type=rng.choice(list(MemoryType)),
        )
        written.append(await store.store(m))
    await store.store(Memory(user_id="bob", content="bob's otters", created_at=T0))
    for m in rng.sample(written, 8):
        await store.update(m.id, "alice", MemoryChanges(state=MemoryState.QUARANTINED, state_reason="test"))
    await store.retrieve(Q(user_id="alice", query="otters", threshold=-1))
    assert h.index.has_user("alice")
    for project in PROJECTS:
        for types in (None, [MemoryType.SEMANTIC], [MemoryType.EPISODIC, MemoryType.PROCEDURAL]):
            for states in (None, [MemoryState.ACTIVE], [MemoryState.QUARANTINED]):
                for limit, offset in ((50, 0), (3, 2), (1, 0)):
                    q = ListQuery(
                        user_id="alice", project_id=project, types=types, states=states, limit=limit, offset=offset
                    )
                    held, stored = await h.list(q), await h.inner.list(q)
                    assert [m.id for m in held.memories] == [m.id for m in stored.memories], q
                    assert (held.total, held.unreadable) == (stored.total, stored.unreadable), q
                    assert [m.model_dump(exclude={"embedding"}) for m in held.memories] == [
                        m.model_dump(exclude={"embedding"}) for m in stored.memories
                    ], q


async def test_an_index_build_of_long_memories_reads_them_off_the_loop_puts_them_over_many_turns_and_queues_a_write(
    monkeypatch,
):
    """A user's index built from 40 memories of 15,000 characters (600,000 to tokenize and
    index): their texts are read (``IndexEntry.of``) on a thread other than the event loop's,
    the loop puts at most ``BUILD_CHARS_PER_TURN`` characters (and the memory that crosses it)
    between two turns of another task, and a memory written during the build is queued for it
    and is in the index it installs."""
    import threading

    from memory_core.stores.hybrid import BUILD_CHARS_PER_TURN
    from memory_core.stores.user_index import IndexEntry, UserIndex

    loop_thread = threading.get_ident()
    turns = 0  # turns another task of the loop got so far
    put_in_turn: dict[int, int] = {}  # turn → characters put by the build during it
    read_on: set[int] = set()  # threads that read the long memories' texts
    real_put_entry, real_of = UserIndex.put_entry, IndexEntry.of.__func__

    def counting_put_entry(self, memory, entry):
        if memory.id != tid("late"):
            put_in_turn[turns] = put_in_turn.get(turns, 0) + len(memory.content)
        return real_put_entry(self, memory, entry)

    def watched_of(cls, memory, represented):
        if memory.id != tid("late"):
            read_on.add(threading.get_ident())
        return real_of(cls, memory, represented)

    async def other_user():
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    monkeypatch.setattr(UserIndex, "put_entry", counting_put_entry)
    monkeypatch.setattr(IndexEntry, "of", classmethod(watched_of))
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    size = 15_000
    long = [
        Memory(id=tid(f"m{i}"), user_id="u1", content=f"otter {i} " + " ".join(f"w{i}x{k}" for k in range(2_500))[: size - 10],
               created_at=T0 + timedelta(seconds=i))
        for i in range(40)
    ]  # fmt: skip
    await inner.store_many(long)  # stored below the hybrid layer: u1 is not loaded
    assert not h.index.has_user("u1")
    ticking = asyncio.ensure_future(other_user())
    try:
        build = asyncio.ensure_future(h.retrieve(RetrieveOptions(user_id="u1", query="otter", hybrid=True)))
        while not put_in_turn:  # the build has begun putting
            await asyncio.sleep(0)
        await h.store(Memory(id=tid("late"), user_id="u1", content="badgers dig at night", created_at=T0))
        queued = h._work["u1"].build.building
        assert queued is not None and ("add", tid("late")) in [(op, getattr(arg, "id", None)) for op, arg in queued]
        await build
    finally:
        ticking.cancel()
    total = sum(len(m.content) for m in long)
    assert sum(put_in_turn.values()) == total
    assert len(put_in_turn) >= total // (BUILD_CHARS_PER_TURN + size)
    assert max(put_in_turn.values()) <= BUILD_CHARS_PER_TURN + size
    assert read_on and loop_thread not in read_on
    found = [s.memory.id for s in await h.retrieve(RetrieveOptions(user_id="u1", query="badgers", hybrid=True))]
    assert h.index.has_user("u1") and tid("late") in found
    await h.close()


@pytest.mark.parametrize("deletion", ["newest", "scope"])
async def test_a_deletion_during_a_build_of_several_pages_leaves_no_memory_out_of_the_index(deletion):
    """1,100 memories (two pages of ``MAX_LIST_LIMIT``): a memory of the first page deleted
    (or a scope deleted) while the build works through that page shifts the second page up a
    row; the build steps back over it, so the index it installs holds every stored memory
    (without the step back the first row of the second page was missing)."""
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    notes = [
        Memory(id=tid(f"m{i}"), user_id="u1", content=f"note {i} " + "lorem ipsum " * 80,
               project_id="p2" if i % 10 == 0 else None, created_at=T0 + timedelta(seconds=i))
        for i in range(1_100)
    ]  # fmt: skip
    for k in range(0, len(notes), 100):
        await inner.store_many(notes[k : k + 100])
    build = asyncio.ensure_future(h.retrieve(RetrieveOptions(user_id="u1", query="note", hybrid=True)))
    for _ in range(4):  # the build has read part of the first page and handed the loop over
        await asyncio.sleep(0)
    assert not build.done()
    if deletion == "newest":
        await h.forget(tid("m1099"), "u1")
    else:
        await h.forget_by_scope(MemoryScope(user_id="u1", project_id="p2"))
    await build
    ui = h.index.ready("u1")
    assert ui is not None
    stored = {m.id for page in [await inner.list(ListQuery(user_id="u1", limit=1_000, offset=o)) for o in (0, 1_000)]
              for m in page.memories}  # fmt: skip
    held = {m.id for m in notes if ui.corpus.attrs(m.id)}
    assert held == stored
    page = await h.list(ListQuery(user_id="u1", limit=10))
    assert page.total == len(stored)


async def test_a_store_closed_during_an_index_build_refuses_it_as_closed():
    """``close()`` while a user's index is being built (between two chunks of its texts): the
    build's read is refused with ``StoreClosed`` (503 to a caller, "rerun to resume" to an
    import), not the build thread's own error of a shut pool."""
    from memory_core.errors import StoreClosed

    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    long = [
        Memory(id=tid(f"m{i}"), user_id="u1", content=f"otter {i} " + "lorem ipsum dolor " * 850,
               created_at=T0 + timedelta(seconds=i))
        for i in range(40)
    ]  # fmt: skip
    await inner.store_many(long)
    real_list = inner.list
    closing: list[asyncio.Future] = []

    async def listing(query):
        page = await real_list(query)
        if not closing:  # the first page is read: close while its chunks are put
            closing.append(asyncio.ensure_future(h.close()))
        return page

    inner.list = listing
    with pytest.raises(StoreClosed):
        await h.retrieve(RetrieveOptions(user_id="u1", query="otter", hybrid=True))
    await closing[0]
