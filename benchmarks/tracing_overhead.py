"""What OpenTelemetry tracing costs a chat request: the full service with tracing off and on,
side by side, in ONE run.

    python -m benchmarks.tracing_overhead [--rounds 200] [--memories 50]

Two services run at once (``serve run --address local serve_config.yaml``, each with its own
Ray instance and data directory, ``benchmarks.hostile.started_service``): one as configured
(tracing off), one with ``global.tracing.otlp_endpoint`` pointing at an OTLP/HTTP receiver in
this process (``memory_core.testing.otlp_receiver``: the real exporter, protobuf over HTTP,
decoded here; ``schedule_delay_ms`` 1000). One user is seeded with ``--memories`` LoCoMo
turns on each. Then ``--rounds`` rounds, each a chat completion on the memory route
(``model: assistant``) of that user to each service, in random order (both see the same
machine). Questions only, so auto-store keeps nothing and the services stay alike.

Prints chat p50/p95 of each service, the ratios on/off, the difference in ms, and the spans
received (a check that the traced service did trace: about 6 spans a chat). Sequential
requests, one client, on loopback; the machine is shared: compare figures of one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console

from benchmarks.hostile import started_service, user_headers
from benchmarks.load import percentile
from memory_core.locomo import load_samples, turns
from memory_core.testing.otlp_receiver import OtlpReceiver

app = typer.Typer(add_completion=False)
console = Console()
USER = "traced-bench"


def edit_for(tracing: dict[str, Any] | None):
    """The config edit: no per-user write limit; ``tracing`` as ``global.tracing`` when given.
    Each service's data stays in its own temporary directory (relative paths)."""

    def edit(config: dict[str, Any]) -> None:
        g = config["applications"][0]["args"]["config"]["global"]
        g["access"]["write_rate_limit"] = {"limit": 0}
        if tracing is not None:
            g["tracing"] = tracing

    return edit


async def seed(url: str, texts: list[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        r = await client.post(
            "/v1/memory",
            json={"memories": [{"content": t, "type": "episodic"} for t in texts]},
            headers=user_headers(USER),
        )
        r.raise_for_status()


async def measure(urls: dict[str, str], questions: list[str], rounds: int) -> dict[str, list[float]]:
    """ms per chat of each service, ``rounds`` interleaved rounds after 5 warm-up ones."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    clients = {name: httpx.AsyncClient(base_url=url, timeout=60) for name, url in urls.items()}
    try:
        for i in range(rounds + 5):
            q = questions[i % len(questions)]
            order = list(urls)
            random.shuffle(order)
            for name in order:
                body = {"model": "assistant", "messages": [{"role": "user", "content": q}]}
                started = time.perf_counter()
                r = await clients[name].post("/v1/chat/completions", json=body, headers=user_headers(USER))
                spent = (time.perf_counter() - started) * 1000
                r.raise_for_status()
                if i >= 5:
                    times[name].append(spent)
    finally:
        for client in clients.values():
            await client.aclose()
    return times


@app.command()
def main(
    rounds: int = typer.Option(200, min=10, help="measured rounds (one chat to each service)"),
    memories: int = typer.Option(50, min=1, max=1000, help="memories of the measured user"),
    json_out: Path | None = typer.Option(None, "--json", help="write the figures here too"),
) -> None:
    samples = load_samples(os.environ.get("LOCOMO_PATH"))
    texts = [t.text for s in samples for t in turns(s)][:memories]
    questions = [q["question"] for s in samples for q in s.get("qa", []) if q.get("question")]
    random.Random(7).shuffle(questions)
    with OtlpReceiver() as receiver, ExitStack() as services:
        tracing = {"otlp_endpoint": receiver.url, "schedule_delay_ms": 1000}
        urls = {
            "off": services.enter_context(started_service(edit_for(None))),
            "on": services.enter_context(started_service(edit_for(tracing))),
        }
        for url in urls.values():
            asyncio.run(seed(url, texts))
        times = asyncio.run(measure(urls, questions, rounds))
        time.sleep(3)  # the last export batch
        spans = receiver.spans()
    out: dict[str, Any] = {
        name: {"p50": percentile(v, 50), "p95": percentile(v, 95), "n": len(v)} for name, v in times.items()
    }
    for q in ("p50", "p95"):
        out[f"ratio_{q}"] = out["on"][q] / out["off"][q]
        out[f"diff_{q}_ms"] = out["on"][q] - out["off"][q]
    out["spans_received"] = len(spans)
    out["chat_traces"] = len({s.trace_id for s in spans if s.name == "chat"})
    console.print(json.dumps(out, indent=2))
    console.print(
        f"chat p50: off {out['off']['p50']:.1f} ms, on {out['on']['p50']:.1f} ms (×{out['ratio_p50']:.2f}, "
        f"{out['diff_p50_ms']:+.1f} ms); p95: off {out['off']['p95']:.1f}, on {out['on']['p95']:.1f} "
        f"(×{out['ratio_p95']:.2f}); {out['spans_received']} spans in {out['chat_traces']} chat traces"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    app()
