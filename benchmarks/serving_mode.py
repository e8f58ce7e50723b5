"""Serve's Python proxy against Ray Serve's throughput mode (``serve.env``), side by side in
ONE run: the read path of one user and concurrent chats near the model's limit.

    python -m benchmarks.serving_mode [--rounds 2] [--requests 150] [--users 32] [--duration 30]

For each round, each mode in turn (the order alternates between rounds, so neither always
runs on a warmer machine): ``serve run serve_config.yaml`` in a scratch directory
(``benchmarks.hostile.started_service``) with the mode's environment, then

- **read path** (``benchmarks.full_service.seed`` / ``measure``): a 1-memory and a
  600-memory user (LoCoMo turns, ``POST /v1/memory``), ``--requests`` interleaved rounds of a
  search of each, a chat on the memory route and one on the memory-off route (its latency is
  the HTTP floor: proxy, ingress, echo upstream); p50/p95 of each;
- **load** (``benchmarks.load.run_load``): ``--users`` concurrent chat users for
  ``--duration`` seconds, every acknowledged write read back.

Modes: ``proxy`` (``RAY_SERVE_THROUGHPUT_OPTIMIZED=0``, ``RAY_SERVE_ENABLE_HA_PROXY=0``: Serve's
Python proxy actor and Ray actor calls between deployments) and ``throughput`` (``serve.env``
as the Makefile applies it). After the last service the model alone is measured on the texts
the load runs embedded (``benchmarks.load.model_alone``, the service stopped), giving the
chat-turn ceiling both modes are divided by.

Prints per mode and round the read-path p50/p95 (ms) and the load's turns/s, its ratio to the
ceiling, chat and all-request p50/p95, errors and lost writes; then the throughput mode's
figures ÷ the proxy's (medians over rounds). Sequential services on one machine; compare only
figures of one run.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from benchmarks.full_service import measure, seed
from benchmarks.hostile import started_service
from benchmarks.load import model_alone, run_load
from deployments.serve_env import serve_env
from memory_core.locomo import load_samples, questions, turns

app = typer.Typer(add_completion=False)
console = Console(width=200)  # the table stays one row per service in a file

MODES: dict[str, dict[str, str]] = {
    "proxy": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0", "RAY_SERVE_ENABLE_HA_PROXY": "0"},
    "throughput": serve_env(),
}
"""Each mode's environment for the service (over this process's)."""


def run_mode(mode: str, texts: list[str], qs: list[str], requests: int, users: int, duration: float) -> dict[str, Any]:
    """One service in ``mode``: the read path, then the load. Returns both results."""
    saved = {k: os.environ.get(k) for k in {*MODES["proxy"], *MODES["throughput"]}}
    os.environ.update(MODES[mode])
    try:
        with started_service() as url:
            asyncio.run(seed(url, texts))
            read = asyncio.run(measure(url, qs, requests))
            load = asyncio.run(run_load(url, users, duration, workload="chat", cleanup=True))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"read": read, "load": load}


@app.command()
def main(
    rounds: int = typer.Option(2, min=1, help="services per mode (alternating order)"),
    requests: int = typer.Option(150, min=10, help="read-path rounds per service"),
    users: int = typer.Option(32, min=1, help="concurrent chat users of the load"),
    duration: float = typer.Option(30.0, min=5.0, help="seconds of load per service"),
) -> None:
    sample = load_samples()[0]
    texts = [t.content for t in turns(sample)][:600]
    qs = [q.question for q in questions(sample)]
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in list(MODES) if r % 2 == 0 else list(reversed(MODES)):
            console.print(f"round {r + 1}: {mode}")
            results[mode].append(run_mode(mode, texts, qs, requests, users, duration))
    loads = [x["load"] for m in MODES for x in results[m]]
    rate = model_alone([t for x in loads for t in x.texts], 32)
    per_turn = sum(x.embeddings for x in loads) / max(1, sum(x.turns for x in loads))
    ceiling = rate / per_turn
    console.print(
        f"model alone: {rate:.1f} sentences/s, {per_turn:.2f} embeddings per chat turn → ceiling {ceiling:.1f} turns/s"
    )

    table = Table(
        "mode", "search 600 p50/p95", "search 1 p50/p95", "chat mem p50/p95", "chat off p50/p95",
        "turns/s", "/ ceiling", "chat p50/p95", "all p50/p95", "errors", "lost",
        title=f"serving modes, {users} users for {duration:.0f} s, {requests} read rounds",
    )  # fmt: skip
    summary: dict[str, dict[str, float]] = {}
    for mode, runs in results.items():
        for x in runs:
            rd, ld = x["read"], x["load"].as_dict()
            chat = ld["by_kind"].get("chat", {})

            def pair(k: str, rd: dict = rd) -> str:
                return f"{rd[k]['p50']:.1f} / {rd[k]['p95']:.1f}"

            table.add_row(
                mode, pair("search_many"), pair("search_one"), pair("chat_memory"), pair("chat_off"),
                f"{ld['turns_per_s']:.1f}", f"{ld['turns_per_s'] / ceiling:.2f}",
                f"{chat.get('p50_ms', 0):.0f} / {chat.get('p95_ms', 0):.0f}", f"{ld['p50_ms']:.0f} / {ld['p95_ms']:.0f}",
                f"{ld['error_rate']}", str(ld["lost_writes"]),
            )  # fmt: skip
        summary[mode] = {
            "search_many_p95": statistics.median(x["read"]["search_many"]["p95"] for x in runs),
            "chat_off_p50": statistics.median(x["read"]["chat_off"]["p50"] for x in runs),
            "turns_per_s": statistics.median(x["load"].as_dict()["turns_per_s"] for x in runs),
            "all_p95": statistics.median(x["load"].as_dict()["p95_ms"] for x in runs),
        }
    console.print(table)
    p, t = summary["proxy"], summary["throughput"]
    console.print(
        f"throughput ÷ proxy (medians): search p95 (600-memory user) {t['search_many_p95'] / p['search_many_p95']:.2f}×, "
        f"HTTP floor p50 {t['chat_off_p50'] / p['chat_off_p50']:.2f}×, chat turns/s {t['turns_per_s'] / p['turns_per_s']:.2f}×, "
        f"all requests' p95 under load {t['all_p95'] / p['all_p95']:.2f}×; "
        f"turns/s ÷ ceiling {p['turns_per_s'] / ceiling:.2f} → {t['turns_per_s'] / ceiling:.2f} (goal at N = 32: ≥ 0.5)"
    )


if __name__ == "__main__":
    app()
