"""A second model for text the configured model cannot represent (``embedding.fallback``).

all-MiniLM-L6-v2 maps Thai, Lao, Khmer, Amharic, Sinhala, Burmese, emoji... to its unknown
token (``TokenizerCoverage``): such a memory's vector says nothing and it is ranked lexically
only. With ``embedding.fallback`` (e.g. ``bundled:multilingual-e5-small`` beside MiniLM) each
store shard loads the fallback model too and ``stores.hybrid.HybridStore`` embeds *those*
memories with it (as passages), holding the vectors in the user's index (a second matrix,
``UserIndex.fallback``: never written to the backend, so the vectors of two models never
share a collection; made again when the index is built after a restart or an eviction). A
search the configured model cannot represent, of a user who holds such vectors in the
search's scope, is embedded by the fallback too (as a query); the memories with a fallback
vector are scored by the fallback cosine mapped onto the configured model's scale
(``FallbackCalibration``), so ``threshold`` and the injection floor keep one meaning.

The map is linear equating, one per script (Kolen & Brennan, *Test Equating, Scaling, and
Linking*, ch. 2, the single-group design): over a set of (question, memory) pairs written in
that script, each also in English, the fallback's cosines of the script's texts and the
configured model's cosines of the English texts are brought to the same mean and standard
deviation, ``y = μ_y + (σ_y / σ_x)(x − μ_x)``, clamped to [-1, 1]. A cosine scale depends on
the script (e5 gives unrelated Lao sentences a higher cosine than unrelated English ones), so
a search's script (``script_of``) picks its table; a script without one gets the table pooled
over every fitted script (``"*"``). The shipped tables (``calibrations/<model>__<fallback>.json``)
are fitted by ``benchmarks/fallback.py --fit`` on the dev split of ``tests/fallback_set``
(the project's own); each file names the two identities it was fitted on and is refused for
any other files. Linear rather than equipercentile equating: a script's fit has 45 to 725
pairs, too few for percentiles of the related tail. README "Choosing a model" gives what was
measured, and what the map cannot do (the fallback tells related from unrelated text less
sharply than MiniLM reads English, so fewer related pairs pass a floor).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import unicodedata
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import FALLBACK_CALIBRATION_DIR as CALIBRATION_DIR
from ..config import fallback_calibration_path as calibration_path
from ..errors import ConfigError
from ..types import as_float32
from .batching import CoalescingEmbedFn
from .encoder import EncodeResult, EncoderWrapper

if TYPE_CHECKING:  # pragma: no cover
    from ..config import EmbeddingSettings
    from .encoder import Encoder

__all__ = [
    "CALIBRATION_DIR",
    "POOLED",
    "CosineCalibration",
    "FallbackCalibration",
    "FallbackModel",
    "calibration_path",
    "load_calibration",
    "open_fallback",
    "script_of",
]


def script_of(text: str) -> str:
    """The Unicode script most of ``text``'s letters and marks belong to, named as the first
    word of their Unicode names (``"THAI"``, ``"LAO"``, ``"KHMER"``, ``"ETHIOPIC"``,
    ``"GEORGIAN"``, ``"SINHALA"``, ``"MYANMAR"``, ``"TAMIL"``, ``"LATIN"``...; ties: the first
    seen); ``""`` when it has none. Linear in the text."""
    counts: dict[str, int] = {}
    for ch in text:
        if unicodedata.category(ch)[0] in "LM":
            name = unicodedata.name(ch, "")
            if name:
                script = name.split(" ", 1)[0]
                counts[script] = counts.get(script, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else ""


@dataclass(frozen=True)
class CosineCalibration:
    """A monotone map from the fallback model's cosines to the configured model's scale:
    ``__call__(c)`` interpolates linearly between ``fallback_knots`` (strictly increasing) and
    ``primary_knots`` (non-decreasing, same length ≥ 2), holds the end values beyond them and
    clamps to [-1, 1]. ``pairs``: how many text pairs its fit saw. Raises ``ValueError`` for
    knots out of shape or order."""

    fallback_knots: tuple[float, ...]
    primary_knots: tuple[float, ...]
    pairs: int = 0

    def __post_init__(self) -> None:
        x, y = np.asarray(self.fallback_knots, float), np.asarray(self.primary_knots, float)
        if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
            raise ValueError("calibration knots must be two lists of the same length ≥ 2")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise ValueError("calibration knots must be finite")
        if np.any(np.diff(x) <= 0) or np.any(np.diff(y) < 0):
            raise ValueError("calibration knots must increase (fallback strictly, primary not decreasing)")

    def __call__(self, cos: float) -> float:
        """The fallback cosine ``cos`` (in [-1, 1]) on the configured model's scale, as a
        float32 value in [-1, 1] (the precision every reported similarity has)."""
        return as_float32(float(np.clip(np.interp(cos, self.fallback_knots, self.primary_knots), -1.0, 1.0)))

    @classmethod
    def linear(cls, fallback_cos: Sequence[float], primary_cos: Sequence[float]) -> CosineCalibration:
        """Linear (mean-sigma) equating of the two models' cosines over the same pairs (pair
        i in both, n ≥ 2 floats in [-1, 1] each): the map ``y = μ_y + (σ_y / σ_x)(x − μ_x)``,
        as its two knots at x = -1 and x = 1. Raises ``ValueError`` for unequal lengths, fewer
        than 2 pairs or fallback cosines that are all equal."""
        x, y = np.asarray(fallback_cos, float), np.asarray(primary_cos, float)
        if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
            raise ValueError("need two equal-length lists of ≥ 2 cosines")
        sx, sy = float(x.std()), float(y.std())
        if sx == 0:
            raise ValueError("the fallback cosines are all equal: nothing to calibrate")
        slope, mx, my = sy / sx, float(x.mean()), float(y.mean())
        return cls((-1.0, 1.0), (my + slope * (-1.0 - mx), my + slope * (1.0 - mx)), pairs=len(x))

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "fallback_knots": [round(v, 6) for v in self.fallback_knots],
            "primary_knots": [round(v, 6) for v in self.primary_knots],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CosineCalibration:
        """Parse ``to_dict``'s shape. Raises ``ValueError``, ``KeyError``, ``TypeError``."""
        return cls(
            tuple(float(v) for v in d["fallback_knots"]),
            tuple(float(v) for v in d["primary_knots"]),
            pairs=int(d.get("pairs", 0)),
        )


POOLED = "*"
"""The table of a script without its own (pooled over every fitted script)."""


@dataclass(frozen=True)
class FallbackCalibration:
    """The shipped calibration of one (model, fallback) pair: ``tables`` by script
    (``script_of``; ``POOLED`` required), ``model``/``fallback`` the models' names,
    ``identities`` their ``ModelIdentity`` digests (``(("fallback", ...), ("model", ...))``),
    ``source`` where the fit's pairs came from. Raises ``ValueError`` without a pooled
    table."""

    tables: tuple[tuple[str, CosineCalibration], ...]
    model: str = ""
    fallback: str = ""
    identities: tuple[tuple[str, str], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if POOLED not in dict(self.tables):
            raise ValueError(f"a calibration needs the pooled table {POOLED!r}")

    def for_text(self, text: str) -> CosineCalibration:
        """The table of ``text``'s script, else the pooled one."""
        tables = dict(self.tables)
        return tables.get(script_of(text)) or tables[POOLED]

    def identity(self, role: str) -> str | None:
        """The digest the fit saw for ``role`` (``"model"`` or ``"fallback"``)."""
        return dict(self.identities).get(role)

    def to_json(self) -> str:
        """The calibration as JSON (the shipped file's format)."""
        return json.dumps(
            {
                "model": self.model,
                "fallback": self.fallback,
                "identities": dict(self.identities),
                "source": self.source,
                "tables": {script: table.to_dict() for script, table in self.tables},
            },
            indent=1,
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> FallbackCalibration:
        """Parse ``to_json``'s format. Raises ``ValueError`` (bad JSON, fields, knots),
        ``KeyError`` or ``TypeError`` (missing or mistyped fields)."""
        d = json.loads(text)
        if not isinstance(d, dict) or not isinstance(d.get("tables"), dict):
            raise ValueError("a calibration is a JSON object with tables")
        return cls(
            tuple(sorted((str(k), CosineCalibration.from_dict(v)) for k, v in d["tables"].items())),
            model=str(d.get("model", "")),
            fallback=str(d.get("fallback", "")),
            identities=tuple(sorted((str(k), str(v)) for k, v in (d.get("identities") or {}).items())),
            source=str(d.get("source", "")),
        )


def load_calibration(model: str, fallback: str, *, identities: dict[str, str] | None = None) -> FallbackCalibration:
    """The shipped calibration of the pair, checked against the models' current identity
    digests when ``identities`` (``{"model": digest, "fallback": digest}``) is given. Raises
    ``ConfigError`` when there is none, it cannot be read, or it was fitted on other files."""
    path = calibration_path(model, fallback)
    try:
        cal = FallbackCalibration.from_json(path.read_text(encoding="utf-8"))
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


class _QueriesFirst:
    """One call of the engine at a time, a waiting query before any waiting passage batch: a
    search waits for at most the one passage batch under way, never for a whole build's
    backlog. State lives on one event loop (no thread touches it)."""

    def __init__(self) -> None:
        self._busy = False
        self._waiting: list[tuple[bool, asyncio.Future[None]]] = []

    def _pass_on(self) -> None:
        """Give the free engine to the first waiting query, else the first waiting passage."""
        self._waiting = [(q, f) for q, f in self._waiting if not f.done()]
        if self._busy or not self._waiting:
            return
        pick = next((w for w in self._waiting if w[0]), self._waiting[0])
        self._waiting.remove(pick)
        self._busy = True
        pick[1].set_result(None)

    @contextlib.asynccontextmanager
    async def turn(self, *, query: bool) -> AsyncIterator[None]:
        if not self._busy and not self._waiting:
            self._busy = True
        else:
            granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((query, granted))
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():  # given the turn, then cancelled
                    self._busy = False
                    self._pass_on()
                raise
        try:
            yield
        finally:
            self._busy = False
            self._pass_on()


class _Gated(EncoderWrapper):
    """``encoder`` (the ``Encoder`` protocol) whose ``encode_async`` calls take turns at
    ``gate``."""

    def __init__(self, encoder: Encoder, gate: _QueriesFirst):
        super().__init__(encoder)
        self.gate = gate

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        async with self.gate.turn(query=query):
            return await self.encoder.encode_async(texts, token_counts, query=query)


@dataclass
class FallbackModel:
    """What ``stores.hybrid.HybridStore`` needs of the fallback model.

    ``encoder``: the model (the ``Encoder`` protocol; its ``encode_async`` runs the forward
    pass in a worker thread, off the event loop). ``calibration``: its cosines onto the
    configured model's scale, a table per script. ``label``: its name. ``represents``: which texts it can embed
    (its own ``TokenizerCoverage``; ``None``: every text, e5's case). ``passage_batch``:
    passages per engine call (a query waits for at most one such call, see
    ``_QueriesFirst``). Concurrent queries share one engine call (``CoalescingEmbedFn``).
    Errors of the encoder propagate; ``HybridStore`` then ranks lexically, as without it.
    """

    encoder: Any
    calibration: FallbackCalibration
    label: str
    represents_fn: Callable[[str], bool] | None = None
    passage_batch: int = 8
    _gate: _QueriesFirst = field(default_factory=_QueriesFirst, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.passage_batch < 1:
            raise ValueError("passage_batch must be ≥ 1")
        gated = _Gated(self.encoder, self._gate)
        self._gated = gated
        self._queries = CoalescingEmbedFn(gated, wait_s=0.0, query=True)

    @property
    def dimension(self) -> int:
        """Length of the fallback's vectors."""
        return int(self.encoder.dimension)

    def represents(self, text: str) -> bool:
        """Whether the fallback model can embed ``text`` meaningfully."""
        return self.represents_fn is None or bool(self.represents_fn(text))

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts (n strings) → float32 unit rows ``[n, dimension]``, ``passage_batch``
        per engine call (``[0, dimension]`` for none). Raises what the encoder raises."""
        texts = list(texts)
        parts = [
            (await self._gated.encode_async(texts[i : i + self.passage_batch], query=False)).vectors
            for i in range(0, len(texts), self.passage_batch)
        ]
        if not parts:
            return np.zeros((0, self.dimension), np.float32)
        return np.asarray(np.concatenate(parts), dtype=np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        """One search text → float32 unit vector ``[dimension]``. Raises what the encoder
        raises."""
        (vector,) = await self._queries([text])
        return np.asarray(vector, dtype=np.float32)

    def scale_for(self, query: str) -> CosineCalibration:
        """The map onto the configured model's scale for a search ``query`` (its script's
        table): every fallback cosine of one ranking goes through the same map."""
        return self.calibration.for_text(query)


def open_fallback(settings: EmbeddingSettings) -> FallbackModel | None:
    """The fallback model ``settings.fallback`` names, loaded in this process (CPU, one
    thread) and run once, with its calibration checked against both models' identities; ``None`` when
    ``settings.fallback`` is unset. Raises ``ConfigError`` (no or a stale calibration, a model
    that cannot be loaded)."""
    if settings.fallback is None:
        return None
    from .coverage import TokenizerCoverage
    from .identity import compute_identity
    from .local import local_encoder

    fb = settings.fallback.as_embedding()
    identities = {"model": compute_identity(settings).digest, "fallback": compute_identity(fb).digest}
    calibration = load_calibration(settings.model, fb.model, identities=identities)
    coverage = TokenizerCoverage.from_settings(fb)
    encoder = local_encoder(fb, num_threads=1)
    encoder.encode(["warm up"], query=True)  # the first call pages the weights in (~1 s here), not a user's
    return FallbackModel(
        encoder,
        calibration,
        fb.model,
        represents_fn=coverage.represents if coverage is not None else None,
    )
