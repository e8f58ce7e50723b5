"""BM25 index and tokenizer (memory_core.retrieval.lexical)."""

import math

import pytest

from memory_core.retrieval.lexical import BM25Corpus, tokenize


def test_tokenize_english_stop_words_stemming_possessive():
    assert tokenize("When did Caroline's painting classes start?") == ["carolin", "paint", "class", "start"]
    assert tokenize("I am going to the PARKS") == ["go", "park"]
    assert tokenize("") == []
    assert tokenize("the and of") == []


def test_tokenize_numbers_and_apostrophes():
    assert tokenize("Moved in 2019, didn't like it") == ["move", "2019", "like"]
    assert tokenize("rock’n’roll") == tokenize("rock'n'roll")


def test_tokenize_cjk_unigrams_and_bigrams():
    assert tokenize("北京大学") == ["北", "京", "大", "学", "北京", "京大", "大学"]
    assert tokenize("我喜欢Python编程") == ["我", "喜", "欢", "我喜", "喜欢", "python", "编", "程", "编程"]
    assert tokenize("すし") == ["す", "し", "すし"]
    assert tokenize("한국어") == ["한", "국", "어", "한국", "국어"]
    assert tokenize("猫") == ["猫"]


def _corpus(k1=1.2, b=0.75):
    c = BM25Corpus(k1=k1, b=b)
    c.add("d1", "apple banana")  # [appl, banana]            |D| = 2
    c.add("d2", "apple apple cherry")  # [appl, appl, cherri]  |D| = 3
    c.add("d3", "banana")  # [banana]                        |D| = 1
    return c


def test_bm25_exact_scores_hand_computed():
    c = _corpus()
    assert c.avgdl == pytest.approx(2.0)
    # idf(apple) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6)
    idf = math.log(1.6)
    assert c.idf("appl") == pytest.approx(idf)
    # d1: tf=1, |D|=2: 1·2.2 / (1 + 1.2·(0.25 + 0.75·2/2)) = 2.2/2.2 = 1
    # d2: tf=2, |D|=3: 2·2.2 / (2 + 1.2·(0.25 + 0.75·3/2)) = 4.4/3.65
    got = dict(c.search("apple"))
    assert got["d1"] == pytest.approx(idf * 1.0)
    assert got["d2"] == pytest.approx(idf * 4.4 / 3.65)
    assert "d3" not in got
    assert [i for i, _ in c.search("apple")] == ["d2", "d1"]
    # two terms add up; cherry only in d2: idf = ln(1 + 2.5/1.5)
    both = dict(c.search("apple cherry"))
    cherry = math.log(1 + 2.5 / 1.5) * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 1.5))
    assert both["d2"] == pytest.approx(idf * 4.4 / 3.65 + cherry)
    # a repeated query term counts once
    assert dict(c.search("apple apple"))["d2"] == pytest.approx(got["d2"])


def test_bm25_b0_k1_0_edge_parameters():
    c = _corpus(k1=0.0, b=0.0)
    # k1 = 0: tf saturates immediately, score = idf for any tf
    got = dict(c.search("apple"))
    assert got["d1"] == pytest.approx(math.log(1.6))
    assert got["d2"] == pytest.approx(math.log(1.6))
    with pytest.raises(ValueError):
        BM25Corpus(k1=-1)
    with pytest.raises(ValueError):
        BM25Corpus(b=1.5)


def test_incremental_add_remove_update_keep_statistics_exact():
    c = _corpus()
    c.add("d2", "cherry")  # update replaces the old version
    assert c.avgdl == pytest.approx((2 + 1 + 1) / 3)
    assert dict(c.search("apple")) == pytest.approx(
        {"d1": math.log(1 + 2.5 / 1.5) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2 / (4 / 3)))}
    )
    assert c.remove("d1") is True
    assert c.remove("d1") is False
    assert c.search("apple") == []
    assert sorted(c.ids()) == ["d2", "d3"]
    # a fresh corpus with the same documents scores identically (no stale statistics)
    fresh = BM25Corpus()
    fresh.add("d2", "cherry")
    fresh.add("d3", "banana")
    assert c.search("cherry banana") == fresh.search("cherry banana")


def test_filters_and_remove_where():
    c = BM25Corpus()
    c.add("a", "garden tomatoes", project_id="p1", type="semantic")
    c.add("b", "garden roses", project_id="p2", type="episodic")
    c.add("c", "garden shed", project_id=None, type="episodic")
    assert {i for i, _ in c.search("garden", project_id="p1")} == {"a"}
    assert {i for i, _ in c.search("garden", types=["episodic"])} == {"b", "c"}
    assert {i for i, _ in c.search("garden", project_id="p2", types=["semantic"])} == set()
    assert sorted(c.remove_where(types=["episodic"])) == ["b", "c"]
    assert [i for i, _ in c.search("garden")] == ["a"]


def test_search_limit_and_tie_order():
    c = BM25Corpus()
    for i in ("z", "y", "x"):
        c.add(i, "same words here")
    assert [i for i, _ in c.search("words", limit=2)] == ["x", "y"]


def test_a_word_too_long_to_stem_is_not_cached():
    """A 16 KB "word" is indexed as it is and never kept in the stem cache."""
    from memory_core.retrieval import lexical

    lexical._stem_cached.cache_clear()
    long_word = "x" * (lexical.MAX_STEM_CHARS + 1)
    assert lexical._stem(long_word) == long_word
    assert lexical._stem_cached.cache_info().currsize == 0
    assert lexical._stem("painting") == "paint"
    assert lexical._stem_cached.cache_info().currsize == 1


def test_the_terms_cache_is_bounded_by_weight_not_by_count():
    """``tokenize``'s cache holds terms up to ``TOKENS_CACHE_BUDGET`` whatever the texts: 300
    distinct 16 KB CJK texts (~11,000 terms each) once held ~280 MB (2,048 of them ~1.9 GB,
    a cache bounded by count), now what is kept stays under the budget's ~30 MB; a chat-sized
    text seen again is served from the cache, and a text heavier than the whole budget is
    tokenized but not kept."""
    import random
    import tracemalloc

    from memory_core.retrieval import lexical

    rng = random.Random(7)
    texts = ["".join(chr(0x4E00 + rng.randrange(20000)) for _ in range(5400)) for _ in range(300)]
    lexical._clear_terms_cache()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in texts:
            lexical.tokenize(text)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 40 * 2**20, f"{kept / 2**20:.0f} MiB kept by the terms cache"
    assert lexical._terms_cache.currsize <= lexical.TOKENS_CACHE_BUDGET

    lexical._clear_terms_cache()
    for n in range(lexical.TOKENS_CACHE_BUDGET // lexical._ENTRY_UNITS + 1000):  # one-word searches
        lexical.tokenize(f"q{n}")
    assert len(lexical._terms_cache) <= lexical.TOKENS_CACHE_BUDGET // lexical._ENTRY_UNITS

    lexical._clear_terms_cache()
    chat = "Caroline went to the LGBTQ support group yesterday"
    assert lexical._terms(chat) is lexical._terms(chat)  # the second from the cache
    heavy = " ".join(f"w{n}" for n in range(lexical.TOKENS_CACHE_BUDGET + 1))
    assert len(lexical.tokenize(heavy)) == lexical.TOKENS_CACHE_BUDGET + 1
    assert heavy not in lexical._terms_cache and chat in lexical._terms_cache


def test_indexing_stems_with_the_c_stemmer_and_its_stems_are_the_python_stemmers():
    """The index stems with PyStemmer's C Snowball stemmer (``snowballstemmer`` hands over to
    it when installed): the pure-Python one costs ~20 µs a distinct word on the store shard's
    GIL (a 16 KB import line of distinct words held the shard ~50 ms). Its stems are the
    pure-Python stemmer's on every word of the project's labelled supersession pairs."""
    import json
    import re
    from pathlib import Path

    import Stemmer
    from snowballstemmer.english_stemmer import EnglishStemmer

    from memory_core.retrieval import lexical

    lexical._stem_cached.cache_clear()
    lexical._STEMMERS.__dict__.pop("english", None)
    lexical._stem("running")
    assert isinstance(lexical._STEMMERS.english, Stemmer.Stemmer)
    assert lexical._STEMMERS.english.maxCacheSize == 0  # one cache of stems, this module's (bounded)
    words = set()
    for path in (Path(__file__).parents[2] / "supersession_set").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            words.update(re.findall(r"[a-z][a-z']*", " ".join(str(v) for v in json.loads(line).values()).lower()))
    assert len(words) > 2000
    python, c = EnglishStemmer(), Stemmer.Stemmer("english")
    assert [w for w in sorted(words) if python.stemWord(w) != c.stemWord(w)] == []


# ---------------------------------------------------------------------- scope tally
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCOPE_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]),
        st.sampled_from(["d1", "d2", "d3", "d4", "d5"]),
        st.sampled_from([None, "p1", "p2"]),
        st.sampled_from(["semantic", "episodic", "procedural"]),
        st.sampled_from(["active", "superseded"]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    ops=_SCOPE_OPS,
    project=st.sampled_from([None, "p1", "p2", "p3"]),
    types=st.sampled_from([None, (), ("semantic",), ("episodic", "procedural")]),
    states=st.sampled_from([None, ("active",), ("superseded",), ("active", "superseded")]),
)
def test_count_is_the_number_of_matching_documents_after_any_writes(ops, project, types, states):
    """``count`` (a tally kept by add/remove, replacing adds included) equals the size of
    ``matching``, the pass over the documents, for every scope."""
    corpus = BM25Corpus()
    for op, doc, doc_project, doc_type, doc_state in ops:
        if op == "add":
            corpus.add(doc, f"text of {doc}", project_id=doc_project, type=doc_type, state=doc_state)
        else:
            corpus.remove(doc)
    assert corpus.count(project, types, states) == len(corpus.matching(project, types, states))
    corpus.remove_where(project, types)
    assert corpus.count(project, types, states) == len(corpus.matching(project, types, states))
