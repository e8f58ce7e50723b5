"""``cluster/grafana/memory-router.json``: importable JSON whose queries name only series the
service exports (``memory_core.chat.metrics.exported_names``) and use the Prometheus
datasource variable."""

from __future__ import annotations

import json
import re
from pathlib import Path

from memory_core.chat.metrics import exported_names

DASHBOARD = Path(__file__).resolve().parents[1] / "cluster" / "grafana" / "memory-router.json"
SERIES = re.compile(r"\b(ray_[a-z0-9_]+)")


def test_dashboard_queries_name_exported_metrics_only():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    exported = exported_names()
    referenced = set()
    titles = []
    for panel in dashboard["panels"]:
        titles.append(panel["title"].lower())
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            names = SERIES.findall(target["expr"])
            assert names, target["expr"]
            for name in names:
                assert name in exported, f"{panel['title']}: {name} is not exported by the service"
            referenced.update(names)
    assert "ray_llm_memory_retrieval_total" in referenced
    assert "ray_llm_memory_retrieval_latency_seconds_bucket" in referenced
    assert any("histogram_quantile(0.95" in t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for topic in ("retrieval rate", "latency", "injected tokens", "skips", "consolidation"):
        assert any(topic in t for t in titles), topic
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
