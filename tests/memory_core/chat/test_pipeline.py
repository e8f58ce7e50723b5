"""The chat pipeline (``MemoryPipeline``) alone: an in-memory store, a fixed clock, a metrics
sink that records — decision, skip reasons, retrieval, the reflection gate's recency decay,
injection, auto-store with provenance, and failures that never fail the chat."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_core.chat import pipeline as pipeline_module
from memory_core.chat.inject import BLOCK_END, BLOCK_START
from memory_core.chat.metrics import SPECS, BoundedLabels, decision_values
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import load_config
from memory_core.errors import StoreUnavailable
from memory_core.sanitize import RequestContext
from memory_core.stores import InMemoryStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import ListQuery, Memory, MemoryType

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CONFIG = {
    "global": {"stores": {"memory": {"retrieval": {"hybrid": True}, "reflection": {"recency_half_life_days": 10}}}},
    "routing": {
        "decisions": [
            {
                "name": "scratch",
                "match": {"models": ["scratch"]},
                "plugins": [{"type": "memory", "configuration": {"enabled": False}}],
            },
            {
                "name": "default",
                "plugins": [
                    {
                        "type": "memory",
                        "configuration": {"enabled": True, "similarity_threshold": 0.45, "retrieval_limit": 3},
                    }
                ],
            },
        ]
    },
}


class Recorder:
    """Keeps what the pipeline reports; every name and label value must be declared in
    ``chat.metrics.METRICS`` (strict ``BoundedLabels``: an undeclared value fails the test)."""

    def __init__(self):
        self.labels = BoundedLabels(decision_values(load_config(CONFIG)), strict=True)
        self.counts: list[tuple[str, dict]] = []
        self.observed: list[tuple[str, float]] = []
        self.values: dict[tuple[str, tuple], float] = {}

    def count(self, name, tags=None, value=1.0):
        assert SPECS[name].kind == "counter"
        bounded = self.labels.bound(name, tags)
        self.counts.append((name, bounded))
        key = (name, tuple(sorted(bounded.items())))
        self.values[key] = self.values.get(key, 0) + value

    def observe(self, name, value, tags=None):
        assert SPECS[name].kind == "histogram"
        self.labels.bound(name, tags)
        self.observed.append((name, value))

    def own(self, prefix="memory_"):
        """The counts of the service's own metrics (not the llm_memory_* ones)."""
        return [(n, t) for n, t in self.counts if n.startswith(prefix)]


class FailingStore(InMemoryStore):
    async def retrieve(self, options, *, touch=True):
        raise StoreUnavailable("down")

    async def write(self, memories):
        raise StoreUnavailable("down")


def body(text: str, model: str = "assistant") -> dict:
    return {"model": model, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]}


def ctx(user: str | None = "alice", **kw) -> RequestContext:
    return RequestContext(user_id=user, **kw)


@pytest.fixture
def store():
    return InMemoryStore(embed=CountingEmbed(), dimension=DIM)


def pipeline(store, metrics=None) -> MemoryPipeline:
    return MemoryPipeline(load_config(CONFIG), store=store, metrics=metrics or Recorder(), now=lambda: NOW)


async def test_retrieves_gates_and_injects_into_the_current_turn(store):
    metrics = Recorder()
    await store.store(Memory(user_id="alice", content="my locker code is 4817", created_at=NOW - timedelta(days=1)))
    await store.store(Memory(user_id="alice", content="I like green tea", created_at=NOW - timedelta(days=1)))
    await store.store(Memory(user_id="bob", content="my locker code is 1111"))
    prepared = await pipeline(store, metrics).prepare(body("what is my locker code"), ctx())
    assert prepared.skipped is None and prepared.policy.decision_name == "default"
    assert [m.content for m in prepared.injected] == ["my locker code is 4817"]
    system, user = prepared.body["messages"]
    assert system == {"role": "system", "content": "Be brief."}  # untouched: the prefix cache keeps hitting
    assert user["content"].startswith("what is my locker code\n\n" + BLOCK_START)
    assert user["content"].endswith('- "my locker code is 4817"\n' + BLOCK_END)
    assert ("memory_injected_total", {"decision": "default"}) in metrics.counts
    assert ("memory_injected_count", 1.0) in metrics.observed
    assert ("llm_memory_retrieval_total", {"backend": "milvus", "status": "hit"}) in metrics.counts
    assert ("llm_memory_retrieval_results", 1.0) in metrics.observed
    assert [n for n, _ in metrics.observed if n == "llm_memory_injected_tokens"]
    assert [n for n, _ in metrics.observed if n == "llm_memory_retrieval_latency_seconds"]
    assert set(prepared.timings_ms) == {"retrieve", "gate_inject"}


async def test_recency_decay_uses_the_injected_clock(store):
    old = await store.store(Memory(user_id="alice", content="my bike is red", created_at=NOW - timedelta(days=30)))
    new = await store.store(Memory(user_id="alice", content="my bike is red now", created_at=NOW - timedelta(hours=1)))
    prepared = await pipeline(store).prepare(body("what colour is my bike"), ctx())
    assert [m.id for m in prepared.injected][:2] == [new.id, old.id]  # 30 days = 3 half-lives


@pytest.mark.parametrize(
    ("request_body", "context", "reason"),
    [
        (body("what is my locker code"), ctx(None), "no_user"),
        (body("what is my locker code"), ctx(memory_disabled=True), "header_disabled"),
        (body("what is my locker code", model="scratch"), ctx(), "plugin_disabled"),
        (body("thanks!"), ctx(), "greeting"),
        (body("   "), ctx(), "empty_message"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "42"}]},
            ctx(),
            "not_user_turn",
        ),
    ],
)
async def test_skip_reasons_are_counted_and_the_body_is_unchanged(store, request_body, context, reason):
    metrics = Recorder()
    await store.store(Memory(user_id="alice", content="my locker code is 4817"))
    prepared = await pipeline(store, metrics).prepare(request_body, context)
    assert prepared.skipped == reason and prepared.injected == [] and prepared.body is request_body
    assert [name for name, _ in metrics.counts] == ["memory_skipped"]
    assert metrics.counts[0][1]["reason"] == reason
    remembered = await pipeline(store).remember(prepared, {"choices": [{"message": {"content": "ok"}}]})
    assert remembered == [] and (await store.list(ListQuery(user_id="alice"))).total == 1


async def test_remember_stores_the_statements_with_provenance_and_without_the_block(store):
    await store.store(Memory(user_id="alice", content="my locker code is 4817", project_id="gym"))
    metrics = Recorder()
    loose = {**CONFIG, "routing": {"decisions": [{"name": "default", "plugins": [
        {"type": "memory", "configuration": {"similarity_threshold": -1.0}}]}]}}  # fmt: skip
    p = MemoryPipeline(load_config(loose), store=store, metrics=metrics, now=lambda: NOW)
    prepared = await p.prepare(
        body("My gym locker is number 12. What is my locker code?"), ctx(project_id="gym", conversation_id="c-1")
    )
    assert prepared.injected  # the block went upstream with the question...
    answer = {"choices": [{"message": {"content": [{"type": "text", "text": "It opens the blue locker."}]}}]}
    (result,) = await p.remember(prepared, answer)
    stored = result.memory
    assert stored.content == "My gym locker is number 12."  # ...but only the statement is kept
    assert BLOCK_START not in stored.content
    assert (stored.type, stored.source, stored.created_via) == (MemoryType.SEMANTIC, "conversation", "auto_store")
    assert (stored.user_id, stored.project_id, stored.conversation_id) == ("alice", "gym", "c-1")
    assert stored.metadata == {"decision": "default", "model": "assistant"}
    assert ("memory_extraction", {"outcome": "semantic", "decision": "default"}) in metrics.counts
    assert ("memory_writes", {"outcome": "created", "decision": "default"}) in metrics.counts


async def test_a_question_alone_is_not_stored_and_the_skip_is_counted(store):
    metrics = Recorder()
    p = pipeline(store, metrics)
    prepared = await p.prepare(body("What is my locker code?"), ctx())
    assert await p.remember(prepared, {"choices": [{"message": {"content": "I don't know."}}]}) == []
    assert ("memory_extraction", {"outcome": "skipped_question", "decision": "default"}) in metrics.counts
    assert (await store.list(ListQuery(user_id="alice"))).total == 0


async def test_store_failures_never_fail_the_chat():
    metrics = Recorder()
    p = pipeline(FailingStore(embed=CountingEmbed(), dimension=DIM), metrics)
    prepared = await p.prepare(body("My locker code is 4817."), ctx())
    assert prepared.skipped == "error"
    assert await p.remember(prepared, {"choices": [{"message": {"content": "ok"}}]}) == []
    assert [n for n, _ in metrics.own()] == ["memory_retrieval_errors", "memory_extraction", "memory_store_errors"]
    assert (
        "llm_memory_retrieval_total",
        {"backend": "milvus", "status": "error"},
    ) in metrics.counts  # the configured one


async def test_extraction_runs_off_the_event_loop(store, monkeypatch):
    """While the extraction of Alice's turn runs (blocked in its thread), Bob's request is
    prepared on the same loop, and is what releases it. Extraction on the loop would block
    the loop: Bob's request could not run, the extraction would time out."""
    started, release, released = threading.Event(), threading.Event(), []
    real = pipeline_module.extract_turn

    def slow(*args, **kwargs):
        started.set()
        released.append(release.wait(5.0))
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_module, "extract_turn", slow)
    p = pipeline(store)
    prepared = await p.prepare(body("My locker code is 4817."), ctx())
    remembering = asyncio.create_task(p.remember(prepared, {"choices": [{"message": {"content": "ok"}}]}))
    assert await asyncio.to_thread(started.wait, 5.0)
    other = await p.prepare(body("what is my locker code"), ctx("bob"))
    assert other.skipped is None and other.injected == []  # Bob's request ran, without Alice's memories
    release.set()
    results = await remembering
    assert released == [True]
    assert [r.memory.content for r in results] == ["My locker code is 4817."]


# ---------------------------------------------------------------------- embedded as background work
async def test_a_turns_memories_are_embedded_by_embed_stored_and_the_store_embeds_none():
    """With ``embed_stored`` (the service: the Embedder's background queue) the turn's
    memories reach the store with their vectors and the identity that made them: the
    store's own embedder is not called for them."""
    from memory_core.testing.fake_embed import fake_vector

    store_embed = CountingEmbed()
    store = InMemoryStore(embed=store_embed, dimension=DIM, identity="model-a")
    asked: list[list[str]] = []

    async def embed_stored(texts):
        asked.append(list(texts))
        return [fake_vector(t, DIM) for t in texts], "model-a"

    p = MemoryPipeline(load_config(CONFIG), store=store, metrics=Recorder(), now=lambda: NOW, embed_stored=embed_stored)
    prepared = await p.prepare(body("My gym locker is number\x07 12."), ctx())
    (result,) = await p.remember(prepared, {"choices": [{"message": {"content": "Noted."}}]})
    # the text the store keeps (control characters out) is the text embedded
    assert asked == [["My gym locker is number 12."]]
    assert store_embed.calls == 1  # the search of prepare only, none for the write
    stored = await store.get(result.memory.id, "alice")
    assert stored.content == "My gym locker is number 12."
    assert np.allclose(stored.embedding, fake_vector("My gym locker is number 12.", DIM), atol=1e-6)


async def test_when_embed_stored_fails_or_answers_another_model_the_turn_is_still_handled():
    """A failing ``embed_stored`` leaves the vectors to the store (the turn is stored); one
    that answers with another model's identity is refused by the store, as any given vector
    of another model is (counted as a store error, never raised)."""
    store_embed = CountingEmbed()
    store = InMemoryStore(embed=store_embed, dimension=DIM, identity="model-a")

    async def broken(texts):
        raise RuntimeError("embedder restarting")

    p = MemoryPipeline(load_config(CONFIG), store=store, metrics=Recorder(), now=lambda: NOW, embed_stored=broken)
    prepared = await p.prepare(body("My gym locker is number 12."), ctx())
    (result,) = await p.remember(prepared, {"choices": [{"message": {"content": "Noted."}}]})
    assert result.memory.content == "My gym locker is number 12." and store_embed.calls == 2

    from memory_core.testing.fake_embed import fake_vector

    async def other_model(texts):
        return [fake_vector(t, DIM) for t in texts], "model-b"

    metrics = Recorder()
    p = MemoryPipeline(load_config(CONFIG), store=store, metrics=metrics, now=lambda: NOW, embed_stored=other_model)
    prepared = await p.prepare(body("My bike is a red Brompton."), ctx())
    assert await p.remember(prepared, {"choices": [{"message": {"content": "Noted."}}]}) == []
    assert ("memory_store_errors", {"decision": "default"}) in metrics.counts


async def test_a_chat_retrieve_asks_for_the_configured_ranking():
    """The chat's retrieve carries ``retrieval``'s ranking: the second hop and the diversity
    weight when hybrid, neither without it."""
    seen: list = []

    class Recording(InMemoryStore):
        async def retrieve(self, options, *, touch=True):
            seen.append(options)
            return await super().retrieve(options, touch=touch)

    for retrieval, expected in (
        ({"hybrid": True, "diversity_weight": 0.25, "hop_weight": 0.1}, (True, 0.25)),
        ({"hybrid": True, "diversity_weight": 0.0, "hop_weight": 0.0}, (False, 0.0)),
        ({"hybrid": False, "diversity_weight": 0.25, "hop_weight": 0.1}, (False, 0.0)),
    ):
        seen.clear()
        config = {"global": {"stores": {"memory": {"retrieval": retrieval}}}}
        store = Recording(embed=CountingEmbed(), dimension=DIM)
        await store.store(Memory(user_id="alice", content="my locker code is 4817"))
        p = MemoryPipeline(load_config(config), store=store, metrics=Recorder(), now=lambda: NOW)
        await p.prepare(body("what is my locker code"), ctx())
        assert [(o.second_hop, o.diversity) for o in seen] == [expected]
