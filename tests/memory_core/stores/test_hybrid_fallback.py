"""HybridStore with a fallback model (``embedding.fallback``): memories the model cannot
represent get the fallback's vectors (held in the index only), searches it cannot represent
are embedded by the fallback and score those memories by the calibrated cosine; the vectors
follow every write and are made again when an index is rebuilt; a failing fallback leaves
ranking as it is without one.

The fake models: a text starting with ``§`` is one the model cannot represent (its vector is
one constant, as MiniLM's ``[UNK]``); the fake fallback maps words to concepts (``zork`` and
``blarg`` are one concept, ``quux`` another...) so that a query and a memory sharing no word
can still be related, and other words to hashed buckets."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from memory_core.embedding.encoder import EncodeResult
from memory_core.embedding.fallback import POOLED, CosineCalibration, FallbackCalibration, FallbackModel
from memory_core.retrieval.held_vectors import cosine, unit_vector
from memory_core.stores import InMemoryStore
from memory_core.stores import hybrid as hybrid_module
from memory_core.stores.hybrid import HybridStore
from memory_core.types import Memory, MemoryChanges, MemoryScope, RetrieveOptions
from tests.ids import tid, tname
from tests.packages import needs_e5

DIM = 32
CONCEPTS = {"zork": 0, "blarg": 0, "quux": 1, "fizz": 1, "wump": 2}
UNK = [1.0] + [0.0] * (DIM - 1)
QUERY = "§ zork nib"  # shares no word with A, the word "nib" with the decoy D
SCALE = CosineCalibration((-1.0, 1.0), (-3.0, 1.0))  # y = 2x - 1: the calibrated value is not the cosine


def represents(text: str) -> bool:
    return not text.startswith("§")


def _bucket(word: str) -> int:
    return 8 + int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % (DIM - 8)


def bag_vector(text: str) -> list[float]:
    """The fake model: hashed bag of words; ``UNK`` for a text it cannot represent."""
    if not represents(text):
        return list(UNK)
    v = [0.0] * DIM
    for w in re.findall(r"\w+", text.lower()):
        v[_bucket(w)] += 1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v] if any(v) else list(UNK)


async def primary_embed(texts):
    return [bag_vector(t) for t in texts]


def concept_vector(text: str) -> np.ndarray:
    """The fake fallback: a concept word weighs 3 on its concept's axis, any other word 1 on
    its hashed bucket."""
    v = np.zeros(DIM, np.float32)
    for w in re.findall(r"\w+", text.lower()):
        if w in CONCEPTS:
            v[CONCEPTS[w]] += 3.0
        else:
            v[_bucket(w)] += 1.0
    if not v.any():
        v[7] = 1.0
    return v / np.linalg.norm(v)


class FakeFallbackEncoder:
    """The ``Encoder`` protocol over ``concept_vector``, in a worker thread as the real ones;
    counts its calls by role and the threads they ran on; ``fail_passages`` / ``fail_queries``
    make it raise; ``gate`` (when set) holds every call until it is set."""

    dimension = DIM
    max_seq_length = None

    def __init__(self):
        self.calls = {"passage": 0, "query": 0}
        self.texts: list[str] = []
        self.threads: set[int] = set()
        self.fail_passages = self.fail_queries = False
        self.gate: asyncio.Event | None = None

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]

    def _encode(self, texts):
        self.threads.add(threading.get_ident())
        return np.stack([concept_vector(t) for t in texts])

    async def encode_async(self, texts, token_counts=None, *, query=False):
        self.calls["query" if query else "passage"] += 1
        self.texts.extend(texts)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_queries if query else self.fail_passages:
            raise RuntimeError("fallback engine down")
        return EncodeResult(vectors=await asyncio.to_thread(self._encode, list(texts)))


def fallback_model(encoder: FakeFallbackEncoder) -> FallbackModel:
    cal = FallbackCalibration(((POOLED, SCALE),), model="fake", fallback="fake-fallback")
    return FallbackModel(encoder, cal, "fake-fallback", passage_batch=2)


def plain(**kw) -> dict:
    """HybridStore kwargs with every extra signal off: pure similarity/BM25 fusion."""
    return {"neighbor_weight": 0.0, "speaker_weight": 0.0, "temporal_weight": 0.0, "hop_weight": 0.0, **kw}


def make_inner() -> InMemoryStore:
    return InMemoryStore(embed=primary_embed, dimension=DIM, represents=represents)


def opts(query=QUERY, user="u1", **kw) -> RetrieveOptions:
    kw.setdefault("limit", 10)
    return RetrieveOptions(user_id=user, query=query, hybrid=True, **kw)


async def seed(store, user="u1", project=None):
    """A (unrepresentable, related to QUERY through its concept), D (unrepresentable, shares a
    word with QUERY), E (English)."""
    for name, text in (("A", "§ blarg mip"), ("D", "§ nib wump"), ("E", "the cat sat on the mat")):
        await store.store(Memory(id=tid(name + user), user_id=user, content=text, project_id=project))


def names(results, user="u1") -> list[str]:
    return [tname(r.memory.id).removesuffix(user) for r in results]


def similarity_of(results, name, user="u1") -> float:
    return next(r.similarity for r in results if tname(r.memory.id) == name + user)


def expected(memory_text: str, query: str = QUERY) -> float:
    return SCALE(cosine(concept_vector(memory_text), unit_vector(concept_vector(query))))


@pytest.mark.parametrize(
    "layout",
    [{}, {"cache_vectors": False}, {"held_search_max": 0}],
    ids=["held search", "vectors not held", "store search"],
)
async def test_an_unrepresentable_memory_is_found_by_an_unrepresentable_query_only_with_the_fallback(layout):
    events: list[str] = []
    encoder = FakeFallbackEncoder()
    without = HybridStore(make_inner(), **plain(**layout))
    with_ = HybridStore(make_inner(), **plain(**layout), fallback=fallback_model(encoder), on_event=events.append)
    for store in (without, with_):
        await store.retrieve(opts("warm up"))  # the user's index is built: writes are indexed as they land
        await seed(store)
    assert "A" not in names(await without.retrieve(opts()))  # lexical only: D, by its shared word
    results = await with_.retrieve(opts())
    assert names(results)[0] == "A"
    a = similarity_of(results, "A")
    assert a == pytest.approx(expected("§ blarg mip"), abs=1e-6) and a == pytest.approx(0.8, abs=1e-6)
    assert "D" not in names(results)  # its calibrated similarity is below the default floor, 0
    everything = await with_.retrieve(opts(threshold=-1.0))
    assert similarity_of(everything, "D") == pytest.approx(expected("§ nib wump"), abs=1e-6) == pytest.approx(-0.8)
    # the threshold is a floor on that one value, whichever side found the memory
    assert "A" in names(await with_.retrieve(opts(threshold=a)))
    assert "A" not in names(await with_.retrieve(opts(threshold=float(np.nextafter(np.float32(a), np.float32(1))))))
    assert events.count("fallback:passage") == 2 and events.count("fallback:query") == 4
    assert threading.get_ident() not in encoder.threads  # never on the event loop's thread
    assert with_.held_vector(tid("Au1"), tid("Au1")) is None  # (another user) nothing leaks


async def test_represented_searches_do_not_embed_with_the_fallback_unless_asked_to():
    encoder = FakeFallbackEncoder()
    store = HybridStore(make_inner(), **plain(), fallback=fallback_model(encoder))
    await store.retrieve(opts("warm up"))
    await seed(store)
    assert encoder.calls["query"] == 0
    assert "A" not in names(await store.retrieve(opts("zork stories")))  # English: the model's side only
    assert encoder.calls["query"] == 0
    store.fallback_queries = "all"  # measured and not shipped (README "Choosing a model")
    results = await store.retrieve(opts("zork stories"))
    assert names(results)[0] == "A" and encoder.calls["query"] == 1
    assert similarity_of(results, "A") == pytest.approx(expected("§ blarg mip", "zork stories"), abs=1e-6)
    with pytest.raises(ValueError):
        HybridStore(make_inner(), fallback_queries="some")


async def test_the_vectors_follow_update_forget_and_scope_deletes():
    encoder = FakeFallbackEncoder()
    store = HybridStore(make_inner(), **plain(), fallback=fallback_model(encoder))
    await store.retrieve(opts("warm up"))
    await seed(store, project="p1")
    a, d = tid("Au1"), tid("Du1")
    before = store.fallback_vector("u1", a)
    assert before is not None and np.allclose(before, concept_vector("§ blarg mip"), atol=1e-6)
    passages = encoder.calls["passage"]
    await store.update(a, "u1", MemoryChanges(metadata={"k": "v"}))  # same text: same vector, no new call
    assert encoder.calls["passage"] == passages and np.array_equal(store.fallback_vector("u1", a), before)
    await store.update(a, "u1", MemoryChanges(content="§ quux mip"))  # another concept now
    assert np.allclose(store.fallback_vector("u1", a), concept_vector("§ quux mip"), atol=1e-6)
    moved = await store.retrieve(opts(threshold=-1.0))
    assert similarity_of(moved, "A") == pytest.approx(expected("§ quux mip"), abs=1e-6) == pytest.approx(-1.0)
    await store.update(a, "u1", MemoryChanges(content="now in English"))  # represented: no fallback vector
    assert store.fallback_vector("u1", a) is None
    await store.forget(d, "u1")
    assert store.fallback_vector("u1", d) is None
    await store.update(a, "u1", MemoryChanges(content="§ blarg again"))
    assert store.fallback_vector("u1", a) is not None
    assert await store.forget_by_scope(MemoryScope(user_id="u1", project_id="p1")) == 2
    assert store.fallback_vector("u1", a) is None
    assert names(await store.retrieve(opts())) == []


async def test_the_vectors_are_made_again_when_the_index_is_rebuilt():
    encoder = FakeFallbackEncoder()
    inner = make_inner()
    first = HybridStore(inner, **plain(), fallback=fallback_model(encoder))
    await seed(first)  # no index held yet: nothing embedded until the build
    assert encoder.calls["passage"] == 0
    ranked = await first.retrieve(opts())
    assert names(ranked)[0] == "A" and encoder.calls["passage"] == 1  # the build's batch of 2
    # a restart: a new decorator over the same store (the backend never held those vectors)
    second = HybridStore(inner, **plain(), fallback=fallback_model(encoder))
    again = await second.retrieve(opts())
    assert [(r.memory.id, r.similarity, r.score) for r in again] == [
        (r.memory.id, r.similarity, r.score) for r in ranked
    ]
    assert np.array_equal(second.fallback_vector("u1", tid("Au1")), first.fallback_vector("u1", tid("Au1")))
    # an eviction (one user held): rebuilt, vectors made again
    small = HybridStore(inner, **plain(max_users=1), fallback=fallback_model(encoder))
    await seed(small, user="u2")
    assert names(await small.retrieve(opts()))[0] == "A"
    await small.retrieve(opts(user="u2"))  # evicts u1
    assert small.fallback_vector("u1", tid("Au1")) is None
    calls = encoder.calls["passage"]
    assert names(await small.retrieve(opts()))[0] == "A" and encoder.calls["passage"] > calls


async def test_a_failing_fallback_leaves_the_ranking_lexical_and_is_counted_then_recovers(monkeypatch):
    events: list[str] = []
    encoder = FakeFallbackEncoder()
    store = HybridStore(make_inner(), **plain(), fallback=fallback_model(encoder), on_event=events.append)
    await store.retrieve(opts("warm up"))
    encoder.fail_passages = True
    await seed(store)  # the writes succeed (each also retries what earlier ones left)
    await store.fallback_settled("u1")
    assert "fallback:error" in events and "fallback:passage" not in events
    assert store.fallback_vector("u1", tid("Au1")) is None
    results = await store.retrieve(opts())  # as without the fallback: D lexically, A not at all
    assert names(results) == ["D"] and similarity_of(results, "D") < 0.5
    encoder.fail_passages = False
    calls = encoder.calls["passage"]
    await store.retrieve(opts())  # within FALLBACK_RETRY_S of the failure: no retry
    await store.fallback_settled("u1")
    assert store.fallback_vector("u1", tid("Au1")) is None and encoder.calls["passage"] == calls
    monkeypatch.setattr(hybrid_module, "FALLBACK_RETRY_S", 0.0)
    await store.retrieve(opts())  # starts the retry in the background
    await store.fallback_settled("u1")
    assert names(await store.retrieve(opts()))[0] == "A"
    # the query side failing: that search is lexical, counted, not failed
    encoder.fail_queries = True
    errors = events.count("fallback:error")
    results = await store.retrieve(opts())
    assert names(results)[0] == "D" and events.count("fallback:error") == errors + 1


async def test_a_write_waits_at_most_fallback_wait_s_and_its_vector_lands_after():
    encoder = FakeFallbackEncoder()
    store = HybridStore(make_inner(), **plain(), fallback=fallback_model(encoder), fallback_wait_s=0.05)
    await store.retrieve(opts("warm up"))
    encoder.gate = asyncio.Event()
    await asyncio.wait_for(store.store(Memory(id=tid("Au1"), user_id="u1", content="§ blarg mip")), 2)
    assert store.fallback_vector("u1", tid("Au1")) is None  # still under way
    encoder.gate.set()
    await store.fallback_settled("u1")
    assert store.fallback_vector("u1", tid("Au1")) is not None


async def test_a_search_out_of_the_fallback_memories_scope_does_not_embed_with_the_fallback():
    encoder = FakeFallbackEncoder()
    store = HybridStore(make_inner(), **plain(), fallback=fallback_model(encoder))
    await store.retrieve(opts("warm up", project_id="p1"))
    await seed(store, project="p1")
    assert names(await store.retrieve(opts(project_id="p2"))) == [] and encoder.calls["query"] == 0
    assert names(await store.retrieve(opts(project_id="p1")))[0] == "A" and encoder.calls["query"] == 1


async def test_writes_during_a_build_get_their_vectors():
    encoder = FakeFallbackEncoder()
    inner = make_inner()
    await inner.store(Memory(id=tid("Du1"), user_id="u1", content="§ nib wump"))
    store = HybridStore(inner, **plain(), fallback=fallback_model(encoder))
    gate = asyncio.Event()
    list_page = inner.list

    async def slow_list(query):
        await gate.wait()
        return await list_page(query)

    inner.list = slow_list  # type: ignore[method-assign]
    search = asyncio.ensure_future(store.retrieve(opts()))
    await asyncio.sleep(0.01)  # the build is listing
    write = asyncio.ensure_future(store.store(Memory(id=tid("Au1"), user_id="u1", content="§ blarg mip")))
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.wait_for(asyncio.gather(search, write), 5)
    await store.fallback_settled("u1")
    assert store.fallback_vector("u1", tid("Au1")) is not None and store.fallback_vector("u1", tid("Du1")) is not None
    assert names(await store.retrieve(opts()))[0] == "A"


# --------------------------------------------------------------------------- the real models

SET = Path(__file__).resolve().parents[2] / "fallback_set"


@needs_e5
async def test_e5_beside_minilm_finds_a_thai_memory_from_a_thai_question_among_distractors(bundled_settings):
    """th01 of the fallback set (dev split): MiniLM reads both as ``[UNK]`` and the words
    barely overlap, so without the fallback the memory is not among the first three; with
    e5 it is, with the best similarity of them."""
    from memory_core.config import FallbackModelSettings
    from memory_core.embedding import CoalescingEmbedFn, TokenizerCoverage, local_encoder
    from memory_core.embedding.fallback import open_fallback

    rows = {r["id"]: r for r in map(json.loads, (SET / "labelled.jsonl").read_text(encoding="utf-8").splitlines())}
    assert rows["th01"]["split"] == "dev"
    distractors = [json.loads(line)["memory"] for line in (SET / "distractors.jsonl").read_text().splitlines()]
    memories = {
        "target": rows["th01"]["memory"],  # I am severely allergic to shrimp and crab
        **{f"th{i:02d}": rows[f"th{i:02d}"]["memory"] for i in (2, 3, 8, 10, 11)},
        **{f"d{i}": t for i, t in enumerate(distractors) if t and t[0] in "ฉสพเ"},  # the Thai distractors
        **{f"en{i:02d}": rows[f"en{i:02d}"]["memory"] for i in (1, 3, 5, 7)},
    }
    question = rows["th01"]["query"]  # which seafood must I not eat?
    coverage = TokenizerCoverage.from_settings(bundled_settings)
    assert coverage is not None and not coverage.represents(question)
    minilm = CoalescingEmbedFn(local_encoder(bundled_settings.model_copy(update={"device": "cpu"}), num_threads=1))
    fallback = open_fallback(bundled_settings.model_copy(update={"fallback": FallbackModelSettings()}))
    assert fallback is not None
    ranked = {}
    for name, model in (("without", None), ("with", fallback)):
        store = HybridStore(InMemoryStore(embed=minilm, dimension=384, represents=coverage.represents), fallback=model)
        for key, text in memories.items():
            await store.store(Memory(id=tid(key), user_id="u", content=text))
        await store.retrieve(RetrieveOptions(user_id="u", query=question, hybrid=True, limit=1))  # build
        await store.fallback_settled("u")
        ranked[name] = await store.retrieve(RetrieveOptions(user_id="u", query=question, hybrid=True, limit=3))
    assert "target" not in [tname(r.memory.id) for r in ranked["without"]]
    found = [tname(r.memory.id) for r in ranked["with"]]
    assert "target" in found
    best = max(ranked["with"], key=lambda r: r.similarity)
    assert tname(best.memory.id) == "target"


async def test_an_index_rebuilt_while_the_evicted_ones_fill_runs_gets_all_its_vectors():
    """The evicted index's fill (still under way) is not the rebuilt index's: the rebuild
    starts its own, so every pending memory gets its vector, not only the batch the old
    fill had in hand when it noticed the eviction."""
    encoder = FakeFallbackEncoder()
    inner = make_inner()
    texts = ("§ blarg mip", "§ nib wump", "§ quux fizz", "§ zork wump", "§ blarg fizz")  # > 2 batches of 2
    for n, text in enumerate(texts):
        await inner.store(Memory(id=tid(f"M{n}"), user_id="u1", content=text))
    store = HybridStore(inner, **plain(max_users=1), fallback=fallback_model(encoder), fallback_wait_s=0.01)
    encoder.gate = asyncio.Event()
    await store.retrieve(opts())  # builds u1; its fill waits at the gate
    await store.retrieve(opts(user="u2"))  # evicts u1
    await store.retrieve(opts())  # rebuilds u1 while the old fill is still under way
    encoder.gate.set()
    await asyncio.wait_for(store.fallback_settled("u1"), 5)
    assert [n for n in range(len(texts)) if store.fallback_vector("u1", tid(f"M{n}")) is None] == []


async def test_writes_overlapping_a_busy_fallback_embed_each_memory_once():
    """Writes whose vectors are still under way (the engine busy past ``fallback_wait_s``):
    the next write's fill of what earlier ones "left behind" does not embed those again."""
    encoder = FakeFallbackEncoder()
    store = HybridStore(make_inner(), **plain(), fallback=fallback_model(encoder), fallback_wait_s=0.01)
    await store.retrieve(opts("warm up"))
    encoder.gate = asyncio.Event()
    texts = [f"§ blarg w{n}" for n in range(6)]
    for n, text in enumerate(texts):
        await store.store(Memory(id=tid(f"M{n}"), user_id="u1", content=text))
    encoder.gate.set()
    await asyncio.wait_for(store.fallback_settled("u1"), 5)
    assert all(store.fallback_vector("u1", tid(f"M{n}")) is not None for n in range(len(texts)))
    assert sorted(encoder.texts) == sorted(texts)  # each once
    assert store._work == {}  # nothing left under way for any user
