"""The memory-router CLI: export/import over HTTP (mock transport), migrate store-to-store."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from memory_core import cli
from memory_core.migration import ImportFailure, ImportReport

runner = CliRunner()


@pytest.fixture()
def http(monkeypatch):
    calls = []
    responses = {}

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return responses[(request.method, request.url.path)](request)

    monkeypatch.setattr(cli, "_client", lambda timeout: httpx.Client(transport=httpx.MockTransport(handler)))
    return calls, responses


def test_export_writes_jsonl(http, tmp_path):
    calls, responses = http
    lines = [json.dumps({"id": f"m{i}", "content": f"c{i}", "user_id": "alice"}) for i in range(3)]
    responses[("GET", "/v1/memory/export")] = lambda r: httpx.Response(
        200, text="\n".join(lines) + "\n", headers={"content-type": "application/x-ndjson"}
    )
    out = tmp_path / "alice.jsonl"
    res = runner.invoke(cli.app, ["export", "--user", "alice", "-o", str(out), "--base-url", "http://svc"])
    assert res.exit_code == 0, res.output
    assert out.read_text().splitlines() == lines
    assert calls[0].headers["x-authz-user-id"] == "alice" and str(calls[0].url) == "http://svc/v1/memory/export"


def test_export_http_error_exits_2(http, tmp_path):
    _, responses = http
    responses[("GET", "/v1/memory/export")] = lambda r: httpx.Response(401, json={"error": "no user"})
    res = runner.invoke(cli.app, ["export", "--user", "alice", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "401" in res.output


def test_import_posts_ndjson_and_reports(http, tmp_path):
    calls, responses = http
    f = tmp_path / "in.jsonl"
    f.write_text('{"content": "a"}\n{"content": "b"}\nbad\n')
    responses[("POST", "/v1/memory/import")] = lambda r: httpx.Response(
        200,
        json=ImportReport(imported=2, failed=[ImportFailure(line=3, error="not valid JSON")]).model_dump(),
    )
    res = runner.invoke(cli.app, ["import", "--user", "bob", str(f)])
    assert res.exit_code == 1 and "imported 2" in res.output and "not valid JSON" in res.output
    req = calls[0]
    assert req.headers["content-type"] == "application/x-ndjson" and req.headers["x-authz-user-id"] == "bob"
    assert req.content == f.read_bytes()

    responses[("POST", "/v1/memory/import")] = lambda r: httpx.Response(
        200, json=ImportReport(skipped_duplicates=2).model_dump()
    )
    res = runner.invoke(cli.app, ["import", "--user", "bob", str(f)])
    assert res.exit_code == 0 and "skipped 2" in res.output


def test_migrate_command_reembeds_into_new_collection(tmp_path, local_encoder, bundled_settings):
    """Old memories (8-dim fake model, identity aaaa…) → bundled MiniLM collection, twice."""
    pytest.importorskip("milvus_lite")
    import asyncio

    import yaml

    from memory_core.embedding import compute_identity
    from memory_core.stores.milvus import MilvusStore
    from memory_core.types import Memory
    from tests.ids import tid
    from tests.memory_core.test_migration import fake_embed

    db = tmp_path / "memory.db"
    old_digest = "a" * 64

    async def seed():
        store = MilvusStore(
            uri=str(db), collection=f"agentic_memory__{'a' * 12}", embed=fake_embed(8), dimension=8, identity=old_digest
        )
        for i in range(5):
            await store.store(Memory(id=tid(f"m{i}"), content=f"alice likes topic {i}", user_id="alice"))
        await store.store(Memory(id=tid("b0"), content="bob's note", user_id="bob"))
        await store.close()

    asyncio.run(seed())
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump({"global": {"stores": {"memory": {"backend": "milvus", "milvus": {"uri": str(db)}}}}})
    )
    users = tmp_path / "users.txt"
    users.write_text("alice\nbob\n")
    new = compute_identity(bundled_settings)
    args = [
        "migrate",
        "-c",
        str(cfg),
        "--users",
        str(users),
        "--from-identity",
        old_digest,
        "--from-dimension",
        "8",
        "--to-identity",
        new.short,
    ]
    res = runner.invoke(cli.app, args)
    assert res.exit_code == 0, res.output
    assert "migrated 6" in res.output
    res = runner.invoke(cli.app, args)
    assert res.exit_code == 0 and "migrated 0, skipped 6" in res.output, res.output

    async def check():
        store = MilvusStore(
            uri=str(db), collection=f"agentic_memory__{new.short}", embed=None, dimension=384, identity=new.digest
        )
        got = await store.get(tid("m3"), "alice")
        await store.close()
        return got

    got = asyncio.run(check())
    assert np.allclose(got.embedding, local_encoder.encode([got.content]).vectors[0], atol=1e-4)

    res = runner.invoke(cli.app, args[:-2] + ["--to-identity", "ffffffffffff"])
    assert res.exit_code == 2 and "target identity" in res.output
