"""Text the embedding model cannot represent (all-MiniLM-L6-v2 maps a Thai sentence to one
[UNK] token, so every Thai sentence gets the same vector) is ranked lexically only, and never
passes a floor on a meaningless cosine."""

from __future__ import annotations

import numpy as np
import pytest

from memory_core.config import EmbeddingSettings
from memory_core.embedding import UNKNOWN_SHARE_LIMIT, TokenizerCoverage
from memory_core.stores import InMemoryStore
from memory_core.stores.hybrid import HybridStore
from memory_core.testing.fake_embed import fake_vector
from memory_core.types import Memory, RetrieveOptions

DIM = 32
FLOOR = 0.425

THAI = {
    "moved": "ฉันย้ายไปเชียงใหม่แล้ว",  # I moved to Chiang Mai
    "cat": "แมวของฉันชื่อส้ม",  # my cat is called Som
    "food": "ฉันชอบกินข้าวผัดกุ้ง",  # I like shrimp fried rice
}


@pytest.fixture(scope="module")
def coverage() -> TokenizerCoverage:
    cov = TokenizerCoverage.from_settings(EmbeddingSettings(model="bundled:all-MiniLM-L6-v2"))
    assert cov is not None
    return cov


def unk_like_embed(coverage):
    """Fake model with the real defect: every text the tokenizer cannot represent gets the same
    vector (e0), and so does the English word "alpha" (a meaningless exact collision)."""

    async def embed(texts):
        out = []
        for t in texts:
            if not coverage.represents(t) or t.strip().lower() == "alpha":
                v = [0.0] * DIM
                v[0] = 1.0
                out.append(v)
            else:
                out.append(fake_vector(t, DIM))
        return out

    return embed


def test_unknown_share_of_the_bundled_tokenizer(coverage):
    assert coverage.unknown_share(THAI["moved"]) == 1.0 and not coverage.represents(THAI["moved"])
    assert coverage.unknown_share("my locker code is 4817") == 0.0
    mixed = "my code is 4817 ผม"  # 2 of 14 visible characters unknown
    assert coverage.unknown_share(mixed) == pytest.approx(2 / 14)
    assert coverage.represents(mixed)
    assert coverage.unknown_share("北京大学 Привет") == 0.0  # covered by the vocabulary
    assert not coverage.represents("😀😀")
    assert coverage.represents("") and coverage.limit == UNKNOWN_SHARE_LIMIT


async def _stores(coverage, **hybrid_kw):
    inner = InMemoryStore(embed=unk_like_embed(coverage), dimension=DIM, represents=coverage.represents)
    return inner, HybridStore(inner, **hybrid_kw)


@pytest.mark.parametrize("held_search_max", [10000, 0], ids=["held-search", "store-search"])
async def test_thai_question_is_ranked_lexically_and_floors_on_coverage(coverage, held_search_max):
    _, store = await _stores(coverage, held_search_max=held_search_max)
    ids = {}
    for key, text in THAI.items():
        ids[key] = (await store.store(Memory(user_id="u", content=text))).id
    await store.store(Memory(user_id="u", content="alpha beta gamma"))
    query = "แมวของฉันชื่ออะไร"  # what is my cat's name?
    every = await store.retrieve(RetrieveOptions(user_id="u", query=query, hybrid=True, limit=10, threshold=-1))
    sims = {r.memory.id: r.similarity for r in every}
    assert sims[ids["cat"]] > FLOOR  # shares most of the question's terms
    assert all(s < FLOOR for i, s in sims.items() if i != ids["cat"])  # never 1.0 for every Thai memory
    assert len(set(sims.values())) > 1
    floored = await store.retrieve(RetrieveOptions(user_id="u", query=query, hybrid=True, limit=10, threshold=FLOOR))
    assert [r.memory.id for r in floored] == [ids["cat"]]


@pytest.mark.parametrize("held_search_max", [10000, 0], ids=["held-search", "store-search"])
async def test_unrepresentable_memories_are_never_vector_candidates(coverage, held_search_max):
    _, store = await _stores(coverage, held_search_max=held_search_max)
    for text in THAI.values():
        await store.store(Memory(user_id="u", content=text))
    english = await store.store(Memory(user_id="u", content="alpha"))
    # "alpha" embeds exactly like every Thai memory (cosine 1.0), but those cosines mean nothing
    got = await store.retrieve(RetrieveOptions(user_id="u", query="alpha", hybrid=True, limit=10, threshold=-1))
    assert [r.memory.id for r in got] == [english.id]


async def test_plain_vector_retrieval_skips_unrepresentable_text(coverage):
    inner, _ = await _stores(coverage)
    for text in THAI.values():
        await inner.store(Memory(user_id="u", content=text))
    alpha = await inner.store(Memory(user_id="u", content="alpha"))
    assert await inner.retrieve(RetrieveOptions(user_id="u", query="แมวของฉัน", limit=10, threshold=-1)) == []
    got = await inner.retrieve(RetrieveOptions(user_id="u", query="alpha", limit=10, threshold=-1))
    assert [r.memory.id for r in got] == [alpha.id]
    assert np.isclose(got[0].similarity, 1.0)
