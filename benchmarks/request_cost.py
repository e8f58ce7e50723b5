"""What one write request costs a store shard on this machine, in process: an import of N
JSONL lines (``migration.import_lines``, as ``POST /v1/memory/import`` runs it) and a
``POST /v1/memory``-shaped batch of M memories (one embedding call, then ``Store.write``), into
the default store (Milvus Lite, curation on) with the bundled model on CPU. The figures chose
the default request bounds (``global.limits``, README "Limits"): a request should cost at most
a few seconds of one shard.

    python benchmarks/request_cost.py --lines 200 --batch 256
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.config import EmbeddingSettings, load_config  # noqa: E402
from memory_core.embedding import CoalescingEmbedFn, LocalEncoder  # noqa: E402
from memory_core.migration import import_lines  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.types import Memory  # noqa: E402

app = typer.Typer(add_completion=False)

SUBJECTS = ("locker code", "cat's name", "favourite band", "dentist", "train", "sister's city", "bike lock")


def sentence(i: int) -> str:
    """A distinct fact per ``i`` (different subjects and values: no supersession chains)."""
    return f"Note {i}: my {SUBJECTS[i % len(SUBJECTS)]} number {i} is {1000 + 7 * i} and I wrote it on day {i % 28}."


async def run(lines: int, batch: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(
            {
                "global": {"stores": {"memory": {"milvus": {"uri": f"{tmp}/m.db", "collection": "cost"}}}},
                "routing": {"decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {}}]}]},
            }
        )
        encoder = LocalEncoder(EmbeddingSettings())
        embed = CoalescingEmbedFn(encoder, wait_s=0.0)
        store = make_store(config.memory, embed=embed, dimension=encoder.dimension, identity="minilm")
        await store.open()
        await embed(["warm up"])
        body = [json.dumps({"content": sentence(i)}) for i in range(lines)]
        started = time.perf_counter()
        report = await import_lines(store, body, user_id="importer")
        took = time.perf_counter() - started
        print(
            f"import of {lines} lines: {took:.2f} s ({lines / took:.1f} lines/s; imported {report.imported}, "
            f"failed {len(report.failed)})"
        )
        texts = [sentence(100_000 + i) for i in range(batch)]
        started = time.perf_counter()
        vectors = await embed(texts)
        embedded = time.perf_counter()
        await store.write(
            [
                Memory(user_id="poster", content=t, embedding=v, embedding_identity="minilm")
                for t, v in zip(texts, vectors, strict=True)
            ]
        )
        done = time.perf_counter()
        print(
            f"POST-shaped batch of {batch}: embed {embedded - started:.2f} s, write {done - embedded:.2f} s "
            f"({batch / (done - started):.1f} memories/s)"
        )
        await store.close()


@app.command()
def main(
    lines: int = typer.Option(200, help="import lines"),
    batch: int = typer.Option(256, help="memories of one POST-shaped batch"),
) -> None:
    asyncio.run(run(lines, batch))


if __name__ == "__main__":
    app()
