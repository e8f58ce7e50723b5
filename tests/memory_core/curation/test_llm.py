"""The optional model calls of curation: the reply parser, the httpx port, the LLM judge in
the curating store and the LLM extractor in the chat pipeline — against stub models."""

from __future__ import annotations

import json

import httpx
import pytest

from memory_core.chat.llm_extract import MAX_MEMORIES, parse_extraction
from memory_core.chat.pipeline import MemoryPipeline
from memory_core.config import CurationSettings, LLMSettings, MemoryStoreSettings, load_config
from memory_core.curation.judge import Verdict
from memory_core.curation.llm import LLMJudge, LLMUnusable, http_complete, parse_json_reply
from memory_core.embedding import CoalescingEmbedFn
from memory_core.errors import ConfigError
from memory_core.sanitize import RequestContext
from memory_core.stores.curating import CuratingStore
from memory_core.stores.hybrid import HybridStore
from memory_core.stores.inmemory import InMemoryStore
from memory_core.types import ListQuery, Memory, MemoryState, MemoryType


def completion(text: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


class StubModel:
    """A ``Complete`` answering ``reply`` (a string, or an exception to raise); keeps the
    request bodies."""

    def __init__(self, reply):
        self.reply = reply
        self.bodies: list[dict] = []

    async def __call__(self, body):
        self.bodies.append(body)
        if isinstance(self.reply, Exception):
            raise self.reply
        return completion(self.reply)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"verdict": "duplicate"}', {"verdict": "duplicate"}),
        ('Sure!\n```json\n{"a": [1, 2]}\n```\nDone.', {"a": [1, 2]}),
        ('<think>{"not": "this"}</think> {"b": true}', {"b": True}),
        ('[{"type": "semantic"}]', [{"type": "semantic"}]),
    ],
)
def test_the_json_of_a_reply_is_found_in_its_usual_wrappings(text, value):
    assert parse_json_reply(text) == value


@pytest.mark.parametrize(
    "text", ["", "no json here", "{broken", "<think>{}</think>", "[" * 100_000 + "]" * 100_000, '{"a":' * 50_000]
)
def test_a_reply_without_json_is_unusable(text):
    with pytest.raises(LLMUnusable):
        parse_json_reply(text)


async def test_the_http_port_posts_to_the_chat_completions_path_with_the_key(monkeypatch):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion("ok"))

    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    settings = LLMSettings(enabled=True, base_url="http://judge.local/v1/", model="m", api_key_env="JUDGE_KEY")
    complete = http_complete(settings, transport=httpx.MockTransport(handler))
    assert (await complete({"model": "m"}))["choices"][0]["message"]["content"] == "ok"
    assert str(seen[0].url) == "http://judge.local/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-test"


def test_the_http_port_refuses_a_missing_key_or_url(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_KEY"):
        http_complete(LLMSettings(base_url="http://x/v1", api_key_env="NO_SUCH_KEY"))
    with pytest.raises(ConfigError):
        http_complete(LLMSettings())


def test_an_enabled_judge_needs_an_endpoint_and_a_model():
    with pytest.raises(ValueError, match="llm_judge"):
        CurationSettings(llm_judge=LLMSettings(enabled=True))
    CurationSettings(llm_judge=LLMSettings(enabled=True, base_url="http://x/v1", model="m"))


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ('{"verdict": "supersedes"}', Verdict.SUPERSEDES),
        ('{"verdict": " Compatible "}', Verdict.COMPATIBLE),
        ('{"verdict": "maybe"}', None),
        ("I think they conflict.", None),
        (httpx.ConnectError("down"), None),
    ],
)
async def test_the_judge_takes_a_known_verdict_and_nothing_else(reply, verdict):
    model = StubModel(reply)
    assert await LLMJudge(model, "judge-model").judge("old", "new") == verdict
    body = model.bodies[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0
    assert "<old>\nold\n</old>" in body["messages"][1]["content"]


@pytest.fixture(scope="module")
def embed(local_encoder):
    return CoalescingEmbedFn(local_encoder, wait_s=0.0)


def curated(embed, model: StubModel | None, max_calls: int = 3) -> CuratingStore:
    settings = MemoryStoreSettings(backend="inmemory")
    inner = HybridStore(InMemoryStore(embed=embed, dimension=384, identity="minilm"))
    judge_settings = LLMSettings(enabled=True, base_url="http://judge/v1", model="j", max_calls=max_calls)
    curation = settings.curation.model_copy(update={"llm_judge": judge_settings})
    return CuratingStore(inner, curation, llm_judge=LLMJudge(model, "j") if model else None)


# the rules call this pair compatible (no shared value, no change marker): the model decides
OLD, NEW = "I am a big fan of jazz.", "These days I only listen to classical music."


async def test_the_judge_is_asked_only_when_the_rules_say_compatible_and_its_verdict_counts(embed):
    model = StubModel('{"verdict": "supersedes"}')
    store = curated(embed, model)
    (old,) = await store.write([Memory(user_id="u", content=OLD)])
    (new,) = await store.write([Memory(user_id="u", content=NEW)])
    assert new.superseded == [old.memory.id] and len(model.bodies) == 1
    held = await store.get(old.memory.id, "u")
    assert held.state == MemoryState.SUPERSEDED and "llm judge" in (held.state_reason or "")
    # a pair the rules decide never reaches the model
    await store.write([Memory(user_id="v", content="I live in Boston.")])
    await store.write([Memory(user_id="v", content="I moved to Denver.")])
    assert len(model.bodies) == 1


async def test_no_opinion_keeps_the_rules_and_events_never_ask(embed):
    model = StubModel("no idea")
    store = curated(embed, model)
    await store.write([Memory(user_id="u", content=OLD)])
    await store.write([Memory(user_id="u", content=NEW)])
    assert (await store.list(ListQuery(user_id="u", states=[MemoryState.ACTIVE]))).total == 2
    calls = len(model.bodies)
    await store.write([Memory(user_id="u", content="Yesterday I went to a jazz concert.", type=MemoryType.EPISODIC)])
    assert len(model.bodies) == calls


async def test_the_judge_is_asked_at_most_max_calls_times_per_write(embed):
    model = StubModel('{"verdict": "compatible"}')
    store = curated(embed, model, max_calls=1)
    for text in ("I enjoy jazz.", "I enjoy blues records.", "I enjoy soul music."):
        await store.write([Memory(user_id="u", content=text)])
    before = len(model.bodies)
    await store.write([Memory(user_id="u", content="I enjoy funk music.")])
    assert len(model.bodies) - before == 1


def test_the_extractor_reply_is_validated():
    reply = json.dumps(
        {
            "memories": [
                {"type": "semantic", "content": "My locker code is 4817."},
                {"type": "Procedural", "content": "Answer in French."},
                {"type": "semantic", "content": "my locker code is 4817."},  # repeated
                {"type": "episodic", "content": "   "},  # empty: dropped
            ]
        }
    )
    got = parse_extraction(reply)
    assert [(m.type, m.content) for m in got] == [
        (MemoryType.SEMANTIC, "My locker code is 4817."),
        (MemoryType.PROCEDURAL, "Answer in French."),
    ]
    many = json.dumps({"memories": [{"type": "semantic", "content": f"Fact {i}."} for i in range(20)]})
    assert len(parse_extraction(many)) == MAX_MEMORIES
    with pytest.raises(LLMUnusable):
        parse_extraction('{"memories": [{"type": "opinion", "content": "x"}]}')
    with pytest.raises(LLMUnusable):
        parse_extraction('{"facts": []}')


CONFIG = {
    "global": {"stores": {"memory": {"backend": "inmemory", "extraction": {"llm": {"enabled": True}}}}},
    "routing": {"decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {}}]}]},
}


class Metrics:
    def __init__(self):
        self.counts: list[tuple[str, dict]] = []

    def count(self, name, tags=None):
        self.counts.append((name, dict(tags or {})))

    def observe(self, name, value, tags=None):
        pass


async def _turn(pipeline, text):
    body = {"model": "assistant", "messages": [{"role": "user", "content": text}]}
    prepared = await pipeline.prepare(body, RequestContext(user_id="alice"))
    return await pipeline.remember(prepared, completion("Noted."))


async def test_the_pipeline_stores_what_the_extractor_says_with_its_provenance(embed):
    from memory_core.stores import make_store

    store = make_store(MemoryStoreSettings(backend="inmemory"), embed=embed, dimension=384, identity="minilm")
    model = StubModel('{"memories": [{"type": "semantic", "content": "I am allergic to peanuts."}]}')
    pipeline = MemoryPipeline(load_config(CONFIG), store=store, complete=model)
    results = await _turn(pipeline, "ugh, peanuts again, I'm allergic, you know")
    assert [(r.memory.content, r.memory.created_via) for r in results] == [("I am allergic to peanuts.", "llm_extract")]
    assert model.bodies[0]["model"] == "assistant"  # no model configured: the request's
    assert "ugh, peanuts again" in model.bodies[0]["messages"][1]["content"]


async def test_an_unusable_extractor_falls_back_to_the_rules_and_is_counted(embed):
    from memory_core.stores import make_store

    store = make_store(MemoryStoreSettings(backend="inmemory"), embed=embed, dimension=384, identity="minilm")
    metrics = Metrics()
    pipeline = MemoryPipeline(load_config(CONFIG), store=store, complete=StubModel("user: echo"), metrics=metrics)
    results = await _turn(pipeline, "My locker code is 4817.")
    assert [(r.memory.content, r.memory.created_via) for r in results] == [("My locker code is 4817.", "auto_store")]
    assert ("memory_extraction", {"outcome": "llm_error", "decision": "default"}) in metrics.counts


async def test_the_write_limit_counts_every_memory_a_turn_stores_and_refuses_a_turn_whole(embed):
    """Chat's auto-store asks ``admit_write(user, n)`` for the turn's ``n`` memories; when the
    user's remaining write budget is smaller, none of them is stored."""
    from memory_core.access import WriteRateLimiter
    from memory_core.stores import make_store

    store = make_store(MemoryStoreSettings(backend="inmemory"), embed=embed, dimension=384, identity="minilm")
    limiter = WriteRateLimiter(limit=4, window_s=60)
    asked: list[tuple[str, int]] = []

    def admit(user_id: str, n: int) -> bool:
        asked.append((user_id, n))
        return limiter.allow(user_id, n)

    three = json.dumps(
        {
            "memories": [
                {"type": "semantic", "content": "I am allergic to peanuts."},
                {"type": "semantic", "content": "My cat is called Zanzibar."},
                {"type": "procedural", "content": "Always answer me in French."},
            ]
        }
    )
    metrics = Metrics()
    pipeline = MemoryPipeline(
        load_config(CONFIG), store=store, complete=StubModel(three), metrics=metrics, admit_write=admit
    )
    assert len(await _turn(pipeline, "peanuts, Zanzibar, French")) == 3
    assert asked == [("alice", 3)]
    assert await _turn(pipeline, "the same again") == []  # 3 more do not fit in the 1 left
    assert asked[-1] == ("alice", 3) and (await store.list(ListQuery(user_id="alice"))).total == 3
    assert ("memory_extraction", {"outcome": "skipped_rate_limited", "decision": "default"}) in metrics.counts
