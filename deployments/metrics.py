"""``MetricsSink`` over ``ray.serve.metrics`` (exported on Ray's metrics port and dashboard)."""

from __future__ import annotations

from collections.abc import Mapping

from ray.serve import metrics

_COUNTERS = {
    "memory_skipped": ("Chat requests where memory was skipped, by reason", ("reason", "decision")),
    "memory_retrieval_errors": ("Chat requests forwarded without memory after a store/embedder failure", ("decision",)),
    "memory_injected_total": ("Chat requests that went through retrieval and injection", ("decision",)),
    "memory_auto_stored_total": ("Turns auto-stored as episodic memories", ("decision",)),
    "memory_store_errors": ("Auto-store failures (the chat still succeeded)", ("decision",)),
    "memory_extraction": (
        "What auto-store kept of a turn (semantic/procedural/episodic/window) or why it skipped it",
        ("outcome", "decision"),
    ),
    "memory_writes": (
        "Auto-store writes by outcome (created, reinforced, refined, quarantined)",
        ("outcome", "decision"),
    ),
    "memory_requests_refused": ("Chat requests refused before memory ran, by reason (invalid_header)", ("reason",)),
    "chat_stream_outcomes": (
        "Streamed chat completions by how they ended (deployments.http.streaming.OUTCOMES)",
        ("outcome",),
    ),
}
_HISTOGRAMS = {
    "memory_injected_count": (
        "Memories injected per chat request (bucket bounds between integers)",
        (0.5, 1.5, 2.5, 3.5, 5.5, 8.5, 13.5, 21.5),
        (),
    ),
    "memory_overhead_ms": (
        "Memory work on the chat path (embed+retrieve+gate+inject), ms",
        (1, 2, 5, 10, 20, 40, 80, 160, 320, 640),
        (),
    ),
}


class RayMetrics:
    """Counters and histograms named in ``_COUNTERS``/``_HISTOGRAMS``; unknown names raise
    ``KeyError`` so a typo cannot silently drop a metric."""

    def __init__(self):
        self._counters = {n: metrics.Counter(n, description=d, tag_keys=k) for n, (d, k) in _COUNTERS.items()}
        self._histograms = {
            n: metrics.Histogram(n, description=d, boundaries=list(b), tag_keys=k)
            for n, (d, b, k) in _HISTOGRAMS.items()
        }

    def count(self, name: str, tags: Mapping[str, str] | None = None, value: float = 1.0) -> None:
        self._counters[name].inc(value, tags=dict(tags or {}))

    def observe(self, name: str, value: float, tags: Mapping[str, str] | None = None) -> None:
        self._histograms[name].observe(value, tags=dict(tags or {}))
