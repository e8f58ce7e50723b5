"""An OpenAI-compatible ``/v1/embeddings`` endpoint as an encoder."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import httpx
import numpy as np

from ..config import RemoteEmbeddingSettings
from ..errors import ConfigError, EmbeddingUnavailable
from .encoder import EncodeResult, check_texts, normalize_rows


def _embeddings_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


class RemoteEncoder:
    """Client of an OpenAI-compatible embeddings endpoint (``POST <base>/v1/embeddings``;
    a ``base_url`` already ending in ``/v1`` is used as is).

    Args:
        settings: endpoint settings; the API key is read from the environment variable
            ``api_key_env`` when set (``ConfigError`` if that variable is missing).
        normalize: L2-normalise returned vectors.
        transport: optional httpx transport (tests).

    ``max_seq_length`` is unknown (``None``): ``truncated`` is always False and token counts
    are estimated (``usage.prompt_tokens`` spread over texts by length, else chars/4).
    """

    max_seq_length: int | None = None

    def __init__(
        self,
        settings: RemoteEmbeddingSettings,
        *,
        normalize: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.settings = settings
        self.dimension = settings.dimension
        self.normalize = normalize
        self.url = _embeddings_url(settings.base_url)
        headers = {"content-type": "application/json"}
        if settings.api_key_env:
            key = os.environ.get(settings.api_key_env)
            if not key:
                raise ConfigError(
                    f"embedding.remote.api_key_env: environment variable {settings.api_key_env} is not set"
                )
            headers["authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(timeout=settings.timeout_s, headers=headers, transport=transport)

    @staticmethod
    def estimate_tokens(text: str) -> int:
        """Rough token count (≈ 4 characters per token, at least 1)."""
        return max(1, math.ceil(len(text) / 4))

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Estimated tokens per text (no tokenizer for a remote model)."""
        return [self.estimate_tokens(t) for t in check_texts(texts)]

    async def encode(self, texts: Sequence[str], token_counts: Sequence[int] | None = None) -> EncodeResult:
        """Embed ``texts`` with one request → ``EncodeResult`` (vectors ``[n, dim]`` float32).

        Raises ``EmbeddingUnavailable`` (network error, non-2xx status, malformed body, wrong
        number of vectors, wrong dimension, zero vector), ``InvalidInput`` (texts not strings).
        """
        texts = check_texts(texts)
        if not texts:
            return EncodeResult(np.empty((0, self.dimension), dtype=np.float32), [], [])
        body = {"model": self.settings.model, "input": texts, "encoding_format": "float"}
        try:
            resp = await self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            raise EmbeddingUnavailable(f"embedding endpoint {self.url} unreachable: {e}") from e
        if resp.status_code >= 400:
            raise EmbeddingUnavailable(f"embedding endpoint {self.url} answered {resp.status_code}: {resp.text[:300]}")
        try:
            payload = resp.json()
            data = sorted(payload["data"], key=lambda d: d.get("index", 0))
            vectors = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            raise EmbeddingUnavailable(f"embedding endpoint {self.url} sent a malformed body: {e}") from e
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise EmbeddingUnavailable(
                f"embedding endpoint returned {vectors.shape[0] if vectors.ndim else 0} vectors for {len(texts)} texts"
            )
        if vectors.shape[1] != self.dimension:
            raise EmbeddingUnavailable(
                f"embedding endpoint returned dimension {vectors.shape[1]}; configured {self.dimension}"
            )
        if self.normalize:
            vectors = normalize_rows(vectors)
        if token_counts is not None:
            counts = list(token_counts)
        else:
            counts = self.count_tokens(texts)
            usage = (payload.get("usage") or {}).get("prompt_tokens")
            if isinstance(usage, int) and usage > 0:
                total = sum(counts)
                counts = [max(1, round(usage * c / total)) for c in counts]
        return EncodeResult(vectors=vectors, truncated=[False] * len(texts), token_counts=counts)

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """``encode`` (the ``Encoder`` protocol; one HTTP request, already asynchronous).
        ``query`` is not sent: an OpenAI-compatible endpoint has no field for it."""
        return await self.encode(texts, token_counts)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
