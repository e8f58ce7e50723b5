"""A second opinion on supersession from the embedding model's own geometry: a logistic
regression on the difference of the two statements' vectors (new minus old; with the new
vector itself or the element-wise product when the fit chose ``diff+new`` or ``diff+prod``),
asked only about pairs the rules (``curation.judge``) call ``compatible`` and do not hold
compatible on purpose (``judge.compatible_on_purpose``: "also", someone else, another
setting, a passing state, another occasion).

Why the difference vector: a statement that changes a fact ("I moved to …", "ya no …",
"我已经搬到 …") moves its vector in a direction the model gives change words in every
language it reads, whatever the fact is; two compatible facts differ by their subjects,
which point anywhere. The classifier is fitted on labelled pairs (``tests/supersession_set``:
``labelled.jsonl``, the ``train_extra*.py`` files and the retired blind sets, 2,351 pairs of
eight writers in eight languages) by ``tests/supersession_set/fit_second_opinion.py``, which
chose its features, L2 penalty and decision threshold by leave-one-writer-out (each writer's
pairs predicted by a fit on the others': what a new user's phrasing meets; a compatible
memory lost costs more than a missed supersession, so at most 0.5 % of the compatible pairs
may be lost beyond the rules' own). Its figures on sets written blind and measured once
(``tests/supersession_set/blind*.jsonl``) are in the
README ("Measured"). The fitted file (``second_opinion.json``, beside this module) holds the
weights folded with the standardisation (``p = sigmoid(w · features + b)``), the
threshold, the identity digest of the embedding model the vectors came from, and its
provenance.

Cost: one dot product of ``dimension`` floats per pair (384 for the bundled model),
independent of the texts' length; no model call, no text read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

BUNDLED_PATH = Path(__file__).with_name("second_opinion.json")
"""The fitted weights shipped with the package."""
FEATURES = ("diff", "diff+new", "diff+prod")
"""What the classifier reads of two vectors ``old``, ``new`` (``features``): ``diff`` =
``new − old``; ``diff+new`` = ``new − old`` then ``new`` (how the new statement itself reads);
``diff+prod`` = ``new − old`` then ``new ⊙ old`` (the element-wise product: which dimensions
the two agree on, whose sum is their cosine; the [u − v, u ⊙ v] pair features of sentence-pair
classifiers, Conneau et al. 2017, "Supervised Learning of Universal Sentence Representations
from Natural Language Inference Data", InferSent)."""
_BLOCKS = {"diff": 1, "diff+new": 2, "diff+prod": 2}
"""How many vectors' lengths each ``FEATURES`` kind has."""


def features(kind: str, old: Sequence[float], new: Sequence[float]) -> np.ndarray:
    """The feature vector (float64) of ``kind`` (one of ``FEATURES``) for the vectors ``old``
    and ``new`` (equal lengths). Raises ``ValueError`` on another kind or unequal lengths."""
    o, n = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    if o.shape != n.shape or o.ndim != 1:
        raise ValueError(f"vectors of shapes {o.shape} and {n.shape}")
    if kind == "diff":
        return n - o
    if kind == "diff+new":
        return np.concatenate([n - o, n])
    if kind == "diff+prod":
        return np.concatenate([n - o, n * o])
    raise ValueError(f"unknown features {kind!r} (known: {', '.join(FEATURES)})")


@dataclass(frozen=True)
class SecondOpinion:
    """A fitted classifier: ``probability(old, new)`` that ``new`` supersedes ``old`` from
    their embedding vectors; ``supersedes`` when it is ≥ ``threshold``.

    Attributes:
        weights: float64 array, one weight per feature (``features`` of ``kind``), the
            standardisation folded in.
        bias: the intercept.
        threshold: the decision threshold on the probability (0–1).
        identity: the digest of the embedding model (``embedding.ModelIdentity.digest``)
            whose vectors the weights were fitted on; vectors of another model mean
            nothing to them.
        provenance: what the file says of its fit (data, script, cross-validated figures).

        kind: which ``FEATURES`` the weights read.
        extra_model: the ``embedding.model`` of a second embedding model whose vectors the
            weights also read (``features`` of ``kind`` of its two vectors, after the first
            model's), or None; ``extra_identity`` its identity digest and ``extra_dimension``
            its vector length (0 without one).
        ask_floor: with an extra model, the probability of the first model's opinion alone
            (``bundled()``) below which the extra model's vectors are not computed (the pair
            is held compatible: that opinion says no at any threshold above it). Chosen by
            the fit where it changes no held-out decision (the file's
            ``extra_model.ask_floor``; 0: always asked). It spares the extra model's cost on
            pairs of two plainly different facts, the usual case.
    """

    weights: np.ndarray
    bias: float
    threshold: float
    identity: str
    provenance: dict
    kind: str = "diff"
    extra_model: str | None = None
    extra_identity: str | None = None
    extra_dimension: int = 0
    ask_floor: float = 0.0

    @property
    def dimension(self) -> int:
        """The embedding vector length the weights expect."""
        return int(self.weights.shape[0]) // _BLOCKS[self.kind] - self.extra_dimension

    @classmethod
    def load(cls, path: Path = BUNDLED_PATH) -> SecondOpinion:
        """Read a fitted file (JSON: ``weights``, ``bias``, ``threshold``, ``identity``,
        ``features``, ``provenance``). Raises ``ValueError`` when a field is missing or
        malformed (a threshold outside 0–1, weights not a flat list of finite numbers, an
        unknown ``features``, an odd number of weights for a two-vector kind), ``OSError`` when
        the file cannot be read."""
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        try:
            weights = np.asarray(raw["weights"], dtype=np.float64)
            bias, threshold = float(raw["bias"]), float(raw["threshold"])
            identity, provenance = str(raw["identity"]), dict(raw["provenance"])
            kind = str(raw["features"])
            extra = raw.get("extra_model")
            extra_model = None if extra is None else str(extra["model"])
            extra_identity = None if extra is None else str(extra["identity"])
            extra_dimension = 0 if extra is None else int(extra["dimension"])
            ask_floor = 0.0 if extra is None else float(extra.get("ask_floor", 0.0))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: not a second-opinion file ({e})") from e
        if weights.ndim != 1 or not weights.size or not np.isfinite(weights).all() or not math.isfinite(bias):
            raise ValueError(f"{path}: weights must be a non-empty flat list of finite numbers")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"{path}: threshold {threshold} outside 0–1")
        if not 0.0 <= ask_floor <= 1.0:
            raise ValueError(f"{path}: ask_floor {ask_floor} outside 0–1")
        if kind not in FEATURES or weights.size % _BLOCKS[kind]:
            raise ValueError(f"{path}: features {kind!r} do not fit {weights.size} weights")
        if extra_dimension < 0 or weights.size // _BLOCKS[kind] <= extra_dimension:
            raise ValueError(
                f"{path}: an extra model of dimension {extra_dimension} does not fit {weights.size} weights"
            )
        return cls(
            weights,
            bias,
            threshold,
            identity,
            provenance,
            kind,
            extra_model,
            extra_identity,
            extra_dimension,
            ask_floor,
        )

    def probability(
        self,
        old: Sequence[float],
        new: Sequence[float],
        old_extra: Sequence[float] | None = None,
        new_extra: Sequence[float] | None = None,
    ) -> float:
        """The probability (0–1) that the statement of vector ``new`` supersedes that of
        ``old`` (each of length ``dimension``, as the embedding model gave them: L2-normalised),
        with ``old_extra`` / ``new_extra``, the two statements' vectors of ``extra_model``
        (length ``extra_dimension``), when the weights read one. Raises ``ValueError`` on
        another length or missing extra vectors."""
        if len(old) != self.dimension or len(new) != self.dimension:
            raise ValueError(f"vectors of length {len(old)}/{len(new)}, the weights expect {self.dimension}")
        x = features(self.kind, old, new)
        if self.extra_dimension:
            if old_extra is None or new_extra is None:
                raise ValueError(f"the weights also read vectors of {self.extra_model}")
            if len(old_extra) != self.extra_dimension or len(new_extra) != self.extra_dimension:
                raise ValueError(f"extra vectors of length {len(old_extra)}/{len(new_extra)}")
            x = np.concatenate([x, features(self.kind, old_extra, new_extra)])
        z = float(self.weights @ x) + self.bias
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def supersedes(
        self,
        old: Sequence[float],
        new: Sequence[float],
        old_extra: Sequence[float] | None = None,
        new_extra: Sequence[float] | None = None,
    ) -> bool:
        """Whether ``probability(old, new, old_extra, new_extra)`` reaches ``threshold``."""
        return self.probability(old, new, old_extra, new_extra) >= self.threshold

    def applies_to(self, identity: str | None, dimension: int | None) -> bool:
        """Whether vectors of a store with this model ``identity`` and ``dimension`` can be
        read by the weights: the same model digest and vector length (an unknown identity:
        no)."""
        return identity == self.identity and dimension == self.dimension


@lru_cache(maxsize=1)
def bundled() -> SecondOpinion:
    """The shipped ``second_opinion.json``, read once."""
    return SecondOpinion.load(BUNDLED_PATH)


BUNDLED_E5_PATH = Path(__file__).with_name("second_opinion_e5.json")
"""The fitted weights that also read multilingual-e5-small's vectors (``extra_model``)."""


@lru_cache(maxsize=1)
def bundled_e5() -> SecondOpinion:
    """The shipped ``second_opinion_e5.json``, read once."""
    return SecondOpinion.load(BUNDLED_E5_PATH)
