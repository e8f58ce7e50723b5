"""A short bounded load on the running service (the CI-sized run of ``benchmarks/load.py``):
8 concurrent users chatting (the ``chat`` workload: a note saved through the API every fourth
turn, a marker write per user at the end) for a few seconds; no 5xx, no error, and every
acknowledged write is there afterwards."""

from __future__ import annotations

import asyncio
import os

from benchmarks.load import run_load


def test_bounded_load_loses_no_write_and_gives_no_5xx(base_url):
    seconds = float(os.environ.get("LOAD_SMOKE_SECONDS", "8"))
    result = asyncio.run(run_load(base_url, users=8, duration_s=seconds))
    figures = result.as_dict()
    print(figures)
    assert figures["requests"] > 0 and figures["acknowledged_writes"] > 0
    assert figures["server_errors_5xx"] == 0, figures["statuses"]
    assert figures["error_rate"] == 0.0, figures["statuses"]
    assert figures["lost_writes"] == 0
