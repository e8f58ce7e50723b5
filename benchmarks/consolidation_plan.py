"""What consolidation's grouping costs the store shard, as a user's memory grows: ``plan_groups``
three ways, side by side in one run, with the bundled model's vectors:

- ``pairs``: every pair read by the rule (``vectors=None, sketches=False``);
- ``prefilter``: only the groups whose first member's vector is near (``vectors=``,
  ``sketches=False``: the code before the word sketches);
- ``sketches``: that, and only the groups whose first member's words may reach
  ``min_jaccard`` (``WordSketches``; the default).

Two users: the case ``benchmarks.lanes`` consolidates (LoCoMo turns, each also written as a
near-duplicate: ``--sizes``), and a user who sent maximal batches of distinct long notes
(``benchmarks.lanes.batch_body``'s 3.9 KB texts, which the model places near each other but
which mostly share no words: ``--notes``; its ``pairs`` way is skipped, it costs what
``prefilter`` does).

    python benchmarks/consolidation_plan.py                  # 500, 1,000, 2,000 memories; 256, 2,000 notes
    python benchmarks/consolidation_plan.py --sizes 2000 --notes 0 --repeat 5

``plan_groups`` runs on the shard's CPU pool, holding the GIL for all of its Python: what it
costs is time the shard's event loop (every other user's search) waits at each switch
interval. 2,000 is ``curation.consolidation.max_memories``, the most one pass reads. Printed
per size: the groups found (the same every way, checked), the cosines the exact rule asked for
(after a Jaccard that passed), the best of ``--repeat`` wall times of each way and the ratios
to ``sketches``.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
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


def long_notes(notes: int) -> list[Memory]:
    """``notes`` notes of maximal ``POST /v1/memory`` bodies (``benchmarks.lanes.batch_body``,
    256 a body), one second apart. The filler seeds each note's words with ``crc32 % 9973``:
    about one note in six has a twin with the same words (the groups found)."""
    from benchmarks.lanes import batch_body

    texts = [item["content"] for b in range(0, notes, 256) for item in batch_body(f"u-{b}")["memories"]]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return [Memory(user_id="notes", content=text, type=MemoryType.SEMANTIC, created_at=t0 + timedelta(seconds=i))
            for i, text in enumerate(texts[:notes])]  # fmt: skip


WAYS = {
    "pairs": {"sketches": False},
    "prefilter": {"sketches": False, "vectors": True},
    "sketches": {"vectors": True},
}


def compare(label: str, memories: list[Memory], encoder: LocalEncoder, repeat: int, ways: list[str]) -> None:
    """Embed ``memories``, group them each way ``repeat`` times, print one table row."""
    rule = ConsolidationSettings()
    embedded = encoder.encode([m.content for m in memories]).vectors
    for m, v in zip(memories, embedded, strict=True):
        m.embedding = list(map(float, v))
    vectors = {m.id: unit_vector(m.embedding) for m in memories}
    similarity = CountingCosine(vectors)
    args = {"min_cosine": rule.min_cosine, "min_jaccard": rule.min_jaccard, "max_groups": len(memories)}
    timings: dict[str, list[float]] = {way: [] for way in ways}
    reads: dict[str, int] = {}
    found: dict[str, list[list[str]]] = {}
    for _ in range(repeat):
        for way in ways:
            extra = {k: (vectors if k == "vectors" else v) for k, v in WAYS[way].items()}
            similarity.asked = 0
            t = time.perf_counter()
            groups = plan_groups(memories, similarity, **args, **extra)
            timings[way].append(time.perf_counter() - t)
            reads[way] = similarity.asked
            found[way] = [[m.id for m in g] for g in groups]
    if any(found[way] != found["sketches"] for way in ways):
        raise SystemExit(f"{label}: the ways found other groups: a bug")
    best = {way: min(ts) * 1000 for way, ts in timings.items()}
    cells = [f"{best[w]:.1f} ms ({best[w] / best['sketches']:.1f}×)" if w in best else "—" for w in WAYS]
    print(f"| {label} | {len(found['sketches'])} | {reads['sketches']:,} | {' | '.join(cells)} |")


@app.command()
def main(
    sizes: str = typer.Option("500,1000,2000", help="LoCoMo user's memories, comma-separated (0: none)"),
    notes: str = typer.Option("256,2000", help="long-notes user's memories, comma-separated (0: none)"),
    repeat: int = typer.Option(3, min=1, help="runs of each way; the best is printed"),
) -> None:
    rule = ConsolidationSettings()
    encoder = LocalEncoder(EmbeddingSettings())
    print(f"min_cosine {rule.min_cosine}, min_jaccard {rule.min_jaccard}, best of {repeat}, "
          f"{datetime.now():%Y-%m-%d %H:%M}")  # fmt: skip
    print("| user | groups | cosines asked | pairs | prefilter (before) | sketches (now) |")
    print("|---|---|---|---|---|---|")
    for n in (int(x) for x in sizes.split(",") if int(x)):
        compare(f"LoCoMo, {n:,} memories", large_user(n), encoder, repeat, list(WAYS))
    for n in (int(x) for x in notes.split(",") if int(x)):
        compare(f"long notes, {n:,}", long_notes(n), encoder, repeat, ["prefilter", "sketches"])


if __name__ == "__main__":
    app()
