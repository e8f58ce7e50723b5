"""The one encoder protocol (``Encoder``) every model runtime implements, and what it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import EmbeddingUnavailable, InvalidInput


@dataclass
class EncodeResult:
    """Output of an encoder for n texts.

    Attributes:
        vectors: float32 array ``[n, dim]`` (L2-normalised when the settings say so).
        truncated: per text, True when its tokens (special tokens included) exceeded
            ``max_seq_length`` and only the first ``max_seq_length`` were embedded.
        token_counts: per text, input tokens before truncation (remote: estimated).
    """

    vectors: np.ndarray
    truncated: list[bool] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)

    def processed_tokens(self, max_seq_length: int | None) -> int:
        """Tokens actually embedded (counts capped at ``max_seq_length``)."""
        if max_seq_length is None:
            return sum(self.token_counts)
        return sum(min(c, max_seq_length) for c in self.token_counts)


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list; raises ``InvalidInput`` unless it is a sequence of strings (a
    single string is refused: it would be embedded character by character)."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InvalidInput("texts must be a list of strings")
    return list(texts)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` ``[n, dim]`` scaled to unit rows (float32); raises ``EmbeddingUnavailable``
    for a zero or non-finite row (the model answered garbage)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise EmbeddingUnavailable("the embedding model returned a zero or non-finite vector")
    return (vectors / norms).astype(np.float32, copy=False)


@runtime_checkable
class Encoder(Protocol):
    """An embedding model runtime (``LocalEncoder``, ``OnnxEncoder``, ``RemoteEncoder``).

    ``dimension``: vector length; ``max_seq_length``: tokens beyond which input is truncated
    (``None`` when unknown); ``count_tokens(texts)``: input tokens per text (special tokens
    included); ``encode_async(texts, token_counts=None, *, query=False)``: n texts →
    ``EncodeResult`` with vectors ``[n, dimension]`` (the work runs off the event loop);
    ``query=True`` marks search text, ``False`` stored text (e5 prefixes them ``"query: "`` /
    ``"passage: "``; the sentence-transformers models here embed both alike)."""

    dimension: int

    @property
    def max_seq_length(self) -> int | None: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult: ...


class EncoderWrapper:
    """Base of an encoder that wraps another (``encoder``, the ``Encoder`` protocol) and
    changes only how ``encode_async`` runs: forwards ``dimension``, ``max_seq_length`` and
    ``count_tokens``. Subclasses define ``encode_async``."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.dimension = encoder.dimension

    @property
    def max_seq_length(self) -> int | None:
        return self.encoder.max_seq_length

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.encoder.count_tokens(texts)
