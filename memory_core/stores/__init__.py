"""Store contract and backends. ``make_store`` builds the configured backend."""

from .base import EmbedFn, MemoryStore
from .inmemory import InMemoryStore

__all__ = ["EmbedFn", "MemoryStore", "InMemoryStore"]
