"""``embedding.fallback``: fit its cosine calibration, and measure what it finds.

``--fit`` writes the shipped calibration of (``--model``, ``--fallback``)
(``memory_core/embedding/calibrations/<model>__<fallback>.json``, ``CosineCalibration.fit``):
equipercentile equating of the fallback's cosines onto the configured model's over the English
pairs of ``tests/supersession_set/labelled.jsonl`` (written for this project, its licence; the
``locomo`` kind, whose old statements are LoCoMo turns, left out): each pair as written (old
statement stored, new one searched: e5 embeds them as ``passage:`` / ``query:``) and as many
shuffled pairs (each old statement with another pair's new one, a seeded derangement), so the
map spans related and unrelated text. Both models represent every text used (checked). The
file records both models' identity digests; the service refuses it for other files.

The default mode measures, on ``tests/fallback_set`` (180 pairs in eight scripts and English,
38 distractor memories), recall@1 and @5 of each pair's memory for its question, per split,
with the fallback off and on, through the service's own store stack in process
(``make_store``: in-memory backend, ``HybridStore`` with the default retrieval settings, no
curation; MiniLM's tokenizer coverage; the fallback as ``open_fallback`` loads it). Users:
per script one user holding that script's memories and distractors and every English memory
and distractor (``--layout per-script``), or one user holding everything (``--layout one``).
Questions: the pair's own (``native``; English pairs are asked in every script's user), and for
the non-English pairs the English question (``english``: cross-lingual). Modes: ``off`` (no
fallback: such memories are found lexically or not at all), ``unrepresentable`` (the fallback
embeds the searches MiniLM cannot represent: the shipped behaviour) and ``all`` (it embeds
every search of a user holding fallback vectors: measured to decide between the two). Also the
time of a search with and without the fallback's query embedding (p50/p95 over the pairs'
questions, sequential, this process; the MiniLM query embedding is given as a vector for every
mode, so the difference is the fallback's), and the fit's check (the calibrated e5 cosine of
each related pair against the MiniLM one, English pairs of the fit; e5's cosines of the
fallback set's own pairs per script beside its English ones).

    PYTHONPATH=. python benchmarks/fallback.py --fit
    PYTHONPATH=. python benchmarks/fallback.py --split dev
    PYTHONPATH=. python benchmarks/fallback.py --split holdout      # the README's figures
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.config import EmbeddingSettings, FallbackModelSettings, MemoryStoreSettings  # noqa: E402
from memory_core.embedding import TokenizerCoverage, compute_identity, local_encoder  # noqa: E402
from memory_core.embedding.fallback import (  # noqa: E402
    CosineCalibration,
    FallbackModel,
    calibration_path,
    load_calibration,
)
from memory_core.stores.factory import make_store  # noqa: E402
from memory_core.stores.hybrid import HybridStore  # noqa: E402
from memory_core.types import Memory, RetrieveOptions  # noqa: E402

MODEL = "bundled:all-MiniLM-L6-v2"
FALLBACK = "bundled:multilingual-e5-small"
FIT_DATA = ROOT / "tests" / "supersession_set" / "labelled.jsonl"
SET_DIR = ROOT / "tests" / "fallback_set"
SHUFFLE_SEED = 20261204
MODES = ("off", "unrepresentable", "all")


# --------------------------------------------------------------------------- fit
def fit_pairs(path: Path = FIT_DATA) -> tuple[list[str], list[str], list[str], list[str]]:
    """(old, new) texts of the related English pairs, then of as many shuffled ones (old i
    with new σ(i), σ a seeded derangement): ``(rel_old, rel_new, shuf_old, shuf_new)``."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r["lang"] == "en" and r["kind"] != "locomo"]
    old, new = [r["old"] for r in rows], [r["new"] for r in rows]
    rng = random.Random(SHUFFLE_SEED)
    order = list(range(len(rows)))
    while True:
        rng.shuffle(order)
        if all(i != j for i, j in enumerate(order)):
            break
    return old, new, old, [new[j] for j in order]


def pair_cosines(encoder, olds: list[str], news: list[str]) -> np.ndarray:
    """Cosine of each (old as stored text, new as a search) with ``encoder``: float ``[n]``."""
    a = encoder.encode(olds).vectors
    b = encoder.encode(news, query=True).vectors
    return np.einsum("ij,ij->i", a, b).astype(float)


def fit(model: str, fallback: str, knots: int, threads: int) -> None:
    primary_settings = EmbeddingSettings(model=model, device="cpu")
    fallback_settings = FallbackModelSettings(model=fallback).as_embedding()
    coverage = TokenizerCoverage.from_settings(primary_settings)
    rel_old, rel_new, shuf_old, shuf_new = fit_pairs()
    olds, news = rel_old + shuf_old, rel_new + shuf_new
    if coverage is not None:
        missing = [t for t in {*olds, *news} if not coverage.represents(t)]
        if missing:
            raise SystemExit(f"the fit needs text both models represent; {model} cannot: {missing[:3]}")
    primary = local_encoder(primary_settings, num_threads=threads)
    second = local_encoder(fallback_settings, num_threads=threads)
    p_cos, f_cos = pair_cosines(primary, olds, news), pair_cosines(second, olds, news)
    source = (
        f"tests/supersession_set/labelled.jsonl: {len(rel_old)} English pairs (kind locomo left out) "
        f"as written and {len(shuf_old)} shuffled (seed {SHUFFLE_SEED}); old as passage, new as query"
    )
    cal = CosineCalibration.fit(
        f_cos,
        p_cos,
        knots=knots,
        model=model,
        fallback=fallback,
        identities=(
            ("fallback", compute_identity(fallback_settings).digest),
            ("model", compute_identity(primary_settings).digest),
        ),
        source=source,
    )
    path = calibration_path(model, fallback)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cal.to_json() + "\n", encoding="utf-8")
    n = len(rel_old)
    print(f"wrote {path} ({cal.pairs} pairs, {len(cal.fallback_knots)} knots)")
    for name, sl in (("related", slice(0, n)), ("shuffled", slice(n, None))):
        print(
            f"  {name:8s} {model.split(':')[-1]} cosine mean {p_cos[sl].mean():.3f}  "
            f"{fallback.split(':')[-1]} mean {f_cos[sl].mean():.3f}  calibrated mean "
            f"{np.mean([cal(c) for c in f_cos[sl]]):.3f}"
        )
    calibrated = np.array([cal(c) for c in f_cos])
    print(
        f"  per pair |calibrated - {model.split(':')[-1]}|: median {np.median(np.abs(calibrated - p_cos)):.3f}, "
        f"rank correlation {np.corrcoef(np.argsort(np.argsort(calibrated)), np.argsort(np.argsort(p_cos)))[0, 1]:.3f}"
    )


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


async def run_mode(
    mode: str,
    users: dict[str, list[tuple[str, str]]],
    questions: list[tuple[str, str, str, str, str]],
    vectors: Vectors,
    coverage: TokenizerCoverage | None,
    fallback: FallbackModel | None,
) -> tuple[dict, list[float]]:
    """Recall per (kind, lang) and search times (ms) of one mode. ``questions``: (user, pair
    id, lang, kind, text)."""
    settings = MemoryStoreSettings(backend="inmemory", curation={"enabled": False})
    store = make_store(
        settings,
        embed=vectors.embed,
        dimension=384,
        represents=coverage.represents if coverage is not None else None,
        fallback=fallback if mode != "off" else None,
    )
    assert isinstance(store, HybridStore)  # curation off: the hybrid store is outermost
    store.fallback_queries = "all" if mode == "all" else "unrepresentable"
    for user, memories in users.items():
        await store.store_many([Memory(id=memory_id(user, i), user_id=user, content=t) for i, t in memories])
        warm = RetrieveOptions(
            user_id=user, query="warm up", embedding=vectors.of[memories[0][1]], hybrid=True, limit=1
        )
        await store.retrieve(warm)  # builds the user's index
        await store.fallback_settled(user)
    hits: dict[tuple[str, str], list[tuple[bool, bool]]] = defaultdict(list)
    times: list[float] = []
    for user, pair_id, lang, kind, text in questions:
        options = RetrieveOptions(
            user_id=user, query=text, embedding=(await vectors.embed([text]))[0], hybrid=True, limit=5
        )
        started = time.perf_counter()
        results = await store.retrieve(options)
        times.append((time.perf_counter() - started) * 1000)
        ranked = [r.memory.id for r in results]
        target = memory_id(user, pair_id)
        hits[(kind, lang)].append((ranked[:1] == [target], target in ranked))
    await store.close()
    return hits, times


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
            results = {}
            for mode in MODES:
                hits, times = await run_mode(mode, users, questions, vectors, coverage, fallback)
                results[mode] = (summarise(hits), times)
            print(f"  split {split}: recall@1 / recall@5 (n) by mode {' | '.join(MODES)}")
            for group in sorted(results["off"][0], key=lambda g: (g.split()[0], "English" in g, g)):
                cells = " | ".join(f"{results[m][0][group][0]:.3f} / {results[m][0][group][1]:.3f}" for m in MODES)
                print(f"    {group:28s} n={results['off'][0][group][2]:3d}  {cells}")
            for mode in MODES:
                times = results[mode][1]
                print(
                    f"    search ms ({mode:15s}): p50 {percentile(times, 50):6.2f}  p95 {percentile(times, 95):6.2f}"
                    f"  mean {statistics.fmean(times):6.2f}"
                )
    if args.check_scale:
        check_scale(pairs, fallback)


def check_scale(pairs: list[dict], fallback: FallbackModel) -> None:
    """e5's cosine of each pair (memory as passage, own question as query), mean per script,
    beside the calibrated value: does one map fit every script?"""
    enc = fallback.encoder
    by_lang: dict[str, list[float]] = defaultdict(list)
    for r in pairs:
        m = enc.encode([r["memory"]]).vectors[0]
        q = enc.encode([r["query"]], query=True).vectors[0]
        by_lang[r["lang"]].append(float(np.dot(m, q)))
    print("\nfallback cosine of each pair's memory and question, mean (calibrated) per script:")
    print(
        "  "
        + ", ".join(
            f"{lang} {np.mean(v):.3f} ({np.mean([fallback.similarity(c) for c in v]):.3f})"
            for lang, v in sorted(by_lang.items())
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="write the calibration file, then stop")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--fallback", default=FALLBACK)
    ap.add_argument("--knots", type=int, default=21, help="quantiles of the fit (--fit)")
    ap.add_argument("--split", choices=("dev", "holdout", "both"), default="holdout")
    ap.add_argument("--layouts", default="per-script,one", help="per-script, one, or both comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="threads of the MiniLM encoder here")
    ap.add_argument("--check-scale", action="store_true", help="also print e5's pair cosines per script")
    args = ap.parse_args()
    if args.fit:
        fit(args.model, args.fallback, args.knots, args.threads)
        return
    load_calibration(args.model, args.fallback)  # fails early without a fit
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
