"""User → shard mapping of the store actor pool."""

from __future__ import annotations

import hashlib


def shard_for(user_id: str, shards: int) -> int:
    """Stable shard index in ``[0, shards)`` for ``user_id`` (SHA-1 based, identical across
    processes and Python versions, unlike ``hash()``). Raises ``ValueError`` if shards < 1."""
    if shards < 1:
        raise ValueError("shards must be ≥ 1")
    digest = hashlib.sha1(user_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards
