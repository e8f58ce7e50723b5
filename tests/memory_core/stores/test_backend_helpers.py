"""Unit tests of the per-backend helpers: escaping, id mapping, retries, FT.INFO parsing."""

from __future__ import annotations

import string
import uuid

import pytest

from memory_core.config import MilvusSettings
from memory_core.errors import StoreUnavailable
from memory_core.stores.milvus import MilvusStore, _filter, milvus_literal
from memory_core.stores.qdrant import point_id, qdrant_filter
from memory_core.stores.valkey import ValkeyStore, _query_filter, tag_escape, tag_value
from memory_core.types import ListQuery, MemoryType


def _unescape_milvus(literal: str) -> str:
    assert literal[0] == literal[-1] == '"'
    out, i, body = [], 0, literal[1:-1]
    table = {"n": "\n", "r": "\r", "t": "\t"}
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            out.append(table.get(nxt, nxt))
            i += 2
        else:
            assert c not in "\"'\n\r", f"unescaped {c!r} in {literal!r}"
            out.append(c)
            i += 1
    return "".join(out)


@pytest.mark.parametrize(
    "value", ['x" || user_id != "y', "a\\", '\\"', "it's", "line\nbreak", "tab\there", "用户🔑", "a} | @user_id:{b"]
)
def test_milvus_literal_is_one_closed_literal(value):
    lit = milvus_literal(value)
    assert _unescape_milvus(lit) == value


def test_milvus_filter_shape():
    f = _filter('u"1', (MemoryType.SEMANTIC, MemoryType.EPISODIC), "p\\")
    assert f == 'user_id == "u\\"1" and project_id == "p\\\\" and memory_type in ["semantic", "episodic"]'


def test_tag_escape_escapes_every_special_character():
    specials = string.punctuation.replace("_", "") + " \t"
    escaped = tag_escape(specials)
    assert escaped == "".join("\\" + c for c in specials)
    assert tag_escape("abc_XYZ_019") == "abc_XYZ_019"
    assert tag_escape("é") == "\\é"


def test_tag_value_is_exact_and_separator_free():
    ids = ["alice", "Alice", " alice", "alice ", "a,b", "a", "b", "用户"]
    values = [tag_value(i) for i in ids]
    assert len(set(values)) == len(ids)
    assert all(set(v) <= set("0123456789abcdef") for v in values)
    assert bytes.fromhex(tag_value("用户")).decode() == "用户"


def test_valkey_query_filter():
    q = _query_filter("a} | @user_id:{b", (MemoryType.PROCEDURAL,), "p")
    assert (
        q
        == f"(@user_tag:{{{tag_value('a} | @user_id:{b')}}} @project_tag:{{{tag_value('p')}}} @memory_type:{{procedural}})"
    )


def test_qdrant_point_id_deterministic_and_filter_is_data():
    assert point_id("m1") == point_id("m1") != point_id("m2")
    uuid.UUID(point_id("任意の id"))
    f = qdrant_filter('x" || user_id != "y', (MemoryType.SEMANTIC,), "p")
    assert f.must[0].key == "user_id" and f.must[0].match.value == 'x" || user_id != "y'
    assert f.must[1].match.value == "p" and f.must[2].match.any == ["semantic"]


@pytest.mark.parametrize(
    "info,dim",
    [
        # RediSearch 2.x shape
        (
            [
                b"index_name",
                b"i",
                b"attributes",
                [
                    [b"identifier", b"user_tag", b"type", b"TAG"],
                    [
                        b"identifier",
                        b"embedding",
                        b"attribute",
                        b"embedding",
                        b"type",
                        b"VECTOR",
                        b"algorithm",
                        b"HNSW",
                        b"data_type",
                        b"FLOAT32",
                        b"dim",
                        384,
                        b"distance_metric",
                        b"COSINE",
                    ],
                ],
            ],
            384,
        ),
        # valkey-search shape
        (
            [
                b"index_name",
                b"i",
                b"attributes",
                [
                    [
                        b"identifier",
                        b"embedding",
                        b"attribute",
                        b"embedding",
                        b"type",
                        b"VECTOR",
                        b"index",
                        [b"capacity", 10240, b"dimensions", 32, b"distance_metric", b"COSINE"],
                    ]
                ],
            ],
            32,
        ),
        ([b"index_name", b"i", b"attributes", [[b"identifier", b"user_tag", b"type", b"TAG"]]], None),
    ],
)
def test_valkey_index_dimension(info, dim):
    assert ValkeyStore._index_dimension(info) == dim


async def test_milvus_retries_transient_errors_with_backoff(tmp_path):
    store = MilvusStore(
        MilvusSettings(uri=str(tmp_path / "never.db"), collection="c"),
        embed=None,
        dimension=4,
        retries=3,
        backoff_s=0.001,
    )
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("connection reset")
        return "ok"

    assert await store._call(flaky) == "ok" and len(calls) == 3

    calls.clear()

    def down():
        calls.append(1)
        raise ConnectionError("unavailable")

    with pytest.raises(StoreUnavailable):
        await store._call(down)
    assert len(calls) == 3

    calls.clear()

    def broken():
        calls.append(1)
        raise ValueError("bad expression")

    with pytest.raises(ValueError):
        await store._call(broken)
    assert len(calls) == 1  # not transient: no retry
    await store.close()


async def test_backend_outage_is_store_unavailable_not_a_crash():
    """A backend error listed in ``unavailable_errors`` raised inside a data operation
    becomes ``StoreUnavailable`` (HTTP 503 at the API)."""
    from memory_core.errors import StoreUnavailable
    from memory_core.stores import InMemoryStore

    class Flaky(InMemoryStore):
        unavailable_errors = (ConnectionResetError,)

        async def _list(self, *a, **kw):
            raise ConnectionResetError("peer went away")

    store = Flaky(embed=None, dimension=4)
    with pytest.raises(StoreUnavailable, match="peer went away"):
        await store.list(ListQuery(user_id="u"))
    await store.close()


async def test_valkey_unreachable_is_store_unavailable():
    from memory_core.errors import StoreUnavailable
    from memory_core.stores.valkey import ValkeyStore

    store = ValkeyStore(url="valkey://127.0.0.1:1/0", prefix="x:", index="x", embed=None, dimension=4)
    with pytest.raises(StoreUnavailable):
        await store.list(ListQuery(user_id="u"))
    await store.close()


@pytest.mark.parametrize(
    ("info", "algorithm"),
    [
        # RediSearch shape
        (
            [b"attributes", [[b"identifier", b"embedding", b"type", b"VECTOR", b"algorithm", b"FLAT", b"dim", 8]]],
            "flat",
        ),
        (
            [b"attributes", [[b"identifier", b"embedding", b"type", b"VECTOR", b"algorithm", b"HNSW", b"dim", 8]]],
            "hnsw",
        ),
        # valkey-search shape (the algorithm inside the attribute's index section)
        (
            [
                b"attributes",
                [[b"identifier", b"embedding", b"index", [b"algorithm", [b"name", b"FLAT"], b"dimensions", 8]]],
            ],
            "flat",
        ),
        # an attribute other than the embedding's does not count; no algorithm: None
        ([b"attributes", [[b"identifier", b"user_tag", b"algorithm", b"HNSW"], [b"identifier", b"embedding"]]], None),
        ([b"attributes", [[b"identifier", b"embedding", b"type", b"VECTOR", b"dim", 8]]], None),
    ],
)
def test_valkey_index_algorithm(info, algorithm):
    assert ValkeyStore._index_algorithm(info) == algorithm
