"""A second model for text the configured model cannot represent (``embedding.fallback``).

all-MiniLM-L6-v2 maps Thai, Lao, Khmer, Amharic, Georgian, Sinhala, emoji... to its unknown
token (``TokenizerCoverage``): such a memory's vector says nothing and it is ranked lexically
only. With ``embedding.fallback`` (e.g. ``bundled:multilingual-e5-small`` beside MiniLM) each
store shard loads the fallback model too and ``stores.hybrid.HybridStore`` embeds *those*
memories with it (as passages), holding the vectors in the user's index (a second matrix,
``UserIndex.fallback``: never written to the backend, so the vectors of two models never
share a collection; rebuilt with the index after a restart or an eviction). A search of a user
who holds such vectors is embedded by the fallback too (as a query); the memories with a
fallback vector are scored by the fallback cosine, mapped onto the configured model's scale
(``CosineCalibration``), so ``threshold`` and the injection floor keep one meaning.

``CosineCalibration`` is equipercentile equating (Kolen & Brennan, *Test Equating, Scaling,
and Linking*, ch. 2): a fallback cosine at the p-th percentile of the fallback's cosines over
a set of text pairs becomes the p-th percentile of the configured model's cosines over the same
pairs (piecewise linear between ``knots`` quantiles, monotone). The shipped tables
(``calibrations/<model>__<fallback>.json``) were fitted by ``benchmarks/fallback.py --fit`` on
the English pairs of ``tests/supersession_set`` (old as passage, new as query; related and
shuffled pairs), which both models represent; each names the two identities it was fitted on
and is refused for any other files.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from ..config import EmbeddingSettings
    from .encoder import Encoder

CALIBRATION_DIR = Path(__file__).parent / "calibrations"
"""Where the shipped cosine calibrations are (one JSON file per model pair)."""


def _file_label(model: str) -> str:
    """``model`` as a file-name part: ``bundled:all-MiniLM-L6-v2`` → ``all-MiniLM-L6-v2``, a
    path → its last component; anything but ``[A-Za-z0-9._-]`` becomes ``_``."""
    name = model.split(":", 1)[1] if model.startswith("bundled:") else Path(model).name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def calibration_path(model: str, fallback: str) -> Path:
    """The calibration file of the pair (``embedding.model``, ``embedding.fallback.model``)."""
    return CALIBRATION_DIR / f"{_file_label(model)}__{_file_label(fallback)}.json"


@dataclass(frozen=True)
class CosineCalibration:
    """A monotone map from the fallback model's cosines to the configured model's scale.

    ``fallback_knots`` (strictly increasing) and ``primary_knots`` (non-decreasing, same
    length ≥ 2): ``__call__(c)`` interpolates linearly between them and holds the end values
    beyond them, clamped to [-1, 1]. ``model``/``fallback`` name the models, ``identities``
    their ``ModelIdentity`` digests (``{"model": ..., "fallback": ...}``), ``pairs`` how many
    text pairs the fit saw, ``source`` where they came from. Raises ``ValueError`` for knots
    out of shape or order."""

    fallback_knots: tuple[float, ...]
    primary_knots: tuple[float, ...]
    model: str = ""
    fallback: str = ""
    identities: tuple[tuple[str, str], ...] = ()
    pairs: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        x, y = np.asarray(self.fallback_knots, float), np.asarray(self.primary_knots, float)
        if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
            raise ValueError("calibration knots must be two lists of the same length ≥ 2")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise ValueError("calibration knots must be finite")
        if np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0):
            raise ValueError("calibration knots must increase (fallback strictly, primary not decreasing)")

    def __call__(self, cos: float) -> float:
        """The fallback cosine ``cos`` on the configured model's scale."""
        return float(np.clip(np.interp(cos, self.fallback_knots, self.primary_knots), -1.0, 1.0))

    def identity(self, role: str) -> str | None:
        """The digest the fit saw for ``role`` (``"model"`` or ``"fallback"``)."""
        return dict(self.identities).get(role)

    @classmethod
    def fit(
        cls, fallback_cos: Sequence[float], primary_cos: Sequence[float], *, knots: int = 21, **meta: Any
    ) -> CosineCalibration:
        """Equipercentile equating of the two models' cosines over the same pairs: the
        ``knots`` quantiles (0 %, …, 100 %) of each, ties in the fallback's quantiles merged
        (their mean primary value kept). ``meta``: the other fields. Raises ``ValueError``
        for fewer than 2 pairs, unequal lengths or ``knots`` < 2."""
        x, y = np.asarray(fallback_cos, float), np.asarray(primary_cos, float)
        if x.shape != y.shape or x.ndim != 1 or len(x) < 2 or knots < 2:
            raise ValueError("need two equal-length lists of ≥ 2 cosines and knots ≥ 2")
        qs = np.linspace(0.0, 1.0, knots)
        fx, fy = np.quantile(x, qs), np.quantile(y, qs)
        xs: list[float] = []
        ys: list[list[float]] = []
        for a, b in zip(fx, fy, strict=True):
            if xs and a <= xs[-1]:
                ys[-1].append(float(b))
            else:
                xs.append(float(a))
                ys.append([float(b)])
        if len(xs) < 2:
            raise ValueError("the fallback cosines are all equal: nothing to calibrate")
        return cls(tuple(xs), tuple(float(np.mean(v)) for v in ys), pairs=len(x), **meta)

    def to_json(self) -> str:
        """The calibration as JSON (the shipped file's format)."""
        return json.dumps(
            {
                "model": self.model,
                "fallback": self.fallback,
                "identities": dict(self.identities),
                "pairs": self.pairs,
                "source": self.source,
                "fallback_knots": [round(v, 6) for v in self.fallback_knots],
                "primary_knots": [round(v, 6) for v in self.primary_knots],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> CosineCalibration:
        """Parse ``to_json``'s format. Raises ``ValueError`` (bad JSON, fields, knots)."""
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("a calibration is a JSON object")
        return cls(
            tuple(float(v) for v in d["fallback_knots"]),
            tuple(float(v) for v in d["primary_knots"]),
            model=str(d.get("model", "")),
            fallback=str(d.get("fallback", "")),
            identities=tuple(sorted((str(k), str(v)) for k, v in (d.get("identities") or {}).items())),
            pairs=int(d.get("pairs", 0)),
            source=str(d.get("source", "")),
        )


def load_calibration(model: str, fallback: str, *, identities: dict[str, str] | None = None) -> CosineCalibration:
    """The shipped calibration of the pair, checked against the models' current identity
    digests when ``identities`` (``{"model": digest, "fallback": digest}``) is given. Raises
    ``ConfigError`` when there is none, it cannot be read, or it was fitted on other files."""
    path = calibration_path(model, fallback)
    try:
        cal = CosineCalibration.from_json(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"embedding.fallback: no calibration for {model} with {fallback} ({path})") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"embedding.fallback: unreadable calibration {path}: {type(e).__name__}: {e}") from None
    for role, digest in (identities or {}).items():
        if cal.identity(role) != digest:
            raise ConfigError(
                f"embedding.fallback: the calibration {path.name} was fitted on another {role} model "
                f"({cal.identity(role)!r}, now {digest!r}): refit it with benchmarks/fallback.py --fit"
            )
    return cal


class _OneAtATime:
    """An encoder whose ``encode_async`` calls run one at a time (the passage and the query
    sides share one engine)."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self._lock = asyncio.Lock()

    async def encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        async with self._lock:
            return (await self.encoder.encode_async(texts, query=query)).vectors


@dataclass
class FallbackModel:
    """What ``HybridStore`` needs of the fallback: ``embed_passages(texts)`` and
    ``embed_query(text)`` (async; float32 unit rows ``[n, dim]`` / one ``[dim]`` row), the
    ``calibration`` onto the configured model's scale and a ``label`` (the model's name).
    Errors of the encoder propagate (``HybridStore`` then ranks lexically, as without it)."""

    encoder: Any
    calibration: CosineCalibration
    label: str
    max_batch: int = 32

    def __post_init__(self) -> None:
        self._serial = _OneAtATime(self.encoder)

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts → float32 ``[n, dim]`` (``max_batch`` per forward pass)."""
        texts = list(texts)
        parts = [
            await self._serial.encode(texts[i : i + self.max_batch], query=False)
            for i in range(0, len(texts), self.max_batch)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        """One search text → float32 ``[dim]``."""
        return (await self._serial.encode([text], query=True))[0]


def open_fallback(settings: EmbeddingSettings) -> FallbackModel | None:
    """The fallback model ``settings.fallback`` names, loaded in this process (CPU, one
    thread), with its calibration checked against both models' identities; ``None`` when
    ``settings.fallback`` is unset. Raises ``ConfigError`` (no or a stale calibration, a model
    that cannot be loaded)."""
    if settings.fallback is None:
        return None
    from .identity import compute_identity
    from .local import local_encoder

    fb = settings.fallback.as_embedding()
    identities = {"model": compute_identity(settings).digest, "fallback": compute_identity(fb).digest}
    calibration = load_calibration(settings.model, fb.model, identities=identities)
    return FallbackModel(local_encoder(fb, num_threads=1), calibration, fb.model)
