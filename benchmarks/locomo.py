"""Replay LoCoMo conversations into a running memory-router over HTTP and measure retrieval.

Each conversation is one user; each dialogue turn becomes one memory created through
``POST /v1/memory`` (``memory_core.locomo.ingest_rest``), sent as a client would: content
``"Speaker: text"``, ``created_at`` the session date (plus the turn's index in seconds),
``conversation_id`` the sample id, metadata ``dia_id`` only (to score recall). Then every category 1–4 question
with evidence is searched as that user through ``POST /v1/memory/search``.

Prints evidence recall@5 and @10 (definition: ``shared/README.md``), overall and per category,
the number of questions, ingest throughput (memories/s) and search latency p50/p95 (ms,
client-side, one request at a time), plus the server-side time from the ``Server-Timing``
response header (``retrieve``: the store shard's work, query embedding included).

    python benchmarks/locomo.py --url http://127.0.0.1:8000
    python benchmarks/locomo.py --passes 4      # latency of 4 search passes over the same data

After the searches it times ``--floor-requests`` searches the ingress rejects (empty query →
400): the cost of the HTTP proxy and the ingress alone, as a reference for the search figures.

By default (``--threshold none``) the searches send no ``threshold``: the service's default
configuration (search applies no similarity floor, see ``deployments.http.schemas.SearchRequest``). ``--threshold X``
sends a cosine floor X (e.g. 0.425, the calibrated floor chat injection uses); ``none`` is the
default.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memory_core.locomo import (
    dia_ids_of,
    ingest_rest,
    load_samples,
    questions,
    recall_at_k,
    recall_table,
    search_body,
    turns,
)

app = typer.Typer(add_completion=False)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100] of ``values``."""
    ordered = sorted(values)
    rank = max(1, int(round(q / 100 * len(ordered) + 0.5)))
    return ordered[min(rank, len(ordered)) - 1]


@app.command()
def main(
    url: str = typer.Option("http://127.0.0.1:8000", help="base URL of the running service"),
    data: str = typer.Option(None, help="LoCoMo JSON (default ../shared/data/locomo/locomo_dev.json)"),
    conversations: int = typer.Option(0, help="replay only the first N conversations (0 = all)"),
    batch: int = typer.Option(32, help="memories per POST /v1/memory"),
    concurrency: int = typer.Option(4, help="conversations ingested in parallel"),
    threshold: str = typer.Option("none", help="cosine floor sent with each search, or 'none' to send none"),
    keep: bool = typer.Option(False, help="keep the replayed memories (default: delete them at the end)"),
    passes: int = typer.Option(1, min=1, help="search passes over the same memories (latency printed per pass)"),
    floor_requests: int = typer.Option(300, min=0, help="rejected searches timed as the HTTP floor (0: skip)"),
) -> None:
    samples = load_samples(data, conversations or None)
    run = uuid.uuid4().hex[:8]
    users = {s["sample_id"]: f"locomo-{run}-{s['sample_id']}" for s in samples}
    search_threshold = None if threshold == "none" else float(threshold)
    console = Console()

    async def go():
        limits = httpx.Limits(max_connections=concurrency * 2)
        async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=120, limits=limits) as client:
            (await client.get("/health")).raise_for_status()
            n_turns = sum(len(turns(s)) for s in samples)
            qs = [(s["sample_id"], q) for s in samples for q in questions(s)]
            cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*cols, console=console) as progress:
                t_ingest = progress.add_task("ingest memories", total=n_turns)
                gate = asyncio.Semaphore(concurrency)

                async def one(sample):
                    async with gate:
                        return await ingest_rest(
                            client,
                            sample,
                            headers={"x-authz-user-id": users[sample["sample_id"]]},
                            batch=batch,
                            on_progress=lambda n: progress.advance(t_ingest, n),
                        )

                started = time.perf_counter()
                stored = sum(await asyncio.gather(*(one(s) for s in samples)))
                ingest_s = time.perf_counter() - started

                runs = []  # per pass: (rows, latencies, server timings)
                for n in range(passes):
                    t_search = progress.add_task(f"search questions (pass {n + 1})", total=len(qs))
                    rows, latencies, server = [], [], {}
                    for sample_id, q in qs:
                        body = search_body(q.question, 10, search_threshold)
                        t0 = time.perf_counter()
                        r = await client.post(
                            "/v1/memory/search", json=body, headers={"x-authz-user-id": users[sample_id]}
                        )
                        latencies.append((time.perf_counter() - t0) * 1000)
                        r.raise_for_status()
                        for part in r.headers.get("server-timing", "").split(","):
                            name, _, dur = part.strip().partition(";dur=")
                            if dur:
                                server.setdefault(name, []).append(float(dur))
                        ranked = [dia_ids_of(m.get("metadata") or {}) for m in r.json()["memories"]]
                        rows.append(
                            (q.category, recall_at_k(ranked, q.evidence, 5), recall_at_k(ranked, q.evidence, 10))
                        )
                        progress.advance(t_search)
                    runs.append((rows, latencies, server))
                floor = []
                for _ in range(floor_requests):
                    t0 = time.perf_counter()
                    r = await client.post("/v1/memory/search", json={"query": ""}, headers={"x-authz-user-id": "floor"})
                    floor.append((time.perf_counter() - t0) * 1000)
                    if r.status_code != 400:
                        raise RuntimeError(f"an empty query should be rejected with 400, got {r.status_code}")
            if not keep:
                for user_id in users.values():
                    await client.delete(
                        "/v1/memory",
                        params={"all": "true"},
                        headers={"x-authz-user-id": user_id} | {"content-type": "application/json"},
                    )
            return stored, ingest_s, runs, floor

    stored, ingest_s, runs, floor = asyncio.run(go())
    rows = runs[0][0]
    if any(r != rows for r, _, _ in runs[1:]):
        console.print("[yellow]recall differed between passes; the table shows the first pass[/yellow]")
    console.print(
        recall_table(
            rows, f"LoCoMo evidence recall through {url} ({len(samples)} conversations, threshold {threshold})"
        )
    )
    console.print(
        f"ingest: {stored} memories in {ingest_s:.1f} s = {stored / ingest_s:.1f} memories/s "
        f"(batch {batch}, {concurrency} conversations in parallel)"
    )
    for n, (_, latencies, server) in enumerate(runs, 1):
        console.print(
            f"search latency, pass {n}, over {len(latencies)} requests (client, end to end): "
            f"p50 {statistics.median(latencies):.1f} ms, p95 {percentile(latencies, 95):.1f} ms"
        )
        for name, values in server.items():
            console.print(
                f"  server-side {name} (Server-Timing): p50 {statistics.median(values):.1f} ms, "
                f"p95 {percentile(values, 95):.1f} ms"
            )
    if floor:
        console.print(
            f"HTTP floor over {len(floor)} rejected searches (proxy + ingress, 400): "
            f"p50 {statistics.median(floor):.1f} ms, p95 {percentile(floor, 95):.1f} ms"
        )


if __name__ == "__main__":
    app()
