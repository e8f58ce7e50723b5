"""The metric catalog (``memory_core.chat.metrics``): every label is bounded, and the code
reports only declared metrics with declared label values (read from its own calls, ``ast``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from memory_core.chat import routing
from memory_core.chat.metrics import (
    DECISION,
    EXPORT_PREFIX,
    METRICS,
    OTHER,
    SPECS,
    BoundedLabels,
    RecordingMetrics,
    decision_values,
    exported_names,
)
from memory_core.config import load_config
from memory_core.stores.cache import EVENT_NAMES

ROOT = Path(__file__).resolve().parents[3]
VALUE = re.compile(r"^[a-z0-9_]{1,40}$")
REFERENCE = {  # the names operators of the reference router watch, with their labels
    "llm_memory_retrieval_total": {"backend", "status"},
    "llm_memory_retrieval_latency_seconds": {"backend"},
    "llm_memory_store_latency_seconds": {"backend", "operation"},
}


def test_every_label_has_a_finite_declared_value_set():
    for m in METRICS:
        assert re.fullmatch(r"[a-z_]+", m.name), m.name
        assert (m.kind == "histogram") == bool(m.buckets), m.name
        assert list(m.buckets) == sorted(m.buckets), m.name
        for key, values in m.labels.items():
            if values is None:  # only the decision label: the configured decision names
                assert key == DECISION, f"{m.name}.{key} has no declared value set"
                continue
            assert isinstance(values, frozenset) and 0 < len(values) <= 64, f"{m.name}.{key}"
            assert all(VALUE.fullmatch(v) for v in values), f"{m.name}.{key}: {sorted(values)}"
            assert key not in {"user", "user_id", "memory_id", "id", "content", "query"}


def test_reference_names_and_labels():
    for name, labels in REFERENCE.items():
        assert set(SPECS[name].labels) == labels
    assert SPECS["llm_memory_retrieval_total"].labels["status"] == {"hit", "miss", "error"}


def test_declared_sets_follow_the_code():
    assert set(routing.SKIP_REASONS) == SPECS["memory_skipped"].labels["reason"]
    assert set(EVENT_NAMES.values()) == SPECS["llm_memory_cache_total"].labels["event"]


def test_decision_values_are_the_configured_names():
    config = load_config({"routing": {"decisions": [{"name": "a"}, {"name": "b"}]}})
    assert decision_values(config) == {"a", "b", ""}


def test_undeclared_values_become_other_or_raise_when_strict():
    labels = BoundedLabels(["default"])
    assert labels.bound("llm_memory_retrieval_total", {"backend": "milvus", "status": "user-42"}) == {
        "backend": "milvus",
        "status": OTHER,
    }
    assert labels.bound("memory_skipped", {"reason": "greeting", "decision": "nope"})["decision"] == OTHER
    with pytest.raises(ValueError):
        BoundedLabels(strict=True).bound("llm_memory_retrieval_total", {"backend": "milvus", "status": "x"})
    with pytest.raises(ValueError):  # a label not declared (e.g. a user id) is refused
        labels.bound("llm_memory_retrieval_total", {"backend": "milvus", "status": "hit", "user": "u"})
    with pytest.raises(KeyError):
        labels.bound("llm_memory_typo", {})
    sink = RecordingMetrics()
    with pytest.raises(KeyError):
        sink.observe("llm_memory_retrieval_total", 1.0, {"backend": "milvus", "status": "hit"})


def _metric_calls():
    """``(file, line, name, {label: value-or-None})`` for every ``.count(...)``/``.observe(...)``
    call with a literal metric name in memory_core/ and deployments/ (``None``: not a literal)."""
    for path in sorted([*ROOT.glob("memory_core/**/*.py"), *ROOT.glob("deployments/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in ("count", "observe") or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            tags = None
            for arg in [*node.args[1:], *(k.value for k in node.keywords if k.arg == "tags")]:
                if isinstance(arg, ast.Dict):
                    tags = arg
            labels: dict[str, str | None] = {}
            if tags is not None:
                for k, v in zip(tags.keys, tags.values, strict=True):
                    if k is None:  # {**base, ...}: the base holds backend only (store shard)
                        labels["backend"] = None
                        continue
                    assert isinstance(k, ast.Constant)
                    labels[k.value] = v.value if isinstance(v, ast.Constant) else None
            yield path.relative_to(ROOT), node.lineno, first.value, labels, tags is not None


def test_the_code_reports_only_declared_metrics_and_values():
    calls = list(_metric_calls())
    assert len(calls) > 20
    seen = set()
    for path, line, name, labels, literal in calls:
        where = f"{path}:{line}"
        assert name in SPECS, f"{where}: undeclared metric {name}"
        seen.add(name)
        if literal:
            assert set(labels) == set(SPECS[name].labels), f"{where}: labels {sorted(labels)}"
        for key, value in labels.items():
            declared = SPECS[name].labels[key]
            if value is not None and declared is not None:
                assert value in declared, f"{where}: {name}{{{key}={value!r}}} is not declared"
    assert {m.name for m in METRICS} <= seen | {"llm_memory_writes_total", "llm_memory_cache_total"}


def test_exported_names():
    names = exported_names()
    assert EXPORT_PREFIX + "llm_memory_retrieval_total" in names
    assert EXPORT_PREFIX + "llm_memory_retrieval_latency_seconds_bucket" in names
    assert EXPORT_PREFIX + "memory_skipped_total" in names  # Prometheus adds _total to counters


def test_every_event_the_curating_store_reports_is_declared():
    """Each ``_count(...)`` in ``CuratingStore`` names an event of a declared set (an f-string
    event: some declared event starts with its literal head), and the sets do not overlap, so
    the shard's ``_on_event`` routes each to exactly one metric."""
    from memory_core.chat.metrics import CURATION_EVENTS, JUDGE_EVENTS, REDACTION_EVENTS, SECOND_OPINION_E5_EVENTS

    sets = [CURATION_EVENTS, JUDGE_EVENTS, REDACTION_EVENTS, SECOND_OPINION_E5_EVENTS, frozenset(EVENT_NAMES.values())]
    declared = frozenset().union(*sets)
    assert sum(len(s) for s in sets) == len(declared)
    tree = ast.parse((ROOT / "memory_core/stores/curating.py").read_text())
    counted = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_count":
            first = node.args[0]
            if isinstance(first, ast.Constant):
                counted.append(first.value)
                assert first.value in declared, f"line {node.lineno}: {first.value!r} is not declared"
            elif isinstance(first, ast.Name):  # relayed from redact_changes: redaction events
                assert first.id == "event", f"line {node.lineno}: {first.id}"
            else:
                assert isinstance(first, ast.JoinedStr), f"line {node.lineno}: event is not a literal"
                head = first.values[0]
                assert isinstance(head, ast.Constant) and head.value, f"line {node.lineno}: no literal head"
                assert any(e.startswith(head.value) for e in declared), f"line {node.lineno}: {head.value!r}"
                counted.append(head.value)
    assert "judge:second_opinion:supersedes" in counted and len(counted) >= 8


def test_every_event_the_hybrid_store_reports_is_a_declared_fallback_event():
    """``HybridStore`` reports ``fallback:<event>`` (``hybrid.FALLBACK_EVENTS``, each a value of
    ``llm_memory_fallback_total{event}``); every ``_event(...)`` call names one of them, and
    none is an event of another set (the shard's ``_on_event`` routes by prefix)."""
    from memory_core.chat.metrics import CURATION_EVENTS, FALLBACK_EVENTS, JUDGE_EVENTS, REDACTION_EVENTS
    from memory_core.stores.hybrid import FALLBACK_EVENTS as REPORTED

    assert {e.removeprefix("fallback:") for e in REPORTED} == FALLBACK_EVENTS
    assert all(e.startswith("fallback:") for e in REPORTED)
    others = CURATION_EVENTS | JUDGE_EVENTS | REDACTION_EVENTS | frozenset(EVENT_NAMES.values())
    assert not others & set(REPORTED)
    tree = ast.parse((ROOT / "memory_core/stores/hybrid.py").read_text())
    reported = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_event"
        if isinstance(node.args[0], ast.Constant)
    ]
    assert sorted(set(reported)) == sorted(REPORTED)
