"""What consolidation's grouping costs the store shard, as a user's memory grows: ``plan_groups``
reading every pair (before) against the vector prefilter (``vectors=``), side by side in one
run, on the case ``benchmarks.lanes`` consolidates (LoCoMo turns, each also written as a
near-duplicate), with the bundled model's vectors.

    python benchmarks/consolidation_plan.py                  # 500, 1,000, 2,000 memories
    python benchmarks/consolidation_plan.py --sizes 2000 --repeat 5

``plan_groups`` runs on the shard's CPU pool, holding the GIL for all of its Python: what it
costs is time the shard's event loop (every other user's search) waits at each switch
interval. 2,000 is ``curation.consolidation.max_memories``, the most one pass reads. Printed
per size: the groups found (the same both ways, checked), the cosines the exact rule asked for
(after a Jaccard that passed), the
best of ``--repeat`` wall times of each way and their ratio.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core import locomo  # noqa: E402
from memory_core.config import ConsolidationSettings, EmbeddingSettings  # noqa: E402
from memory_core.curation.consolidate import plan_groups  # noqa: E402
from memory_core.embedding import LocalEncoder  # noqa: E402
from memory_core.retrieval.held_vectors import cosine, unit_vector  # noqa: E402
from memory_core.types import Memory, MemoryType  # noqa: E402

app = typer.Typer(add_completion=False)


def large_user(memories: int) -> list[Memory]:
    """``memories`` LoCoMo turns of conversations 4 on, each followed by a near-duplicate
    (``benchmarks.lanes.large_user_batches``' texts)."""
    out: list[Memory] = []
    for sample in locomo.load_samples()[3:]:
        for turn in locomo.turns(sample):
            for content in (turn.content, turn.content + " (I said that again.)"):
                out.append(Memory(user_id="large", content=content, type=MemoryType.EPISODIC,
                                  created_at=turn.created_at))  # fmt: skip
    if len(out) < memories:
        raise typer.BadParameter(f"LoCoMo holds {len(out)} such memories, fewer than {memories}")
    return out[:memories]


class CountingCosine:
    """The consolidation's cosine of two memories (``CuratingStore.consolidate``'s rule: -1 for
    a memory without a vector), counting the calls in ``asked``."""

    def __init__(self, vectors: dict):
        self.vectors = vectors
        self.asked = 0

    def __call__(self, a: Memory, b: Memory) -> float:
        self.asked += 1
        va, vb = self.vectors.get(a.id), self.vectors.get(b.id)
        return -1.0 if va is None or vb is None else (cosine(va, vb) or -1.0)


@app.command()
def main(
    sizes: str = typer.Option("500,1000,2000", help="memories of the user, comma-separated"),
    repeat: int = typer.Option(3, min=1, help="runs of each way; the best is printed"),
) -> None:
    counts = [int(x) for x in sizes.split(",")]
    rule = ConsolidationSettings()
    everything = large_user(max(counts))
    encoder = LocalEncoder(EmbeddingSettings())
    t = time.perf_counter()
    embedded = encoder.encode([m.content for m in everything]).vectors
    print(f"embedded {len(everything)} memories in {time.perf_counter() - t:.1f} s; "
          f"min_cosine {rule.min_cosine}, min_jaccard {rule.min_jaccard}, {datetime.now():%Y-%m-%d %H:%M}")  # fmt: skip
    for m, v in zip(everything, embedded, strict=True):
        m.embedding = list(map(float, v))
    print(
        "| memories | groups | cosines asked, every pair | cosines asked, prefilter | every pair ms | prefilter ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in counts:
        memories = everything[:n]
        vectors = {m.id: unit_vector(m.embedding) for m in memories}
        similarity = CountingCosine(vectors)
        args = {"min_cosine": rule.min_cosine, "min_jaccard": rule.min_jaccard, "max_groups": n}
        timings: dict[str, list[float]] = {"pairs": [], "prefilter": []}
        reads: dict[str, int] = {}
        found: dict[str, list[list[str]]] = {}
        for _ in range(repeat):
            for way, extra in (("pairs", {}), ("prefilter", {"vectors": vectors})):
                similarity.asked = 0
                t = time.perf_counter()
                groups = plan_groups(memories, similarity, **args, **extra)
                timings[way].append(time.perf_counter() - t)
                reads[way] = similarity.asked
                found[way] = [[m.id for m in g] for g in groups]
        if found["pairs"] != found["prefilter"]:
            raise SystemExit(f"at {n} memories the prefilter found other groups: a bug")
        best = {way: min(ts) * 1000 for way, ts in timings.items()}
        print(f"| {n:,} | {len(found['pairs'])} | {reads['pairs']:,} | {reads['prefilter']:,} | {best['pairs']:.1f} "
              f"| {best['prefilter']:.1f} | {best['pairs'] / best['prefilter']:.1f}× |")  # fmt: skip


if __name__ == "__main__":
    app()
