"""A deterministic stand-in for the embedding model (tests, benchmarks): hashed
bag-of-words → L2-normalised vector. Texts sharing words get a positive cosine."""

from __future__ import annotations

import hashlib
import math
import re

DIM = 32


def fake_vector(text: str, dim: int = DIM) -> list[float]:
    """``dim``-float unit vector of ``text`` (lower-cased ``\\w+`` tokens hashed into signed
    buckets; a text without tokens maps to the first axis)."""
    v = [0.0] * dim
    for tok in re.findall(r"\w+", text.lower()):
        h = hashlib.blake2b(tok.encode(), digest_size=8).digest()
        v[int.from_bytes(h[:4], "little") % dim] += 1.0 if h[4] & 1 else -1.0
    if not any(v):
        v[0] = 1.0
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


class CountingEmbed:
    """Async ``EmbedFn`` over :func:`fake_vector` that counts its calls in ``calls``."""

    def __init__(self, dim: int = DIM):
        self.dim = dim
        self.calls = 0

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [fake_vector(t, self.dim) for t in texts]
