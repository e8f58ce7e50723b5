"""Store contract and backends. ``make_store`` builds the configured backend (Milvus, Qdrant,
Valkey or in-memory), optionally behind the Valkey hot cache. Backend modules are imported
lazily by the factory, so importing this package needs none of the backend clients."""

from ..embedding.identity import physical_name
from .base import EmbedFn, MemoryStore, Store, StoreDecorator
from .factory import make_store
from .inmemory import InMemoryStore

__all__ = ["EmbedFn", "MemoryStore", "Store", "StoreDecorator", "InMemoryStore", "make_store", "physical_name"]
