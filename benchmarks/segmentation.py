"""Sentence segmentation (``memory_core.sentences.split_sentences``) on the blind set.

    python benchmarks/segmentation.py            # per split and kind: exact sentence lists
    python benchmarks/segmentation.py --misses dev
    python benchmarks/segmentation.py --locomo   # LoCoMo's questions sent as chat turns

``--locomo``: how many of the LoCoMo questions (``LOCOMO_PATH`` or the shared set), each sent
alone as a user's chat message, leave a memory (``extract_turn``; a question should leave
none), and which.

``tests/segmentation_set/blind_2026_12_07.jsonl`` (see its README): each message's sentences as
a careful reader cuts them. A message counts when the whole list is exact. Split by the parity
of the first byte of each text's SHA-256 (``split_of``), fixed before the rules were written;
the holdout is the figure to quote.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.sentences import split_sentences  # noqa: E402

DATA = ROOT / "tests" / "segmentation_set" / "blind_2026_12_07.jsonl"


def rows() -> list[dict]:
    """The labelled messages: ``{"lang", "text", "sentences", "kind"}`` each."""
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def split_of(row: dict) -> str:
    """``dev`` or ``holdout``: the parity of the first byte of the text's SHA-256."""
    return "dev" if hashlib.sha256(row["text"].encode("utf-8")).digest()[0] % 2 == 0 else "holdout"


def score(split: str) -> dict[str, tuple[int, int]]:
    """``{kind: (exact, n)}`` of ``split``'s messages, ``"all"`` included."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows():
        if split_of(row) != split:
            continue
        ok = split_sentences(row["text"]) == row["sentences"]
        for kind in (row["kind"], "all"):
            out[kind][0] += ok
            out[kind][1] += 1
    return {kind: (ok, n) for kind, (ok, n) in sorted(out.items())}


def locomo_questions_stored() -> list[tuple[str, list[str]]]:
    """(question, the memories its chat turn leaves) for each LoCoMo question that leaves any."""
    import os

    from memory_core.chat.extract import extract_turn
    from memory_core.locomo import load_samples

    questions = [q["question"] for s in load_samples(os.environ.get("LOCOMO_PATH")) for q in s.get("qa", [])]
    out = []
    for q in questions:
        memories = extract_turn([{"role": "user", "content": q}], q, window_every=0).memories
        if memories:
            out.append((q, [m.content for m in memories]))
    return out


def main() -> None:
    if sys.argv[1:] == ["--locomo"]:
        stored = locomo_questions_stored()
        print(f"LoCoMo questions that leave a memory as a chat turn: {len(stored)}")
        for q, memories in stored:
            print(f"  {q!r} -> {memories}")
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--misses":
        for row in rows():
            if split_of(row) == sys.argv[2] and split_sentences(row["text"]) != row["sentences"]:
                print(f"{row['kind']}: {row['text']!r}\n  got {split_sentences(row['text'])}")
        return
    for split in ("dev", "holdout"):
        figures = ", ".join(f"{kind} {ok}/{n}" for kind, (ok, n) in score(split).items())
        print(f"{split}: {figures}")


if __name__ == "__main__":
    main()
