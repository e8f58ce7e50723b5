"""The pure parts of ``benchmarks/hostile.py`` (no service): the victim's window figures,
the settle rule, the attack selection, the inputs' sizes and the table."""

from __future__ import annotations

import asyncio
import time

import pytest
import typer

from benchmarks.hostile import (
    ATTACKS,
    DASHES,
    MAX_CONTENT_BYTES,
    NEWLINES,
    Sample,
    Victim,
    markdown,
    select,
    server_timing_ms,
    settings_for,
    text_family,
    variant,
)


def victim_with(samples: list[Sample]) -> Victim:
    v = Victim(client=None, user="v")  # type: ignore[arg-type]  # never sends here
    v.samples = samples
    return v


def test_window_takes_the_requests_that_overlap_it_and_ages_those_in_flight():
    base = time.monotonic() - 100
    v = victim_with(
        [
            Sample("search", base + 0.0, base + 0.1, 200),  # before the window
            Sample("search", base + 0.9, base + 1.2, 200),  # began before it, ended inside: counts
            Sample("search", base + 1.5, base + 23.5, 200),  # the blocked one
            Sample("chat", base + 2.0, base + 2.05, 503),
            Sample("search", base + 30.0, base + 30.1, 200),  # after the window
        ]
    )
    v.in_flight[1] = ("search", base + 95.0)  # began ~5 s ago, still unanswered
    w = v.window(base + 1.0, base + 25.0)
    assert (w.n, w.server_errors, w.in_flight) == (3, 1, 0)
    assert w.max == pytest.approx(22000.0)
    late = v.window(base + 90.0, base + 100.0)  # only the request in flight, with its age
    assert (late.n, late.in_flight) == (1, 1)
    assert late.max == pytest.approx(5000.0, abs=500)


def test_window_splits_search_and_chat_and_reads_server_timing_and_the_clients_lag():
    base = time.monotonic() - 100
    v = victim_with(
        [Sample("search", base + 1.0 + i, base + 1.01 + i, 200, 8.0) for i in range(10)]
        + [Sample("chat", base + 1.5 + i, base + 1.6 + i, 200, 30.0) for i in range(10)]
        + [Sample("search", base + 50.0, base + 51.0, 200, 900.0)]  # after the window
    )
    v.lags = [(base + 2.0, 1.0), (base + 3.0, 40.0), (base + 60.0, 500.0)]
    w = v.window(base + 0.5, base + 20.0)
    assert w.search_p95 == pytest.approx(10.0)
    assert w.chat_p95 == pytest.approx(100.0)
    assert w.server_p95 == pytest.approx(30.0)
    assert w.client_lag_p95 == pytest.approx(40.0)


@pytest.mark.parametrize(
    ("header", "ms"),
    [
        ("retrieve;dur=12.5", 12.5),
        ("retrieve;dur=12.5, gate_inject;dur=0.5", 13.0),
        ('retrieve;desc="x";dur=2', 2.0),
        ("retrieve", None),
        ("retrieve;dur=fast", None),
        ("retrieve;dur=nan", None),
        ("retrieve;dur=inf, gate_inject;dur=2", 2.0),
        ("", None),
        (None, None),
    ],
)
def test_server_timing_sums_the_dur_of_every_step(header, ms):
    assert server_timing_ms(header) == (None if ms is None else pytest.approx(ms))


def test_settle_waits_for_three_fast_searches_in_a_row_begun_after_the_attack():
    async def scenario() -> tuple[float | None, float | None]:
        since = time.monotonic()
        v = victim_with(
            [
                Sample("search", since + 0.01, since + 0.02, 200),
                Sample("search", since + 0.02, since + 0.03, 200),
                Sample("search", since + 0.03, since + 5.0, 200),  # a slow one last
            ]
        )
        slow = await v.settle(since, threshold_ms=100, timeout_s=0.5, dwell_s=0)
        v.samples += [Sample("search", since + 0.04 + i / 100, since + 0.05 + i / 100, 200) for i in range(3)]
        fast = await v.settle(since, threshold_ms=100, timeout_s=5, dwell_s=0)  # the first took 0.5 s
        return slow, fast

    slow, fast = asyncio.run(scenario())
    assert slow is None
    assert fast == pytest.approx(0.07)


def test_select_keeps_the_run_order_and_refuses_unknown_names():
    assert [a.name for a in select("all")] == [a.name for a in ATTACKS]
    picked = select("cost_import,text_newlines, edge")
    assert [a.name for a in picked] == ["text_newlines", "edge_no_content_type", "edge_anonymous", "cost_import"]
    with pytest.raises(typer.BadParameter):
        select("text,nope")


def test_every_hostile_text_fits_the_content_bound_and_its_variant_differs():
    texts = [NEWLINES, DASHES] + [t for _, t in text_family()]
    for text in texts:
        assert len(text.encode()) <= MAX_CONTENT_BYTES + 2  # NEWLINES is the reported 16,002 B input
        assert variant(text) != text and len(variant(text)) == len(text)
    assert len({t for _, t in text_family()}) == len(text_family())


def test_quick_settings_and_overrides():
    s = settings_for(True, attack_timeout_s=7.0, import_lines=None)
    assert s.attack_timeout_s == 7.0 and s.import_lines == 500
    assert settings_for(False).import_lines == 20_000


def test_markdown_gives_one_row_per_attack_and_escapes_pipes():
    row = {
        "class": 4,
        "attack": "screen_injections",
        "inputs": "11 writes",
        "attack_statuses": {"201": 11},
        "attack_seconds": 5.2,
        "bound_hit": False,
        "attacker_5xx": 0,
        "victim": {"n": 53, "p50_ms": 75.7, "p95_ms": 257.9, "max_ms": 352.4, "victim_5xx": 0},
        "max_over_idle_p95": 1.9,
        "settle_seconds": None,
        "victim_verdict": "SLOW",
        "outcome": "active: 'a' | 'b'",
        "check": "FAIL",
    }
    report = {
        "victim": {"memories": 50},
        "idle": {"n": 40, "p50_ms": 40.0, "p95_ms": 90.0, "max_ms": 120.0},
        "settings": {"attack_timeout_s": 60, "settle_timeout_s": 45, "max_victim_ms": 2000},
        "attacks": [row],
    }
    table = markdown(report).splitlines()
    assert table[-1].startswith("| 4 | screen_injections | 11 writes | 201×11 | 5.2 | 53 | 76 | 258 | 352 | 1.9× |")
    assert "'a' \\| 'b'" in table[-1] and "not recovered" in table[-1]
    assert table[-1].count(" | ") == table[2].count(" | ")  # as many cells as the header
