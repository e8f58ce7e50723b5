"""``MetricsSink`` over Ray's metrics (``ray.util.metrics``: exported on Ray's metrics port and
dashboard, next to ``ray_serve_*``, each name prefixed ``ray_``).

The metrics, their labels and the values each label may take are declared once, in
``memory_core.chat.metrics.METRICS``; ``RayMetrics`` builds the Ray metrics from that table
and bounds every label value (``BoundedLabels``: an undeclared value is reported as
``"other"``). ``ray.util.metrics`` rather than ``ray.serve.metrics``: the same sink serves
Serve replicas and the store shards (plain actors).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ray.util import metrics

from memory_core.chat.metrics import METRICS, BoundedLabels


class RayMetrics:
    """Counters and histograms named in ``METRICS``; unknown names raise ``KeyError`` so a typo
    cannot silently drop a metric. ``decisions``: the configured decision names (the values of
    the ``decision`` label). Metrics are created lazily, on their first use, so a process only
    exports what it reports."""

    def __init__(self, decisions: Iterable[str] = ("",), *, names: Iterable[str] | None = None):
        self.labels = BoundedLabels(decisions)
        wanted = set(names) if names is not None else None
        self._specs = {m.name: m for m in METRICS if wanted is None or m.name in wanted}
        self._made: dict[str, Any] = {}

    def _metric(self, name: str, kind: str) -> Any:
        made = self._made.get(name)
        if made is not None:
            return made
        spec = self._specs[name]
        if spec.kind != kind:
            raise KeyError(f"{name} is a {spec.kind}, not a {kind}")
        keys = tuple(spec.labels)
        if kind == "counter":
            made = metrics.Counter(name, description=spec.description, tag_keys=keys)
        else:
            made = metrics.Histogram(name, description=spec.description, boundaries=list(spec.buckets), tag_keys=keys)
        self._made[name] = made
        return made

    def count(self, name: str, tags: Mapping[str, str] | None = None, value: float = 1.0) -> None:
        metric = self._metric(name, "counter")
        metric.inc(value, tags=self.labels.bound(name, tags))

    def observe(self, name: str, value: float, tags: Mapping[str, str] | None = None) -> None:
        metric = self._metric(name, "histogram")
        metric.observe(value, tags=self.labels.bound(name, tags))
