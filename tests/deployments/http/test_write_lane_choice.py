"""``IngressBase._embed_write``: which embeds a caller's write, the store shard's write lane or
the Embedder (``pool.in_shard_write_texts`` with ``pool.query_embedding: in_shard``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deployments.embedder import EmbedResponse
from deployments.http.routes.base import IngressBase
from memory_core.config import MemoryStoreSettings
from memory_core.errors import InvalidInput, StoreUnavailable


class Rig:
    """What ``_embed_write`` reads of an ingress: the pool settings, the store pool client's
    ``embed_write`` (answers ``lane``) and ``_embed`` (the Embedder)."""

    def __init__(self, pool: dict, lane):
        self.config = SimpleNamespace(memory=MemoryStoreSettings.model_validate({"pool": pool}))
        self.lane_calls: list[tuple[str, list[str]]] = []
        self.embedder_calls: list[list[str]] = []

        async def embed_write(user_id, texts):
            self.lane_calls.append((user_id, list(texts)))
            got = lane(texts)
            if isinstance(got, Exception):
                raise got
            return got

        self.store = SimpleNamespace(embed_write=embed_write)

    async def _embed(self, texts):
        self.embedder_calls.append(list(texts))
        return EmbedResponse([[0.0, 1.0]] * len(texts), "embedder-id", 2, "m", [False] * len(texts), 1)

    async def run(self, texts):
        return await IngressBase._embed_write(self, "alice", texts)  # type: ignore[arg-type]


IN_SHARD = {"query_embedding": "in_shard"}


async def test_a_small_write_taken_by_the_lane_never_reaches_the_embedder():
    rig = Rig(IN_SHARD, lambda texts: ([[1.0, 0.0]] * len(texts), "shard-id"))
    assert await rig.run(["a", "b"]) == ([[1.0, 0.0], [1.0, 0.0]], "shard-id")
    assert rig.lane_calls == [("alice", ["a", "b"])] and rig.embedder_calls == []


async def test_a_lane_that_declines_sends_the_write_to_the_embedder():
    rig = Rig(IN_SHARD, lambda texts: None)  # the lane full
    assert await rig.run(["a"]) == ([[0.0, 1.0]], "embedder-id")
    assert len(rig.lane_calls) == 1 and rig.embedder_calls == [["a"]]


@pytest.mark.parametrize(
    ("pool", "texts"),
    [
        (IN_SHARD, [f"t{i}" for i in range(9)]),  # above the default 8
        ({**IN_SHARD, "in_shard_write_texts": 0}, ["a"]),  # the lane off
        ({"query_embedding": "embedder"}, ["a"]),  # no model copy in the shard
        (IN_SHARD, []),
    ],
)
async def test_the_lane_is_not_asked_when_it_cannot_take_the_write(pool, texts):
    rig = Rig(pool, lambda texts: pytest.fail("the lane was asked"))
    vectors, identity = await rig.run(texts)
    assert identity == "embedder-id" and len(vectors) == len(texts)
    assert rig.lane_calls == [] and rig.embedder_calls == [texts]


@pytest.mark.parametrize("bad", [-1, 65])
def test_the_lane_bound_is_validated(bad):
    with pytest.raises(ValueError):
        MemoryStoreSettings.model_validate({"pool": {"query_embedding": "in_shard", "in_shard_write_texts": bad}})
    assert MemoryStoreSettings().pool.in_shard_write_texts == 8


async def test_a_failing_lane_hands_the_write_to_the_embedder_and_a_bad_text_is_refused():
    rig = Rig(IN_SHARD, lambda texts: StoreUnavailable("store shard unavailable; retry"))
    assert await rig.run(["a"]) == ([[0.0, 1.0]], "embedder-id")
    assert rig.embedder_calls == [["a"]]
    rig = Rig(IN_SHARD, lambda texts: InvalidInput("texts must be strings"))
    with pytest.raises(InvalidInput):
        await rig.run(["a"])
    assert rig.embedder_calls == []
