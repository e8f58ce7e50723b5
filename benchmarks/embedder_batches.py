"""Sentences/s of the embedding model at batch sizes 1..256, on the CPU or a GPU, in one run.

    python benchmarks/embedder_batches.py --model PATH [--device cuda] [--dtypes float32,float16]
        [--texts texts.json] [--batches 1,2,4,8,16,32,64,128,256] [--repeats 3]

What the service's Embedder does per forward pass (``memory_core.embedding.LocalEncoder``:
``SentenceTransformer.encode`` on a group of texts, unit vectors out), timed at each batch
size with nothing else in the way: no Serve, no batching queue, no HTTP. On a GPU each timing
ends with the vectors copied back to the host (``convert_to_numpy``), as the service needs
them. Each figure is the median of ``--repeats`` passes over the same texts (batch 1 and 2
use the first ``--small`` texts only: a pass over thousands of texts one at a time measures
nothing more). Also prints, per dtype, the ratio of each batch size's rate to batch 1's.

It needs only torch and sentence-transformers (no memory_core, no Ray), so it runs on a bare
GPU image with the model directory carried to it. ``--texts``: a JSON list of strings
(default: the LoCoMo dialogue turns of ``../shared/data/locomo/locomo_dev.json``, as
``benchmarks/embedder.py`` uses). Figures: README "Measured" (the GPU rows).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo_dev.json"


def locomo_texts(path: Path) -> list[str]:
    """The dialogue turn texts of a LoCoMo file, in file order."""
    out: list[str] = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        keys = sorted(
            (k for k in conv if k.startswith("session_") and not k.endswith("date_time")),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in keys:
            out.extend(f"{t['speaker']}: {t['text']}" for t in conv[key] if t.get("text"))
    return out


def rate(model, texts: list[str], batch: int, repeats: int, sync) -> float:
    """Median sentences/s of ``repeats`` passes of ``model.encode`` over ``texts``."""
    rates = []
    for _ in range(repeats):
        sync()
        started = time.perf_counter()
        model.encode(texts, batch_size=batch, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        sync()
        rates.append(len(texts) / (time.perf_counter() - started))
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a sentence-transformers model directory")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtypes", default="float32", help="comma-separated torch dtypes to run the model in")
    ap.add_argument("--texts", type=Path, default=None, help="a JSON list of strings (default: LoCoMo turns)")
    ap.add_argument("--count", type=int, default=4096, help="texts per pass")
    ap.add_argument("--small", type=int, default=512, help="texts per pass at batch 1 and 2")
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = json.loads(args.texts.read_text()) if args.texts else locomo_texts(LOCOMO)
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if len(texts) < args.count:
        texts = (texts * (args.count // max(1, len(texts)) + 1))[: args.count]
    texts = texts[: args.count]
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    on_gpu = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    machine = {
        "device": torch.cuda.get_device_name(0) if on_gpu else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "texts": len(texts),
        "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
    }
    print(json.dumps(machine))
    results: dict[str, dict[int, float]] = {}
    for dtype_name in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
        model = SentenceTransformer(args.model, device=args.device, local_files_only=True)
        model = model.to(getattr(torch, dtype_name))
        model.eval()
        loaded = str(next(model.parameters()).dtype)
        with torch.inference_mode():
            model.encode(texts[:256], batch_size=64, show_progress_bar=False)  # warm-up (kernels, allocator)
            row: dict[int, float] = {}
            for b in batches:
                part = texts[: args.small] if b <= 2 else texts
                row[b] = rate(model, part, b, args.repeats, sync)
                print(f"{dtype_name} ({loaded}) batch {b:>4}: {row[b]:10.1f} sentences/s", flush=True)
        results[dtype_name] = row
        base = row.get(batches[0]) or 1.0
        print(f"{dtype_name}: rate / batch {batches[0]}: " + ", ".join(f"{b}: {r / base:.1f}x" for b, r in row.items()))
        del model
        if on_gpu:
            torch.cuda.empty_cache()
    if args.json_out:
        args.json_out.write_text(json.dumps({"machine": machine, "sentences_per_s": results}, indent=1))


if __name__ == "__main__":
    main()
