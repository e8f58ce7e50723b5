"""Ranking constants chosen by leave-one-conversation-out on LoCoMo, in process.

The ranking constants of ``RetrievalSettings`` (lexical weight, BM25 k1 and b, neighbour weight
and radius, speaker and temporal weights, candidate pool, the second hop's weight and term
count, the weight and slack of the periods a query names, how much lower a memory that asks
ranks) are each swept over a grid with the
others at their defaults (``SWEEPS``); every configuration is evaluated once per conversation
(in-memory backend, hybrid retrieval, top 10, the questions' evidence recall as in
``benchmarks/locomo_offline.py``; curation off, so the store holds one memory per turn).

Then, for each conversation in turn (the fold), every constant takes the value with the best
mean recall@5 over the *other* conversations' questions, and that combined configuration is
evaluated on the held-out conversation. Printed: recall@5/@10 of

- ``defaults``: the shipped ``RetrievalSettings``;
- ``in-sample``: constants chosen the same way on all conversations, scored on all of them
  (what tuning on the shared set reports);
- ``leave-one-out``: each conversation scored with constants chosen without it (what to
  expect on conversations outside the set);

the per-category table (multi-hop, temporal, open-domain, single-hop) of each, and the
values each fold chose. The replay is a client's (``memory_core.locomo``: no speaker or
session metadata). A constant whose best value moves from fold to fold, or an
in-sample figure well above the leave-one-out one, is fitted to the set.

    python benchmarks/locomo_loo.py
    python benchmarks/locomo_loo.py --limit-samples 3     # quicker
    python benchmarks/locomo_loo.py --model bundled:all-mpnet-base-v2   # another model
    python benchmarks/locomo_loo.py --set bm25_k1=1.2 --set hop_weight=0.2   # another starting point

``--model`` (any ``embedding.model``) loads the model as the service does
(``embedding.local_encoder``; e5 gets its ``"query: "`` prefix for the questions) and caches its
vectors per model identity under ``--cache-dir`` (``models_<identity>_passage.npz`` /
``_query.npz``, the caches ``benchmarks/models.py`` uses, saved every few hundred texts), so a
slow model encodes once; the store then uses that model's dimension and tokenizer coverage.
Without it: all-MiniLM-L6-v2 through ``--embed-cache`` as before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from locomo_offline import EmbedCache, replay  # noqa: E402
from rich.console import Console  # noqa: E402

from memory_core import locomo as ld  # noqa: E402
from memory_core.config import (  # noqa: E402
    CurationSettings,
    EmbeddingSettings,
    MemoryStoreSettings,
    RetrievalSettings,
)
from memory_core.embedding import TokenizerCoverage  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.stores.hybrid import HybridStore  # noqa: E402
from memory_core.types import RetrieveOptions  # noqa: E402

SWEEPS: dict[str, tuple] = {
    "lexical_weight": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
    "bm25_k1": (0.6, 0.9, 1.2, 1.5),
    "bm25_b": (0.2, 0.4, 0.6, 0.75),
    "neighbor_weight": (0.0, 0.25, 0.5, 0.6, 0.75, 1.0),
    "neighbor_radius": (1, 2, 3, 4),
    "speaker_weight": (0.0, 0.15, 0.3, 0.5),
    "temporal_weight": (0.0, 0.1, 0.2, 0.4),
    "candidate_pool": (10, 20, 40),
    "hop_weight": (0.0, 0.1, 0.2, 0.35),
    "hop_terms": (4, 8, 16),
    "date_weight": (0.0, 0.15, 0.3, 0.5),
    "date_slack_days": (0.0, 1.0, 2.0, 3.0),
    "question_weight": (0.0, 0.1, 0.15, 0.2, 0.3),
    "diversity_weight": (0.0, 0.1, 0.2, 0.3, 0.4),
}
"""Values tried per constant (each with the others at their defaults)."""

Rows = dict[str, list[tuple[int, float, float]]]  # sample_id → (category, r@5, r@10) per question


@dataclass
class Vectors:
    """One model's vectors: ``stored`` (text → vector of stored text, and the store's embed
    function), ``queries`` (of questions), the model's settings and dimension."""

    stored: Any
    queries: Any
    embedding: EmbeddingSettings
    dimension: int


def vectors_of(model: str | None, embed_cache: str, cache_dir: str) -> Vectors:
    """MiniLM through ``EmbedCache`` (``model`` None), else ``model`` loaded as the service
    loads it, its vectors cached per identity under ``cache_dir``."""
    if model is None:
        cache = EmbedCache(embed_cache)
        return Vectors(cache, cache, EmbeddingSettings(), 384)
    from models import ModelVectors

    from memory_core.embedding import compute_identity, local_encoder

    settings = EmbeddingSettings(model=model)
    identity = compute_identity(settings)

    class Lazy:
        """The encoder, loaded on the first text not in the cache."""

        _enc = None

        def encode(self, texts, query=False):
            if Lazy._enc is None:
                Lazy._enc = local_encoder(settings, num_threads=2)
            return Lazy._enc.encode(texts, query=query)

    enc = Lazy()
    d = Path(cache_dir)
    return Vectors(
        ModelVectors(enc, d / f"models_{identity.short}_passage.npz", query=False),
        ModelVectors(enc, d / f"models_{identity.short}_query.npz", query=True),
        settings,
        identity.dimension,
    )


_INDEXED: dict[tuple, tuple[Any, frozenset[str]]] = {}
"""(BM25 k1, b, vectors) → (an opened store holding the conversations, their ids): the
index depends on these only, so configurations that differ in the ranking's other constants
share one replay (each user's index is its own: a conversation ranks the same in a store
holding others)."""


async def indexed(settings: RetrievalSettings, samples: list[dict], vectors: Vectors) -> HybridStore:
    """The ``HybridStore`` (in-memory backend, curation off) holding ``samples``, built and
    replayed once per BM25 k1 and b (``_INDEXED``)."""
    key = (settings.bm25_k1, settings.bm25_b, id(vectors))
    wanted = frozenset(s["sample_id"] for s in samples)
    held = _INDEXED.get(key)
    if held is None or not wanted <= held[1]:
        if held is not None:
            await held[0].close()
        coverage = TokenizerCoverage.from_settings(vectors.embedding)
        store = make_store(
            MemoryStoreSettings(
                backend="inmemory",
                embedding=vectors.embedding,
                retrieval=settings,
                curation=CurationSettings(enabled=False),
            ),
            embed=vectors.stored.embed,
            dimension=vectors.dimension,
            represents=coverage.represents if coverage else None,
        )
        assert isinstance(store, HybridStore)
        await store.open()
        await replay(store, samples, vectors.stored)
        held = _INDEXED[key] = (store, wanted)
    return held[0]


async def evaluate(settings: RetrievalSettings, samples: list[dict], vectors: Vectors) -> Rows:
    """Per-conversation question rows for one ``RetrievalSettings``: a ``HybridStore`` built
    from ``settings`` over the replayed store of ``indexed`` and its users' indexes."""
    base = await indexed(settings, samples, vectors)
    store = HybridStore.from_settings(base.inner, settings)
    store.index = base.index
    out: Rows = {}
    for s in samples:
        rows = out.setdefault(s["sample_id"], [])
        for q in ld.questions(s):
            res = await store.retrieve(
                RetrieveOptions(
                    user_id=s["sample_id"],
                    query=q.question,
                    embedding=vectors.queries[q.question],
                    limit=10,
                    **settings.ranking_options(),  # as the service's searches ask
                ),
                touch=False,
            )
            ids = [ld.dia_ids_of(r.memory.metadata) for r in res]
            rows.append((q.category, ld.recall_at_k(ids, q.evidence, 5), ld.recall_at_k(ids, q.evidence, 10)))
    return out


async def close_indexed() -> None:
    """Close the stores ``indexed`` built."""
    for store, _ in _INDEXED.values():
        await store.close()
    _INDEXED.clear()


def parse_setting(text: str) -> tuple[str, object]:
    """``"name=value"`` → (name, value as the ``RetrievalSettings`` field's type). Raises
    ``SystemExit`` for an unknown field."""
    name, _, value = text.partition("=")
    if name not in RetrievalSettings.model_fields:
        raise SystemExit(f"--set: no RetrievalSettings field {name!r}")
    current = getattr(RetrievalSettings(), name)
    if isinstance(current, bool):
        return name, value.lower() in ("1", "true", "yes")
    return name, type(current)(value) if isinstance(current, int | float) else value


def mean_r5(rows: Rows, samples: list[str]) -> float:
    flat = [r for s in samples for r in rows[s]]
    return sum(r[1] for r in flat) / len(flat)


def choose(
    results: dict[tuple[str, object], Rows], on: list[str], default: RetrievalSettings | None = None
) -> dict[str, object]:
    """Each constant's value with the best mean recall@5 over the questions of ``on`` (ties:
    the value of ``default`` (the shipped defaults when None), then the first in the grid)."""
    default = default or RetrievalSettings()
    chosen = {}
    for name, values in SWEEPS.items():
        chosen[name] = max(
            values,
            key=lambda v, name=name: (round(mean_r5(results[(name, v)], on), 6), v == getattr(default, name)),
        )
    return chosen


def figures(rows: list[tuple[int, float, float]]) -> str:
    s = ld.summarize(rows)["overall"]
    return f"recall@5 {s['r@5']:.3f}  recall@10 {s['r@10']:.3f}  (n={s['n']})"


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--limit-samples", type=int, default=None)
    ap.add_argument("--embed-cache", default="/tmp/locomo_minilm_cache.npz", help="MiniLM's cache (no --model)")
    ap.add_argument("--model", default=None, help="embedding.model (default: all-MiniLM-L6-v2 via --embed-cache)")
    ap.add_argument("--cache-dir", default="/tmp", help="per-identity vector caches of --model")
    ap.add_argument("--encode-only", action="store_true", help="fill the vector caches, then stop")
    ap.add_argument("--save-rows", default=None, help="write every configuration's question rows here (JSON)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="start from the defaults with this RetrievalSettings field changed (repeatable): the point "
        "the sweeps move around and the folds' ties go to",
    )
    args = ap.parse_args(argv)
    samples = ld.load_samples(args.data, args.limit_samples)
    ids = [s["sample_id"] for s in samples]
    cache = vectors_of(args.model, args.embed_cache, args.cache_dir)
    cache.stored.ensure([t.content for s in samples for t in ld.turns(s)])
    cache.queries.ensure([q.question for s in samples for q in ld.questions(s)])
    if args.encode_only:
        return
    print(f"model: {args.model or 'bundled:all-MiniLM-L6-v2'} (dimension {cache.dimension})")
    default = RetrievalSettings(**dict(parse_setting(a) for a in args.set))
    if args.set:
        print(f"starting point: the shipped defaults with {' '.join(args.set)}")
    results: dict[tuple[str, object], Rows] = {}
    for name, values in SWEEPS.items():
        for v in values:
            if v == getattr(default, name) and ("default", None) in results:
                results[(name, v)] = results[("default", None)]
                continue
            print(f"evaluating {name}={v} …", file=sys.stderr)
            results[(name, v)] = await evaluate(default.model_copy(update={name: v}), samples, cache)
            if v == getattr(default, name):
                results[("default", None)] = results[(name, v)]
    if ("default", None) not in results:
        results[("default", None)] = await evaluate(default, samples, cache)

    if args.save_rows:
        with open(args.save_rows, "w", encoding="utf-8") as fh:
            json.dump([[name, v, rows] for (name, v), rows in results.items()], fh)
    in_sample_choice = choose(results, ids, default)
    in_sample = await evaluate(default.model_copy(update=in_sample_choice), samples, cache)
    loo_rows: list[tuple[int, float, float]] = []
    picks: dict[str, Counter] = {name: Counter() for name in SWEEPS}
    for held in ids:
        chosen = choose(results, [s for s in ids if s != held], default)
        for name, v in chosen.items():
            picks[name][v] += 1
        held_sample = [s for s in samples if s["sample_id"] == held]
        loo_rows += (await evaluate(default.model_copy(update=chosen), held_sample, cache))[held]
    await close_indexed()

    print(f"\nLoCoMo leave-one-conversation-out over {len(ids)} conversations")
    print(f"defaults       {figures([r for s in ids for r in results[('default', None)][s]])}")
    print(f"in-sample      {figures([r for s in ids for r in in_sample[s]])}   chosen {in_sample_choice}")
    print(f"leave-one-out  {figures(loo_rows)}")
    console = Console()
    for title, rows in (
        ("defaults", [r for s in ids for r in results[("default", None)][s]]),
        ("in-sample", [r for s in ids for r in in_sample[s]]),
        ("leave-one-out", loo_rows),
    ):
        console.print(ld.recall_table(rows, f"LoCoMo {title} ({len(ids)} conversations)"))
    print("values chosen per fold (value: folds):")
    for name, c in picks.items():
        print(
            f"  {name:16s} default {getattr(default, name)!s:6s} "
            + ", ".join(f"{v}: {n}" for v, n in sorted(c.items()))
        )


if __name__ == "__main__":
    asyncio.run(main())
