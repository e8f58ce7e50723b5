"""HybridStore: the lexical index follows the store; fusion, filters, threshold, isolation."""

import asyncio
import hashlib
import math
import re
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_core.errors import DuplicateMemory, InvalidInput, MemoryNotFound, StoreUnavailable
from memory_core.retrieval.lexical import tokenize
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.types import ListQuery, Memory, MemoryChanges, MemoryScope, MemoryType, RetrieveOptions
from tests.ids import tid, tname, tnames

DIM = 256


def fake_vector(text: str) -> list[float]:
    """Hashed bag of words (non-negative buckets) → unit vector; texts without shared words
    have cosine ≈ 0, texts with the same words cosine 1."""
    v = [0.0] * DIM
    for tok in re.findall(r"\w+", text.lower()):
        v[int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=4).digest(), "little") % DIM] += 1.0
    if not any(v):
        v[0] = 1.0
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


async def fake_embed(texts):
    return [fake_vector(t) for t in texts]


def cos(a: str, b: str) -> float:
    return float(np.dot(fake_vector(a), fake_vector(b)))


def plain(**kw) -> dict:
    """HybridStore kwargs with every extra signal off: pure cosine/BM25 fusion."""
    return {
        "neighbor_weight": 0.0,
        "speaker_weight": 0.0,
        "temporal_weight": 0.0,
        "date_weight": 0.0,
        "question_weight": 0.0,
        **kw,
    }


def opts(user="u1", query="", **kw) -> RetrieveOptions:
    kw.setdefault("hybrid", True)
    kw.setdefault("limit", 10)
    return RetrieveOptions(user_id=user, query=query, **kw)


@pytest.fixture
def inner():
    return InMemoryStore(embed=fake_embed, dimension=DIM)


async def put(store, mid, content, user="u1", **kw):
    """Store a memory under the test name ``mid`` (its id is ``tid(mid)``)."""
    return await store.store(Memory(id=tid(mid), user_id=user, content=content, **kw))


def ids(results):
    """The test names of the results' ids, in order."""
    return [tname(r.memory.id) for r in results]


def found(h, user, query, *args):
    """The test names of the lexical index's hits for ``query``, in order."""
    return [tname(i) for i, _ in h.index.search(user, query, *args)]


def by_name(results) -> dict:
    """``{test name: score}`` of the results."""
    return {tname(r.memory.id): r.score for r in results}


async def test_passthrough_when_not_hybrid(inner):
    h = HybridStore(inner)
    await put(h, "a", "the cat sat on the mat")
    got = await h.retrieve(opts(query="cat mat", hybrid=False))
    assert ids(got) == ["a"]
    assert got[0].score == pytest.approx(got[0].similarity)


async def test_index_follows_store_update_forget(inner):
    h = HybridStore(inner, **plain())
    await put(h, "a", "my zebra collection")
    await put(h, "b", "a quiet evening")
    assert "a" in ids(await h.retrieve(opts(query="zebra", threshold=0.01)))  # builds the index
    await h.update(tid("a"), "u1", MemoryChanges(content="my giraffe collection"))
    assert h.index.search("u1", "zebra") == []
    assert found(h, "u1", "giraffe") == ["a"]
    await put(h, "c", "zebra stripes everywhere")  # added to the loaded index
    assert found(h, "u1", "zebra") == ["c"]
    await h.forget(tid("c"), "u1")
    assert h.index.search("u1", "zebra") == []
    assert "c" not in ids(await h.retrieve(opts(query="zebra stripes")))
    with pytest.raises(MemoryNotFound):
        await h.forget(tid("c"), "u1")


async def test_forget_by_scope_removes_from_index(inner):
    h = HybridStore(inner, **plain())
    await put(h, "p1", "garden tomatoes", project_id="p1")
    await put(h, "p2", "garden roses", project_id="p2")
    await put(h, "e", "garden shed", type=MemoryType.EPISODIC)
    await h.retrieve(opts(query="garden"))
    assert await h.forget_by_scope(MemoryScope(user_id="u1", project_id="p1")) == 1
    assert set(found(h, "u1", "garden")) == {"p2", "e"}
    assert await h.forget_by_scope(MemoryScope(user_id="u1", types=[MemoryType.EPISODIC])) == 1
    assert set(found(h, "u1", "garden")) == {"p2"}
    assert ids(await h.retrieve(opts(query="garden"))) == ["p2"]


async def test_deleted_behind_the_decorator_is_seen_when_the_index_is_rebuilt(inner):
    # the rule (module docstring): a loaded user's reads are served from the index, which sees
    # every write through the decorator; a write behind its back is seen once it is rebuilt
    h = HybridStore(inner, **plain())
    await put(h, "a", "secret volcano lair")
    await put(h, "b", "ordinary lunch")
    await h.retrieve(opts(query="volcano"))
    await inner.forget(tid("a"), "u1")  # bypasses the decorator: the index still has "a"
    assert "a" in ids(await h.retrieve(opts(query="volcano lair")))
    h.index.drop_user("u1")  # as after a restart or an LRU eviction
    assert "a" not in ids(await h.retrieve(opts(query="volcano lair")))
    assert h.index.search("u1", "volcano") == []


async def test_without_held_records_a_deleted_or_changed_memory_is_never_returned_stale(inner):
    h = HybridStore(inner, **plain(cache_vectors=False))  # every candidate read from the store
    await put(h, "a", "secret volcano lair")
    await put(h, "c", "alpha bravo")
    await h.retrieve(opts(query="volcano"))
    await inner.forget(tid("a"), "u1")
    assert "a" not in ids(await h.retrieve(opts(query="volcano lair")))
    assert h.index.search("u1", "volcano") == []
    await inner.update(tid("c"), "u1", MemoryChanges(**{"content": "charlie delta"}))
    got = await h.retrieve(opts(query="alpha"))
    assert got and got[0].memory.content == "charlie delta"
    assert h.index.search("u1", "alpha") == [] and found(h, "u1", "charlie") == ["c"]


async def test_lazy_rebuild_after_restart(inner):
    first = HybridStore(inner)
    for i in range(1205):  # more than one page of inner.list
        await put(first, f"m{i:04d}", f"note number {i} about item{i}")
    await put(first, "target", "the kayak is in the garage")
    second = HybridStore(inner)  # a restarted service over the same backend
    assert not second.index.has_user("u1")
    got = await second.retrieve(opts(query="kayak garage", limit=3))
    assert ids(got)[0] == "target"
    assert second.index.has_user("u1")
    assert len(second.index.corpus("u1")) == 1206
    assert found(second, "u1", "item7") == ["m0007"]


class SlowListStore(InMemoryStore):
    """``list`` waits for ``release`` so a write can land while the index is being built."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.listing = asyncio.Event()
        self.release = asyncio.Event()

    async def _list(self, *a, **kw):
        result = await super()._list(*a, **kw)
        self.listing.set()
        await self.release.wait()
        return result


async def test_writes_during_a_build_are_replayed():
    inner = SlowListStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "old", "walrus facts")
    await put(h, "gone", "walrus trivia")
    task = asyncio.create_task(h.retrieve(opts(query="walrus")))
    await inner.listing.wait()  # the page was read without "new"
    await put(h, "new", "walrus tusks")
    await h.forget(tid("gone"), "u1")  # the page had "gone"
    inner.release.set()
    await task
    assert set(found(h, "u1", "walrus")) == {"old", "new"}


async def test_store_many_is_indexed(inner):
    h = HybridStore(inner, **plain())
    await put(h, "a", "my zebra collection")
    await h.retrieve(opts(query="zebra"))  # index loaded
    out = await h.store_many(
        [Memory(id=tid(f"b{i}"), user_id="u1", content=f"walrus number {i}") for i in range(3)]
        + [Memory(id=tid("z"), user_id="u1", content="zebra crossing", project_id="p")]
    )
    assert tnames(m.id for m in out) == ["b0", "b1", "b2", "z"]
    assert set(found(h, "u1", "walrus")) == {"b0", "b1", "b2"}
    assert set(found(h, "u1", "zebra")) == {"a", "z"}
    got = await h.retrieve(opts(query="walrus", threshold=0.01))
    assert set(ids(got)) == {"b0", "b1", "b2"}
    assert ids(await h.retrieve(opts(query="zebra", project_id="p", threshold=0.01))) == ["z"]


async def test_refused_store_many_indexes_nothing(inner):
    h = HybridStore(inner, **plain())
    await put(h, "taken", "existing walrus")
    await h.retrieve(opts(query="walrus"))
    with pytest.raises(DuplicateMemory):
        await h.store_many(
            [
                Memory(id=tid("n1"), user_id="u1", content="new walrus"),
                Memory(id=tid("taken"), user_id="u1", content="x"),
            ]
        )
    with pytest.raises(InvalidInput):
        await h.store_many(
            [Memory(id=tid("n1"), user_id="u1", content="new walrus"), Memory(id=tid("n2"), user_id="u2", content="y")]
        )
    assert found(h, "u1", "walrus") == ["taken"]
    assert not h.index.has_user("u2")
    assert ids(await h.retrieve(opts(query="new walrus", threshold=-1))) == ["taken"]


async def test_store_many_during_a_build_is_replayed():
    inner = SlowListStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "old", "walrus facts")
    task = asyncio.create_task(h.retrieve(opts(query="walrus")))
    await inner.listing.wait()  # the page was read without the batch
    await h.store_many(
        [
            Memory(id=tid("n1"), user_id="u1", content="walrus tusks"),
            Memory(id=tid("n2"), user_id="u1", content="walrus pups"),
        ]
    )
    inner.release.set()
    await task
    assert set(found(h, "u1", "walrus")) == {"old", "n1", "n2"}


async def test_user_isolation(inner):
    h = HybridStore(inner, **plain())
    await put(h, "a1", "blue bicycle", user="alice")
    await put(h, "b1", "blue bicycle", user="bob")
    got = await h.retrieve(opts(user="alice", query="blue bicycle"))
    assert ids(got) == ["a1"]
    assert all(r.memory.user_id == "alice" for r in got)
    # even a corrupted index entry pointing at another user's memory is not returned
    h.index.corpus("alice").add(tid("b1"), "blue bicycle")
    assert ids(await h.retrieve(opts(user="alice", query="blue bicycle"))) == ["a1"]
    assert ids(await h.retrieve(opts(user="bob", query="blue bicycle"))) == ["b1"]


async def test_project_and_type_filters_apply_to_lexical_candidates(inner):
    # vector pool of 1: "p2"/"sem" can only come in through the lexical side
    h = HybridStore(inner, candidate_pool=1, **plain())
    await put(h, "p1", "harbor", project_id="p1", type=MemoryType.SEMANTIC)
    await put(h, "p2", "harbor boats", project_id="p2", type=MemoryType.EPISODIC)
    await put(h, "none", "harbor boats sailing", type=MemoryType.EPISODIC)
    got = await h.retrieve(opts(query="harbor", project_id="p2", limit=5))
    assert ids(got) == ["p2"]
    got = await h.retrieve(opts(query="harbor", types=(MemoryType.SEMANTIC,), limit=5))
    assert ids(got) == ["p1"]
    got = await h.retrieve(opts(query="harbor", types=(MemoryType.EPISODIC,), limit=5))
    assert set(ids(got)) == {"p2", "none"}


async def test_threshold_is_a_cosine_floor_for_lexical_candidates(inner):
    h = HybridStore(inner, **plain())
    # high BM25 for "quokka", but the query's other words make its cosine low
    await put(h, "lex", "quokka")
    await put(h, "vec", "sunny beach holiday weekend plans")
    query = "quokka sunny beach holiday weekend plans"
    c_lex, c_vec = cos(query, "quokka"), cos(query, "sunny beach holiday weekend plans")
    assert c_lex < 0.5 < c_vec
    got = await h.retrieve(opts(query=query, threshold=0.5))
    assert ids(got) == ["vec"]
    got = await h.retrieve(opts(query=query, threshold=0.0))
    assert set(ids(got)) == {"lex", "vec"}
    for r in got:
        assert r.similarity == pytest.approx(cos(query, r.memory.content), abs=1e-5)
        assert r.similarity >= 0.0


async def test_score_fusion_matches_the_formula_and_orders(inner):
    h = HybridStore(inner, **plain())
    docs = {
        "a": "rare orchid greenhouse",
        "b": "orchid",
        "c": "greenhouse gardening tips for spring and summer seasons",
        "d": "completely unrelated sentence",
    }
    for k, v in docs.items():
        await put(h, k, v)
    query = "orchid greenhouse"
    w = 0.6
    got = await h.retrieve(opts(query=query, lexical_weight=w))
    bm = {tname(i): score for i, score in h.index.search("u1", query, 10)}
    top = max(bm.values())
    expected = {k: (1 - w) * cos(query, v) + w * bm.get(k, 0.0) / top for k, v in docs.items()}
    assert ids(got) == sorted(expected, key=lambda k: (-expected[k], k))
    for r in got:
        assert r.score == pytest.approx(expected[tname(r.memory.id)], abs=1e-5)
    # the weight moves the order: pure vector vs pure lexical
    vec_only = await h.retrieve(opts(query=query, lexical_weight=0.0))
    assert ids(vec_only)[0] == max(docs, key=lambda k: cos(query, docs[k]))
    lex_only = await h.retrieve(opts(query=query, lexical_weight=1.0))
    assert ids(lex_only)[0] == max(bm, key=bm.get)


async def test_rrf_fusion(inner):
    h = HybridStore(inner, fusion="rrf", rrf_k=60, **plain())
    await put(h, "both", "lighthouse keeper")
    await put(h, "vec", "lighthouse keeper keeper keeper coast")
    await put(h, "other", "mountain hut")
    got = await h.retrieve(opts(query="lighthouse keeper", lexical_weight=0.5))
    assert ids(got)[0] in {"both", "vec"}
    assert got[0].score <= 1.0 + 1e-9  # ranks 1/1 → (k+1)/(k+1)
    assert ids(got)[-1] == "other"


def _turn(mid, speaker, text, i, session=1, conv="c1"):
    """A conversation turn stored under the test name ``mid`` (id ``tid(mid)``), as a client
    writes it: ``"Speaker: text"``, the session's time (sessions a week apart) plus ``i``
    seconds, no speaker or session metadata."""
    return Memory(
        id=tid(mid),
        user_id="u1",
        content=f"{speaker}: {text}",
        conversation_id=conv,
        created_at=datetime(2023, 5, 8, 13, 56, tzinfo=UTC) + timedelta(days=7 * (session - 1), seconds=i),
        metadata={"dia_id": mid},
    )


async def test_neighbour_expansion_lifts_the_answer_after_a_matching_question(inner):
    turns = [
        _turn("t1", "Ann", "what did you research last month?", 0),
        _turn("t2", "Bob", "adoption agencies mostly", 1),
        _turn("t3", "Ann", "nice weather today", 2),
        _turn("t4", "Bob", "agencies are busy", 3, session=2),  # other session: not a neighbour
    ]
    on, off = HybridStore(inner, **plain(neighbor_weight=0.5)), None
    for t in turns:
        await on.store(t)
    off = HybridStore(inner, **plain())
    q = opts(query="what did you research", limit=4)
    base = await off.retrieve(q)
    boosted = await on.retrieve(q)
    rank = lambda res, i: ids(res).index(i) if i in ids(res) else 99  # noqa: E731
    assert rank(boosted, "t2") < rank(base, "t2") or rank(base, "t2") == 1
    assert rank(boosted, "t2") == 1
    s = by_name(boosted)
    b = by_name(base)
    assert s["t2"] == pytest.approx(b.get("t2", 0.0) + 0.5 * b["t1"], abs=1e-6)
    assert s.get("t4", 0.0) == pytest.approx(b.get("t4", 0.0), abs=1e-6)


async def test_speaker_prefix_is_a_field_and_named_speaker_is_boosted(inner):
    h = HybridStore(inner, **plain(speaker_weight=0.3))
    await h.store(_turn("a", "Caroline", "I went hiking", 0))
    await h.store(_turn("b", "Melanie", "I went hiking", 1, session=2))
    # the name is not indexed as a body term for every turn of the speaker
    assert "carolin" not in tokenize("I went hiking")
    got = await h.retrieve(opts(query="Where did Caroline go hiking?", lexical_weight=0.4))
    assert ids(got)[0] == "a"
    by = by_name(got)
    assert by["a"] - by["b"] == pytest.approx(0.3 + (got[0].similarity - got[1].similarity) * 0.6, abs=1e-6)
    assert h.index.search("u1", "Caroline") == []


async def test_temporal_boost_only_for_when_questions(inner):
    h = HybridStore(inner, **plain(temporal_weight=0.2))
    await put(h, "t", "I painted a sunrise last year")
    await put(h, "n", "I painted a sunrise with oranges")
    when = await h.retrieve(opts(query="When did she paint a sunrise?", temporal_boost=True))
    assert ids(when)[0] == "t"
    what = await h.retrieve(opts(query="What did she paint with sunrise oranges?", temporal_boost=True))
    assert ids(what)[0] == "n"
    off = await h.retrieve(opts(query="When did she paint a sunrise?", temporal_boost=False))
    s_on = by_name(when)
    s_off = by_name(off)
    assert s_on["t"] - s_off["t"] == pytest.approx(0.2)
    assert s_on["n"] == pytest.approx(s_off["n"])


async def test_only_returned_memories_get_access_counts(inner):
    h = HybridStore(inner, **plain())
    for i in range(6):
        await put(h, f"m{i}", f"otter fact {i}" + " otter" * i)
    got = await h.retrieve(opts(query="otter", limit=2))
    assert len(got) == 2 and all(r.memory.access_count == 1 for r in got)
    stored = {m.id: m for m in (await inner.list(ListQuery(user_id="u1", limit=10))).memories}
    for mid, m in stored.items():
        assert m.access_count == (1 if tname(mid) in ids(got) else 0), tname(mid)
    await h.retrieve(opts(query="otter", limit=2), touch=False)
    stored2 = {m.id: m.access_count for m in (await inner.list(ListQuery(user_id="u1", limit=10))).memories}
    assert stored2 == {mid: m.access_count for mid, m in stored.items()}


async def test_lru_bound_rebuilds_evicted_user(inner):
    h = HybridStore(inner, max_users=1, **plain())
    await put(h, "a", "penguin", user="ua")
    await put(h, "b", "penguin", user="ub")
    assert ids(await h.retrieve(opts(user="ua", query="penguin"))) == ["a"]
    assert ids(await h.retrieve(opts(user="ub", query="penguin"))) == ["b"]
    assert not h.index.has_user("ua") and h.index.has_user("ub")
    await put(h, "a2", "penguin colony", user="ua")  # not loaded: picked up by the rebuild
    assert set(ids(await h.retrieve(opts(user="ua", query="penguin")))) == {"a", "a2"}


def test_from_settings_uses_configuration():
    from memory_core.config import RetrievalSettings

    s = RetrievalSettings(fusion="rrf", candidate_pool=7, bm25_k1=1.5, max_index_users=3)
    h = HybridStore.from_settings(InMemoryStore(embed=fake_embed, dimension=DIM), s)
    assert (h.fusion, h.candidate_pool, h.index.k1, h.index.max_users) == ("rrf", 7, 1.5, 3)
    with pytest.raises(ValueError):
        HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), fusion="max")


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": 1001}, {"threshold": float("nan")}, {"user": ""}])
async def test_invalid_options_raise(inner, bad):
    from memory_core.errors import InvalidInput

    h = HybridStore(inner)
    await put(h, "a", "anything")
    kw = dict(bad)
    user = kw.pop("user", "u1")
    with pytest.raises(InvalidInput):
        await h.retrieve(opts(user=user, query="anything", **kw))


class NoHookDecorator:
    """A decorator from before the ``touch`` hook: ``retrieve(options)`` only."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def retrieve(self, options):
        return await self.inner.retrieve(options)


async def test_inner_decorator_without_touch_hook_still_works(inner):
    h = HybridStore(NoHookDecorator(inner), **plain())
    await put(h, "a", "heron by the river")
    await put(h, "b", "heron nest")
    got = await h.retrieve(opts(query="heron river", limit=1))
    assert ids(got) == ["a"] and got[0].memory.access_count >= 1


class GatedEmbedStore(InMemoryStore):
    """The query embedding waits until the lexical candidates are being loaded
    (``get_many``): a retrieve that ran the two sides one after the other would hang."""

    def __init__(self, *, fail_load: Exception | None = None, fail_embed: Exception | None = None):
        self.loading = asyncio.Event()
        self.embed_cancelled = False
        self.fail_load = fail_load
        self.fail_embed = fail_embed
        self.armed = False
        super().__init__(embed=self._embed, dimension=DIM)

    async def _embed(self, texts):
        if self.armed:
            try:
                await self.loading.wait()
            except asyncio.CancelledError:
                self.embed_cancelled = True
                raise
            if self.fail_embed is not None:
                raise self.fail_embed
        return await fake_embed(texts)

    async def _get_many(self, memory_ids, user_id=None):
        if self.armed:
            if self.fail_load is not None:
                await asyncio.sleep(0.01)  # the query embedding is under way by now
                raise self.fail_load
            self.loading.set()
        return await super()._get_many(memory_ids, user_id)


async def armed_store(**kw) -> tuple[GatedEmbedStore, HybridStore]:
    """A HybridStore (vectors not held, so lexical candidates are loaded from the store) over a
    ``GatedEmbedStore`` (``kw``) with two memories and a built index, its gates armed."""
    inner = GatedEmbedStore(**kw)
    h = HybridStore(inner, **plain(cache_vectors=False))  # lexical candidates are loaded
    await put(h, "a", "the walrus sleeps on ice")
    await put(h, "b", "penguins eat fish")
    await h.retrieve(opts(query="penguins"))  # builds the index
    inner.armed = True
    return inner, h


async def test_query_embedding_overlaps_the_lexical_load():
    inner, h = await armed_store()
    results = await asyncio.wait_for(h.retrieve(opts(query="where does the walrus sleep")), 5)
    assert ids(results)[0] == "a" and inner.loading.is_set()


async def test_failed_lexical_load_cancels_the_query_embedding():
    inner, h = await armed_store(fail_load=StoreUnavailable("backend down"))
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(h.retrieve(opts(query="walrus")), 5)
    assert inner.embed_cancelled


async def test_failed_query_embedding_is_raised():
    _, h = await armed_store(fail_embed=InvalidInput("embedder refused"))
    with pytest.raises(InvalidInput, match="embedder refused"):
        await asyncio.wait_for(h.retrieve(opts(query="walrus")), 5)


class CountingStore(InMemoryStore):
    """Counts the record loads (``get_many``, each batch recorded as test names) and vector
    searches that reach the store."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.loads: list[list[str]] = []
        self.searches = 0

    async def _get_many(self, memory_ids, user_id=None):
        self.loads.append(tnames(memory_ids))
        return await super()._get_many(memory_ids, user_id)

    async def _search(self, options, vector):
        self.searches += 1
        return await super()._search(options, vector)


def _conversation() -> list[Memory]:
    texts = [
        ("Ann", "what did you research last month?"),
        ("Bob", "adoption agencies mostly"),
        ("Ann", "nice weather today for a walk"),
        ("Bob", "agencies are busy in spring"),
        ("Ann", "my dog loves the beach"),
        ("Bob", "which beach do you go to?"),
        ("Ann", "the one near the lighthouse"),
        ("Bob", "I painted that lighthouse once"),
    ]
    return [_turn(f"t{i}", who, text, i * 60, session=1 + i // 4) for i, (who, text) in enumerate(texts)]


# (cache_vectors, held_search_max) → vector searches that reach the store
MODES = {
    "held search": ((True, 10000), 0),
    "store search, held vectors": ((True, 0), 1),
    "load all": ((False, 10000), 1),
}


@pytest.mark.parametrize("query", ["what did you research", "lighthouse beach", "agencies", "when did Bob paint"])
async def test_held_vectors_rank_exactly_as_loaded_ones_with_fewer_store_calls(query):
    results, loads = {}, {}
    for mode, ((cache_vectors, held_search_max), searches) in MODES.items():
        inner = CountingStore(embed=fake_embed, dimension=DIM)
        h = HybridStore(inner, cache_vectors=cache_vectors, held_search_max=held_search_max, candidate_pool=2)
        for m in _conversation():
            await h.store(m)
        inner.loads.clear()
        got = await h.retrieve(opts(query=query, limit=3))
        results[mode] = [(r.memory.id, r.memory.content, r.score, r.similarity) for r in got]
        loads[mode] = sum(len(batch) for batch in inner.loads)
        assert inner.searches == searches, mode
    assert results["held search"]
    for mode in ("store search, held vectors", "load all"):
        # float32 dot products here against the store's cosine: equal to 1e-6
        assert [(i, c, pytest.approx(s, abs=1e-6), pytest.approx(sim, abs=1e-6)) for i, c, s, sim in results[mode]] == (
            results["held search"]
        )
    assert loads["load all"] > 0
    # held records: the winners come from the index, no read of the store at all
    assert loads["store search, held vectors"] == 0
    assert loads["held search"] == 0


@pytest.mark.parametrize("held_search_max", [10000, 0])
async def test_held_search_honours_project_and_type_filters(held_search_max):
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(held_search_max=held_search_max))
    await put(h, "a", "volcano lair map", project_id="p")
    await put(h, "b", "volcano lair map", project_id="q")
    await put(h, "c", "volcano lair", project_id="p", type=MemoryType.PROCEDURAL)
    assert ids(await h.retrieve(opts(query="volcano lair map", project_id="p"))) == ["a", "c"]
    assert ids(await h.retrieve(opts(query="volcano lair map", project_id="q"))) == ["b"]
    assert ids(await h.retrieve(opts(query="volcano", types=[MemoryType.PROCEDURAL]))) == ["c"]


async def test_held_search_reads_the_memories_whose_vector_is_not_held_and_holds_them():
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "a", "volcano lair map")
    await put(h, "b", "sunny beach")
    await h.retrieve(opts(query="beach"))
    h.index.ready("u1").held.remove(tid("a"))  # as after an index entry written without a vector
    inner.loads.clear()
    got = await h.retrieve(opts(query="volcano lair map", limit=1))
    assert ids(got) == ["a"] and inner.searches == 0
    assert inner.loads[0] == ["a"]  # read once to hold its vector ...
    assert np.allclose(h.held_vector("u1", tid("a")), fake_vector("volcano lair map"), atol=1e-6)
    inner.loads.clear()
    await h.retrieve(opts(query="volcano lair map", limit=1))
    assert inner.loads == []  # ... then the held record answers


async def test_users_above_held_search_max_are_searched_by_the_store():
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(held_search_max=2))
    await put(h, "a", "volcano lair map")
    await put(h, "b", "sunny beach")
    await h.retrieve(opts(query="volcano"))
    assert inner.searches == 0
    await put(h, "c", "volcano")
    assert ids(await h.retrieve(opts(query="volcano lair map", limit=2))) == ["a", "c"]
    assert inner.searches == 1


@pytest.mark.parametrize("cache_vectors", [True, False])
async def test_update_through_the_decorator_ranks_like_a_fresh_index(cache_vectors):
    inner = InMemoryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(candidate_pool=1, cache_vectors=cache_vectors))
    for mid, text in (("a", "harbour ferry times"), ("b", "ferry"), ("c", "train times")):
        await put(h, mid, text)
    await h.retrieve(opts(query="ferry"))
    await h.update(tid("b"), "u1", MemoryChanges(content="ferry times harbour schedule"))
    got = await h.retrieve(opts(query="harbour ferry times", limit=3))
    fresh = HybridStore(inner, **plain(candidate_pool=1, cache_vectors=False))  # built from the store
    want = await fresh.retrieve(opts(query="harbour ferry times", limit=3))
    assert [(r.memory.id, r.memory.content, round(r.score, 6)) for r in got] == [
        (r.memory.id, r.memory.content, round(r.score, 6)) for r in want
    ]
    held = h.held_vector("u1", tid("b"))
    if cache_vectors:
        assert np.allclose(held, fake_vector("ferry times harbour schedule"), atol=1e-6)
    else:
        assert held is None


@pytest.mark.parametrize("held_search_max", [10000, 0])
async def test_held_record_moved_to_another_project_or_owned_by_another_user_is_not_returned(held_search_max):
    inner = CountingStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain(candidate_pool=1, held_search_max=held_search_max))
    await put(h, "a", "volcano lair map", project_id="p")
    await put(h, "b", "volcano lair", project_id="p")
    await put(h, "c", "volcano", project_id="p")
    await put(h, "x", "volcano lair map", user="u2", project_id="p")
    await h.retrieve(opts(query="volcano", project_id="p"))
    await h.update(tid("b"), "u1", MemoryChanges(**{"project_id": "q"}))
    got = await h.retrieve(opts(query="volcano lair map", limit=3, project_id="p"))
    assert ids(got) == ["a", "c"]
    assert all(r.memory.user_id == "u1" and r.memory.project_id == "p" for r in got)


async def test_a_vector_hit_without_a_held_vector_gets_it_back_when_loaded():
    inner = InMemoryStore(embed=fake_embed, dimension=DIM)
    h = HybridStore(inner, **plain())
    await put(h, "a", "volcano lair")
    await h.retrieve(opts(query="volcano"))
    await inner.update(tid("a"), "u1", MemoryChanges(**{"content": "volcano lair map"}))  # behind the decorator
    ui = h.index.ready("u1")
    (hit,) = await inner.retrieve(opts(query="volcano lair map", hybrid=False, limit=1))
    h._reconcile(ui, hit.memory)  # as a vector hit does: its record carries no vector
    assert h.held_vector("u1", tid("a")) is None and found(h, "u1", "map") == ["a"]
    await h._load([tid("a")], "u1", ui)
    assert np.allclose(h.held_vector("u1", tid("a")), fake_vector("volcano lair map"), atol=1e-6)


async def test_reading_many_held_records_gives_the_loop_a_turn_every_chunk(inner):
    """``get_many`` of a loaded user copies at most ``HELD_RECORDS_PER_TURN`` held records per
    turn of the event loop (a consolidation pass reads up to 2,000: ~80 ms in one step held
    the loop that serves every user): a task beside it runs between two chunks."""
    from unittest.mock import patch

    from memory_core.stores import hybrid

    h = HybridStore(inner, **plain())
    n = 3 * hybrid.HELD_RECORDS_PER_TURN + 5
    for i in range(n):
        await put(h, f"m{i}", f"note number {i}")
    await h.retrieve(opts(query="note", threshold=0.01))  # loads the user's index
    events: list[str] = []
    held_records = HybridStore._held_records

    def recorded(ids, user_id, ui):
        events.append("c")
        return held_records(ids, user_id, ui)

    async def beside() -> None:
        while True:
            events.append("t")
            await asyncio.sleep(0)

    with patch.object(HybridStore, "_held_records", staticmethod(recorded)):
        task = asyncio.create_task(beside())
        await asyncio.sleep(0)
        try:
            got = await h.get_many([tid(f"m{i}") for i in range(n)], "u1")
        finally:
            task.cancel()
    assert len(got) == n
    chunks = "".join(events)
    assert chunks.count("c") == 4 and "cc" not in chunks
