"""Embedder throughput: raw sentence-transformers vs the Serve deployment, in one run.

    python benchmarks/embedder.py [--sentences 1024] [--clients 32] [--batch-sizes 16,32,64,128]

(a) raw in-process ``SentenceTransformer.encode`` at several batch sizes (best kept);
(b) the ``Embedder`` deployment (``num_cpus: 0`` replica, torch threads = all cores) under
    ``--clients`` concurrent clients, each sending one sentence per call through a
    DeploymentHandle; (c) the same with batching disabled (``user_config.max_batch_size: 1``,
    applied by reconfigure). Prints sentences/s and the ratios (b)/(a) and (b)/(c).
Sentences: the dialogue turns of ../shared/data/locomo/locomo_dev.json (``$LOCOMO_PATH``), in file order.
Goal on CPU: (b) ≥ 0.8 × (a) and (b) ≥ 4 × (c). The machine is shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from memory_core.config import EmbeddingSettings
from memory_core.embedding import compute_identity, resolve_model_path
from memory_core.locomo import default_path
from memory_core.testing.net import free_port

LOCOMO = default_path()
console = Console()


def load_sentences(n: int) -> list[str]:
    """The first ``n`` dialogue turns of LoCoMo dev (conversation order)."""
    data = json.loads(LOCOMO.read_text())
    out: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        sessions = sorted(
            (k for k in conv if k.startswith("session_") and not k.endswith("date_time")),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            out.extend(turn["text"] for turn in conv[key] if turn.get("text"))
    if len(out) < n:
        raise SystemExit(f"only {len(out)} sentences in {LOCOMO}")
    return out[:n]


def bench_raw(sentences: list[str], batch_sizes: list[int], repeats: int) -> dict[int, float]:
    """sentences/s of in-process encode per batch size (median of ``repeats``)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(
        str(resolve_model_path("bundled:all-MiniLM-L6-v2")), device="cpu", local_files_only=True
    )
    model.encode(sentences[:64], batch_size=32, show_progress_bar=False)  # warm-up
    out = {}
    for bs in batch_sizes:
        rates = []
        for _ in range(repeats):
            t = time.perf_counter()
            model.encode(sentences, batch_size=bs, normalize_embeddings=True, show_progress_bar=False)
            rates.append(len(sentences) / (time.perf_counter() - t))
        out[bs] = statistics.median(rates)
    del model
    return out


async def drive(handle, sentences: list[str], clients: int) -> float:
    """sentences/s with ``clients`` closed-loop clients, one sentence per call."""
    it = iter(range(len(sentences)))

    async def client():
        for i in it:
            res = await handle.embed.remote([sentences[i]])
            assert len(res.embeddings) == 1

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(sentences) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=1024)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument(
        "--batch-sizes", default="1,16,32,64,128", help="raw batch sizes; 1 shows the CPU ceiling of (b)/(c)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--unbatched-fraction", type=float, default=0.25, help="share of sentences used for (c)")
    ap.add_argument("--batch-wait-timeout-s", type=float, default=0.05)
    args = ap.parse_args()

    sentences = load_sentences(args.sentences)
    batch_sizes = [int(x) for x in args.batch_sizes.split(",")]
    console.print(f"{len(sentences)} LoCoMo sentences, {args.clients} clients, cores: {len(os.sched_getaffinity(0))}")

    raw = bench_raw(sentences, batch_sizes, args.repeats)
    best_bs = max(raw, key=raw.get)

    import ray
    from ray import serve

    from deployments.embedder import Embedder

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = EmbeddingSettings()
    identity = compute_identity(settings)

    def deploy(max_batch_size: int):
        app = Embedder.options(
            ray_actor_options={"num_cpus": 0},
            max_ongoing_requests=max(256, args.clients * 2),
            user_config={"max_batch_size": max_batch_size, "batch_wait_timeout_s": args.batch_wait_timeout_s},
            version=f"bench-{identity.short}",  # keep the replica across user_config changes
            _internal=True,
        ).bind(settings, identity)
        return serve.run(app, name="embedder_bench", route_prefix=None)

    async def run_serve():
        handle = deploy(args.clients)
        await drive(handle, sentences[: args.clients * 4], args.clients)  # warm-up
        await handle.stats.remote(reset=True)
        rates = []
        for _ in range(args.repeats):
            rates.append(await drive(handle, sentences, args.clients))
        stats = await handle.stats.remote(reset=True)
        batched = statistics.median(rates)

        handle = deploy(1)
        part = sentences[: max(args.clients, int(len(sentences) * args.unbatched_fraction))]
        await drive(handle, part[: args.clients], args.clients)
        await handle.stats.remote(reset=True)
        unbatched = await drive(handle, part, args.clients)
        stats_1 = await handle.stats.remote(reset=True)
        return batched, stats, unbatched, stats_1

    try:
        batched, stats, unbatched, stats_1 = asyncio.run(run_serve())
    finally:
        serve.delete("embedder_bench")
        serve.shutdown()
        ray.shutdown()

    sizes = stats["batch_sizes"]
    table = Table(title="Embedder throughput (all-MiniLM-L6-v2, CPU)")
    table.add_column("setup")
    table.add_column("sentences/s", justify="right")
    table.add_column("notes")
    for bs, rate in raw.items():
        table.add_row(f"(a) raw encode, batch {bs}", f"{rate:.0f}", "best" if bs == best_bs else "")
    table.add_row(
        f"(b) Serve, {args.clients} clients, batched",
        f"{batched:.0f}",
        f"batches: mean {statistics.mean(sizes):.1f}, max {max(sizes)}, n={len(sizes)}",
    )
    table.add_row(
        f"(c) Serve, {args.clients} clients, max_batch_size=1",
        f"{unbatched:.0f}",
        f"batches: max {max(stats_1['batch_sizes'])}",
    )
    console.print(table)
    ratio_a = batched / raw[best_bs]
    ratio_c = batched / unbatched
    console.print(
        f"(b)/(a) = {ratio_a:.2f} (goal ≥ 0.8)   (b)/(c) = {ratio_c:.2f} (goal ≥ 4)   "
        f"same replica across user_config change: {stats['pid'] == stats_1['pid']}"
    )


if __name__ == "__main__":
    main()
