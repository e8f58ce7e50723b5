"""Upstream configuration: ``global.upstream`` and a decision's own ``upstream`` (validated by
``memory_core.config``; the effective upstream of each route by ``RouterConfig.upstream_of``)."""

from __future__ import annotations

import pytest

from memory_core.config import DEFAULT_UPSTREAM_TIMEOUT_S, UpstreamSettings, load_config
from memory_core.errors import ConfigError


def config(global_upstream: dict | None = None, *decisions: dict):
    doc: dict = {"routing": {"decisions": list(decisions)}}
    if global_upstream is not None:
        doc["global"] = {"upstream": global_upstream}
    return load_config(doc)


def test_default_is_one_global_upstream_the_echo():
    c = config(None, {"name": "default"})
    assert c.upstream_of("default") == c.upstream_of(None) == UpstreamSettings()
    assert c.upstream_of(None).base_url is None and c.upstream_of(None).timeout_s == DEFAULT_UPSTREAM_TIMEOUT_S
    assert c.upstreams() == {None: UpstreamSettings(), "default": UpstreamSettings()}


def test_a_decision_with_its_own_server_inherits_no_key_and_no_model():
    c = config(
        {"base_url": "http://main:8000/v1/", "api_key_env": "MAIN_KEY", "model": "main-model", "timeout_s": 30},
        {"name": "code", "match": {"models": ["code"]}, "upstream": {"base_url": "https://coder.internal/v1"}},
        {"name": "default"},
    )
    assert c.upstream_of(None).base_url == "http://main:8000/v1"  # trailing slash dropped
    assert c.upstream_of("code") == UpstreamSettings(
        base_url="https://coder.internal/v1", model=None, api_key_env=None, timeout_s=30
    )
    assert c.upstream_of("default") == c.global_.upstream
    assert c.upstream_of("no-such-decision") == c.global_.upstream


def test_a_decision_without_base_url_overrides_fields_of_the_global_upstream():
    c = config(
        {"base_url": "http://main:8000/v1", "api_key_env": "MAIN_KEY"},
        {"name": "small", "upstream": {"model": "qwen-small", "timeout_s": 5}},
        {"name": "other-key", "upstream": {"api_key_env": "OTHER_KEY"}},
    )
    assert c.upstream_of("small") == UpstreamSettings(
        base_url="http://main:8000/v1", model="qwen-small", api_key_env="MAIN_KEY", timeout_s=5
    )
    assert c.upstream_of("other-key").api_key_env == "OTHER_KEY"
    assert c.upstream_of("other-key").model is None


def test_a_decision_may_rename_the_model_for_the_echo():
    c = config(None, {"name": "renamed", "upstream": {"model": "echo-2"}})
    assert c.upstream_of("renamed") == UpstreamSettings(model="echo-2")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"global": {"upstream": {"api_key_env": "KEY"}}}, "global.upstream: api_key_env needs a base_url"),
        (
            {"routing": {"decisions": [{"name": "d", "upstream": {"api_key_env": "KEY"}}]}},
            "routing.decisions.0.upstream: api_key_env needs a base_url",
        ),
        ({"global": {"upstream": {"base_url": "ftp://host/v1"}}}, "global.upstream.base_url: base_url must be"),
        ({"global": {"upstream": {"base_url": "vllm:8000/v1"}}}, "global.upstream.base_url"),
        (
            {"routing": {"decisions": [{"name": "d", "upstream": {"base_url": "http://user:pw@host/v1"}}]}},
            "routing.decisions.0.upstream.base_url",
        ),
        ({"global": {"upstream": {"base_url": "http://h/v1?key=x"}}}, "without query"),
        (
            {"routing": {"decisions": [{"name": "d", "upstream": {"base_url": "http://h", "api_key_env": "A-B"}}]}},
            "routing.decisions.0.upstream.api_key_env",
        ),
        ({"routing": {"decisions": [{"name": "d", "upstream": {"timeout_s": 0}}]}}, "upstream.timeout_s"),
        ({"routing": {"decisions": [{"name": "d", "upstream": {"model": ""}}]}}, "upstream.model"),
        ({"routing": {"decisions": [{"name": "d", "upstream": {"url": "http://h"}}]}}, "upstream.url: Extra inputs"),
    ],
)
def test_invalid_upstreams_fail_at_load_naming_the_key(doc, message):
    with pytest.raises(ConfigError) as err:
        load_config(doc)
    assert message in str(err.value)
    assert "Value error" not in str(err.value)
