"""No caller value reaches a backend's query language: a table of crafted ids and scope
values run through every store method, on every backend (bare and behind the hot cache),
checked at the storage level.

User ``A`` (the attacker) holds one memory; user ``V`` (the victim) holds three. ``A`` runs
every contract method with crafted ids (quotes, expression fragments, RediSearch syntax,
key-name tricks, ``V``'s real ids) and crafted project ids. Afterwards the backend's own
rows (read with the backend client, not through the contract) show ``V``'s records
untouched — same ids, contents, projects, access counts — and nothing ``A`` got back
belongs to ``V``.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest

from memory_core.config import (
    CacheSettings,
    MemoryStoreSettings,
    MilvusSettings,
    QdrantSettings,
    RetrievalSettings,
    ValkeySettings,
)
from memory_core.errors import DuplicateMemory, InvalidInput, MemoryNotFound
from memory_core.stores import make_store
from memory_core.stores.base import StoreDecorator
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import ListQuery, Memory, MemoryChanges, MemoryScope, MemoryType, RetrieveOptions
from tests.conftest import MILVUS_PASSWORD_ENV

BACKENDS = ["inmemory", "milvus", "qdrant", "valkey"]
RIGS = [(b, cached, hybrid) for b in BACKENDS for cached in (False, True) for hybrid in (False, True)] + [
    pytest.param(("milvus_server", False, False), marks=pytest.mark.milvus_server)
]
_n = itertools.count()

A, V = "attacker", "victim"


def crafted_ids(victim_ids: list[str]) -> list[str]:
    """Ids built to break out of an expression, a RediSearch query or a key name, plus the
    victim's real ids (valid format, wrong owner)."""
    vid = victim_ids[0]
    return [
        f"{vid}'] or user_id == '{V}' or id in ['zz",
        f'{vid}"] or user_id == "{V}" or id in ["zz',
        f'x" || user_id != "{A}',
        "x' or 1==1 or id=='",
        "a'b",
        'a"b',
        "\\",
        "a\\",
        "*",
        "%",
        "",
        " ",
        f"{vid} ",
        f" {vid}",
        vid.upper(),
        f"{vid}\n",
        f'id in ["{vid}"]',
        f"@user_tag:{{{V.encode().hex()}}}",
        "(@user_tag:{*})",
        "a|b",
        "{}",
        f"../m:{vid}",
        f"m:{vid}",
        "ｉｄ",
        "x" * 1000,
        *victim_ids,
    ]


CRAFTED_SCOPES = [
    f"p' or user_id == '{V}",
    f'p" || user_id != "{A}',
    f'p"] or user_id == "{V}" or project_id in ["',
    "@user_tag:{*}",
    "*",
    "p|q",
    "p\\",
    "p{x}",
    "victim-project",  # the victim's own project id: still only the caller's memories
]


def settings(
    kind: str, cached: bool, hybrid: bool, tmp, server, name: str, milvus_uri: str | None = None
) -> MemoryStoreSettings:
    cache = CacheSettings(enabled=False)
    if cached:
        cache = CacheSettings(enabled=True, url=server.url_db(1), ttl_s=60, prefix=f"c_{name}:")
    milvus = MilvusSettings(uri=str(tmp / "milvus.db"), collection=name)
    if milvus_uri:  # the milvus_server rig: a Milvus server with authorization on
        milvus = MilvusSettings(uri=milvus_uri, collection=name, user="root", password_env=MILVUS_PASSWORD_ENV)
    return MemoryStoreSettings(
        backend="milvus" if kind == "milvus_server" else kind,
        milvus=milvus,
        qdrant=QdrantSettings(path=str(tmp / "qdrant"), collection=name),
        valkey=ValkeySettings(
            url=server.url_db(0) if server else "valkey://127.0.0.1:1/0", prefix=f"m_{name}:", index=name
        ),
        cache=cache,
        retrieval=RetrievalSettings(hybrid=hybrid),
    )


def backend_of(store):
    while isinstance(store, StoreDecorator):
        store = store.inner
    return store


async def storage_rows(store) -> dict[str, dict[str, Any]]:
    """Every record the backend holds, read with the backend's own client:
    ``{id: {user_id, content, project_id, access_count}}``."""
    b = backend_of(store)
    await b.open()
    out: dict[str, dict[str, Any]] = {}
    if b.name == "inmemory":
        for m in b._rows.values():
            out[m.id] = {
                "user_id": m.user_id,
                "content": m.content,
                "project_id": m.project_id,
                "access_count": m.access_count,
            }
    elif b.name == "milvus":
        rows = await b._call(b._query_all, 'id != ""', ["id", "user_id", "content", "project_id", "access_count"])
        for r in rows:
            out[r["id"]] = {k: r[k] for k in ("user_id", "content", "project_id", "access_count")}
    elif b.name == "qdrant":
        offset = None
        while True:
            points, offset = await b._client.scroll(b.collection, limit=1000, offset=offset, with_payload=True)
            for p in points:
                pl = p.payload
                out[pl["id"]] = {k: pl.get(k) for k in ("user_id", "content", "project_id", "access_count")}
            if offset is None:
                break
    elif b.name == "valkey":
        async for key in b._client.scan_iter(match=f"{b.prefix}m:*"):
            h = {k.decode(): v.decode() for k, v in (await b._client.hgetall(key)).items() if k != b"embedding"}
            out[h["id"]] = {
                "user_id": h["user_id"],
                "content": h["content"],
                "project_id": h.get("project_id"),
                "access_count": int(h.get("access_count", 0)),
            }
    else:  # pragma: no cover
        raise AssertionError(b.name)
    return out


def victim_rows(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i: r for i, r in rows.items() if r["user_id"] == V}


def assert_none_of_victims(value: Any) -> None:
    """Nothing in ``value`` (results of any store call) belongs to the victim."""
    if isinstance(value, Memory):
        assert value.user_id != V, value
    elif hasattr(value, "memory"):
        assert_none_of_victims(value.memory)
    elif hasattr(value, "memories"):
        for m in value.memories:
            assert_none_of_victims(m)
    elif isinstance(value, (list, tuple)):
        for v in value:
            assert_none_of_victims(v)


@pytest.fixture(params=RIGS, ids=lambda p: p[0] + ("+cache" if p[1] else "") + ("+hybrid" if p[2] else ""))
async def stores(request, tmp_path):
    kind, cached, hybrid = request.param
    server = request.getfixturevalue("valkey_server") if (kind == "valkey" or cached) else None
    milvus = request.getfixturevalue("milvus_server") if kind == "milvus_server" else None
    name = f"x{next(_n)}_{uuid.uuid4().hex[:6]}"
    store = make_store(
        settings(kind, cached, hybrid, tmp_path, server, name, milvus.uri if milvus else None),
        embed=CountingEmbed(),
        dimension=DIM,
        identity="fake",
    )
    try:
        yield store
    finally:
        await store.close()


async def test_crafted_ids_and_scopes_never_reach_another_users_rows(stores):
    store = stores
    mine = await store.store(Memory(user_id=A, content="attacker note about gardens", project_id="own"))
    theirs = [
        await store.store(Memory(user_id=V, content=content, project_id="victim-project"))
        for content in ("victim secret about gardens", "the victim's bank is Northwind", "victim likes tulips")
    ]
    await store.retrieve(RetrieveOptions(user_id=V, query="gardens", hybrid=True, limit=5))  # victim reads: access 1
    backend = backend_of(store)
    backend._flush_access_now.set()
    for _ in range(200):
        if not backend._access_pending:
            break
        await asyncio.sleep(0.05)
    backend._flush_access_now.clear()
    before = victim_rows(await storage_rows(store))
    assert len(before) == 3 and all(r["access_count"] == 1 for r in before.values())

    ids = crafted_ids([m.id for m in theirs])
    returned: list[Any] = []
    for bad in ids:
        for call in (
            store.get(bad, A),
            store.update(bad, A, MemoryChanges(content="overwritten by attacker")),
            store.forget(bad, A),
        ):
            with pytest.raises(MemoryNotFound):
                returned.append(await call)
        returned.append(await store.get_many([bad, mine.id], A))
        planted = Memory(user_id=A, content="planted").model_copy(update={"id": bad})  # past the model's checks
        with pytest.raises((InvalidInput, DuplicateMemory)):
            await store.store(planted)
        with pytest.raises((InvalidInput, DuplicateMemory)):
            await store.store_many([planted])
        await store.record_access([bad], A)
        returned.append(
            await store.retrieve(
                RetrieveOptions(user_id=A, query=bad if bad.strip() else "x", hybrid=True, limit=10, threshold=-1)
            )
        )
    returned.append(await store.get_many(ids, A))
    for scope in CRAFTED_SCOPES:
        returned.append(await store.list(ListQuery(user_id=A, project_id=scope, limit=100)))
        returned.append(
            await store.retrieve(
                RetrieveOptions(user_id=A, query="gardens", project_id=scope, hybrid=True, limit=10, threshold=-1)
            )
        )
        returned.append(
            await store.retrieve(
                RetrieveOptions(user_id=A, query="gardens", project_id=scope, hybrid=False, limit=10, threshold=-1)
            )
        )
        assert await store.forget_by_scope(MemoryScope(user_id=A, project_id=scope)) == 0
        assert await store.forget_by_scope(MemoryScope(user_id=A, project_id=scope, types=[MemoryType.SEMANTIC])) == 0
        mv = await store.store(Memory(user_id=A, content="attacker scoped note", project_id=scope))
        returned.append(mv)
        assert (await store.list(ListQuery(user_id=A, project_id=scope))).total == 1
        assert await store.forget_by_scope(MemoryScope(user_id=A, project_id=scope)) == 1
    returned.append(await store.list(ListQuery(user_id=A, limit=1000)))
    returned.append(
        await store.retrieve(
            RetrieveOptions(user_id=A, query="victim secret gardens", hybrid=True, limit=50, threshold=-1)
        )
    )
    assert_none_of_victims(returned)

    await store.forget_by_scope(MemoryScope(user_id=A))  # everything of the caller, nothing of anyone else
    backend._flush_access_now.set()
    for _ in range(200):
        if not backend._access_pending:
            break
        await asyncio.sleep(0.05)
    after = await storage_rows(store)
    assert victim_rows(after) == before
    assert not [r for r in after.values() if r["user_id"] == A]
