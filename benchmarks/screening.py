"""Screening (``memory_core.curation.screening.screen``) on the labelled set: recall of
injections and false-positive rate on benign texts, per split and per language.

Data: ``tests/screening_set/labelled.jsonl`` (hand-written for this project, see the README
beside it), lines ``{"text", "label": "injection"|"benign", "lang", "kind", "split"}``. The
rules were written looking at ``dev`` only; ``holdout`` is the measure.

    python benchmarks/screening.py              # the table
    python benchmarks/screening.py --misses     # also every miss and false positive (dev only,
                                                # unless --all: looking at holdout misses to
                                                # write rules would spoil it)

Printed per split: injections caught / total (recall), benign flagged / total (FPR); then
per language and per kind for each split. Pure Python, a second or two.

``--guardify`` measures, beside the rules, the one offline prompt-injection classifier found
whose weights ship inside its PyPI package: ``prompt-guardrail`` (import ``guardify``, a
TF-IDF + logistic regression, pickled; not a dependency of this project: install it apart,
e.g. ``pip install --no-deps --target /tmp/pg prompt-guardrail`` and ``PYTHONPATH=/tmp/pg``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memory_core.curation.screening import screen  # noqa: E402

DATA = ROOT / "tests" / "screening_set" / "labelled.jsonl"


def load(path: Path = DATA) -> list[dict]:
    """The labelled rows of ``path`` (JSON lines)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rules(text: str) -> bool:
    """True when screening flags ``text``."""
    return screen(text) is not None


def measure(rows: list[dict], key: str = "split", flags=rules) -> dict[str, dict[str, list[int]]]:
    """``{group: {"injection": [caught, total], "benign": [flagged, total]}}``, grouped by
    ``row[key]`` (``split``, ``lang``, ``kind``); ``flags(text)`` says whether a text is
    flagged (default: the screening rules)."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"injection": [0, 0], "benign": [0, 0]})
    for row in rows:
        cell = out[row[key]][row["label"]]
        cell[0] += bool(flags(row["text"]))
        cell[1] += 1
    return dict(out)


def _fmt(cell: list[int]) -> str:
    hit, total = cell
    return f"{hit:>3}/{total:<3} {hit / total:6.1%}" if total else "   -          "


def table(rows: list[dict], key: str, title: str, flags=rules) -> None:
    """Print recall and FPR of ``flags`` on ``rows`` grouped by ``key``."""
    print(f"\n{title}")
    print(f"  {'':18} {'recall (injections)':>22} {'FPR (benign)':>18}")
    for group, cells in sorted(measure(rows, key, flags).items()):
        print(f"  {group:18} {_fmt(cells['injection']):>22} {_fmt(cells['benign']):>18}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--misses", action="store_true", help="print dev misses and false positives")
    parser.add_argument("--all", action="store_true", help="with --misses: holdout too")
    parser.add_argument("--guardify", action="store_true", help="also the prompt-guardrail classifier")
    args = parser.parse_args()
    rows = load(args.data)
    table(rows, "split", f"screening on {args.data.name}: {len(rows)} texts")
    for split in ("dev", "holdout", "fresh"):
        part = [r for r in rows if r["split"] == split]
        table(part, "lang", f"{split} by language")
        table(part, "kind", f"{split} by kind")
    if args.guardify:
        from guardify import detect  # prompt-guardrail, installed apart (module docstring)

        def classifier(text: str) -> bool:
            return detect(text)["label"] == "injection"

        table(rows, "split", "prompt-guardrail (guardify) classifier", classifier)
        table(rows, "split", "rules or classifier", lambda t: rules(t) or classifier(t))
    if args.misses:
        print("\nmisses (injection not caught) and false positives (benign flagged):")
        for row in rows:
            if row["split"] != "dev" and not args.all:
                continue
            reason = screen(row["text"])
            if (reason is None) == (row["label"] == "injection"):
                print(f"  {row['split']:7} {row['label']:9} {row['lang']} {reason or '-':17} {row['text']!r}")


if __name__ == "__main__":
    main()
