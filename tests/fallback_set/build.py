"""Writes ``labelled.jsonl`` and ``distractors.jsonl`` from ``pairs.py``.

``labelled.jsonl``: one row per pair, ``{id, lang, memory, memory_en, query, query_en,
split}`` (``memory_en``, ``query_en``: the memory and the question in English; for an English
pair the texts themselves). ``distractors.jsonl``: ``{id, lang, memory, memory_en}``, memories
no question asks for. The dev/holdout
split (``split_of``: the parity of a seeded SHA-256 of the pair) was fixed when this file was
first run, before the fallback was wired or measured; the holdout is only ever measured
(``python benchmarks/fallback.py --split holdout``), never read to choose anything.
Provenance and licence: ``README.md`` beside this file.

    python tests/fallback_set/build.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pairs  # noqa: E402

SEED = "fallback-set-2026-12-04"
LANGS = {
    "th": pairs.TH,
    "lo": pairs.LO,
    "km": pairs.KM,
    "am": pairs.AM,
    "ka": pairs.KA,
    "si": pairs.SI,
    "my": pairs.MY,
    "ta": pairs.TA,
}


def split_of(lang: str, memory: str, query: str) -> str:
    """``dev`` or ``holdout``: the parity of a seeded SHA-256 of the pair."""
    digest = hashlib.sha256(f"{SEED}\x00{lang}\x00{memory}\x00{query}".encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "holdout"


def rows() -> list[dict]:
    """Every pair as a row; raises ``ValueError`` on an id, memory or question written twice."""
    out = []
    for lang, items in LANGS.items():
        out += [
            {"id": i, "lang": lang, "memory": m, "memory_en": pairs.MEMORY_EN[i], "query": q, "query_en": e}
            for i, m, q, e in items
        ]
    out += [
        {"id": i, "lang": "en", "memory": m, "memory_en": m, "query": q, "query_en": q}
        for i, m, q in [*pairs.EN, *pairs.EN_MORE]
    ]
    for field in ("id", "memory", "query"):
        seen = [r[field] for r in out]
        if len(set(seen)) != len(seen):
            raise ValueError(f"a {field} is written twice")
    for r in out:
        if not r["id"].startswith(r["lang"]):
            raise ValueError(f"id {r['id']} is not of language {r['lang']}")
        r["split"] = split_of(r["lang"], r["memory"], r["query"])
    return out


def distractors() -> list[dict]:
    """The distractor memories as rows ``{id, lang, memory, memory_en}``; raises ``ValueError``
    on one that is also a pair's memory, or a language whose English versions do not match."""
    memories = {r["memory"] for r in rows()}
    out = []
    counts: dict[str, int] = {}
    for lang, memory in pairs.DISTRACTORS:
        if memory in memories:
            raise ValueError(f"distractor is a pair's memory: {memory}")
        counts[lang] = counts.get(lang, 0) + 1
        english = memory if lang == "en" else pairs.DISTRACTORS_EN[lang][counts[lang] - 1]
        out.append({"id": f"{lang}-d{counts[lang]:02d}", "lang": lang, "memory": memory, "memory_en": english})
    for lang, english in pairs.DISTRACTORS_EN.items():
        if len(english) != counts.get(lang, 0):
            raise ValueError(f"{lang}: {len(english)} English distractors for {counts.get(lang, 0)}")
    return out


def main() -> None:
    for name, data in (("labelled.jsonl", rows()), ("distractors.jsonl", distractors())):
        path = HERE / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
        print(f"wrote {path} ({len(data)} rows)")


if __name__ == "__main__":
    main()
