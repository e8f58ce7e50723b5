"""The structural rule of HybridStore's per-user index: a loaded user's reads (retrieve, get,
get_many, curation's candidate search) make no backend read; every write reaches the backend
before it is acknowledged, and one the backend refuses never reaches the index."""

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_core.config import CurationSettings, MemoryStoreSettings
from memory_core.errors import MemoryNotFound, StoreUnavailable
from memory_core.retrieval.lexical import BM25Corpus
from memory_core.stores import InMemoryStore, make_store
from memory_core.stores.hybrid import HybridStore
from memory_core.stores.user_index import UserIndex, UserIndexes, content_key
from memory_core.types import Memory, MemoryChanges, MemoryType, RetrieveOptions
from tests.ids import tid
from tests.memory_core.stores.test_hybrid import DIM, fake_embed, ids, opts, plain, put

READS = ("_get_many", "_search", "_list", "_owned_ids", "_scope_ids", "_counts")


def count_reads(backend) -> dict[str, int]:
    """Wrap the backend's read hooks on the instance; the returned dict counts their calls."""
    counts = dict.fromkeys(READS, 0)
    for name in READS:
        original = getattr(backend, name)

        async def counted(*args, _name=name, _original=original, **kw):
            counts[_name] += 1
            return await _original(*args, **kw)

        setattr(backend, name, counted)
    return counts


async def test_a_loaded_users_retrieve_get_and_get_many_make_no_backend_read():
    inner = InMemoryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    for mid, text in (("a", "volcano lair map"), ("b", "sunny beach"), ("c", "volcano")):
        await put(h, mid, text)
    await h.retrieve(opts(query="volcano"))  # builds the index: one list
    reads = count_reads(inner)
    got = await h.retrieve(opts(query="volcano lair map", limit=2))
    assert ids(got) == ["a", "c"]
    assert got[0].memory.access_count == 2  # this retrieve's access and the first one's
    one = await h.get(tid("b"), "u1")
    assert one.content == "sunny beach" and one.embedding is not None
    assert {m.id for m in await h.get_many([tid("a"), tid("b"), tid("zz")], "u1")} == {tid("a"), tid("b")}
    with pytest.raises(MemoryNotFound):
        await h.get(tid("zz"), "u1")
    with pytest.raises(MemoryNotFound):
        await h.get(tid("a"), "u2")  # another user: not loaded, asked of the store, not found
    assert reads["_search"] == 0
    assert reads["_get_many"] == 1  # only u2's get, which is not loaded


async def test_held_access_counts_follow_record_access_and_updates():
    inner = InMemoryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "a", "volcano lair map")
    await h.retrieve(opts(query="volcano"))
    await h.record_access([tid("a"), tid("a")], "u1")  # one access, as the store counts it
    await h.update(tid("a"), "u1", MemoryChanges(importance=0.9))  # the store's record lags its access log
    held = await h.get(tid("a"), "u1")
    h.index.drop_user("u1")
    stored = await h.get(tid("a"), "u1")  # not loaded: from the store, with its pending accesses
    assert (held.access_count, held.importance) == (stored.access_count, stored.importance) == (2, 0.9)


class GatedInsertStore(InMemoryStore):
    """The next armed insert waits for ``release`` (then fails when ``fail``)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.armed = self.fail = False
        self.waiting, self.release = asyncio.Event(), asyncio.Event()

    async def _insert(self, memory):
        if self.armed:
            self.armed = False
            self.waiting.set()
            await self.release.wait()
            if self.fail:
                raise StoreUnavailable("backend down")
        await super()._insert(memory)


@pytest.mark.parametrize("fail", [False, True])
async def test_a_write_reaches_the_backend_before_it_is_acknowledged_or_served(fail):
    inner = GatedInsertStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "a", "volcano lair map")
    await h.retrieve(opts(query="volcano"))
    inner.armed, inner.fail = True, fail
    write = asyncio.ensure_future(put(h, "b", "volcano crater"))
    await asyncio.wait_for(inner.waiting.wait(), 3)
    assert not write.done()
    with pytest.raises(MemoryNotFound):  # not acknowledged: not served either
        await h.get(tid("b"), "u1")
    assert ids(await h.retrieve(opts(query="volcano crater"))) == ["a"]
    inner.release.set()
    if fail:
        with pytest.raises(StoreUnavailable):
            await write
        assert ids(await h.retrieve(opts(query="volcano crater"))) == ["a"]
        return
    await write
    assert (await inner.get(tid("b"), "u1")).content == "volcano crater"  # in the backend
    assert ids(await h.retrieve(opts(query="volcano crater"))) == ["b", "a"]


async def test_curations_candidate_search_of_a_loaded_user_makes_no_backend_read():
    settings = MemoryStoreSettings(backend="inmemory", curation=CurationSettings(enabled=True))
    store = make_store(settings, embed=fake_embed, dimension=DIM)
    backend = store
    while hasattr(backend, "inner"):
        backend = backend.inner
    texts = ["I live in Boston", "my dog is called Rex", "I work as a nurse"]
    for i, text in enumerate(texts):
        await store.write([Memory(id=tid(f"m{i}"), user_id="u1", content=text, type=MemoryType.SEMANTIC)])
    reads = count_reads(backend)
    (result,) = await store.write(
        [Memory(id=tid("m9"), user_id="u1", content="my dog is called Rex", type=MemoryType.SEMANTIC)]
    )
    assert result.outcome.value == "reinforced"  # the candidate search found the duplicate
    hits = await store.retrieve(RetrieveOptions(user_id="u1", query="where do I live", hybrid=True, limit=2))
    assert hits
    assert reads["_search"] == reads["_list"] == 0
    # the reinforcing update reads the record it rewrites (the backend's own read-modify-write)
    assert reads["_get_many"] <= 1


def test_user_indexes_is_an_lru_of_ready_indexes():
    evicted = []
    lru = UserIndexes(max_users=2, on_evict=evicted.append)
    for user in ("a", "b", "c"):
        lru.put(user, UserIndex(BM25Corpus()))
    assert evicted == ["a"] and not lru.has_user("a") and lru.has_user("c")
    building = UserIndex(BM25Corpus(), building=[])
    lru.put("d", building)
    assert not lru.has_user("d") and lru.ready("d") is None and lru.get("d") is building
    with pytest.raises(ValueError):
        UserIndexes(max_users=0)


def _memory(i: int, *, project: str | None = None, type_: MemoryType = MemoryType.SEMANTIC) -> Memory:
    vec = [0.0] * DIM
    vec[i % DIM] = 1.0
    return Memory(
        id=f"m{i}", user_id="alice", type=type_, content=f"fact number {i}", project_id=project, embedding=vec
    )


def test_vector_mask_is_the_scope_of_the_held_rows_and_follows_every_change():
    ui = UserIndex(BM25Corpus())
    for i in range(6):
        ui.put(_memory(i, project="p" if i % 2 else None), represented=i != 4)
    mask = ui.vector_mask("p", None, None)
    # rows of project p (1, 3, 5); all represented
    assert sorted(ui.held._ids[r] for r in mask.nonzero()[0]) == ["m1", "m3", "m5"]
    assert ui.vector_mask("p", None, None) is mask  # kept while nothing changes
    # the unrepresentable memory (m4) is never a vector row, whatever the scope
    assert "m4" not in {ui.held._ids[r] for r in ui.vector_mask(None, None, None).nonzero()[0]}
    ui.remove("m3")
    after_remove = ui.vector_mask("p", None, None)
    assert after_remove is not mask
    assert sorted(ui.held._ids[r] for r in after_remove.nonzero()[0]) == ["m1", "m5"]
    ui.put(_memory(7, project="p"), represented=True)  # a new row
    assert sorted(ui.held._ids[r] for r in ui.vector_mask("p", None, None).nonzero()[0]) == ["m1", "m5", "m7"]
    ui.put(_memory(1, project="q"), represented=True)  # same row, another scope
    assert sorted(ui.held._ids[r] for r in ui.vector_mask("p", None, None).nonzero()[0]) == ["m5", "m7"]
    only_events = ui.vector_mask(None, (MemoryType.EPISODIC,), None)
    assert not only_events.any()


def test_held_top_with_a_mask_answers_as_with_the_same_filter_and_refuses_a_stale_mask():
    ui = UserIndex(BM25Corpus())
    for i in range(5):
        ui.put(_memory(i, project="p" if i < 3 else None), represented=True)
    q = np.zeros(DIM, dtype=np.float32)
    q[:5] = [0.1, 0.5, 0.2, 0.9, 0.3]
    q /= np.linalg.norm(q)
    mask = ui.vector_mask("p", None, None)
    by_keep = ui.held.top(q, 3, lambda i: ui.corpus.passes(i, "p"))
    assert ui.held.top(q, 3, allowed=mask) == by_keep == [(i, c) for i, c in by_keep]
    assert [i for i, _ in by_keep] == ["m1", "m2", "m0"]
    ui.put(_memory(9), represented=True)  # one more row: the old mask is of another layout
    with pytest.raises(ValueError, match="another version"):
        ui.held.top(q, 3, allowed=mask)


def _client_turn(name: str, conv: str | None, when: datetime, content: str = "Ann: hello") -> Memory:
    """A memory as a client writes it: content, created_at, conversation id; no metadata."""
    return Memory(id=tid(name), user_id="u1", content=content, conversation_id=conv, created_at=when)


def test_neighbours_group_by_conversation_and_time_gap_and_break_time_ties_by_write_order():
    t0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    ui = UserIndex(corpus=BM25Corpus())
    # session 1 (three writes with one created_at: the order of writes decides), session 2 a day later
    for name in ("s1a", "s1b", "s1c"):
        ui.put(_client_turn(name, "c1", t0), represented=True)
    ui.put(_client_turn("s2a", "c1", t0 + timedelta(days=1)), represented=True)
    ui.put(_client_turn("s2b", "c1", t0 + timedelta(days=1, seconds=5)), represented=True)
    ui.put(_client_turn("other", "c2", t0 + timedelta(seconds=1)), represented=True)  # other conversation
    ui.put(_client_turn("x1", None, t0), represented=True)  # no conversation id: no neighbours
    ui.put(_client_turn("x2", None, t0 + timedelta(minutes=5)), represented=True)
    names = {tid(n): n for n in ("s1a", "s1b", "s1c", "s2a", "s2b", "other", "x1", "x2")}

    def nb(name: str) -> set[str]:
        a = ui.corpus.attrs(tid(name))
        assert a is not None
        return {names[i] for i in ui.timeline.neighbours(a["group"], a["ts"], tid(name), 6 * 3600, a["seq"])}

    assert nb("s1a") == {"s1b"}
    assert nb("s1b") == {"s1a", "s1c"}
    assert nb("s1c") == {"s1b"}  # s2a is a day later: another session
    assert nb("s2a") == {"s2b"}
    assert nb("other") == set()
    assert nb("x1") == set() and nb("x2") == set()  # notes outside a conversation, minutes apart
    # a re-put keeps the memory's place in the write order; a removal closes the gap
    ui.put(_client_turn("s1a", "c1", t0, content="Ann: hello again"), represented=True)
    assert nb("s1b") == {"s1a", "s1c"}
    ui.remove(tid("s1b"))
    assert nb("s1a") == {"s1c"}


def test_the_speaker_from_the_content_is_a_field_not_body_terms():
    ui = UserIndex(corpus=BM25Corpus())
    ui.put(_client_turn("a", "c1", datetime(2023, 5, 8, tzinfo=UTC), content="Caroline: I went hiking"), True)
    ui.put(_client_turn("n", "c1", datetime(2023, 5, 9, tzinfo=UTC), content="Note: Caroline went hiking"), True)
    a, n = ui.corpus.attrs(tid("a")), ui.corpus.attrs(tid("n"))
    assert a is not None and n is not None
    assert a["speaker_terms"] and not n["speaker_terms"]
    assert [i for i, _ in ui.corpus.search("caroline", 5)] == [tid("n")]  # only the body that names her


def test_a_wider_neighbour_window_stops_at_a_session_gap():
    t0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    ui = UserIndex(corpus=BM25Corpus())
    names = ["a", "b", "c", "d", "e"]
    for i, name in enumerate(names):
        ui.put(_client_turn(name, "c1", t0 + timedelta(seconds=i)), represented=True)
    ui.put(_client_turn("next", "c1", t0 + timedelta(days=2)), represented=True)  # another session
    by_id = {tid(n): n for n in [*names, "next"]}

    def window(name: str, radius: int) -> list[str]:
        a = ui.corpus.attrs(tid(name))
        assert a is not None
        return [by_id[i] for i in ui.timeline.neighbours(a["group"], a["ts"], tid(name), 6 * 3600, a["seq"], radius)]

    assert window("c", 1) == ["b", "d"]
    assert window("c", 2) == ["b", "a", "d", "e"]  # nearest first on each side
    assert window("e", 3) == ["d", "c", "b"]  # "next" is two days later
    assert window("next", 3) == []
    assert window("a", 0) == []


def test_the_timeline_finds_every_memory_created_in_an_interval():
    t0 = datetime(2023, 5, 8, tzinfo=UTC)
    ui = UserIndex(corpus=BM25Corpus())
    assert ui.timeline.span() is None and ui.timeline.between(0, 1e12) == []
    ui.put(_client_turn("early", "c1", t0), represented=True)
    ui.put(_client_turn("note", None, t0 + timedelta(hours=5)), represented=True)  # no conversation: still timed
    ui.put(_client_turn("late", "c2", t0 + timedelta(days=3)), represented=True)
    start, end = t0.timestamp(), (t0 + timedelta(days=1)).timestamp()
    assert ui.timeline.between(start, end) == [tid("early"), tid("note")]
    assert ui.timeline.between(end, end + 5 * 86400) == [tid("late")]
    assert ui.timeline.span() == (start, (t0 + timedelta(days=3)).timestamp())
    ui.remove(tid("note"))
    ui.put(_client_turn("early", "c1", t0 + timedelta(days=2)), represented=True)  # moved in time
    assert ui.timeline.between(start, end) == []
    assert ui.timeline.between(start, end + 5 * 86400) == [tid("early"), tid("late")]
    ui.remove_where(None, None)
    assert ui.timeline.span() is None


def test_a_fallback_vector_is_held_only_for_the_text_it_was_made_from():
    """``UserIndex.put_fallback``: a vector made from an older text (a write landed while it
    was being made) is refused and the memory stays pending with its new text; ``None`` (the
    fallback cannot embed it either) ends the wait without a vector; a represented text
    needs none."""
    from memory_core.stores.user_index import content_key

    ui = UserIndex(BM25Corpus(), track_fallback=True)
    old = Memory(id=tid("a"), user_id="u", content="ฉันแพ้กุ้ง")
    ui.put(old, represented=False)
    assert ui.fallback_pending == {old.id: (content_key(old.content), old.content)}
    new = old.model_copy(update={"content": "ฉันแพ้ปู"})
    ui.put(new, represented=False)
    assert not ui.put_fallback(old.id, content_key(old.content), np.ones(4))  # made from the old text
    assert old.id not in ui.fallback and ui.fallback_pending[old.id][1] == "ฉันแพ้ปู"
    assert ui.put_fallback(old.id, content_key(new.content), np.ones(4))
    assert old.id in ui.fallback and not ui.fallback_pending
    ui.put(new.model_copy(update={"metadata": {"k": "v"}}), represented=False)  # same text: kept
    assert old.id in ui.fallback and not ui.fallback_pending
    ui.put(new.model_copy(update={"content": "now in English"}), represented=True)
    assert old.id not in ui.fallback and not ui.fallback_pending
    ui.put(old, represented=False)
    assert not ui.put_fallback(old.id, content_key(old.content), None)  # none can be made
    assert old.id not in ui.fallback and not ui.fallback_pending
    ui.put(new, represented=False)
    ui.remove(old.id)
    assert not ui.fallback_pending and not ui.put_fallback(old.id, content_key(new.content), np.ones(4))
    untracked = UserIndex(BM25Corpus())  # no fallback configured: nothing is noted
    untracked.put(old, represented=False)
    assert not untracked.fallback_pending


# ---------------------------------------------------------------------- same content
def _text_memory(mid: str, content: str, **kw) -> Memory:
    return Memory(id=tid(mid), user_id="u1", content=content, **kw)


def test_same_content_follows_puts_rewrites_and_removals():
    """``UserIndex.same_content`` finds the memories of exactly one text by its content key,
    filtered by scope, and forgets a memory whose text changed or which was removed (one by
    one or by scope)."""
    ui = UserIndex(corpus=BM25Corpus())
    ui.put(_text_memory("a", "We had pizza.", type=MemoryType.EPISODIC), True)
    ui.put(_text_memory("b", "We had pizza.", type=MemoryType.EPISODIC, project_id="p"), True)
    ui.put(_text_memory("c", "We had pizza.", type=MemoryType.SEMANTIC), True)
    ui.put(_text_memory("d", "We had sushi.", type=MemoryType.EPISODIC), True)
    episodic = (MemoryType.EPISODIC,)
    assert ui.same_content("We had pizza.", None, episodic, None) == sorted([tid("a"), tid("b")])
    assert ui.same_content("We had pizza.", "p", episodic, None) == [tid("b")]
    assert ui.same_content("We had pizza.", None, None, None) == sorted([tid("a"), tid("b"), tid("c")])
    assert ui.same_content("we had pizza.", None, None, None) == []  # exact text only
    ui.put(_text_memory("a", "We had pasta.", type=MemoryType.EPISODIC), True)  # rewritten
    assert ui.same_content("We had pizza.", None, episodic, None) == [tid("b")]
    assert ui.same_content("We had pasta.", None, episodic, None) == [tid("a")]
    ui.remove(tid("b"))
    assert ui.same_content("We had pizza.", None, None, None) == [tid("c")]
    ui.remove_where(None, (MemoryType.SEMANTIC,))
    assert ui.same_content("We had pizza.", None, None, None) == []
    assert ui.same_content("We had sushi.", None, episodic, None) == [tid("d")]
    assert set(ui.by_key) == {content_key("We had pasta."), content_key("We had sushi.")}


async def test_a_search_of_a_scope_the_user_has_nothing_in_embeds_and_ranks_nothing():
    """A built index holds every memory of its user: a retrieve whose scope (types, project,
    states) holds none of them answers [] without embedding the query or asking the store."""
    calls: list[list[str]] = []

    async def embed(texts):
        calls.append(list(texts))
        return await fake_embed(texts)

    inner = InMemoryStore(embed=embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "a", "We had pizza on the beach.", type=MemoryType.EPISODIC)
    assert ids(await h.retrieve(opts(query="pizza", types=(MemoryType.EPISODIC,)))) == ["a"]
    calls.clear()
    reads = count_reads(inner)
    assert await h.retrieve(opts(query="pizza", types=(MemoryType.SEMANTIC,))) == []
    assert await h.retrieve(opts(query="pizza", project_id="elsewhere")) == []
    assert calls == [] and sum(reads.values()) == 0
    assert ids(await h.retrieve(opts(query="pizza"))) == ["a"]  # the scope that holds it still finds it


async def test_a_search_of_an_empty_scope_still_refuses_a_bad_request():
    """The tally's early answer checks the request as a search does: no query at all, a
    vector of another dimension or of another model identity is refused, not answered []."""
    from memory_core.errors import EmbeddingIdentityMismatch, InvalidInput

    inner = InMemoryStore(embed=fake_embed, dimension=DIM, identity="model-a")
    h = HybridStore(inner, **plain())
    await put(h, "a", "We had pizza on the beach.", type=MemoryType.EPISODIC)
    facts = (MemoryType.SEMANTIC,)
    with pytest.raises(InvalidInput):
        await h.retrieve(opts(query="  ", types=facts))
    with pytest.raises(InvalidInput):
        await h.retrieve(opts(embedding=[0.1] * (DIM + 1), types=facts))
    with pytest.raises(EmbeddingIdentityMismatch):
        await h.retrieve(opts(embedding=[0.1] * DIM, embedding_identity="model-b", types=facts))
    assert await h.retrieve(opts(embedding=[0.1] * DIM, embedding_identity="model-a", types=facts)) == []


def test_a_listing_sorts_nothing_and_a_pager_through_a_narrower_scope_walks_the_records_once(monkeypatch):
    """``UserIndex.newest_first`` pages (newest first, ties by id descending) without sorting:
    a scope holding every record is cut by position (no record tested), and a pager through
    a narrower scope tests each record at most twice (its first page's walk, then one walk
    for all later pages) until the index changes."""
    import builtins

    ui = UserIndex(BM25Corpus(), hold_records=True)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(300):
        m = _memory(i, project="p" if i % 3 else None)
        ui.put(m.model_copy(update={"created_at": t0 + timedelta(seconds=i // 2)}), represented=True)
    everyone = sorted(((ui.records[i].created_at, i) for i in ui.records), reverse=True)
    in_p = [i for _, i in everyone if ui.records[i].project_id == "p"]

    tested = 0
    real_scope_test = ui.corpus.scope_test

    def counting_scope_test(*args):
        test = real_scope_test(*args)

        def counted(doc_id):
            nonlocal tested
            tested += 1
            return test(doc_id)

        return counted

    monkeypatch.setattr(ui.corpus, "scope_test", counting_scope_test)
    monkeypatch.setattr(builtins, "sorted", None)  # a listing that sorts fails here
    assert ui.newest_first(None, None, None, 10, 20) == ([i for _, i in everyone][10:30], 300)
    assert tested == 0
    pages = [ui.newest_first("p", None, None, offset, 30) for offset in range(0, 240, 30)]
    monkeypatch.undo()
    assert [i for page, _ in pages for i in page] == in_p and {total for _, total in pages} == {200}
    assert tested <= 2 * len(ui.records)  # a walk per page would test ~1,600
    assert ui.newest_first("p", None, None, 500, 10) == ([], 200)
