"""Okapi BM25 lexical index, one corpus per user, updated incrementally.

Scoring (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
Foundations and Trends in IR 3(4), 2009, eq. 3.15 with the Robertson/Spärck Jones IDF)::

    score(D, Q) = Σ_{t ∈ Q} idf(t) · tf(t, D) · (k1 + 1) / (tf(t, D) + k1 · (1 − b + b · |D| / avgdl))
    idf(t)      = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))

``tf`` = occurrences of term t in D, ``|D|`` = number of terms of D, ``avgdl`` = mean |D| over
the user's corpus, ``N`` = documents in it, ``n(t)`` = documents containing t. The ``1 +``
inside the log (as in Lucene) keeps idf positive for terms in more than half of the documents.
Each distinct query term counts once. Defaults ``k1 = 1.2``, ``b = 0.75`` (the values
Robertson & Zaragoza report as robust).

Tokenizer (``tokenize``): Unicode NFKC, lowercase; Latin/Cyrillic/Greek/digit words lose a
possessive ``'s``, English stop words are dropped and the rest are Snowball-stemmed (Porter2,
``snowballstemmer``; a word longer than ``MAX_STEM_CHARS`` is kept whole); runs of CJK ideographs / kana / hangul become character unigrams plus
bigrams (the usual dictionary-free CJK indexing: Chinese "北京大学" → 北 京 大 学 北京 京大 大学);
Thai, Lao, Myanmar and Khmer, also written without spaces, are indexed the same way.

Memory: one posting map per loaded user (``memory_core.stores.user_index.UserIndexes`` holds
them, at most ``max_users`` users, LRU).
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import cachetools
import snowballstemmer

DEFAULT_K1 = 1.2
DEFAULT_B = 0.75

# English stop words: the Snowball English list (snowballstem.org/algorithms/english/stop.txt)
# plus common chat fillers. Question words (when/what/how …) are on it: they carry no topic.
STOP_WORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself it its itself they them their theirs themselves what which who whom this that these those am is are
    was were be been being have has had having do does did doing would should could ought i'm you're he's she's
    it's we're they're i've you've we've they've i'd you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll
    they'll isn't aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't
    shouldn't can't cannot couldn't mustn't let's that's who's what's here's there's when's where's why's how's a
    an the and but if or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once here there when
    where why how all any both each few more most other some such no nor not only own same so than too very
    will can just also s t d ll m re ve y yeah yes oh ok okay hey hi hello wow really thanks thank lol um uh
    gonna wanna got get
    """.split()
)

_CJK_CLASS = (
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
    r"\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]"
)
"""Scripts written without spaces between words: CJK ideographs, kana, hangul, and Thai,
Lao, Myanmar and Khmer (their combining vowel marks included), indexed as characters."""
_ALNUM = rf"[^\W_{_CJK_CLASS[1:-1]}]"  # a letter or digit that is not CJK
_WORD = re.compile(rf"{_CJK_CLASS}++|{_ALNUM}++(?:['’]{_ALNUM}++)*+")
"""A word. Linear: one character class per step, and possessive quantifiers (what they took
is never given back: "a'a'a'…" is one pass, where a backtracking group rescanned it)."""
_CJK = re.compile(_CJK_CLASS)
_STEMMERS = threading.local()
"""One Snowball stemmer per thread: a stemmer object keeps the word it works on in itself, so
two threads (the loop and a ``pretokenize`` worker) must not share one."""


MAX_STEM_CHARS = 64
"""Longest word that is stemmed; a longer one is indexed as it is (the Snowball stemmer's
time grows faster than the word: a 16 KB "word" would take seconds)."""


def _stem(word: str) -> str:
    """The Snowball stem of ``word``; a word longer than ``MAX_STEM_CHARS`` as it is, and
    never cached (65,536 cached 16 KB "words" would hold a gigabyte)."""
    if len(word) > MAX_STEM_CHARS:
        return word
    return _stem_cached(word)


@lru_cache(maxsize=65536)
def _stem_cached(word: str) -> str:
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
        if hasattr(stemmer, "maxCacheSize"):  # PyStemmer's: this module's cache is the one (bounded)
            stemmer.maxCacheSize = 0
    return stemmer.stemWord(word)


TOKENS_CACHE_BUDGET = 262_144
"""Size of ``tokenize``'s cache (LRU) in weight units: a text weighs its number of terms plus
one per ``_CHARS_PER_UNIT`` characters of it, plus ``_ENTRY_UNITS``. A batch's texts
tokenized off the event loop (``pretokenize``) are found there when the index adds them and
searches with them. About 8,000 chat-sized texts (~20 terms) fit, 16 KB of CJK text (~11,000
terms) about 23, one-word searches about 29,000: what the cache holds stays near 30 MB
whatever the texts (a cache of 2,048 texts, bounded by count, held ~1.9 GB of RSS after
2,048 distinct 16 KB CJK texts: one user's writes could fill it). A text heavier than the
whole budget is never kept."""

_CHARS_PER_UNIT = 16


_ENTRY_UNITS = 8
"""Weight of an entry's own bookkeeping (key, value, the cache's dicts: ~200-440 bytes), so
that many tiny texts (searches of one word) are bounded as well as a few large ones."""


def _tokens_weight(entry: tuple[int, tuple[str, ...]]) -> int:
    chars, terms = entry
    return len(terms) + chars // _CHARS_PER_UNIT + _ENTRY_UNITS


_terms_cache: cachetools.LRUCache = cachetools.LRUCache(maxsize=TOKENS_CACHE_BUDGET, getsizeof=_tokens_weight)
_terms_lock = threading.Lock()


def tokenize(text: str) -> list[str]:
    """Index terms of ``text`` in order (see the module docstring). Empty for empty text.
    The terms of recent texts are cached up to ``TOKENS_CACHE_BUDGET`` (thread-safe): a text
    seen before costs a hash of it, not its stemming.

    >>> tokenize("Caroline's painting classes!")
    ['carolin', 'paint', 'class']
    >>> tokenize("北京大学")
    ['北', '京', '大', '学', '北京', '京大', '大学']
    """
    return list(_terms(text or ""))


def pretokenize(texts: Iterable[str]) -> None:
    """Tokenize ``texts`` into ``tokenize``'s cache (pure CPU: run it on a worker thread, so
    that the event loop that later indexes or searches with these texts only reads the
    cache). ~0.2 µs per distinct word with PyStemmer's C Snowball stemmer (which
    ``snowballstemmer`` uses when it is installed, a dependency; its pure-Python stemmer
    took ~20 µs, and held the GIL of the process that indexes: the store shard)."""
    for text in texts:
        _terms(text or "")


def _terms(text: str) -> tuple[str, ...]:
    """``tokenize``'s terms of ``text`` through the weight-bounded cache."""
    with _terms_lock:
        entry = _terms_cache.get(text)
    if entry is not None:
        return entry[1]
    terms = _read_terms(text)
    try:
        with _terms_lock:
            _terms_cache[text] = (len(text), terms)
    except ValueError:  # heavier than the whole budget: not kept (cachetools raises "value too large")
        pass
    return terms


def _clear_terms_cache() -> None:
    """Empty ``tokenize``'s cache (tests, benchmarks)."""
    with _terms_lock:
        _terms_cache.clear()


def _read_terms(text: str) -> tuple[str, ...]:
    text = unicodedata.normalize("NFKC", text or "").lower()
    out: list[str] = []
    for m in _WORD.finditer(text):
        w = m.group(0)
        if _CJK.match(w):
            out.extend(w)
            out.extend(w[i : i + 2] for i in range(len(w) - 1))
            continue
        w = w.replace("’", "'")
        if w in STOP_WORDS:
            continue
        if w.endswith("'s"):
            w = w[:-2]
        w = w.replace("'", "")
        if not w or w in STOP_WORDS:
            continue
        out.append(_stem(w))
    return tuple(out)


@dataclass
class _Doc:
    tf: Counter
    length: int
    project_id: str | None
    type: Any
    attrs: dict[str, Any] = field(default_factory=dict)
    state: Any = None


class BM25Corpus:
    """One user's documents with their postings. ``add`` replaces a document of the same id.

    Args:
        k1: term-frequency saturation (≥ 0). b: length normalisation in [0, 1].
    Raises ``ValueError`` on parameters out of range.
    """

    def __init__(self, k1: float = DEFAULT_K1, b: float = DEFAULT_B):
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError("BM25 needs k1 ≥ 0 and 0 ≤ b ≤ 1")
        self.k1, self.b = k1, b
        self._docs: dict[str, _Doc] = {}
        self._postings: dict[str, dict[str, int]] = {}
        self._total_len = 0
        # (project_id, type, state) → how many documents: ``count`` without a pass over them
        self._scopes: Counter = Counter()

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._docs

    @property
    def avgdl(self) -> float:
        return self._total_len / len(self._docs) if self._docs else 0.0

    def ids(self) -> list[str]:
        return list(self._docs)

    def terms(self, doc_id: str) -> list[str]:
        """The distinct terms of ``doc_id`` (``[]`` when it is not indexed)."""
        doc = self._docs.get(doc_id)
        return list(doc.tf) if doc is not None else []

    def doc_freq(self, term: str) -> int:
        """How many documents hold ``term``."""
        return len(self._postings.get(term, ()))

    def attrs(self, doc_id: str) -> dict[str, Any] | None:
        doc = self._docs.get(doc_id)
        return doc.attrs if doc is not None else None

    def passes(
        self,
        doc_id: str,
        project_id: str | None = None,
        types: Iterable[Any] | None = None,
        states: Iterable[Any] | None = None,
    ) -> bool:
        """Whether ``doc_id`` is indexed and matches the optional ``project_id``, ``types``
        and ``states`` (``scope_test`` of that scope)."""
        return self.scope_test(project_id, types, states)(doc_id)

    def scope_test(
        self, project_id: str | None = None, types: Iterable[Any] | None = None, states: Iterable[Any] | None = None
    ) -> Callable[[str], bool]:
        """``passes`` of one scope as a function of the id alone, its wanted sets made once
        (for a walk over many ids)."""
        docs, wanted_types, wanted_states = self._docs, _set(types), _set(states)

        def test(doc_id: str) -> bool:
            doc = docs.get(doc_id)
            return doc is not None and _passes(doc, project_id, wanted_types, wanted_states)

        return test

    def matching(
        self, project_id: str | None = None, types: Iterable[Any] | None = None, states: Iterable[Any] | None = None
    ) -> set[str]:
        """The ids of the documents matching the optional ``project_id``, ``types`` and
        ``states``."""
        test = self.scope_test(project_id, types, states)
        return {i for i in self._docs if test(i)}

    def count(
        self, project_id: str | None = None, types: Iterable[Any] | None = None, states: Iterable[Any] | None = None
    ) -> int:
        """How many documents match the optional ``project_id``, ``types`` and ``states``
        (as ``matching``), from a tally per (project, type, state): its cost follows the
        number of such combinations, not of documents."""
        wanted_types, wanted_states = _set(types), _set(states)
        return sum(
            n
            for (project, type_, state), n in self._scopes.items()
            if (project_id is None or project == project_id)
            and (not wanted_types or type_ in wanted_types)
            and (not wanted_states or state in wanted_states)
        )

    def add(
        self,
        doc_id: str,
        text: str,
        *,
        project_id: str | None = None,
        type: Any = None,
        attrs: dict[str, Any] | None = None,
        tokens: Sequence[str] | None = None,
        state: Any = None,
    ) -> None:
        """Index ``text`` (or the given ``tokens``) under ``doc_id``, replacing an earlier
        version. ``project_id``/``type``/``state`` are kept for filtered search; ``attrs`` is
        opaque."""
        self.remove(doc_id)
        tf = Counter(tokens if tokens is not None else tokenize(text))
        length = sum(tf.values())
        self._docs[doc_id] = _Doc(tf, length, project_id, type, dict(attrs or {}), state)
        self._scopes[(project_id, type, state)] += 1
        self._total_len += length
        for term, n in tf.items():
            self._postings.setdefault(term, {})[doc_id] = n

    def remove(self, doc_id: str) -> bool:
        """Drop ``doc_id``; False when it was not indexed."""
        doc = self._docs.pop(doc_id, None)
        if doc is None:
            return False
        scope = (doc.project_id, doc.type, doc.state)
        self._scopes[scope] -= 1
        if not self._scopes[scope]:
            del self._scopes[scope]
        self._total_len -= doc.length
        for term in doc.tf:
            plist = self._postings.get(term)
            if plist is not None:
                plist.pop(doc_id, None)
                if not plist:
                    del self._postings[term]
        return True

    def remove_where(self, project_id: str | None = None, types: Iterable[Any] | None = None) -> list[str]:
        """Drop every document matching the optional ``project_id`` and ``types``; returns ids."""
        wanted = _set(types)
        ids = [i for i, d in self._docs.items() if _passes(d, project_id, wanted, None)]
        for i in ids:
            self.remove(i)
        return ids

    def idf(self, term: str) -> float:
        """ln(1 + (N − n + 0.5) / (n + 0.5)); 0 for an empty corpus."""
        n_docs = len(self._docs)
        if not n_docs:
            return 0.0
        n = len(self._postings.get(term, ()))
        return math.log(1.0 + (n_docs - n + 0.5) / (n + 0.5))

    def score_terms(
        self,
        terms: Sequence[str],
        limit: int | None = None,
        project_id: str | None = None,
        types: Iterable[Any] | None = None,
        states: Iterable[Any] | None = None,
    ) -> list[tuple[str, float]]:
        """BM25 of every document sharing a term with ``terms`` (distinct terms count once),
        filtered, best first (ties by id); the first ``limit`` when given. Scores > 0."""
        if not self._docs:
            return []
        avgdl = self.avgdl or 1.0
        k1, b = self.k1, self.b
        wanted_types, wanted_states = _set(types), _set(states)
        scores: dict[str, float] = {}
        for term in dict.fromkeys(terms):
            plist = self._postings.get(term)
            if not plist:
                continue
            idf = self.idf(term)
            for doc_id, tf in plist.items():
                dl = self._docs[doc_id].length
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        if project_id is not None or wanted_types or wanted_states:
            scores = {
                i: s for i, s in scores.items() if _passes(self._docs[i], project_id, wanted_types, wanted_states)
            }
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        return ranked[:limit] if limit is not None else ranked

    def coverage(self, terms: Sequence[str], doc_id: str) -> float:
        """IDF-weighted share in [0, 1] of the distinct ``terms`` that ``doc_id`` contains:
        Σ idf(t) over the terms in the document / Σ idf(t) over all the terms (0 when the
        document is not indexed or no term has weight). The similarity reported for a pair
        whose cosine means nothing (``embedding.TokenizerCoverage``)."""
        doc = self._docs.get(doc_id)
        distinct = list(dict.fromkeys(terms))
        if doc is None or not distinct:
            return 0.0
        weights = [(self.idf(t), t in doc.tf) for t in distinct]
        total = sum(w for w, _ in weights)
        return sum(w for w, hit in weights if hit) / total if total > 0 else 0.0

    def search(self, query: str, limit: int | None = None, project_id=None, types=None) -> list[tuple[str, float]]:
        """``score_terms(tokenize(query), ...)``."""
        return self.score_terms(tokenize(query), limit, project_id, types)


def _set(values: Iterable[Any] | None) -> set | None:
    return set(values) if values else None


def _passes(doc: _Doc, project_id: str | None, types: set | None, states: set | None) -> bool:
    return (
        (project_id is None or doc.project_id == project_id)
        and (not types or doc.type in types)
        and (not states or doc.state in states)
    )
