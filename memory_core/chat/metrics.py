"""Every metric the service exports, with its labels and the finite set of values each label
may take (one place; ``deployments.metrics.RayMetrics`` builds Ray metrics from it).

Label values are bounded: never a user id, memory id or free text. A value outside a label's
set is reported as ``"other"`` (``BoundedLabels.bound``; ``strict=True`` raises instead, for
tests). ``decision`` is the one label whose values come from the configuration: the names of
``routing.decisions`` (finite per deployment), plus ``""`` (no decision matched).

Ray exports every metric with the ``ray_`` prefix (``llm_memory_retrieval_total`` is scraped as
``ray_llm_memory_retrieval_total``; a counter whose name lacks ``_total`` gets it:
``memory_skipped`` → ``ray_memory_skipped_total``); ``exported_series``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..config import RouterConfig
from ..curation.opinion_vectors import OUTCOMES, RECHECK_OUTCOMES
from ..redaction import KINDS as REDACTION_KINDS
from ..redaction import POLICIES as REDACTION_POLICIES
from ..stores.cache import EVENT_NAMES
from ..types import MemoryType, WriteOutcome
from .extract import SKIP_REASONS as EXTRACT_SKIP_REASONS
from .routing import SKIP_REASONS

log = logging.getLogger(__name__)

EXPORT_PREFIX = "ray_"
"""Prefix Ray puts before every application metric on its metrics endpoint."""
OTHER = "other"
"""Reported instead of a label value outside its declared set."""
DECISION = "decision"
"""The label whose values are the configured decision names (``decision_values``)."""

BACKENDS = frozenset({"milvus", "qdrant", "valkey", "inmemory"})
RETRIEVAL_STATUSES = frozenset({"hit", "miss", "error"})
STORE_OPERATIONS = frozenset(
    {
        "store",
        "store_many",
        "write",
        "retrieve",
        "embed_write",
        "record_access",
        "get",
        "get_many",
        "update",
        "list",
        "forget",
        "totals",
        "forget_by_scope",
        "counts",
        "history",
        "restore",
        "unmerge",
        "consolidate",
    }
)
GATE_DROP_REASONS = frozenset({"blocked", "duplicate", "budget", "limit"})
"""Why the reflection gate (``chat.gate``) or the route's limit dropped a retrieved memory."""
EXTRACTION_OUTCOMES = frozenset(
    {t.value for t in MemoryType}
    | {"window", "llm_error", "skipped_llm_nothing", "skipped_rate_limited", "skipped_writes_pending"}
    | {f"skipped_{r}" for r in EXTRACT_SKIP_REASONS}
)
WRITE_OUTCOMES = frozenset({o.value for o in WriteOutcome} | {"superseded"})
CACHE_EVENTS = frozenset(EVENT_NAMES.values())
CONSOLIDATION_EVENT_LABELS = {
    "consolidation_group": "group",
    "expired_purged": "expired",
    "consolidation_too_large": "too_large",
    "consolidation_invalid": "invalid",
}
"""``CuratingStore``'s consolidation events → the ``event`` label of ``llm_memory_consolidation_total``."""
CONSOLIDATION_EVENTS = frozenset(CONSOLIDATION_EVENT_LABELS.values())
CURATION_EVENTS = frozenset({f"write_{o}" for o in WRITE_OUTCOMES} | CONSOLIDATION_EVENT_LABELS.keys())
"""What ``CuratingStore`` reports to ``on_event`` (mapped to the write and consolidation metrics)."""
JUDGES = frozenset({"second_opinion", "llm"})
"""Who overrode or answered for the rules in supersession: the embedding second opinion
(``curation.second_opinion``) or the optional LLM judge."""
JUDGE_VERDICTS = frozenset({"duplicate", "refines", "supersedes", "compatible", "none"})
"""``curation.judge.Verdict`` values, and ``none`` (the LLM judge gave no usable answer)."""
JUDGE_EVENTS = frozenset(f"judge:{j}:{v}" for j in JUDGES for v in JUDGE_VERDICTS)
"""What ``CuratingStore`` reports to ``on_event`` when a judge other than the rules decided
(``judge:<judge>:<verdict>``; mapped to ``llm_memory_judge_opinions_total``)."""
SECOND_OPINION_E5_OUTCOMES = OUTCOMES | RECHECK_OUTCOMES
SECOND_OPINION_E5_EVENTS = frozenset(f"second_opinion_e5:{o}" for o in SECOND_OPINION_E5_OUTCOMES)
"""What ``CuratingStore`` reports to ``on_event`` per call for the e5 second opinion's vectors
and per deferred opinion (``second_opinion_e5:<outcome>``, ``curation.opinion_vectors.OUTCOMES``
and ``RECHECK_OUTCOMES``; mapped to ``llm_memory_second_opinion_vectors_total``)."""
REDACTION_EVENTS = frozenset(f"redaction:{k}:{p}" for k in REDACTION_KINDS for p in REDACTION_POLICIES)
"""What ``CuratingStore`` reports to ``on_event`` per secret or personal value found
(``redaction:<kind>:<policy>``; mapped to ``memory_redactions``)."""
FALLBACK_EVENTS = frozenset({"passage", "query", "error"})
"""What ``HybridStore`` reports with ``embedding.fallback`` (``fallback:<event>``; mapped to
``llm_memory_fallback_total``): a stored text embedded by the fallback, a search embedded by
it, a failed call of its encoder (that search or write went on without it)."""
STREAM_OUTCOMES = frozenset({"completed", "incomplete", "upstream_error", "client_disconnected"})
REFUSAL_REASONS = frozenset({"invalid_header"})
PASS_OUTCOMES = frozenset({"ok", "error"})


@dataclass(frozen=True)
class MetricSpec:
    """One metric: ``kind`` counter or histogram; ``labels`` label key → allowed values
    (``None`` only for ``decision``: the configured names); ``buckets`` for histograms."""

    name: str
    kind: Literal["counter", "histogram"]
    description: str
    labels: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    buckets: tuple[float, ...] = ()


_LATENCY_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_COUNT = (0.5, 1.5, 2.5, 3.5, 5.5, 8.5, 13.5, 21.5, 34.5, 55.5)

METRICS: tuple[MetricSpec, ...] = (
    # ---- as the reference router names them
    MetricSpec(
        "llm_memory_retrieval_total",
        "counter",
        "Memory retrievals on the chat path by status: hit (>=1 memory injected), miss (0), "
        "error (store/embedder failure)",
        {"backend": BACKENDS, "status": RETRIEVAL_STATUSES},
    ),
    MetricSpec(
        "llm_memory_retrieval_latency_seconds",
        "histogram",
        "Retrieval on the chat path (query embedding + store search), seconds",
        {"backend": BACKENDS},
        _LATENCY_S,
    ),
    MetricSpec(
        "llm_memory_store_latency_seconds",
        "histogram",
        "One store operation in a store shard, seconds",
        {"backend": BACKENDS, "operation": STORE_OPERATIONS},
        _LATENCY_S,
    ),
    MetricSpec(
        "memory_store_cancelled",
        "counter",
        "Store operations in a store shard stopped because their caller went away (client "
        "disconnect: the ingress cancels the shard's call)",
        {"operation": STORE_OPERATIONS},
    ),
    MetricSpec(
        "llm_memory_retrieval_results",
        "histogram",
        "Memories injected per retrieval on the chat path",
        {"backend": BACKENDS},
        _COUNT,
    ),
    MetricSpec(
        "llm_memory_injected_tokens",
        "histogram",
        "Estimated tokens of the memories injected into one request",
        {"backend": BACKENDS},
        (16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    ),
    MetricSpec(
        "llm_memory_gate_drops_total",
        "counter",
        "Retrieved memories not injected, by reason (blocked, duplicate, budget: reflection gate; "
        "limit: over the route's retrieval_limit)",
        {"reason": GATE_DROP_REASONS},
    ),
    MetricSpec(
        "llm_memory_writes_total",
        "counter",
        "Curated writes in the store (every write path) by outcome: created, reinforced, "
        "refined, quarantined, superseded (an older memory replaced)",
        {"backend": BACKENDS, "outcome": WRITE_OUTCOMES},
    ),
    MetricSpec(
        "llm_memory_consolidation_total",
        "counter",
        "Consolidation in the store: group (near-duplicate group merged), expired (memory purged), "
        "too_large (a group left as it is: its merged text would exceed the content limit)",
        {"backend": BACKENDS, "event": CONSOLIDATION_EVENTS},
    ),
    MetricSpec(
        "llm_memory_judge_opinions_total",
        "counter",
        "Supersession verdicts given by a judge other than the rules, by judge (second_opinion: "
        "the embedding model's geometry; llm: the optional LLM judge) and verdict",
        {"backend": BACKENDS, "judge": JUDGES, "verdict": JUDGE_VERDICTS},
    ),
    MetricSpec(
        "llm_memory_second_opinion_vectors_total",
        "counter",
        "Calls for the e5 second opinion's vectors by outcome: cached, served, busy (its "
        "estimated wait exceeded its lane's: the store's vectors alone answered at once, the pair "
        "asked again later), full, timeout, unavailable; rechecked (a deferred pair answered "
        "later), dropped (a deferred pair let go: the queue was full)",
        {"backend": BACKENDS, "outcome": SECOND_OPINION_E5_OUTCOMES},
    ),
    MetricSpec(
        "llm_memory_cache_total",
        "counter",
        "Hot retrieval cache events (cache_hit, cache_miss, cache_error: fail-open read, ...)",
        {"backend": BACKENDS, "event": CACHE_EVENTS},
    ),
    MetricSpec(
        "llm_memory_fallback_total",
        "counter",
        "The fallback model for text the embedding model cannot represent (embedding.fallback), in "
        "the store shard: passage (a stored text embedded), query (a search embedded), error (its "
        "encoder failed; ranked lexically instead)",
        {"backend": BACKENDS, "event": FALLBACK_EVENTS},
    ),
    MetricSpec(
        "llm_memory_embedder_batch_size",
        "histogram",
        "Texts per Embedder forward pass (@serve.batch)",
        {},
        (1, 2, 4, 8, 16, 32, 64, 128, 256),
    ),
    MetricSpec(
        "llm_memory_embedder_queue_seconds",
        "histogram",
        "Time a text waited in the Embedder's batch queue, seconds",
        {},
        (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    ),
    # ---- the service's own (kept: dashboards and README name them)
    MetricSpec(
        "memory_skipped",
        "counter",
        "Chat requests where memory was skipped, by reason",
        {"reason": frozenset(SKIP_REASONS), DECISION: None},
    ),
    MetricSpec(
        "memory_retrieval_errors",
        "counter",
        "Chat requests forwarded without memory after a store/embedder failure",
        {DECISION: None},
    ),
    MetricSpec(
        "memory_injected_total",
        "counter",
        "Chat requests that went through retrieval and injection",
        {DECISION: None},
    ),
    MetricSpec("memory_auto_stored_total", "counter", "Turns auto-stored", {DECISION: None}),
    MetricSpec("memory_store_errors", "counter", "Auto-store failures (the chat still succeeded)", {DECISION: None}),
    MetricSpec(
        "memory_extraction",
        "counter",
        "What auto-store kept of a turn (semantic/procedural/episodic/window) or why it skipped it",
        {"outcome": EXTRACTION_OUTCOMES, DECISION: None},
    ),
    MetricSpec(
        "memory_writes",
        "counter",
        "Auto-store writes by outcome (created, reinforced, refined, quarantined)",
        {"outcome": WRITE_OUTCOMES, DECISION: None},
    ),
    MetricSpec(
        "memory_redactions",
        "counter",
        "Secrets and personal values found in text before it was stored (every write path), by kind "
        "(credentials, card_number, iban, phone, national_id) and the policy applied (drop, mask, keep); "
        "never the value",
        {"kind": frozenset(REDACTION_KINDS), "policy": frozenset(REDACTION_POLICIES)},
    ),
    MetricSpec(
        "memory_cache_events",
        "counter",
        "Hot cache events (as llm_memory_cache_total, without the backend)",
        {"event": CACHE_EVENTS},
    ),
    MetricSpec(
        "memory_requests_refused",
        "counter",
        "Chat requests refused before memory ran, by reason (invalid_header)",
        {"reason": REFUSAL_REASONS},
    ),
    MetricSpec(
        "chat_stream_outcomes",
        "counter",
        "Streamed chat completions by how they ended",
        {"outcome": STREAM_OUTCOMES},
    ),
    MetricSpec(
        "memory_injected_count",
        "histogram",
        "Memories injected per chat request (bucket bounds between integers)",
        {},
        (0.5, 1.5, 2.5, 3.5, 5.5, 8.5, 13.5, 21.5),
    ),
    MetricSpec(
        "memory_overhead_ms",
        "histogram",
        "Memory work on the chat path (embed+retrieve+gate+inject), ms",
        {},
        (1, 2, 5, 10, 20, 40, 80, 160, 320, 640),
    ),
    MetricSpec(
        "memory_consolidation_passes",
        "counter",
        "Consolidation passes over one user (Consolidator)",
        {"outcome": PASS_OUTCOMES},
    ),
    MetricSpec("memory_consolidation_groups", "counter", "Near-duplicate groups merged (Consolidator)"),
    # ---- lifecycle events and webhooks (memory_core.events, memory_core.webhooks)
    MetricSpec("memory_events_appended", "counter", "Lifecycle events appended to the log", {"outcome": PASS_OUTCOMES}),
    MetricSpec(
        "memory_webhook_deliveries",
        "counter",
        "Webhook delivery attempts (WebhookDispatcher)",
        {"outcome": frozenset({"delivered", "retry", "failed"})},
    ),
    MetricSpec("memory_consolidation_expired", "counter", "Expired memories purged (Consolidator)"),
    MetricSpec(
        "memory_audit_append_failures",
        "counter",
        "Audit entries not appended after the answer (logged at ERROR instead; memory_core.audit)",
    ),
    MetricSpec(
        "memory_consolidation_pass_seconds",
        "histogram",
        "Time of one user's consolidation pass, seconds",
        {},
        (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30),
    ),
)
SPECS: dict[str, MetricSpec] = {m.name: m for m in METRICS}


def decision_values(config: RouterConfig | None) -> frozenset[str]:
    """The values of the ``decision`` label: the configured decision names and ``""``."""
    names = {d.name for d in config.routing.decisions} if config is not None else set()
    return frozenset(names | {""})


def exported_series(spec: MetricSpec) -> tuple[str, ...]:
    """The series names of ``spec`` on Ray's metrics endpoint: ``EXPORT_PREFIX`` + the name;
    a counter ends in ``_total`` (added when its name lacks it: ``memory_skipped`` is scraped
    as ``ray_memory_skipped_total``); a histogram has ``_bucket``, ``_count`` and ``_sum``."""
    base = EXPORT_PREFIX + spec.name
    if spec.kind == "counter":
        return (base if base.endswith("_total") else base + "_total",)
    return tuple(base + s for s in ("_bucket", "_count", "_sum"))


def exported_names() -> dict[str, MetricSpec]:
    """Every series name on Ray's metrics endpoint → its metric (``exported_series``)."""
    return {series: m for m in METRICS for series in exported_series(m)}


class BoundedLabels:
    """Checks a metric's name and label values against ``METRICS``: an unknown name raises
    ``KeyError``; a missing or unknown label key raises ``ValueError``; a value outside the
    label's set becomes ``"other"`` (logged once per value) or raises ``ValueError`` when
    ``strict``."""

    def __init__(self, decisions: Iterable[str] = ("",), *, strict: bool = False):
        self.decisions = frozenset(decisions) | {""}
        self.strict = strict
        self._warned: set[tuple[str, str]] = set()

    def allowed(self, spec: MetricSpec, key: str) -> frozenset[str]:
        values = spec.labels[key]
        return self.decisions if values is None else values

    def bound(self, name: str, tags: Mapping[str, str] | None) -> dict[str, str]:
        spec = SPECS[name]
        tags = dict(tags or {})
        if set(tags) != set(spec.labels):
            raise ValueError(f"metric {name}: labels {sorted(tags)} != {sorted(spec.labels)}")
        out = {}
        for key, value in tags.items():
            value = str(value)
            if value not in self.allowed(spec, key):
                if self.strict:
                    raise ValueError(f"metric {name}: {key}={value!r} is not a declared value")
                if (key, value) not in self._warned and len(self._warned) < 100:
                    self._warned.add((key, value))
                    log.warning("metric %s: undeclared %s value reported as %r", name, key, OTHER)
                value = OTHER
            out[key] = value
        return out


class RecordingMetrics:
    """A ``MetricsSink`` that keeps what it is given (tests), checked by ``BoundedLabels``
    (strict by default)."""

    def __init__(self, decisions: Iterable[str] = ("",), *, strict: bool = True):
        self.labels = BoundedLabels(decisions, strict=strict)
        self.counts: list[tuple[str, dict[str, str], float]] = []
        self.observed: list[tuple[str, float, dict[str, str]]] = []

    def count(self, name: str, tags: Mapping[str, str] | None = None, value: float = 1.0) -> None:
        if SPECS[name].kind != "counter":
            raise KeyError(f"{name} is not a counter")
        self.counts.append((name, self.labels.bound(name, tags), value))

    def observe(self, name: str, value: float, tags: Mapping[str, str] | None = None) -> None:
        if SPECS[name].kind != "histogram":
            raise KeyError(f"{name} is not a histogram")
        self.observed.append((name, value, self.labels.bound(name, tags)))
