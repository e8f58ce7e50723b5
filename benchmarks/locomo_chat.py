"""LoCoMo through chat: memories come only from auto-store, next to the per-turn REST mode.

Each conversation is one user. Mode ``chat`` feeds it through ``POST /v1/chat/completions``
as a client would: session by session, one request per turn of the first speaker (the user),
its ``messages`` the session so far (the first speaker's turns as ``user`` messages, the other
speaker's as ``assistant`` messages). Requests of one conversation go one at a time, in
order. Mode ``rest`` stores one memory per turn through ``POST /v1/memory`` (as
``benchmarks/locomo.py``). Both modes then ask every category 1–4 question through
``POST /v1/memory/search`` (limit 10).

An evidence turn counts as found when a retrieved memory contains its text (both compared
lower-cased with whitespace collapsed), so windows of several turns count for every turn they
hold. Printed per mode: recall@5/@10 overall and per category; memories per conversation by
state (``active``, ``superseded``, ``consolidated``, ``quarantined``) against turns; after
``--consolidate`` (``POST /v1/memory/consolidate`` per user) the groups merged; and with
``--metrics-url`` (Ray's Prometheus endpoint, e.g. ``http://127.0.0.1:8080/metrics`` when Ray
was started with ``--metrics-export-port 8080``) the service's extraction and write counters
over the run (skipped by reason, reinforced = deduplicated, superseded...). Then the ratio
chat/REST of recall@5 (goal ≥ 0.9) and memories/turns (goal < 1).

    python benchmarks/locomo_chat.py --url http://127.0.0.1:8000
    python benchmarks/locomo_chat.py --mode chat --conversations 1 --consolidate
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory_core.locomo import evaluate, feed_chat, ingest_rest, load_samples, recall_table, settle, summarize, turns

app = typer.Typer(add_completion=False)
console = Console()
STATES = ("active", "superseded", "consolidated", "quarantined")


@dataclass
class ModeResult:
    mode: str
    rows: list[tuple[int, float, float]] = field(default_factory=list)
    turns: int = 0
    states: Counter = field(default_factory=Counter)
    consolidated_groups: int = 0
    requests: int = 0
    seconds: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)


async def _count_states(client: httpx.AsyncClient, user: str) -> Counter:
    out: Counter = Counter()
    for state in STATES:
        r = await client.get("/v1/memory", params={"state": state, "limit": 1}, headers={"x-authz-user-id": user})
        r.raise_for_status()
        out[state] = r.json()["total"]
    return out


async def scrape(metrics_url: str | None) -> dict[str, float]:
    """The service's extraction/write counters (``<name>{outcome=...}`` summed over labels
    other than ``outcome``) from Ray's Prometheus endpoint; empty without ``metrics_url``."""
    if not metrics_url:
        return {}
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(timeout=30) as c:
        text = (await c.get(metrics_url)).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = re.sub(r"^ray_|_total$", "", sample.name)
            if name in ("memory_extraction", "memory_writes", "memory_skipped"):
                key = f"{name}:{sample.labels.get('outcome') or sample.labels.get('reason')}"
                out[key] = out.get(key, 0.0) + sample.value
    return out


async def run_mode(client: httpx.AsyncClient, mode: str, samples: list[dict], args: dict, run: str) -> ModeResult:
    result = ModeResult(mode)
    users = {s["sample_id"]: f"locomo-{mode}-{run}-{s['sample_id']}" for s in samples}
    before = await scrape(args["metrics_url"])
    gate = asyncio.Semaphore(args["concurrency"])
    started = time.perf_counter()

    async def feed(sample):
        async with gate:
            headers = {"x-authz-user-id": users[sample["sample_id"]]}
            if mode == "chat":
                n = await feed_chat(client, sample, headers=headers, model=args["model"])
            else:
                n = (await ingest_rest(client, sample, headers=headers, batch=32) + 31) // 32  # requests
            await settle(client, headers=headers)
            return n

    result.requests = sum(await asyncio.gather(*(feed(s) for s in samples)))
    result.seconds = time.perf_counter() - started
    after = await scrape(args["metrics_url"])
    result.counters = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
    if args["consolidate"]:
        for user in users.values():
            r = await client.post(
                "/v1/memory/consolidate",
                headers={"x-authz-user-id": user, "x-authz-role": "admin"} | {"content-type": "application/json"},
            )
            r.raise_for_status()
            result.consolidated_groups += r.json().get("groups", 0)
    for sample in samples:
        user = users[sample["sample_id"]]
        result.turns += len(turns(sample))
        result.states.update(await _count_states(client, user))
        result.rows += await evaluate(client, sample, headers={"x-authz-user-id": user}, match="content")
    if not args["keep"]:
        for user in users.values():
            await client.delete(
                "/v1/memory",
                params={"all": "true"},
                headers={"x-authz-user-id": user} | {"content-type": "application/json"},
            )
    return result


def show(result: ModeResult, n_conv: int) -> None:
    console.print(
        recall_table(
            result.rows, f"LoCoMo through {result.mode} ({n_conv} conversations, evidence found by containment)"
        )
    )
    total = sum(result.states.values())
    console.print(
        f"{result.mode}: {result.requests} requests in {result.seconds:.1f} s; "
        f"{total} memories for {result.turns} turns ({total / n_conv:.0f} per conversation, "
        f"{total / result.turns:.2f} per turn); by state: {dict(result.states)}; "
        f"consolidation groups merged: {result.consolidated_groups}"
    )
    if result.counters:
        console.print(f"  service counters over the run: {dict(sorted(result.counters.items()))}")


@app.command()
def main(
    url: str = typer.Option("http://127.0.0.1:8000", help="base URL of the running service"),
    data: str = typer.Option(None, help="LoCoMo JSON (default ../shared/data/locomo/locomo_dev.json)"),
    conversations: int = typer.Option(0, help="only the first N conversations (0 = all)"),
    mode: str = typer.Option("both", help="chat | rest | both"),
    concurrency: int = typer.Option(3, help="conversations fed in parallel"),
    model: str = typer.Option("assistant", help="the chat request's model (a decision with the memory plugin)"),
    consolidate: bool = typer.Option(False, help="run POST /v1/memory/consolidate per user before searching"),
    metrics_url: str = typer.Option(None, help="Ray's Prometheus endpoint, for the service's counters"),
    keep: bool = typer.Option(False, help="keep the memories (default: delete them at the end)"),
) -> None:
    if mode not in ("chat", "rest", "both"):
        raise typer.BadParameter("mode is chat, rest or both")
    samples = load_samples(data, conversations or None)
    args = {"concurrency": concurrency, "model": model, "consolidate": consolidate, "metrics_url": metrics_url,
            "keep": keep}  # fmt: skip
    run = uuid.uuid4().hex[:8]

    async def go() -> list[ModeResult]:
        async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=120) as client:
            (await client.get("/health")).raise_for_status()
            modes = ("rest", "chat") if mode == "both" else (mode,)
            return [await run_mode(client, m, samples, args, run) for m in modes]

    results = asyncio.run(go())
    for r in results:
        show(r, len(samples))
    if len(results) == 2:
        rest, chat = (summarize(r.rows)["overall"] for r in results)
        chat_memories = sum(results[1].states.values())
        console.print(
            f"chat/REST recall@5 {chat['r@5'] / rest['r@5']:.3f} (goal ≥ 0.9), recall@10 "
            f"{chat['r@10'] / rest['r@10']:.3f}; chat memories/turns {chat_memories / results[1].turns:.2f} (goal < 1)"
        )


if __name__ == "__main__":
    app()
