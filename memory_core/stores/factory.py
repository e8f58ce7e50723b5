"""Build the configured store from ``MemoryStoreSettings``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

from ..config import MemoryStoreSettings
from ..embedding.identity import physical_name
from ..errors import ConfigError
from .base import EmbedFn, MemoryStore, StoreDecorator

if TYPE_CHECKING:  # pragma: no cover
    from ..embedding.fallback import FallbackModel


class _CommonArgs(TypedDict):
    """The ``MemoryStore`` arguments every backend gets."""

    embed: EmbedFn | None
    embed_query: EmbedFn | None
    dimension: int
    identity: str | None
    represents: Callable[[str], bool] | None


def make_store(
    settings: MemoryStoreSettings,
    *,
    embed: EmbedFn | None,
    dimension: int,
    identity: str | None = None,
    collection_suffix: str | None = None,
    on_event: Callable[[str], None] | None = None,
    embed_query: EmbedFn | None = None,
    represents: Callable[[str], bool] | None = None,
    fallback: FallbackModel | None = None,
) -> MemoryStore | StoreDecorator:
    """The backend named by ``settings.backend`` (``milvus`` | ``qdrant`` | ``valkey`` |
    ``inmemory``), wrapped by :class:`~memory_core.stores.hybrid.HybridStore` when
    ``settings.retrieval.hybrid``, then by :class:`~memory_core.stores.cache.CachingStore`
    when ``settings.cache.enabled``, and outermost by
    :class:`~memory_core.stores.curating.CuratingStore` unless ``settings.curation.enabled`` is
    false (with the LLM judge of ``curation.llm_judge`` when enabled).

    The collection (Milvus/Qdrant), index and key prefix (Valkey) and cache key prefix are
    the configured logical names + ``"__" + collection_suffix`` when given. ``on_event`` is
    passed to the cache (counter names such as ``cache_hit``, ``cache_error``). ``embed_query``
    embeds query texts instead of ``embed`` when given; ``represents`` tells which texts the
    embedding model can represent (see ``MemoryStore``). ``fallback``: the model for the texts
    it cannot (``embedding.fallback``, loaded once by the caller with
    ``memory_core.embedding.fallback.open_fallback``; used by ``HybridStore``, which
    reports its events to ``on_event``); ignored without hybrid retrieval, which the
    configuration then refuses.

    Credentials come from the environment variables the settings name (``token_env``,
    ``password_env``, ``api_key_env``; ``memory_core.stores.credentials``): the cache reads
    its password here, the backends when they open.

    Building does no I/O; ``await store.open()`` (or the first operation) connects and
    creates or checks the collection/index, raising ``ConfigError`` (e.g. an existing
    collection of another vector dimension, a credential variable that is unset, refused
    credentials) or ``StoreUnavailable`` (unreachable). Building raises ``ConfigError`` when
    the cache's password variable is unset.
    """
    common: _CommonArgs = {
        "embed": embed,
        "embed_query": embed_query,
        "dimension": dimension,
        "identity": identity,
        "represents": represents,
    }
    backend, name = _backend(settings, common, collection_suffix)
    store: MemoryStore | StoreDecorator = backend
    if settings.retrieval.hybrid:
        # lexical index kept in step with the store; inside the cache so that cached results
        # are the fused ones and cache invalidation covers them
        from .hybrid import HybridStore

        store = HybridStore.from_settings(
            store,
            settings.retrieval,
            fallback=fallback,
            on_event=on_event,
        )
    if settings.cache.enabled:
        from .cache import CachingStore

        c = settings.cache
        store = CachingStore(
            store,
            url=c.url,
            ttl_s=c.ttl_s,
            prefix=f"{c.prefix}{settings.backend}:{name}:",
            on_event=on_event,
            connection=c,
            settings_key="global.stores.memory.cache",
        )
    if not settings.curation.enabled:
        return store
    # outermost: every write is curated (screening, one record per fact, supersession), and
    # its own writes go through the cache's invalidation and the hybrid index below
    return _curating(store, settings, on_event)


def _backend(
    settings: MemoryStoreSettings, common: _CommonArgs, collection_suffix: str | None
) -> tuple[MemoryStore, str]:
    """(the backend store named by ``settings.backend``, the physical name of its collection,
    index or store): built, not opened."""
    backend = settings.backend
    store: MemoryStore
    if backend == "milvus":
        from .milvus import MilvusStore

        m = settings.milvus
        name = physical_name(m.collection, collection_suffix)
        store = MilvusStore(m.model_copy(update={"collection": name}), **common)
    elif backend == "qdrant":
        from .qdrant import QdrantStore

        q = settings.qdrant
        name = physical_name(q.collection, collection_suffix)
        store = QdrantStore(url=q.url, api_key_env=q.api_key_env, path=q.path, collection=name, **common)
    elif backend == "valkey":
        from .valkey import ValkeyStore

        v = settings.valkey
        name = physical_name(v.index, collection_suffix)
        prefix = physical_name(v.prefix.rstrip(":"), collection_suffix) + ":" if collection_suffix else v.prefix
        store = ValkeyStore(
            url=v.url,
            prefix=prefix,
            index=name,
            connection=v,
            settings_key="global.stores.memory.valkey",
            knn_prefilter=v.knn_prefilter,
            vector_index=v.vector_index,
            **common,
        )
    elif backend == "inmemory":
        from .inmemory import InMemoryStore

        name = physical_name("inmemory", collection_suffix)
        store = InMemoryStore(**common)
    else:  # pragma: no cover - the settings model forbids other values
        raise ConfigError(f"global.stores.memory.backend: unknown backend {backend!r}")
    return store, name


def _curating(store: MemoryStore | StoreDecorator, settings: MemoryStoreSettings, on_event) -> StoreDecorator:
    """``store`` behind ``CuratingStore`` (with the LLM judge when ``curation.llm_judge`` is
    enabled, and the redaction settings)."""
    from .curating import CuratingStore

    judge_settings = settings.curation.llm_judge
    llm_judge = None
    if judge_settings.enabled:
        from ..curation.llm import LLMJudge, http_complete

        llm_judge = LLMJudge(http_complete(judge_settings), judge_settings.model or "")
    return CuratingStore(store, settings.curation, on_event=on_event, llm_judge=llm_judge, redaction=settings.redaction)
