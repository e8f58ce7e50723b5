"""Store credentials come from environment variables the configuration names, never from the
configuration itself: literal secrets are refused, a missing variable fails the start with a
``ConfigError`` naming the key and the variable, refused credentials fail clearly, and no
secret appears in an error message.

Valkey runs with ``requirepass`` and an ACL user (real servers started here); Milvus against
the standalone server of the ``milvus`` package with authorization on (``milvus_server``);
Qdrant only up to reading its key (no Qdrant server here).
"""

from __future__ import annotations

import uuid

import pytest

from memory_core.config import (
    CacheSettings,
    CurationSettings,
    MemoryStoreSettings,
    MilvusSettings,
    QdrantSettings,
    RetrievalSettings,
    ValkeySettings,
    load_config,
)
from memory_core.errors import ConfigError, StoreUnavailable
from memory_core.stores import make_store
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.testing.valkey_server import start_valkey_server
from memory_core.types import Memory, RetrieveOptions

SECRET = "s3cret-Valkey-pw"
ALICE_SECRET = "alice-acl-pw"
ENV = "MEMORY_ROUTER_TEST_STORE_PASSWORD"


def _config(memory: dict) -> dict:
    return {"global": {"stores": {"memory": memory}}}


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("memory", "key", "needle"),
    [
        ({"milvus": {"uri": "http://m:19530", "token": "root:Milvus"}}, "milvus", "token_env"),
        ({"qdrant": {"url": "http://q:6333", "api_key": "k-123"}}, "qdrant", "api_key_env"),
    ],
)
def test_literal_secrets_are_refused_without_echoing_them(memory, key, needle):
    with pytest.raises(ConfigError) as e:
        load_config(_config(memory))
    text = str(e.value)
    assert f"global.stores.memory.{key}" in text and needle in text
    assert "root:Milvus" not in text and "k-123" not in text


@pytest.mark.parametrize(
    "memory",
    [
        {"valkey": {"url": "valkey://user:pw@h:6379/0"}},
        {"cache": {"url": "valkey://:pw@h:6379/1"}},
        {"milvus": {"uri": "http://root:pw@m:19530"}},
    ],
)
def test_credentials_in_urls_are_refused(memory):
    with pytest.raises(ConfigError, match="must not hold credentials") as e:
        load_config(_config(memory))
    assert ":pw@" not in str(e.value)


@pytest.mark.parametrize(
    ("memory", "message"),
    [
        ({"milvus": {"uri": "http://m:19530", "user": "root"}}, "user and password_env go together"),
        ({"milvus": {"uri": "http://m:19530", "password_env": "P"}}, "user and password_env go together"),
        (
            {"milvus": {"uri": "http://m:19530", "token_env": "T", "user": "u", "password_env": "P"}},
            "either token_env or user",
        ),
        ({"milvus": {"uri": "./x.db", "token_env": "T"}}, "need a Milvus server uri"),
        ({"milvus": {"uri": "http://m:19530", "server_pem_path": "/s.pem"}}, "secure: true"),
        ({"milvus": {"uri": "https://m:443", "ca_pem_path": "/ca.pem"}}, "mutual TLS"),
        ({"milvus": {"uri": "http://m:19530", "token_env": "not a name"}}, "token_env"),
        ({"valkey": {"username": "alice"}}, "username needs password_env"),
        ({"valkey": {"ca_cert_path": "/ca.pem"}}, "ca_cert_path needs tls"),
        ({"valkey": {"url": "http://h:6379"}}, "url must start with"),
        ({"qdrant": {"api_key_env": "K"}}, "needs a server url"),
    ],
)
def test_inconsistent_connection_settings_are_refused(memory, message):
    with pytest.raises(ConfigError, match=message):
        load_config(_config(memory))


def test_env_names_tls_and_partitions_are_accepted():
    cfg = load_config(
        _config(
            {
                "milvus": {
                    "uri": "https://milvus:443",
                    "user": "memory",
                    "password_env": "MILVUS_PASSWORD",
                    "server_pem_path": "/etc/milvus/server.pem",
                    "num_partitions": 256,
                },
                "valkey": {"url": "valkeys://v:6380/0", "username": "mr", "password_env": "VALKEY_PASSWORD"},
                "cache": {"url": "valkey://v:6379/1", "password_env": "CACHE_PASSWORD", "tls": True},
            }
        )
    )
    m = cfg.memory
    assert (m.milvus.user, m.milvus.password_env, m.milvus.num_partitions) == ("memory", "MILVUS_PASSWORD", 256)
    assert m.valkey.password_env == "VALKEY_PASSWORD" and m.cache.tls


# ---------------------------------------------------------------------- Valkey


@pytest.fixture(scope="module")
def locked_valkey():
    """A Valkey server with the search module, ``requirepass`` and an ACL user ``alice``."""
    server = start_valkey_server(search=True, requirepass=SECRET, acl_users=[f"alice on >{ALICE_SECRET} ~* &* +@all"])
    try:
        yield server
    finally:
        server.stop()


def _valkey_settings(url: str, **connection) -> MemoryStoreSettings:
    name = f"cred_{uuid.uuid4().hex[:8]}"
    return MemoryStoreSettings(
        backend="valkey",
        valkey=ValkeySettings(url=url, prefix=f"{name}:", index=name, **connection),
        retrieval=RetrievalSettings(hybrid=False),
        curation=CurationSettings(enabled=False),
    )


async def _roundtrip(store) -> None:
    m = await store.store(Memory(user_id="alice", content="the locker code is 4817"))
    hits = await store.retrieve(RetrieveOptions(user_id="alice", query="locker code", threshold=-1.0))
    assert [h.memory.id for h in hits] == [m.id]


async def test_valkey_reads_the_password_from_the_environment(locked_valkey, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    store = make_store(
        _valkey_settings(locked_valkey.url_db(0), password_env=ENV), embed=CountingEmbed(), dimension=DIM
    )
    try:
        await _roundtrip(store)
    finally:
        await store.close()


async def test_valkey_acl_user_with_password_from_the_environment(locked_valkey, monkeypatch):
    monkeypatch.setenv(ENV, ALICE_SECRET)
    settings = _valkey_settings(locked_valkey.url_db(0), username="alice", password_env=ENV)
    store = make_store(settings, embed=CountingEmbed(), dimension=DIM)
    try:
        await _roundtrip(store)
    finally:
        await store.close()


async def test_valkey_missing_variable_fails_the_open_naming_key_and_variable(locked_valkey, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    store = make_store(
        _valkey_settings(locked_valkey.url_db(0), password_env=ENV), embed=CountingEmbed(), dimension=DIM
    )
    try:
        with pytest.raises(ConfigError) as e:
            await store.open()
        assert "global.stores.memory.valkey.password_env" in str(e.value) and ENV in str(e.value)
    finally:
        await store.close()


@pytest.mark.parametrize("password", [None, "wrong-password-xyz"])
async def test_valkey_without_or_with_a_wrong_password_fails_clearly(locked_valkey, monkeypatch, password):
    connection = {}
    if password is not None:
        monkeypatch.setenv(ENV, password)
        connection = {"password_env": ENV}
    store = make_store(_valkey_settings(locked_valkey.url_db(0), **connection), embed=CountingEmbed(), dimension=DIM)
    try:
        with pytest.raises(ConfigError, match="refused the connection's credentials") as e:
            await store.open()
        assert "wrong-password-xyz" not in str(e.value) and SECRET not in str(e.value)
    finally:
        await store.close()


async def test_cache_reads_its_password_from_the_environment(locked_valkey, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    settings = MemoryStoreSettings(
        backend="inmemory",
        cache=CacheSettings(enabled=True, url=locked_valkey.url_db(1), password_env=ENV, prefix="credcache:"),
        retrieval=RetrievalSettings(hybrid=False),
        curation=CurationSettings(enabled=False),
    )
    events: list[str] = []
    store = make_store(settings, embed=CountingEmbed(), dimension=DIM, on_event=events.append)
    try:
        await store.store(Memory(user_id="alice", content="the locker code is 4817"))
        opts = RetrieveOptions(user_id="alice", query="locker code", threshold=-1.0)
        first, second = await store.retrieve(opts), await store.retrieve(opts)
        assert [h.memory.id for h in first] == [h.memory.id for h in second]
        assert "cache_hit" in events and "cache_error" not in events
    finally:
        await store.close()
    monkeypatch.delenv(ENV)
    with pytest.raises(ConfigError, match=f"global.stores.memory.cache.password_env: environment variable {ENV}"):
        make_store(settings, embed=CountingEmbed(), dimension=DIM)


# ---------------------------------------------------------------------- Qdrant


async def test_qdrant_missing_key_variable_fails_the_open(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    settings = MemoryStoreSettings(
        backend="qdrant",
        qdrant=QdrantSettings(url="http://127.0.0.1:1", api_key_env=ENV),
        retrieval=RetrievalSettings(hybrid=False),
        curation=CurationSettings(enabled=False),
    )
    store = make_store(settings, embed=CountingEmbed(), dimension=DIM)
    try:
        with pytest.raises(ConfigError, match=f"global.stores.memory.qdrant.api_key_env: environment variable {ENV}"):
            await store.open()
    finally:
        await store.close()


# ---------------------------------------------------------------------- Milvus


async def test_milvus_passes_env_token_and_tls_options_to_the_client(monkeypatch, tmp_path):
    """What reaches ``pymilvus.MilvusClient``: the token read from the variable and the TLS
    keyword arguments under pymilvus's names (a recording stand-in for the client: no
    TLS server here)."""
    import pymilvus

    seen: dict = {}

    class Recorder:
        def __init__(self, **kwargs):
            seen.update(kwargs)
            raise ConnectionError("recorded")

    monkeypatch.setattr(pymilvus, "MilvusClient", Recorder)
    monkeypatch.setenv(ENV, "tok-from-env")
    settings = MemoryStoreSettings(
        milvus=MilvusSettings(
            uri="https://milvus.example:443",
            token_env=ENV,
            server_pem_path=str(tmp_path / "server.pem"),
            server_name="milvus.internal",
        ),
        retrieval=RetrievalSettings(hybrid=False),
        curation=CurationSettings(enabled=False),
    )
    store = make_store(settings, embed=CountingEmbed(), dimension=DIM)
    try:
        with pytest.raises(Exception, match="cannot open Milvus") as e:
            await store.open()
        assert "tok-from-env" not in str(e.value)
    finally:
        await store.close()
    assert seen["token"] == "tok-from-env" and seen["uri"] == "https://milvus.example:443"
    assert seen["server_pem_path"] == str(tmp_path / "server.pem") and seen["server_name"] == "milvus.internal"
    assert "ca_pem_path" not in seen  # only the options that are set


def _server_settings(uri: str, **credentials) -> MemoryStoreSettings:
    return MemoryStoreSettings(
        milvus=MilvusSettings(uri=uri, collection=f"cred_{uuid.uuid4().hex[:8]}", **credentials),
        retrieval=RetrievalSettings(hybrid=False),
        curation=CurationSettings(enabled=False),
    )


@pytest.mark.milvus_server
async def test_milvus_server_credentials_from_the_environment(milvus_server, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    missing = make_store(
        _server_settings(milvus_server.uri, user="root", password_env=ENV), embed=CountingEmbed(), dimension=DIM
    )
    try:
        with pytest.raises(ConfigError, match=f"global.stores.memory.milvus.password_env: environment variable {ENV}"):
            await missing.open()
    finally:
        await missing.close()

    monkeypatch.setenv(ENV, "wrong-password-xyz")
    wrong = make_store(
        _server_settings(milvus_server.uri, user="root", password_env=ENV), embed=CountingEmbed(), dimension=DIM
    )
    try:
        # Milvus 2.3.5 answers a wrong password with "Fail connecting to server ..., illegal
        # connection params or server unavailable", which cannot be told from an unreachable
        # server: StoreUnavailable there (ConfigError where the server names authentication)
        with pytest.raises((ConfigError, StoreUnavailable), match="Milvus at") as e:
            await wrong.open()
        assert "wrong-password-xyz" not in str(e.value)
    finally:
        await wrong.close()

    from memory_core.testing.milvus_server import ROOT_PASSWORD, ROOT_USER

    monkeypatch.setenv(ENV, f"{ROOT_USER}:{ROOT_PASSWORD}")
    right = make_store(_server_settings(milvus_server.uri, token_env=ENV), embed=CountingEmbed(), dimension=DIM)
    try:
        await _roundtrip(right)
    finally:
        await right.close()
