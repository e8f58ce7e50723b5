"""Micro-benchmark: reflection gate + injection for 50 candidates (budget: < 1 ms per call).

Prints the median time per call in µs over many runs (and p90), for the heuristic gate alone,
injection alone, and gate + injection as the chat path runs them. Pure CPU, single thread.

    python benchmarks/gate.py [--candidates 50] [--runs 2000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from memory_core.chat.gate import select_gate
from memory_core.chat.inject import inject_memories
from memory_core.config import ReflectionSettings
from memory_core.types import Memory, ScoredMemory

VOCAB = (
    "tea coffee lyon paris bike gym locker code meeting tuesday dog cat beagle birthday "
    "sister brother project deadline report python rust train flight hotel allergy peanut "
    "doctor dentist password wifi garden"
).split()


def candidates(n: int, rng: random.Random, now: datetime) -> list[ScoredMemory]:
    out = []
    for i in range(n):
        words = rng.choices(VOCAB, k=rng.randint(8, 30))
        if i % 7 == 0:
            words += ["我的", "储物柜", "密码"]
        m = Memory(
            id=f"m{i:03d}", content=" ".join(words), user_id="u1", updated_at=now - timedelta(days=rng.uniform(0, 120))
        )
        s = rng.uniform(0.3, 0.9)
        out.append(ScoredMemory(memory=m, score=s, similarity=s))
    return out


def timeit(fn, runs: int) -> tuple[float, float]:
    for _ in range(min(50, runs)):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--block-patterns", type=int, default=2, help="number of block patterns configured")
    args = ap.parse_args()

    rng = random.Random(0)
    now = datetime(2025, 6, 1, tzinfo=UTC)
    cands = candidates(args.candidates, rng, now)
    settings = ReflectionSettings(
        block_patterns=[r"\bpassword\b", r"\d{3}-\d{2}-\d{4}"][: args.block_patterns], max_inject_tokens=2048
    )
    gate = select_gate(settings)
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(10):
        messages += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    messages.append({"role": "user", "content": "What's my locker code?"})

    kept = gate.apply(cands, settings, now)
    memories = [c.memory for c in kept]

    def gate_only():
        gate.apply(cands, settings, now)

    def inject_only():
        inject_memories(messages, memories)

    def both():
        inject_memories(messages, [c.memory for c in gate.apply(cands, settings, now)])

    print(f"candidates={len(cands)} kept={len(kept)} messages={len(messages)} runs={args.runs}")
    for name, fn in (("gate", gate_only), ("inject", inject_only), ("gate+inject", both)):
        med, p90 = timeit(fn, args.runs)
        print(f"{name:12s} median {med:8.1f} µs   p90 {p90:8.1f} µs")


if __name__ == "__main__":
    main()
