"""Store contract and backends. ``make_store`` builds the configured backend (Milvus, Qdrant,
Valkey or in-memory), optionally behind the Valkey hot cache. Backend modules are imported
lazily by the factory, so importing this package needs none of the backend clients."""

from .base import EmbedFn, MemoryStore, StoreDecorator
from .factory import make_store, physical_name
from .inmemory import InMemoryStore

__all__ = ["EmbedFn", "MemoryStore", "StoreDecorator", "InMemoryStore", "make_store", "physical_name"]
