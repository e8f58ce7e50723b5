"""``embedding.fallback``: fit its cosine calibration, and measure what it finds.

``--fit`` writes the shipped calibration of (``--model``, ``--fallback``)
(``memory_core/embedding/calibrations/<model>__<fallback>.json``, ``FallbackCalibration``):
per script, linear equating of the fallback's cosines onto the configured model's, single-group
design, over the **dev** split of ``tests/fallback_set`` (the project's own): every pair of a
dev question and a dev memory or distractor of that script (related or not), the fallback
reading the script's texts (question as ``query:``, memory as ``passage:``), the configured
model reading their English versions (``query_en``, ``memory_en``). A script gets its own table
with at least ``MIN_FIT_PAIRS`` pairs and ``MIN_FIT_RELATED`` related ones; the pooled table
(``"*"``, every script's pairs) serves the others. The file records both models' identity
digests; the service refuses it for other files.

The default mode measures, on ``tests/fallback_set`` (180 pairs in eight scripts and English,
38 distractor memories), recall@1 and @5 of each pair's memory for its question, per split,
with the fallback off and on, through the service's own store stack in process
(``make_store``: in-memory backend, ``HybridStore`` with the default retrieval settings, no
curation; MiniLM's tokenizer coverage; the fallback as ``open_fallback`` loads it). Users:
per script one user holding that script's memories and distractors and every English memory
and distractor (``--layouts per-script``), or one user holding everything (``one``).
Questions: the pair's own (``native``; English pairs are asked in every script's user), and for
the non-English pairs the English question (``english``: cross-lingual). Modes: ``off`` (no
fallback: such memories are found lexically or not at all), ``unrepresentable`` (the fallback
embeds the searches MiniLM cannot represent: the shipped behaviour) and ``all`` (it embeds
every search of a user holding fallback vectors: measured to decide between the two); the
three modes take turns at every search, build and write (their order rotated), so their times
are measured under the same load: a user's index build until its fallback vectors are made,
one search (p50/p95 over the questions, sequential, this process; the MiniLM query vector is
given in every mode, so the difference is the fallback's query embedding) and one write of a
memory MiniLM cannot represent; a write through curation (the service's default: its
candidate search of such a memory is embedded by the fallback too). Then the floor check
(``--floor-check``): per script, the share of related and of unrelated (question, memory)
pairs of the split whose calibrated similarity reaches the injection floor (0.425), beside
MiniLM's on their English versions.

    PYTHONPATH=. python benchmarks/fallback.py --fit
    PYTHONPATH=. python benchmarks/fallback.py --split dev
    PYTHONPATH=. python benchmarks/fallback.py --split holdout --floor-check    # the README's figures
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.config import (  # noqa: E402
    DEFAULT_SIMILARITY_THRESHOLD,
    EmbeddingSettings,
    FallbackModelSettings,
    MemoryStoreSettings,
    RetrievalSettings,
)
from memory_core.embedding import TokenizerCoverage, compute_identity, local_encoder  # noqa: E402
from memory_core.embedding.fallback import (  # noqa: E402
    POOLED,
    CosineCalibration,
    FallbackCalibration,
    FallbackModel,
    calibration_path,
    load_calibration,
    script_of,
)
from memory_core.stores.factory import make_store  # noqa: E402
from memory_core.stores.hybrid import HybridStore  # noqa: E402
from memory_core.types import Memory, RetrieveOptions  # noqa: E402

SERVICE_RANKING = {k: v for k, v in RetrievalSettings().ranking_options().items() if k in ("second_hop", "diversity")}
"""The second hop and diversity as the service's searches ask for them (the default settings)."""

MODEL = "bundled:all-MiniLM-L6-v2"
FALLBACK = "bundled:multilingual-e5-small"
SET_DIR = ROOT / "tests" / "fallback_set"
MIN_FIT_PAIRS = 30
"""Fewest (question, memory) pairs a script's own table is fitted on."""
MIN_FIT_RELATED = 3
"""Fewest related pairs (dev questions) a script's own table is fitted on."""
MODES = ("off", "unrepresentable", "all")


# --------------------------------------------------------------------------- fit
def script_pairs(
    pairs: list[dict], distractors: list[dict], lang: str, split: str
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], np.ndarray]:
    """Every (question, memory) of ``lang`` in ``split`` (memories: the split's pairs' and the
    language's distractors): ``(native texts, English texts, related mask)``, one entry per
    pair of texts, questions first."""
    questions = [r for r in pairs if r["lang"] == lang and r["split"] == split]
    memories = questions + [d for d in distractors if d["lang"] == lang]
    native = [(q["query"], m["memory"]) for q in questions for m in memories]
    english = [(q["query_en"], m["memory_en"]) for q in questions for m in memories]
    related = np.array([q["id"] == m["id"] for q in questions for m in memories], dtype=bool)
    return native, english, related


def cosines(encoder, pairs_of_texts: list[tuple[str, str]]) -> np.ndarray:
    """Cosine of each (search, stored text) with ``encoder`` (the search with ``query=True``):
    float ``[n]``."""
    if not pairs_of_texts:
        return np.zeros(0)
    queries = sorted({q for q, _ in pairs_of_texts})
    stored = sorted({m for _, m in pairs_of_texts})
    qv = dict(zip(queries, encoder.encode(queries, query=True).vectors, strict=True))
    mv = dict(zip(stored, encoder.encode(stored).vectors, strict=True))
    return np.array([float(np.dot(qv[q], mv[m])) for q, m in pairs_of_texts])


def language_script(pairs: list[dict], lang: str) -> str:
    """The one script (``script_of``) of every text of ``lang``; raises ``SystemExit`` when
    its texts are in several."""
    scripts = {script_of(t) for r in pairs if r["lang"] == lang for t in (r["memory"], r["query"])}
    if len(scripts) != 1:
        raise SystemExit(f"{lang}: texts in several scripts {sorted(scripts)}")
    return scripts.pop()


def fit(model: str, fallback: str, threads: int) -> None:
    primary_settings = EmbeddingSettings(model=model, device="cpu")
    fallback_settings = FallbackModelSettings(model=fallback).as_embedding()
    primary = local_encoder(primary_settings, num_threads=threads)
    second = local_encoder(fallback_settings, num_threads=threads)
    pairs, distractors = load_set()
    tables: dict[str, CosineCalibration] = {}
    pooled_x, pooled_y = [], []
    langs = sorted({r["lang"] for r in pairs} - {"en"})
    for lang in langs:
        native, english, related = script_pairs(pairs, distractors, lang, "dev")
        x, y = cosines(second, native), cosines(primary, english)
        pooled_x.append(x)
        pooled_y.append(y)
        script = language_script(pairs, lang)
        own = len(x) >= MIN_FIT_PAIRS and int(related.sum()) >= MIN_FIT_RELATED
        if own:
            tables[script] = CosineCalibration.linear(x, y)
        print(
            f"  {lang} {script:9s} {len(x):4d} pairs ({int(related.sum())} related): "
            + (f"own table {tables[script].primary_knots}" if own else "too few: the pooled table")
        )
    tables[POOLED] = CosineCalibration.linear(np.concatenate(pooled_x), np.concatenate(pooled_y))
    cal = FallbackCalibration(
        tuple(sorted(tables.items())),
        model=model,
        fallback=fallback,
        identities=(
            ("fallback", compute_identity(fallback_settings).digest),
            ("model", compute_identity(primary_settings).digest),
        ),
        source=(
            "tests/fallback_set, dev split: per script every (question, memory or distractor) pair, "
            "the fallback on the script's texts, the model on their English versions; linear equating"
        ),
    )
    path = calibration_path(model, fallback)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cal.to_json() + "\n", encoding="utf-8")
    print(f"wrote {path}: tables {', '.join(s for s, _ in cal.tables)}")


# --------------------------------------------------------------------------- measure
def load_set() -> tuple[list[dict], list[dict]]:
    """(pairs, distractors) of ``tests/fallback_set``."""

    def read(name: str) -> list[dict]:
        text = (SET_DIR / name).read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    return read("labelled.jsonl"), read("distractors.jsonl")


def users_of(pairs: list[dict], distractors: list[dict], layout: str) -> dict[str, list[tuple[str, str]]]:
    """user → [(memory id, text)]: per script (that script's memories, and every English one)
    or one user holding everything."""
    items = [(r["id"], r["lang"], r["memory"]) for r in pairs] + [
        (d["id"], d["lang"], d["memory"]) for d in distractors
    ]
    if layout == "one":
        return {"everyone": [(i, t) for i, _, t in items]}
    scripts = sorted({lang for _, lang, _ in items} - {"en"})
    return {s: [(i, t) for i, lang, t in items if lang in (s, "en")] for s in scripts}


def memory_id(user: str, item: str) -> str:
    """The 32-hex memory id of ``item`` (a pair or distractor id) in ``user``'s store."""
    return hashlib.blake2b(f"{user}:{item}".encode(), digest_size=16).hexdigest()


class Vectors:
    """MiniLM vectors of every text of the set, computed once (memories as stored text,
    questions as searches)."""

    def __init__(self, encoder, texts: list[str]):
        unique = sorted(set(texts))
        vecs = encoder.encode(unique).vectors
        self.of = {t: v.tolist() for t, v in zip(unique, vecs, strict=True)}

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.of[t] for t in texts]


async def run_modes(
    users: dict[str, list[tuple[str, str]]],
    questions: list[tuple[str, str, str, str, str]],
    vectors: Vectors,
    coverage: TokenizerCoverage | None,
    fallback: FallbackModel,
) -> dict[str, tuple[dict, dict[str, list[float]]]]:
    """Per mode (``MODES``), recall per (kind, lang) and times (ms): ``build`` (a user's first
    search, which builds the index, until its fallback vectors are all made), ``search`` of a
    question the model can / cannot represent, ``write`` of one memory it cannot represent
    (after the searches: the stored texts are the user's questions). One store per mode, the
    modes taking turns at every step (their order rotated), so the machine's load falls on
    them alike. ``questions``: (user, pair id, lang, kind, text)."""
    settings = MemoryStoreSettings(backend="inmemory", curation={"enabled": False})
    stores: dict[str, HybridStore] = {}
    for mode in MODES:
        store = make_store(
            settings,
            embed=vectors.embed,
            dimension=384,
            represents=coverage.represents if coverage is not None else None,
            fallback=fallback if mode != "off" else None,
        )
        assert isinstance(store, HybridStore)  # curation off: the hybrid store is outermost
        store.fallback_queries = "all" if mode == "all" else "unrepresentable"
        stores[mode] = store
    times: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in MODES}
    hits: dict[str, dict[tuple[str, str], list[tuple[bool, bool]]]] = {m: defaultdict(list) for m in MODES}
    step = 0

    def turns() -> list[str]:
        nonlocal step
        step += 1
        k = step % len(MODES)
        return [*MODES[k:], *MODES[:k]]

    for user, memories in users.items():
        for mode in turns():
            store = stores[mode]
            await store.store_many([Memory(id=memory_id(user, i), user_id=user, content=t) for i, t in memories])
            warm = RetrieveOptions(
                user_id=user, query="warm up", embedding=vectors.of[memories[0][1]], hybrid=True, limit=1
            )
            started = time.perf_counter()
            await store.retrieve(warm)  # builds the user's index
            await store.fallback_settled(user)
            times[mode]["build"].append((time.perf_counter() - started) * 1000)
    represents = coverage.represents if coverage is not None else (lambda _t: True)
    for user, pair_id, lang, kind, text in questions:
        options = RetrieveOptions(
            user_id=user,
            query=text,
            embedding=(await vectors.embed([text]))[0],
            hybrid=True,
            limit=5,
            **SERVICE_RANKING,
        )
        for mode in turns():
            started = time.perf_counter()
            results = await stores[mode].retrieve(options)
            elapsed = (time.perf_counter() - started) * 1000
            times[mode]["search, represented" if represents(text) else "search, unrepresentable"].append(elapsed)
            ranked = [r.memory.id for r in results]
            target = memory_id(user, pair_id)
            hits[mode][(kind, lang)].append((ranked[:1] == [target], target in ranked))
    for n, (user, _, _, kind, text) in enumerate(questions):
        if kind == "native" and not represents(text):
            for mode in turns():
                started = time.perf_counter()
                await stores[mode].store(Memory(id=memory_id(user, f"written-{n}"), user_id=user, content=text))
                times[mode]["write, unrepresentable"].append((time.perf_counter() - started) * 1000)
    for store in stores.values():
        await store.close()
    return {m: (hits[m], times[m]) for m in MODES}


def questions_of(pairs: list[dict], users: dict[str, list[tuple[str, str]]], split: str, layout: str) -> list:
    """(user, pair id, lang, kind, text) of the split's pairs: the native question in the
    user(s) holding the memory (an English pair in every user), and the English question of
    a non-English pair."""
    out = []
    for r in pairs:
        if r["split"] != split:
            continue
        holders = [u for u, ms in users.items() if any(i == r["id"] for i, _ in ms)]
        for user in holders:
            out.append((user, r["id"], r["lang"], "native", r["query"]))
            if r["lang"] != "en":
                out.append((user, r["id"], r["lang"], "english", r["query_en"]))
    return out


def summarise(hits: dict) -> dict[str, tuple[float, float, int]]:
    """(kind/lang group) → (recall@1, recall@5, n)."""
    groups: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for (kind, lang), hs in hits.items():
        groups[f"{kind} {lang}"].extend(hs)
        if lang == "en":
            groups[f"{kind} English pairs"].extend(hs)
        else:
            groups[f"{kind} non-English pairs"].extend(hs)
    return {g: (sum(a for a, _ in hs) / len(hs), sum(b for _, b in hs) / len(hs), len(hs)) for g, hs in groups.items()}


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def measure(args) -> None:
    pairs, distractors = load_set()
    primary_settings = EmbeddingSettings(model=args.model, device="cpu")
    coverage = TokenizerCoverage.from_settings(primary_settings)
    texts = [r["memory"] for r in pairs] + [d["memory"] for d in distractors]
    questions_all = [r["query"] for r in pairs] + [r["query_en"] for r in pairs]
    if coverage is not None:
        by_lang: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in pairs:
            c = by_lang[r["lang"]]
            c[0] += 1
            c[1] += not coverage.represents(r["memory"])
            c[2] += not coverage.represents(r["query"])
        print("unrepresentable by the model (memories / questions of the pairs):")
        print("  " + ", ".join(f"{lang} {m}/{n} {q}/{n}" for lang, (n, m, q) in sorted(by_lang.items())))
    primary = local_encoder(primary_settings, num_threads=args.threads)
    vectors = Vectors(primary, texts + questions_all)
    from memory_core.embedding.fallback import open_fallback

    fallback = open_fallback(
        primary_settings.model_copy(update={"fallback": FallbackModelSettings(model=args.fallback)})
    )
    assert fallback is not None
    splits = ("dev", "holdout") if args.split == "both" else (args.split,)
    for layout in args.layouts.split(","):
        users = users_of(pairs, distractors, layout)
        sizes = ", ".join(f"{u} {len(ms)}" for u, ms in users.items())
        print(f"\nlayout {layout}: memories per user: {sizes}")
        for split in splits:
            questions = questions_of(pairs, users, split, layout)
            results = {
                mode: (summarise(hits), times)
                for mode, (hits, times) in (await run_modes(users, questions, vectors, coverage, fallback)).items()
            }
            print(f"  split {split}: recall@1 / recall@5 (n) by mode {' | '.join(MODES)}")
            for group in sorted(results["off"][0], key=lambda g: (g.split()[0], "English" in g, g)):
                cells = " | ".join(f"{results[m][0][group][0]:.3f} / {results[m][0][group][1]:.3f}" for m in MODES)
                print(f"    {group:28s} n={results['off'][0][group][2]:3d}  {cells}")
            for what in sorted(results["off"][1]):
                print(f"    {what} ms (n={len(results['off'][1][what])}), p50 / p95 by mode:", end="")
                for mode in MODES:
                    t = results[mode][1][what]
                    print(f"  {mode} {percentile(t, 50):.2f} / {percentile(t, 95):.2f}", end="")
                print()
    await curated_writes(pairs, splits, vectors, coverage, fallback)
    if args.floor_check:
        for split in splits:
            floor_check(pairs, distractors, split, fallback, primary)


async def curated_writes(
    pairs: list[dict], splits: tuple[str, ...], vectors: Vectors, coverage: TokenizerCoverage | None, fallback
) -> None:
    """The time of a write through curation (``make_store``'s defaults: ``CuratingStore``,
    whose candidate search of a memory MiniLM cannot represent is embedded by the fallback
    too) of each non-English memory of the splits into one user, without and with the
    fallback, taking turns (ms, p50/p95)."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    stores = {
        mode: make_store(
            MemoryStoreSettings(backend="inmemory"),
            embed=vectors.embed,
            dimension=384,
            identity="bench",
            represents=coverage.represents if coverage is not None else None,
            fallback=fallback if mode == "on" else None,
        )
        for mode in times
    }
    rows = [r for r in pairs if r["lang"] != "en" and r["split"] in splits]
    for store in stores.values():  # builds the user's index
        await store.retrieve(
            RetrieveOptions(user_id="w", query="x", embedding=vectors.of[rows[0]["memory"]], hybrid=True)
        )
    for n, r in enumerate(rows):
        for mode in ("off", "on") if n % 2 else ("on", "off"):
            started = time.perf_counter()
            await stores[mode].write([Memory(id=memory_id("w", r["id"]), user_id="w", content=r["memory"])])
            times[mode].append((time.perf_counter() - started) * 1000)
    for store in stores.values():
        await store.close()
    print(
        f"\nwrite through curation of a non-English memory (n={len(rows)}), p50 / p95 ms: "
        + "  ".join(f"{m} {percentile(t, 50):.1f} / {percentile(t, 95):.1f}" for m, t in times.items())
    )


def floor_check(pairs: list[dict], distractors: list[dict], split: str, fallback: FallbackModel, primary) -> None:
    """Per script, the share of the split's related and unrelated (question, memory) pairs
    whose calibrated fallback similarity reaches the floor, beside the configured model's on
    the English versions of the same pairs: what the floor means on each side."""
    floor = DEFAULT_SIMILARITY_THRESHOLD
    print(f"\nfloor check, split {split}: share of pairs at or above {floor} (related n / unrelated n)")
    print("  script     fallback calibrated: related  unrelated | model on the English versions: related  unrelated")
    for lang in sorted({r["lang"] for r in pairs} - {"en"}):
        native, english, related = script_pairs(pairs, distractors, lang, split)
        if not related.any():
            continue
        scale = fallback.scale_for(native[0][0])
        calibrated = np.array([scale(c) for c in cosines(fallback.encoder, native)])
        english_cos = cosines(primary, english)
        counts = f"{lang} ({int(related.sum())} / {int((~related).sum())})"
        print(
            f"  {counts:14s}{np.mean(calibrated[related] >= floor):22.2f} {np.mean(calibrated[~related] >= floor):10.3f} |"
            f"{np.mean(english_cos[related] >= floor):38.2f} {np.mean(english_cos[~related] >= floor):10.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="write the calibration file, then stop")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--fallback", default=FALLBACK)
    ap.add_argument("--split", choices=("dev", "holdout", "both"), default="holdout")
    ap.add_argument("--layouts", default="per-script,one", help="per-script, one, or both comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="threads of the MiniLM encoder here")
    ap.add_argument("--floor-check", action="store_true", help="also print what the floor passes per script")
    args = ap.parse_args()
    if args.fit:
        fit(args.model, args.fallback, args.threads)
        return
    load_calibration(args.model, args.fallback)  # fails early without a fit
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
