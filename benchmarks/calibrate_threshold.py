"""Calibrate the default cosine similarity threshold for the default embedding model.

For a set of stored facts, each with a direct question a user would ask about it, it measures
(a) the cosine of each question with its own fact (must pass the threshold) and (b) the best
cosine of each question with every *other* fact (must not). It prints both distributions and
the threshold that maximises the margin: the midpoint between the lowest matching score
and the highest non-matching score, when they separate.

Run: ``python benchmarks/calibrate_threshold.py`` (loads the bundled all-MiniLM-L6-v2).
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from memory_core.config import DEFAULT_SIMILARITY_THRESHOLD, EmbeddingSettings
from memory_core.embedding import LocalEncoder

# (stored fact, direct question about it). Facts are phrased as users tell them in chat.
PAIRS = [
    ("Please remember this: my locker code is 4817.", "What is my locker code?"),
    ("My daughter's name is Maya and she is seven.", "How old is my daughter?"),
    ("I'm allergic to peanuts.", "What food allergies do I have?"),
    ("I drive a blue 2018 Subaru Outback.", "What car do I drive?"),
    ("My dentist appointment is on March 3rd at 10am.", "When is my dentist appointment?"),
    ("Our wifi password is sunflower-42.", "What's the wifi password?"),
    ("I prefer aisle seats on long flights.", "Which seat do I like on flights?"),
    ("My manager is called Priya Raman.", "Who is my manager?"),
    ("I moved to Lisbon last spring.", "Where do I live now?"),
    ("I take my coffee black with no sugar.", "How do I take my coffee?"),
    ("My favourite programming language is Rust.", "Which programming language do I like best?"),
    ("The staging database runs on port 5433.", "What port does the staging database use?"),
    ("My passport expires in August 2027.", "When does my passport expire?"),
    ("I'm training for the Berlin marathon in September.", "Which race am I training for?"),
    ("My cat Biscuit is a ginger tabby.", "What is my cat's name?"),
    ("I am vegetarian.", "Do I eat meat?"),
    ("My sister lives in Toronto.", "Where does my sister live?"),
    ("Deploys go out with `make release` from the main branch.", "How do I deploy?"),
    ("My gym membership renews on the first of every month.", "When does my gym membership renew?"),
    ("I speak Portuguese and a little Japanese.", "What languages do I speak?"),
]


def main() -> None:
    encoder = LocalEncoder(EmbeddingSettings())
    facts = encoder.encode([f for f, _ in PAIRS]).vectors
    questions = encoder.encode([q for _, q in PAIRS]).vectors
    sims = questions @ facts.T
    own = np.diag(sims)
    others = np.where(np.eye(len(PAIRS), dtype=bool), -np.inf, sims).max(axis=1)
    table = Table(title="cosine: question vs its own fact / best other fact")
    for col in ("question", "own", "best other"):
        table.add_column(col)
    for (_, q), a, b in zip(PAIRS, own, others, strict=True):
        table.add_row(q, f"{a:.3f}", f"{b:.3f}")
    console = Console()
    console.print(table)
    low_match, high_other = float(own.min()), float(others.max())
    console.print(f"matching:     min {low_match:.3f}  p10 {np.percentile(own, 10):.3f}  median {np.median(own):.3f}")
    console.print(
        f"non-matching: max {high_other:.3f}  p90 {np.percentile(others, 90):.3f}  median {np.median(others):.3f}"
    )
    if low_match > high_other:
        console.print(f"separable: suggested threshold {(low_match + high_other) / 2:.3f}")
    else:
        console.print("not separable by one threshold: overlap between matching and non-matching scores")
    sweep = Table(title="threshold sweep (Youden's J = recall − false-pull rate)")
    for col in ("threshold", "recall (own fact passes)", "false pull (other fact passes)", "J"):
        sweep.add_column(col)
    best = None
    for t in np.arange(0.25, 0.551, 0.025):
        recall, pull = float(np.mean(own >= t)), float(np.mean(others >= t))
        sweep.add_row(f"{t:.3f}", f"{recall:.2f}", f"{pull:.2f}", f"{recall - pull:.2f}")
        if best is None or recall - pull > best[1] + 1e-9:
            best = (float(t), recall - pull)
    console.print(sweep)
    console.print(f"best J at threshold {best[0]:.3f} (lowest such threshold: recall first)")
    t = DEFAULT_SIMILARITY_THRESHOLD
    console.print(
        f"configured default {t:.2f}: recall {np.mean(own >= t):.2f} of matching questions, "
        f"{np.mean(others >= t):.2f} of questions would also pull an unrelated fact"
    )


if __name__ == "__main__":
    main()
