"""Tests for memory_core.chat.routing: decision matching, policy precedence, skip reasons."""

from __future__ import annotations

import dataclasses

import pytest

from memory_core.chat.routing import (
    SKIP_REASONS,
    MemoryPolicy,
    effective_policy,
    is_greeting,
    select_decision,
    skip_reason,
)
from memory_core.config import ReflectionSettings, load_config
from memory_core.sanitize import normalize_headers, request_context


def cfg(memory: dict | None = None, decisions: list | None = None):
    return load_config(
        {
            "global": {"stores": {"memory": {"backend": "inmemory", **(memory or {})}}},
            "routing": {"decisions": decisions or []},
        }
    )


def mem_plugin(**conf):
    return {"type": "memory", "configuration": conf}


DECISIONS = [
    {"name": "by_model", "match": {"models": ["assistant"]}, "plugins": [mem_plugin(enabled=True)]},
    {"name": "by_keyword", "match": {"keywords": ["Remember"]}, "plugins": [mem_plugin()]},
    {"name": "by_regex", "match": {"regex": [r"\blocker\s+code\b"]}, "plugins": [mem_plugin()]},
    {"name": "by_header", "match": {"headers": {"X-Tenant": "acme"}}, "plugins": [mem_plugin()]},
    {"name": "both", "match": {"models": ["gpt-x"], "keywords": ["tea"]}, "plugins": [mem_plugin()]},
    {"name": "default", "plugins": []},
]


def pick(config, model=None, text="", headers=None):
    # the headers as the edge hands them on: normalised once (lower-case names)
    d = select_decision(config, model=model, last_user_message=text, headers=normalize_headers((headers or {}).items()))
    return d.name if d else None


# ------------------------------------------------------------------ matching


def test_match_by_model_exact():
    c = cfg(decisions=DECISIONS)
    assert pick(c, model="assistant") == "by_model"
    assert pick(c, model="Assistant") == "default"
    assert pick(c, model="assistant-2") == "default"


def test_match_by_keyword_case_insensitive_substring():
    c = cfg(decisions=DECISIONS)
    assert pick(c, text="please REMEMBER this") == "by_keyword"
    assert pick(c, text="remembered") == "by_keyword"


def test_match_by_regex():
    c = cfg(decisions=DECISIONS)
    assert pick(c, text="what is my locker   code?") == "by_regex"
    assert pick(c, text="lockercode") == "default"


def test_match_by_header_name_case_insensitive():
    c = cfg(decisions=DECISIONS)
    assert pick(c, headers={"x-tenant": "acme"}) == "by_header"
    assert pick(c, headers={"X-TENANT": "acme"}) == "by_header"
    assert pick(c, headers={"x-tenant": "other"}) == "default"


def test_all_rules_must_match():
    c = cfg(decisions=DECISIONS)
    assert pick(c, model="gpt-x", text="I like tea") == "both"
    assert pick(c, model="gpt-x", text="I like coffee") == "default"
    assert pick(c, model="other", text="I like tea") == "default"


def test_first_match_wins():
    c = cfg(decisions=DECISIONS)
    # matches by_model, by_keyword and by_regex: the first in order wins
    assert pick(c, model="assistant", text="remember my locker code") == "by_model"
    assert pick(c, text="remember my locker code") == "by_keyword"


def test_no_match_returns_none():
    c = cfg(decisions=DECISIONS[:-1])
    assert pick(c, model="zzz", text="nothing") is None
    assert pick(cfg(), model="m", text="t") is None


def test_decision_without_rules_matches_everything():
    c = cfg(decisions=[{"name": "catch_all"}])
    assert pick(c) == "catch_all"
    assert pick(c, model="m", text="x", headers={"a": "b"}) == "catch_all"


# ------------------------------------------------------------------ policy


def test_no_decisions_uses_global_settings():
    c = cfg(
        memory={
            "default_retrieval_limit": 7,
            "default_similarity_threshold": 0.5,
            "auto_store": False,
            "injection": {"placement": "after_system"},
            "retrieval": {"hybrid": False, "lexical_weight": 0.1, "temporal_boost": False, "diversity_weight": 0.2},
        }
    )
    p = effective_policy(c, None)
    assert p == MemoryPolicy(
        decision_name=None,
        enabled=True,
        retrieval_limit=7,
        similarity_threshold=0.5,
        auto_store=False,
        reflection=ReflectionSettings(),
        placement="after_system",
        hybrid=False,
        lexical_weight=0.1,
        temporal_boost=False,
        second_hop=False,  # neither without hybrid
        diversity=0.0,
    )


def test_decision_without_memory_plugin_is_disabled():
    c = cfg(decisions=DECISIONS)
    p = effective_policy(c, c.routing.decisions[-1])
    assert p.decision_name == "default" and p.enabled is False


def test_no_matching_decision_with_decisions_configured_is_disabled():
    c = cfg(decisions=DECISIONS[:-1])
    assert effective_policy(c, None).enabled is False


def test_unset_fields_inherit_global():
    c = cfg(
        memory={"default_retrieval_limit": 9, "default_similarity_threshold": 0.42, "auto_store": True},
        decisions=[{"name": "d", "plugins": [mem_plugin()]}],
    )
    p = effective_policy(c, c.routing.decisions[0])
    assert (p.enabled, p.retrieval_limit, p.similarity_threshold, p.auto_store, p.placement) == (
        True,
        9,
        0.42,
        True,
        "current_turn",
    )
    assert p.reflection == c.memory.reflection


def test_explicit_false_beats_global_true():
    c = cfg(
        memory={"enabled": True, "auto_store": True},
        decisions=[{"name": "d", "plugins": [mem_plugin(enabled=False, auto_store=False)]}],
    )
    p = effective_policy(c, c.routing.decisions[0])
    assert p.enabled is False and p.auto_store is False


def test_explicit_values_override_global():
    c = cfg(
        memory={"auto_store": False, "default_retrieval_limit": 5},
        decisions=[
            {
                "name": "d",
                "plugins": [
                    mem_plugin(retrieval_limit=2, similarity_threshold=0.1, auto_store=True, placement="after_system")
                ],
            }
        ],
    )
    p = effective_policy(c, c.routing.decisions[0])
    assert (p.retrieval_limit, p.similarity_threshold, p.auto_store, p.placement) == (2, 0.1, True, "after_system")


def test_reflection_merged_field_by_field():
    c = cfg(
        memory={"reflection": {"max_inject_tokens": 1000, "recency_half_life_days": 7, "block_patterns": ["secret"]}},
        decisions=[
            {"name": "d", "plugins": [mem_plugin(reflection={"max_inject_tokens": 300, "dedup_threshold": 0.8})]}
        ],
    )
    r = effective_policy(c, c.routing.decisions[0]).reflection
    assert r == ReflectionSettings(
        enabled=True,
        algorithm="heuristic",
        max_inject_tokens=300,
        recency_half_life_days=7,
        dedup_threshold=0.8,
        block_patterns=["secret"],
        exact_token_count=False,
    )
    # the global settings object is not modified
    assert c.memory.reflection.max_inject_tokens == 1000 and c.memory.reflection.dedup_threshold == 0.9


def test_reflection_override_can_disable_and_switch_algorithm():
    c = cfg(decisions=[{"name": "d", "plugins": [mem_plugin(reflection={"enabled": False, "algorithm": "noop"})]}])
    r = effective_policy(c, c.routing.decisions[0]).reflection
    assert (r.enabled, r.algorithm, r.max_inject_tokens) == (False, "noop", 2048)


def test_other_plugins_are_ignored():
    c = cfg(
        decisions=[
            {"name": "d", "plugins": [{"type": "pii", "configuration": {"x": 1}}, mem_plugin(retrieval_limit=3)]}
        ]
    )
    assert effective_policy(c, c.routing.decisions[0]).retrieval_limit == 3
    c2 = cfg(decisions=[{"name": "d", "plugins": [{"type": "pii"}]}])
    assert effective_policy(c2, c2.routing.decisions[0]).enabled is False


def test_policy_is_frozen():
    p = effective_policy(cfg(), None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.enabled = False  # type: ignore[misc]


# ------------------------------------------------------------------ skip reasons


def _skip(config=None, policy=None, *, model="m", user_id="u1", headers=None, text="what is my locker code?"):
    config = config or cfg()
    policy = policy or effective_policy(config, None)
    disabled = request_context(normalize_headers((headers or {}).items())).memory_disabled  # read at the edge
    return skip_reason(config, policy, model=model, user_id=user_id, memory_disabled=disabled, last_user_message=text)


def test_skip_none_when_memory_runs():
    assert _skip() is None


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "1", "yes", "Yes"])
def test_skip_header_disabled(value):
    assert _skip(headers={"X-Disable-Router-Memory": value}) == "header_disabled"


@pytest.mark.parametrize("value", ["false", "0", "no", ""])
def test_header_false_values_do_not_skip(value):
    assert _skip(headers={"x-disable-router-memory": value}) is None


@pytest.mark.parametrize("user", [None, "", "   "])
def test_skip_no_user(user):
    assert _skip(user_id=user) == "no_user"


def test_skip_decision_disabled():
    c = cfg(memory={"disabled_decisions": ["d"]}, decisions=[{"name": "d", "plugins": [mem_plugin()]}])
    assert _skip(c, effective_policy(c, c.routing.decisions[0])) == "decision_disabled"


def test_skip_model_disabled():
    c = cfg(memory={"disabled_models": ["cheap-model"]})
    assert _skip(c, model="cheap-model") == "model_disabled"
    assert _skip(c, model="other") is None


def test_skip_plugin_disabled():
    c = cfg(decisions=[{"name": "d", "plugins": [mem_plugin(enabled=False)]}, {"name": "x"}])
    assert _skip(c, effective_policy(c, c.routing.decisions[0])) == "plugin_disabled"
    assert _skip(c, effective_policy(c, c.routing.decisions[1])) == "plugin_disabled"


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_skip_empty_message(text):
    assert _skip(text=text) == "empty_message"


@pytest.mark.parametrize(
    "text",
    [
        "hi",
        "Hello!",
        "hey 👋",
        "Thanks!!",
        "thank you",
        "Thank you so much!",
        "ok",
        "OK.",
        "okay 👍",
        "cool",
        "great",
        "bye",
        "Good morning!",
        "hi there",
        "ok thanks",
        "👍",
        "你好",
        "你好！",
        "谢谢",
        "ありがとう",
        "ありがとうございます。",
        "안녕하세요",
        "감사합니다!",
        "Hola",
        "merci",
    ],
)
def test_skip_greeting(text):
    assert is_greeting(text)
    assert _skip(text=text) == "greeting"


@pytest.mark.parametrize(
    "text",
    [
        "hi, what's my locker code?",
        "thanks, and where is my bike?",
        "hello world program in rust",
        "ok so what did I say about tea",
        "good morning, remind me of my plans",
        "你好，我的储物柜密码是多少？",
        "hi hi hi hi hi hi hi",  # more words than GREETING_MAX_WORDS
        "history",
        "okay then explain monads",
        "thanksgiving plans?",
    ],
)
def test_not_greeting(text):
    assert not is_greeting(text)
    assert _skip(text=text) is None


def test_skip_reason_order():
    c = cfg(
        memory={"disabled_decisions": ["d"], "disabled_models": ["m"]},
        decisions=[{"name": "d", "plugins": [mem_plugin(enabled=False)]}],
    )
    p = effective_policy(c, c.routing.decisions[0])
    on = {"x-disable-router-memory": "1"}
    assert _skip(c, p, headers=on, user_id=None, model="m", text="") == "header_disabled"
    assert _skip(c, p, user_id=None, model="m", text="") == "no_user"
    assert _skip(c, p, model="m", text="") == "decision_disabled"
    c2 = cfg(memory={"disabled_models": ["m"]}, decisions=[{"name": "d", "plugins": [mem_plugin(enabled=False)]}])
    p2 = effective_policy(c2, c2.routing.decisions[0])
    assert _skip(c2, p2, model="m", text="") == "model_disabled"
    assert _skip(c2, p2, model="other", text="") == "plugin_disabled"
    assert _skip(text="") == "empty_message"


def test_skip_reasons_tuple():
    assert set(SKIP_REASONS) == {
        "header_disabled",
        "no_user",
        "decision_disabled",
        "model_disabled",
        "plugin_disabled",
        "not_user_turn",
        "greeting",
        "punctuation",
        "empty_message",
    }


def test_tool_call_continuation_is_skipped():
    config = load_config({})
    policy = effective_policy(config, None)
    common = dict(model="m", user_id="u", last_user_message="find restaurants")
    assert skip_reason(config, policy, last_role="tool", **common) == "not_user_turn"
    assert skip_reason(config, policy, last_role="assistant", **common) == "not_user_turn"
    assert skip_reason(config, policy, last_role="user", **common) is None
