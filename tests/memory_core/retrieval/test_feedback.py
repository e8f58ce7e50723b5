"""``memory_core.retrieval.feedback``: the second hop's expansion terms and scores, and the
second hop in ``HybridStore`` (a memory sharing no term with the query is found through the
first hop's best memory)."""

from __future__ import annotations

import pytest

from memory_core.retrieval.feedback import expansion_terms, hop_scores
from memory_core.retrieval.lexical import BM25Corpus, tokenize
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.types import Memory, MemoryType
from tests.ids import tid
from tests.memory_core.stores.test_hybrid import DIM, fake_embed, ids, opts, plain

FILLER = [f"weather note {i} about rain and clouds" for i in range(12)]


def corpus_of(docs: dict[str, str]) -> BM25Corpus:
    c = BM25Corpus()
    for i, text in docs.items():
        c.add(i, text)
    return c


def test_expansion_terms_are_seed_terms_the_query_lacks_held_by_some_other_memories():
    docs = {
        "seed": "my daughter luna painted a dinosaur",
        "luna": "luna adores museums",
        "dino": "the dinosaur book was great",
        "only": "painted pottery",
        **{f"f{i}": t for i, t in enumerate(FILLER)},
    }
    c = corpus_of(docs)
    q = tokenize("what does my daughter like")
    got = expansion_terms(c, ["seed"], q, term_count=10)
    assert set(got) == set(tokenize("luna dinosaur painted"))  # df ≥ 2, not in the query
    assert not set(got) & set(q)
    # idf × seeds holding the term, then the term: a term two seeds hold comes first
    two = expansion_terms(c, ["seed", "luna"], q, term_count=1)
    assert two == tokenize("luna")
    assert expansion_terms(c, ["seed"], q, term_count=0) == []
    assert expansion_terms(c, [], q, term_count=5) == []
    assert expansion_terms(c, ["seed"], q, term_count=10, exclude=tokenize("luna")) == sorted(
        got[1:] if got[0] == tokenize("luna")[0] else [t for t in got if t != tokenize("luna")[0]],
        key=lambda t: (-c.idf(t), t),
    )


def test_a_term_most_memories_hold_or_only_the_seed_holds_is_no_expansion_term():
    docs = {"seed": "rain luna", **{f"f{i}": t for i, t in enumerate(FILLER)}, "x": "unique words here"}
    c = corpus_of(docs)
    assert "rain" in c.terms("seed")
    assert expansion_terms(c, ["seed"], [], term_count=5) == []  # rain: in 13 of 14 memories; luna: only the seed


def test_hop_scores_are_max_normalised_and_filtered():
    c = BM25Corpus()
    c.add("a", "luna luna museum", project_id="p1")
    c.add("b", "luna", project_id="p2")
    c.add("c", "nothing")
    got = hop_scores(c, tokenize("luna museum"), 10)
    assert got["a"] == pytest.approx(1.0) and 0 < got["b"] < 1 and "c" not in got
    assert set(hop_scores(c, tokenize("luna"), 10, project_id="p2")) == {"b"}
    assert hop_scores(c, [], 10) == {} and hop_scores(c, tokenize("luna"), 0) == {}


async def test_the_second_hop_finds_a_memory_through_the_first_hops_best():
    texts = {
        "seed": "Mel: my daughter Luna painted a dinosaur yesterday",
        "answer": "Mel: Luna adores the dinosaur museum",  # no term of the query
        **{f"f{i}": f"Mel: {t}" for i, t in enumerate(FILLER)},
    }
    margin = {}
    for hop_weight, second_hop in ((0.0, True), (0.5, True), (0.5, False)):
        store = HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), **plain(hop_weight=hop_weight, hop_seeds=1))
        for name, text in texts.items():
            await store.store(Memory(id=tid(name), user_id="u1", content=text, type=MemoryType.EPISODIC))
        got = await store.retrieve(opts(query="What does my daughter like?", limit=len(texts), second_hop=second_hop))
        assert ids(got)[0] == "seed"
        score = {n: r.score for n, r in zip(ids(got), got, strict=True)}
        margin[(hop_weight, second_hop)] = score.get("answer", 0.0) - max(
            score.get(f"f{i}", 0.0) for i in range(len(FILLER))
        )
    assert margin[(0.0, True)] == pytest.approx(0.0, abs=1e-6)  # one hop: the answer scores as the filler
    assert margin[(0.5, True)] > 0.2  # two hops: found through "luna" and "dinosaur" of the seed
    # a request without ``second_hop`` (curation's candidate search) gets one hop whatever the weight
    assert margin[(0.5, False)] == pytest.approx(0.0, abs=1e-6)


def test_hop_settings_are_checked():
    with pytest.raises(ValueError):
        HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), hop_weight=-1)
    with pytest.raises(ValueError):
        HybridStore(InMemoryStore(embed=fake_embed, dimension=DIM), hop_seeds=0)
