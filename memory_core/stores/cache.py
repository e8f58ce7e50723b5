"""Hot cache of retrieve results in Valkey/Redis, in front of any store.

Read-through: ``retrieve`` answers from the cache when the same options were asked before
(the key hashes the full ``RetrieveOptions`` JSON: user, query, embedding, filters, limit,
threshold, hybrid/lexical/temporal options), else asks the store and caches the answer
for ``ttl_s`` seconds.

Invalidation: ``store``, ``store_many``, ``update``, ``forget`` and ``forget_by_scope``
(``base.WRITE_METHODS``) invalidate the user's entries after the write and before they
return. Each user has a generation counter that is part of every entry key; invalidation
increments it (and deletes the entries listed in the user's key set). A retrieve reads the
generation before asking the store and writes its answer only if the generation is unchanged
(atomically, in a Lua script), so a retrieve that started before a delete and finishes after
it never caches the deleted memory.

Fail-open: when the cache cannot be reached, reads go to the store and ``counters`` count
it. A user whose invalidation failed is remembered (in this process) and bypasses the
cache until an invalidation succeeds. Entry keys carry this process's ``epoch`` (random per
``CachingStore``), so a restarted shard, which no longer knows whose invalidation failed,
starts from an empty cache instead of reading what its predecessor cached (the old entries
expire by their TTL). A cache hit counts as an access of the returned
memories in the store (``record_access``); the cached copies themselves keep the counts
they had when cached.

Counters (plain ints in ``counters``; each increment is also reported to ``on_event`` under
the name in ``EVENT_NAMES``, e.g. ``errors`` → ``cache_error``):
``hits``, ``misses``, ``errors`` (cache failures on reads, answered by the store),
``invalidations``, ``invalidation_errors``, ``stale_skipped`` (answers not cached because a
write happened meanwhile), ``bypassed`` (reads sent past the cache for a dirty user).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import StoreClosed
from ..types import ListQuery, ListResult, Memory, MemoryChanges, MemoryScope, RetrieveOptions, ScoredMemory
from .base import MemoryStore, StoreDecorator
from .credentials import valkey_client

if TYPE_CHECKING:
    from ..config import ValkeyConnectionSettings

log = logging.getLogger(__name__)

# KEYS[1] gen, KEYS[2] entry, KEYS[3] user key set; ARGV[1] expected gen, ARGV[2] value, ARGV[3] ttl s
_WRITE_LUA = """
local g = redis.call('GET', KEYS[1])
if g == false then g = '0' end
if g ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('SADD', KEYS[3], KEYS[2])
redis.call('EXPIRE', KEYS[3], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], 2 * tonumber(ARGV[3])) end
return 1
"""
# KEYS[1] gen, KEYS[2] user key set; ARGV[1] ttl s
_INVALIDATE_LUA = """
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
local ks = redis.call('SMEMBERS', KEYS[2])
for i = 1, #ks, 500 do
  redis.call('DEL', unpack(ks, i, math.min(i + 499, #ks)))
end
redis.call('DEL', KEYS[2])
return #ks
"""

EVENT_NAMES = {
    "hits": "cache_hit",
    "misses": "cache_miss",
    "errors": "cache_error",
    "invalidations": "cache_invalidation",
    "invalidation_errors": "cache_invalidation_error",
    "stale_skipped": "cache_stale_skipped",
    "bypassed": "cache_bypass",
}
"""Counter name → event name given to ``on_event``."""
COUNTER_NAMES = tuple(EVENT_NAMES)


def options_digest(options: RetrieveOptions) -> str:
    """SHA-256 hex of the full options JSON (every field, so any option change is a miss)."""
    return hashlib.sha256(options.model_dump_json().encode("utf-8")).hexdigest()


class CachingStore(StoreDecorator):
    """Valkey/Redis read-through cache of ``retrieve`` in front of ``inner``.

    Args:
        inner: any store (or decorator) keeping the contract.
        url: ``valkey://host:port/db`` of the cache server.
        ttl_s: lifetime of cached answers, seconds (> 0).
        prefix: prefix of every cache key (include the collection name so two stores never
            share entries; ``make_store`` does).
        on_event: optional callback receiving event names (``EVENT_NAMES``); exceptions it
            raises are logged and ignored.
        timeout_s: socket connect/read timeout towards the cache, seconds.
        connection: credentials and TLS of the cache server (``ValkeyConnectionSettings``,
            e.g. ``CacheSettings``; its ``url`` is used in place of ``url``); the password is
            read from the environment variable it names here, at construction.
        settings_key: the configuration key of ``connection``, named in errors.

    Raises ``ConfigError`` when ``connection.password_env`` names a variable that is unset.
    A cache server that refuses the credentials fails open like an unreachable one (its
    errors are counted as ``cache_error``).
    """

    def __init__(
        self,
        inner: MemoryStore | StoreDecorator,
        *,
        url: str,
        ttl_s: int = 300,
        prefix: str = "memcache:",
        on_event: Callable[[str], None] | None = None,
        timeout_s: float = 0.5,
        connection: ValkeyConnectionSettings | None = None,
        settings_key: str = "global.stores.memory.cache",
    ):
        super().__init__(inner)
        from ..config import ValkeyConnectionSettings

        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        if connection is None:
            connection = ValkeyConnectionSettings(url=url)
        url = connection.url
        self.url = url
        self.ttl_s = int(ttl_s)
        self.prefix = prefix
        self.on_event = on_event
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        self._client = valkey_client(
            connection, settings_key, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._write_script = self._client.register_script(_WRITE_LUA)
        self._invalidate_script = self._client.register_script(_INVALIDATE_LUA)
        self._dirty: set[str] = set()
        # entries are read only by the process that wrote them: a restarted process (which
        # lost ``_dirty``) never reads what its predecessor cached, so a write whose
        # invalidation failed before the restart cannot resurface as a stale entry
        self.epoch = secrets.token_hex(6)
        self._closed = False
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    # ------------------------------------------------------------------ plumbing
    @property
    def closed(self) -> bool:
        return self._closed or self.inner.closed

    @contextlib.asynccontextmanager
    async def _op(self):
        if self.closed:
            raise StoreClosed(f"{self.name} store is closed")
        self._inflight += 1
        self._drained.clear()
        try:
            yield
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    def _count(self, name: str) -> None:
        self.counters[name] += 1
        if self.on_event is not None:
            try:
                self.on_event(EVENT_NAMES[name])
            except Exception:
                log.exception("cache on_event callback failed")

    def _user_keys(self, user_id: str) -> tuple[str, str, str]:
        u = hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:32]
        return f"{self.prefix}g:{u}", f"{self.prefix}s:{u}", f"{self.prefix}r:{u}:{self.epoch}:"

    async def _invalidate(self, user_id: Any) -> None:
        if not isinstance(user_id, str) or not user_id.strip():
            return
        gen, keyset, _ = self._user_keys(user_id)
        try:
            await self._invalidate_script(keys=[gen, keyset], args=[self.ttl_s])
        except Exception as e:
            self._dirty.add(user_id)
            self._count("invalidation_errors")
            log.warning("cache invalidation for a user failed (%s); bypassing the cache for them", e)
            return
        self._dirty.discard(user_id)
        self._count("invalidations")

    # ------------------------------------------------------------------ reads
    async def _inner_retrieve(self, options: RetrieveOptions, touch: bool) -> list[ScoredMemory]:
        if touch:  # the plain call: an inner decorator without the ``touch`` hook still works
            return await self.inner.retrieve(options)
        return await self.inner.retrieve(options, touch=False)

    async def retrieve(self, options: RetrieveOptions, *, touch: bool = True) -> list[ScoredMemory]:
        """As ``MemoryStore.retrieve``, answered from the cache when possible. ``touch=False``
        leaves access counts alone, on a hit as on a miss (as ``MemoryStore.retrieve``)."""
        async with self._op():
            user = options.user_id
            if not isinstance(user, str) or not user.strip():
                return await self._inner_retrieve(options, touch)  # the store raises InvalidInput
            if user in self._dirty:
                await self._invalidate(user)
                if user in self._dirty:
                    self._count("errors")
                    self._count("bypassed")
                    return await self._inner_retrieve(options, touch)
            gen_key, keyset, entry_prefix = self._user_keys(user)
            try:
                gen = await self._client.get(gen_key)
                gen = gen.decode() if gen is not None else "0"
                entry = f"{entry_prefix}{gen}:{options_digest(options)}"
                cached = await self._client.get(entry)
            except Exception as e:
                self._count("errors")
                log.warning("cache read failed (%s); answering from the store", e)
                return await self._inner_retrieve(options, touch)
            if cached is not None:
                try:
                    results = [ScoredMemory.model_validate(r) for r in json.loads(cached)]
                    self._count("hits")
                    if results and touch:  # a hit is still an access (written behind by the store)
                        await self.inner.record_access([r.memory.id for r in results], user)
                    return results
                except (ValueError, TypeError):
                    log.warning("unreadable cache entry ignored")
            self._count("misses")
            results = await self._inner_retrieve(options, touch)
            payload = json.dumps([r.model_dump(mode="json") for r in results], ensure_ascii=False)
            try:
                written = await self._write_script(keys=[gen_key, entry, keyset], args=[gen, payload, self.ttl_s])
            except Exception as e:
                self._count("errors")
                log.warning("cache write failed (%s)", e)
                return results
            if not written:
                self._count("stale_skipped")
            return results

    async def get(self, memory_id: str, user_id: str) -> Memory:
        async with self._op():
            return await self.inner.get(memory_id, user_id)

    async def get_many(self, memory_ids, user_id: str) -> list[Memory]:
        async with self._op():
            return await self.inner.get_many(memory_ids, user_id)

    async def list(self, query: ListQuery) -> ListResult:
        async with self._op():
            return await self.inner.list(query)

    async def check_connection(self) -> bool:
        """The store's answer (a down cache does not make the service unhealthy: fail-open)."""
        async with self._op():
            return await self.inner.check_connection()

    async def open(self):
        async with self._op():
            await self.inner.open()
            return self

    # ------------------------------------------------------------------ writes (invalidate)
    async def store(self, memory: Memory) -> Memory:
        async with self._op():
            try:
                return await self.inner.store(memory)
            finally:
                await self._invalidate(memory.user_id)

    async def store_many(self, memories: Sequence[Memory]) -> builtins.list[Memory]:
        """As ``MemoryStore.store_many``; then invalidates the entries of the batch's user(s)
        (also when the store raised: an all-or-nothing refusal costs one invalidation)."""
        batch = list(memories)
        async with self._op():
            try:
                return await self.inner.store_many(batch)
            finally:
                for user_id in dict.fromkeys(getattr(m, "user_id", None) for m in batch):
                    await self._invalidate(user_id)

    async def update(self, memory_id: str, user_id: str, changes: MemoryChanges) -> Memory:
        async with self._op():
            try:
                return await self.inner.update(memory_id, user_id, changes)
            finally:
                await self._invalidate(user_id)

    async def forget(self, memory_id: str, user_id: str) -> None:
        async with self._op():
            try:
                await self.inner.forget(memory_id, user_id)
            finally:
                await self._invalidate(user_id)

    async def forget_by_scope(self, scope: MemoryScope) -> int:
        async with self._op():
            try:
                return await self.inner.forget_by_scope(scope)
            finally:
                await self._invalidate(scope.user_id)

    async def close(self) -> None:
        """Refuse new calls, close the store (which refuses new work at once and drains its
        in-flight operations), wait for this decorator's in-flight calls (their cache writes
        and invalidations), then close the cache connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.inner.close()
        finally:
            await self._drained.wait()
            with contextlib.suppress(Exception):
                await self._client.aclose()
