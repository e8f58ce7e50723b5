"""The memory-router CLI against the real application in ``api_key`` mode: the first admin key
made with ``keys create --db`` before the service starts (as an operator bootstraps), then
keys made, used and revoked through the admin API, admin commands acting for other users, a
user key refused where it needs the admin role, and the LoCoMo replay written through
``?user_id=``.

One application for the module; each test has its own users.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from memory_core import cli, locomo
from memory_core.cli import common
from tests.conftest import wait_healthy
from tests.memory_core.test_cli_service import small_sample

pytestmark = pytest.mark.integration

runner = CliRunner(env={"COLUMNS": "200"})


@dataclass
class Service:
    url: str
    admin_key: str
    db: Path

    def invoke(self, *args: str, key: str | None = None):
        """The CLI with ``--api-key`` (default: the admin key) and ``--base-url``."""
        return runner.invoke(cli.app, [*args, "--api-key", key or self.admin_key, "--base-url", self.url])

    def get(self, path: str, key: str | None = None, **params) -> httpx.Response:
        return httpx.get(
            self.url + path, params=params, headers={"authorization": f"Bearer {key or self.admin_key}"}, timeout=60
        )


@pytest.fixture(autouse=True)
def _no_key_from_the_environment(monkeypatch):
    monkeypatch.delenv(common.API_KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def svc(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_app

    tmp = tmp_path_factory.mktemp("cli_access")
    db = tmp / "keys" / "access.sqlite"
    made = runner.invoke(
        cli.app, ["keys", "create", "--db", str(db), "--user-id", "ops", "--role", "admin", "--name", "bootstrap"]
    )
    assert made.exit_code == 0, made.output
    assert f"creating the key database {db}" in made.stderr
    admin_key = made.stdout.strip()
    assert re.fullmatch(r"mr_[A-Za-z0-9_-]{43}", admin_key), made.stdout
    config = {
        "global": {
            "stores": {"memory": {"backend": "milvus", "milvus": {"uri": str(tmp / "memory.db"), "collection": "cli"}}},
            "access": {"mode": "api_key", "api_keys": {"path": str(db)}},
        }
    }
    serve.run(build_app({"config": config}), name="memory-cli-keys", route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(url)
    yield Service(url, admin_key, db)
    serve.delete("memory-cli-keys")


def new_user() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def jsonl(tmp_path: Path, *contents: str) -> Path:
    f = tmp_path / f"{uuid.uuid4().hex[:6]}.jsonl"
    f.write_text("".join(json.dumps({"content": c}) + "\n" for c in contents))
    return f


def test_key_made_used_listed_revoked_then_refused(svc, tmp_path):
    dave = new_user()
    made = svc.invoke("keys", "create", "--user-id", dave, "--role", "user", "--name", "laptop")
    assert made.exit_code == 0, made.output
    key = made.stdout.strip()
    assert made.stdout == key + "\n" and key.startswith("mr_")  # the key alone on stdout
    key_id = re.search(r"key id (key_[0-9a-f]+) for user", made.stderr).group(1)
    assert svc.get("/v1/me", key=key).json() == {"user_id": dave, "role": "user", "mode": "api_key"}

    res = svc.invoke("import", str(jsonl(tmp_path, "I keep bees", "My bike is red")), key=key)
    assert res.exit_code == 0 and "imported 2" in res.stderr, res.output
    res = svc.invoke("export", key=key)
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == 3, res.output  # and the end line

    listed = svc.invoke("keys", "list", "--user-id", dave)
    assert listed.exit_code == 0, listed.output
    assert key_id in listed.stdout and "laptop" in listed.stdout and key not in listed.output
    assert "API keys (1)" in listed.stdout

    res = svc.invoke("keys", "revoke", key_id)
    assert res.exit_code == 0 and f"revoked {key_id}" in res.stderr, res.output
    res = svc.invoke("export", key=key)
    assert res.exit_code == 2 and "HTTP 401 invalid_api_key" in res.stderr and "hint: authenticate" in res.stderr
    row = re.search(rf"│\s*{key_id}\s*│.*│\s*(\S+)\s*│\n", svc.invoke("keys", "list", "--user-id", dave).stdout)
    assert row and row.group(1).startswith("20"), "revoked_at is listed"

    res = svc.invoke("keys", "revoke", "key_0000000000000000")
    assert res.exit_code == 2 and "HTTP 404" in res.stderr


def test_a_user_key_cannot_do_admin_work(svc, tmp_path):
    eve, other = new_user(), new_user()
    key = svc.invoke("keys", "create", "--user-id", eve).stdout.strip()
    for args in (
        ["stats"],
        ["consolidate"],
        ["keys", "list"],
        ["import", str(jsonl(tmp_path, "not for you")), "--for-user", other],
        ["export", "--for-user", other],
    ):
        res = svc.invoke(*args, key=key)
        assert res.exit_code == 2, (args, res.output)
        assert "HTTP 403 forbidden" in res.stderr and "hint: this needs an admin" in res.stderr, (args, res.stderr)


def test_admin_imports_exports_consolidates_for_users_and_sees_stats(svc, tmp_path):
    erin, frank = new_user(), new_user()
    res = svc.invoke(
        "import", str(jsonl(tmp_path, "I like sailing", "I own a kayak", "My boat is blue")), "--for-user", erin
    )
    assert res.exit_code == 0 and "imported 3" in res.stderr, res.output
    res = svc.invoke("import", str(jsonl(tmp_path, "Frank likes tea")), "--for-user", frank)
    assert res.exit_code == 0, res.output
    page = svc.get("/v1/memory", user_id=erin).json()
    assert page["total"] == 3 and all(m["user_id"] == erin for m in page["memories"])

    out = tmp_path / "erin.jsonl"
    res = svc.invoke("export", "--for-user", erin, "-o", str(out))
    assert res.exit_code == 0 and f"exported 3 memories of {erin!r}" in res.stderr, res.output
    assert {json.loads(line)["user_id"] for line in out.read_text().splitlines()[:-1]} == {erin}

    res = svc.invoke("consolidate", "--user-id", erin)
    assert res.exit_code == 0, res.output
    assert re.search(rf"│\s*{erin}\s*│\s*3\s*│", res.stdout), res.stdout

    users = [u["user_id"] for u in svc.get("/v1/admin/users").json()["users"]]
    res = svc.invoke("consolidate", "--all")
    assert res.exit_code == 0, res.output
    assert f"{len(users)} users consolidated" in res.stderr
    assert all(re.search(rf"│\s*{re.escape(u)}\s*│\s*\d+\s*│", res.stdout) for u in users), res.stdout

    stats = svc.get("/v1/admin/stats").json()
    res = svc.invoke("stats")
    assert res.exit_code == 0, res.output
    summary = re.search(r"│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)\s*│", res.stdout)
    assert summary and summary.groups() == (str(stats["users"]), str(stats["memories"]), str(stats["keys"]))
    assert re.search(r"│\s*active\s*│\s*" + str(stats["by_state"]["active"]) + r"\s*│", res.stdout)
    assert re.search(rf"│\s*{erin}\s*│\s*3\s*│\s*0\s*│", res.stdout), res.stdout
    assert f"users ({len(users)} of {len(users)})" in res.stdout


def test_key_database_directly_lists_and_revokes_what_the_service_checks(svc):
    grace = new_user()
    made = runner.invoke(cli.app, ["keys", "create", "--db", str(svc.db), "--user-id", grace])
    assert made.exit_code == 0 and "creating the key database" not in made.stderr, made.output
    key = made.stdout.strip()
    assert svc.get("/v1/me", key=key).json()["user_id"] == grace  # the service reads the same file

    listed = runner.invoke(cli.app, ["keys", "list", "--db", str(svc.db), "--user-id", grace])
    key_id = re.search(r"(key_[0-9a-f]{16})", listed.stdout).group(1)
    assert listed.exit_code == 0 and "API keys (1)" in listed.stdout and key not in listed.output
    res = runner.invoke(cli.app, ["keys", "revoke", key_id, "--db", str(svc.db)])
    assert res.exit_code == 0 and f"revoked {key_id}" in res.stderr
    assert svc.get("/v1/me", key=key).status_code == 401

    res = runner.invoke(cli.app, ["keys", "revoke", "key_unknown", "--db", str(svc.db)])
    assert res.exit_code == 2 and "no API key 'key_unknown'" in res.stderr
    res = runner.invoke(cli.app, ["keys", "create", "--db", str(svc.db), "--user-id", " padded "])
    assert res.exit_code == 2 and "user_id" in res.stderr and res.stdout == ""
    missing = svc.db.parent / "typo.sqlite"
    res = runner.invoke(cli.app, ["keys", "list", "--db", str(missing)])
    assert res.exit_code == 2 and f"no key database at {missing}" in res.stderr and not missing.exists()


def test_replay_locomo_as_admin_writes_each_conversation_through_user_id(svc, tmp_path):
    sample = small_sample(sessions=1, questions=2)
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([sample]))
    owner = f"cli-key-{sample['sample_id']}"
    res = svc.invoke("replay-locomo", str(data), "--user-prefix", "cli-key-", "--evaluate")
    assert res.exit_code == 0, res.output
    page = svc.get("/v1/memory", user_id=owner, limit=1000).json()
    assert page["total"] == len(locomo.turns(sample))
    assert {m["created_by_user_id"] for m in page["memories"]} == {"ops"}  # the admin wrote them
    assert re.search(r"│\s*overall\s*│\s*" + str(len(sample["qa"])), res.stdout), res.stdout
    assert svc.get("/v1/memory", user_id="ops").json()["total"] == 0  # nothing went to the admin's own memories
