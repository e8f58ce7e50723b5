"""A smoke run of ``benchmarks/hostile.py`` against the running service: two cheap attacks in
its ``--quick`` sizes (~15 s). It checks the benchmark, not the fixes: every attack gives its
row and verdicts, the victim was measured idle and during each attack, and the victim never
got a 5xx (whatever the attacker's inputs did)."""

from __future__ import annotations

import asyncio

from benchmarks.hostile import markdown, run_bench, select, settings_for


def test_quick_hostile_run_measures_the_victim_during_each_attack(base_url):
    attacks = select("scope,edge_no_content_type")
    settings = settings_for(True, idle_s=2.0, settle_timeout_s=10.0)
    report = asyncio.run(run_bench(base_url, attacks, settings, cleanup=True))
    table = markdown(report)
    print(table)
    assert report["idle"]["n"] > 0 and report["victim"]["memories"] == settings.victim_memories
    assert [r["attack"] for r in report["attacks"]] == ["scope_supersession_patch", "edge_no_content_type"]
    for row in report["attacks"]:
        assert row["victim"]["n"] > 0, row
        assert row["victim"]["victim_5xx"] == 0, row
        assert row["attack_statuses"], row
        assert row["check"] in ("PASS", "FAIL", "n/a"), row
        assert row["victim_verdict"] in ("ok", "SLOW"), row
        assert f"| {row['attack']} |" in table
