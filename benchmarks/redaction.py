"""Precision and recall per kind of ``memory_core.redaction.detect`` on the labelled set
``tests/fixtures/redaction/labelled.jsonl`` (see its ``generate.py`` for provenance).

A line is a positive for a kind when labelled with it; it is predicted positive when
``detect`` finds a value of that kind in it. Look-alikes and ordinary facts are labelled with
no kind, so each value detected in them is a false positive of its kind.

Run: ``python -m benchmarks.redaction [--split holdout|dev|all]`` (holdout by default).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from memory_core.redaction import KINDS, detect

LABELLED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "redaction" / "labelled.jsonl"


@dataclass
class Score:
    """Counts of one kind: true positives, false positives, false negatives (lines)."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def load(split: str = "holdout", path: Path = LABELLED) -> list[dict]:
    """The labelled lines of ``split`` (``dev``, ``holdout`` or ``all``)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows if split == "all" else [r for r in rows if r["split"] == split]


def evaluate(rows: list[dict]) -> dict[str, Score]:
    """Kind → ``Score`` over ``rows``."""
    scores = {kind: Score() for kind in KINDS}
    for row in rows:
        found = {f.kind for f in detect(row["text"])}
        labelled = set(row["kinds"])
        for kind in KINDS:
            if kind in found and kind in labelled:
                scores[kind].tp += 1
            elif kind in found:
                scores[kind].fp += 1
            elif kind in labelled:
                scores[kind].fn += 1
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="holdout", choices=["dev", "holdout", "all"])
    args = parser.parse_args()
    rows = load(args.split)
    scores = evaluate(rows)
    print(f"split={args.split} lines={len(rows)}")
    print(f"{'kind':<12} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>9} {'recall':>7}")
    for kind, s in scores.items():
        print(f"{kind:<12} {s.tp:>4} {s.fp:>4} {s.fn:>4} {s.precision:>9.3f} {s.recall:>7.3f}")


if __name__ == "__main__":
    main()
