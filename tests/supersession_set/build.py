"""Writes ``labelled.jsonl``: labelled pairs of one user's statements (old, then new).

Provenance: written by hand for memory-router on 2026-12-02, by kind of fact (places, jobs,
relations, numbers, dates, preferences, tools, health, schedules, negations, plans cancelled
or done) and in six languages (``pairs_en.py``, ``pairs_other.py``); the ``locomo`` kind takes
its old statements verbatim from the turns of the LoCoMo conversations in ``../shared``
(Maharana et al. 2024, CC BY-NC 4.0) and adds a new statement to each. None was written
from the judge's rules or its tests. The dev/holdout split (``split_of``, a seeded hash of
the pair) was fixed when the set was written, before its first measurement; the holdout is
only ever measured (``python benchmarks/contradictions.py --data tests/supersession_set/labelled.jsonl
--split holdout``), never read to write rules. Licence: the project's own, except the
LoCoMo sentences (CC BY-NC 4.0).

Labels: ``supersedes`` (the new statement makes the old one no longer true), ``duplicate``
(the same fact), ``refinement`` (the same fact with more detail), ``compatible`` (both true).

    python tests/supersession_set/build.py   # writes labelled.jsonl and blind*.jsonl
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pairs_en import PAIRS as EN  # noqa: E402
from pairs_other import PAIRS as OTHER  # noqa: E402

SEED = "supersession-set-2026-12-02"
LABELS = ("supersedes", "duplicate", "refinement", "compatible")


def split_of(old: str, new: str) -> str:
    """``dev`` or ``holdout``: the parity of a seeded SHA-256 of the pair."""
    digest = hashlib.sha256(f"{SEED}\x00{old}\x00{new}".encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "holdout"


def rows() -> list[dict]:
    """Every pair as a row ``{old, new, label, lang, kind, split}``; raises ``ValueError`` on
    an unknown label or a pair written twice."""
    out = [{"lang": "en", "kind": k, "label": lab, "old": o, "new": n} for k, lab, o, n in EN]
    out += [{"lang": lang, "kind": k, "label": lab, "old": o, "new": n} for lang, k, lab, o, n in OTHER]
    seen: set[tuple[str, str]] = set()
    for row in out:
        if row["label"] not in LABELS:
            raise ValueError(f"unknown label {row['label']!r}")
        key = (row["old"], row["new"])
        if key in seen:
            raise ValueError(f"pair written twice: {key}")
        seen.add(key)
        row["split"] = split_of(row["old"], row["new"])
    return out


BLIND_SETS = {
    "blind.jsonl": "blind_2026_12_05",
    "blind_b.jsonl": "blind_2026_12_05b",
    "blind_c.jsonl": "blind_2026_12_05c",
    "blind_d.jsonl": "blind_2026_12_05d",
    "blind_e.jsonl": "blind_2026_12_05e",
    "blind_f.jsonl": "blind_2026_12_05f",
}
"""Sets written blind on 2026-12-05 (output file → module), each by a writer who had read
neither the rules nor any pair above nor the other blind sets: ``blind`` (set A) replaced
the holdout above, retired after its seventh measurement, and was itself retired into the
second opinion's training after it was measured once; ``blind_b`` (set B) replaced it and
was retired after its second measurement; ``blind_c`` (set C, asked for hard compatible
pairs) after its first, which showed the second opinion losing compatible memories that
cross-validation on one writer's pairs had hidden; ``blind_d`` (set D) after its second (a
review then found that the first had measured rules that read other people's names as the
speaker's); ``blind_e`` (set E) after its second (the first on the round-4 code, the
second after round 5's rules, before its pairs were read); ``blind_f`` (set F) is the one
not yet read."""


def blind_rows(module: str) -> list[dict]:
    """The pairs of the blind set ``module`` (one of ``BLIND_SETS``) as rows with ``split``
    ``blind``. A pair also in ``labelled.jsonl`` (the same two statements) is left out: it
    was not written blind. Raises ``ValueError`` as ``rows`` does."""
    pairs = importlib.import_module(module).PAIRS
    known = {(r["old"], r["new"]) for r in rows()}
    out = [
        {"lang": a, "kind": k, "label": lab, "old": o, "new": n, "split": "blind"}
        for a, k, lab, o, n in pairs
        if (o, n) not in known
    ]
    seen: set[tuple[str, str]] = set()
    for row in out:
        key = (row["old"], row["new"])
        if row["label"] not in LABELS:
            raise ValueError(f"unknown label {row['label']!r}")
        if key in seen:
            raise ValueError("a blind pair written twice")
        seen.add(key)
    print(f"{module}: {len(pairs) - len(out)} of {len(pairs)} pairs left out (also in labelled.jsonl)")
    return out


def main() -> None:
    outputs = [(HERE / "labelled.jsonl", rows())]
    outputs += [(HERE / name, blind_rows(module)) for name, module in BLIND_SETS.items()]
    for path, data in outputs:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
        print(f"wrote {path} ({len(data)} pairs)")


if __name__ == "__main__":
    main()
