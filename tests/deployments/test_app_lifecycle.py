"""Application lifecycle under ``serve.run``: data survives a restart of the application, and
a collection whose vector dimension does not match the model fails the start clearly."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration


def milvus_config(db: str, collection: str) -> dict:
    return {
        "global": {"stores": {"memory": {"backend": "milvus", "milvus": {"uri": db, "collection": collection}}}},
        "routing": {
            "decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {"enabled": True}}]}]
        },
    }


def test_memories_survive_an_application_restart(serve_http_port, tmp_path):
    from ray import serve

    from deployments.app import build_app

    url = f"http://127.0.0.1:{serve_http_port}"
    config = milvus_config(str(tmp_path / "restart.db"), "restart_memory")
    h = {"x-authz-user-id": "restart-user"}
    serve.run(build_app({"config": config}), name="memory-restart", route_prefix="/", blocking=False)
    try:
        wait_healthy(url)
        r = httpx.post(f"{url}/v1/memory", json={"memories": [{"content": "My locker code is 4817"}]}, headers=h)
        assert r.status_code == 201, r.text
        memory_id = r.json()["memories"][0]["id"]
    finally:
        serve.delete("memory-restart")

    serve.run(build_app({"config": config}), name="memory-restart", route_prefix="/", blocking=False)
    try:
        wait_healthy(url)
        assert httpx.get(f"{url}/v1/memory/{memory_id}", headers=h).json()["content"] == "My locker code is 4817"
        found = httpx.post(f"{url}/v1/memory/search", json={"query": "What is my locker code?"}, headers=h)
        assert found.status_code == 200, found.text
        assert [m["id"] for m in found.json()["memories"]] == [memory_id]
    finally:
        serve.delete("memory-restart")


def test_existing_collection_of_another_dimension_fails_the_start(serve_http_port, tmp_path):
    from ray import serve

    from deployments.app import build_app
    from memory_core.config import EmbeddingSettings
    from memory_core.embedding import compute_identity

    db = str(tmp_path / "dim.db")
    physical = f"dim_memory__{compute_identity(EmbeddingSettings()).short}"
    # create it in another process: Milvus Lite keeps the file locked while its process lives
    script = f"""
from pymilvus import DataType, MilvusClient
client = MilvusClient({db!r})
schema = client.create_schema(auto_id=False)
schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=8)
index = client.prepare_index_params()
index.add_index("embedding", index_type="FLAT", metric_type="COSINE")
client.create_collection({physical!r}, schema=schema, index_params=index)
client.close()
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)

    with pytest.raises(RuntimeError, match="StorePool"):
        serve.run(
            build_app({"config": milvus_config(db, "dim_memory")}),
            name="memory-dim",
            route_prefix="/dim",
            blocking=False,
        )
    try:
        message = serve.status().applications["memory-dim"].deployments["StorePool"].message
        assert "dimension" in message and "384" in message and "8" in message, message
    finally:
        serve.delete("memory-dim")
