"""Bulk ingest through the API against the model alone, side by side in one run.

    python -m benchmarks.ingest --url http://127.0.0.1:8000 [--batch 100] [--batches 10]

(a) the model alone: the bundled all-MiniLM-L6-v2 (``LocalEncoder``, all cores) encoding the
    same texts in batches of ``--batch``, in this process, while the service is idle;
(b) the API: other texts of the same kind as ``POST /v1/memory`` batches of ``--batch``
    memories (episodic memories as ``benchmarks.locomo`` sends them), for each of
    ``--accounts``: ``one`` (every batch for one new user: a migration of one account, whose
    curation searches a store that grows by a batch each request) and ``many`` (each batch
    for another new user: curation searches an empty store); with 1 and with 2 requests in
    flight (``--concurrency``: a bulk loader keeps the next batch coming while one is
    written); the service's ``server-timing`` splits each request into embed and write
    (curation and insert).
Prints memories/s of each, the ratio (b)/(a) (goal ≥ 0.8: the model is the limit, not the
path) and where the API time goes. Texts: LoCoMo dialogue turns (``$LOCOMO_PATH``), each
prefixed with a run id so no batch repeats an earlier run's text. The machine is shared:
compare the ratio, not the absolute figures.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid

import httpx
import typer
from rich.console import Console
from rich.table import Table

from memory_core.embedding import bound_openmp_spinning
from memory_core.locomo import load_samples, turns

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the model alone runs as the service's Embedder runs it: with the other processes of the
# machine (the service, even idle) torch's default spinning halved its rate here
bound_openmp_spinning()
app = typer.Typer(add_completion=False)


def texts_for(n: int, run: str) -> list[str]:
    """``n`` distinct texts: LoCoMo turn texts in file order, prefixed with ``run`` and the
    pass over the file (the file is read again when ``n`` exceeds its turns)."""
    contents = [t.content for sample in load_samples(None, None) for t in turns(sample)]
    if not contents:
        raise typer.BadParameter("the LoCoMo file holds no turns")
    return [f"[{run}.{i // len(contents)}] {contents[i % len(contents)]}" for i in range(n)]


def model_rate(
    texts: list[str], batch: int, model: str = "bundled:all-MiniLM-L6-v2", device: str | None = None
) -> float:
    """Sentences/s of ``model`` (an ``embedding.model`` value: bundled name or a local path)
    on ``device`` (``None``: a GPU when torch sees one, else the CPU) encoding ``texts`` in
    batches of ``batch`` (after one warm-up batch), through the service's own ``LocalEncoder``,
    its threads' spinning bounded as in the Embedder (``bound_openmp_spinning``, applied when
    this module is imported: with the default, the idle service's processes on the same cores
    halved the rate measured here, 103 → 45.5 sentences/s at batch 100)."""
    from memory_core.config import EmbeddingSettings
    from memory_core.embedding import LocalEncoder

    encoder = LocalEncoder(EmbeddingSettings(model=model, device=device))
    encoder.encode(texts[:batch])
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        encoder.encode(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - started)


def server_timings(header: str) -> dict[str, float]:
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def api_rate(client: httpx.Client, texts: list[str], batch: int, concurrency: int, user: str, *, one: bool = False):
    """Memories/s of ``POST /v1/memory`` for ``texts`` in batches of ``batch`` (all for the user
    ``user`` when ``one``, else one user per batch: ``{user}-{i}``), ``concurrency`` requests
    in flight; and the server-timing of every request. Raises ``httpx.HTTPStatusError`` on a
    refused request."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = [texts[i : i + batch] for i in range(0, len(texts), batch)]

    def post(i: int) -> dict[str, float]:
        body = {"memories": [{"content": t, "type": "episodic", "source": "benchmark"} for t in chunks[i]]}
        resp = client.post("/v1/memory", json=body, headers={"x-authz-user-id": user if one else f"{user}-{i}"})
        resp.raise_for_status()
        return server_timings(resp.headers.get("server-timing", ""))

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        timings = list(pool.map(post, range(len(chunks))))
    return len(texts) / (time.perf_counter() - started), timings


@app.command()
def main(
    url: str = typer.Option("http://127.0.0.1:8000", help="base URL of the running service"),
    batch: int = typer.Option(100, min=1, max=256, help="memories per POST /v1/memory (and model batch)"),
    batches: int = typer.Option(10, min=1, help="batches timed per measurement"),
    rounds: int = typer.Option(2, min=1, help="alternate model/API this many times (noise shows as spread)"),
    concurrency: str = typer.Option("1,2", help="API requests in flight, one measurement each"),
    accounts: str = typer.Option("one,many", help="one (every batch for one user), many (a user per batch)"),
) -> None:
    console = Console()
    run = uuid.uuid4().hex[:8]
    levels = [int(c) for c in concurrency.split(",")]
    kinds = [a.strip() for a in accounts.split(",") if a.strip()]
    if not kinds or set(kinds) - {"one", "many"}:
        raise typer.BadParameter("--accounts: one, many or both")
    cases = [(a, c) for a in kinds for c in levels]
    n = batch * batches
    texts = texts_for(n * rounds * (1 + len(cases)) + batch, run)
    table = Table(title=f"bulk ingest, batches of {batch}")
    for col in (
        "round",
        "accounts",
        "in flight",
        "model alone (sent/s)",
        "API (memories/s)",
        "API / model",
        "embed ms",
        "write ms",
        "last write ms",
    ):
        table.add_column(col, justify="right")
    ratios: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    with httpx.Client(base_url=url.rstrip("/"), timeout=300) as client:
        client.get("/health").raise_for_status()
        api_rate(client, texts[-batch:], batch, 1, f"warmup-{run}")  # one warm-up request
        used = 0
        for r in range(rounds):
            raw = model_rate(texts[used : used + n], batch)
            used += n
            for a, c in cases:
                user = f"ingest-{run}-{r}-{a}-{c}"
                api, timings = api_rate(client, texts[used : used + n], batch, c, user, one=a == "one")
                used += n
                ratios[a, c].append(api / raw)
                row = (
                    str(r + 1),
                    a,
                    str(c),
                    f"{raw:.1f}",
                    f"{api:.1f}",
                    f"{api / raw:.2f}",
                    f"{statistics.median(t.get('embed', 0) for t in timings):.0f}",
                    f"{statistics.median(t.get('write', 0) for t in timings):.0f}",
                    f"{timings[-1].get('write', 0):.0f}",
                )
                console.print(" | ".join(row))  # as measured: a long run that is stopped keeps its rows
                table.add_row(*row)
    console.print(table)
    for a, c in cases:
        console.print(
            f"{a} account{'s' if a == 'many' else ''}, {c} in flight: API / model median "
            f"{statistics.median(ratios[a, c]):.2f} over {rounds} rounds (goal ≥ 0.8)"
        )


if __name__ == "__main__":
    app()
