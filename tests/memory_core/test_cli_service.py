"""The memory-router CLI against the real application (``serve.run`` on Milvus Lite, the echo
upstream) in trusted_header mode: ``--user`` (and ``--role admin``) as identity headers.

One application for the module; each test has its own users.
"""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest
from typer.testing import CliRunner

from memory_core import cli, locomo
from memory_core.cli import common
from memory_core.types import WINDOW_CREATED_VIA
from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration

runner = CliRunner(env={"COLUMNS": "200"})  # tables on one line each row (ids are never cut, only folded)


@pytest.fixture(scope="module")
def base_url(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_app

    tmp = tmp_path_factory.mktemp("cli_app")
    config = {
        "global": {
            "stores": {"memory": {"backend": "milvus", "milvus": {"uri": str(tmp / "memory.db"), "collection": "cli"}}}
        }
    }
    serve.run(build_app({"config": config}), name="memory-cli", route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(url)
    yield url
    serve.delete("memory-cli")


@pytest.fixture(autouse=True)
def _no_key_from_the_environment(monkeypatch):
    monkeypatch.delenv(common.API_KEY_ENV, raising=False)


def user() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def invoke(base_url: str, *args: str):
    return runner.invoke(cli.app, [*args, "--base-url", base_url])


def memories(base_url: str, user_id: str, **params) -> dict:
    r = httpx.get(f"{base_url}/v1/memory", params={"limit": 1000, **params}, headers={"x-authz-user-id": user_id})
    r.raise_for_status()
    return r.json()


def test_import_in_chunks_export_and_reimport(base_url, tmp_path):
    alice, bob = user(), user()
    facts = ["I prefer window seats", "My locker code is 4817", "I live in Lisbon", "I am allergic to peanuts"]
    lines = [json.dumps({"content": c, "type": "semantic"}) for c in facts[:3]]
    lines.insert(2, "{not json")  # line 3
    lines.append(json.dumps({"content": facts[3], "metadata": {"k": 1}}))
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")

    res = invoke(base_url, "import", str(source), "--user", alice, "--chunk-lines", "2")
    assert res.exit_code == 1, res.output
    assert "imported 4, skipped 0 duplicates, 1 failed" in res.stderr
    failed = re.search(r"│\s*(\d+)\s*│[^│\n]*JSON", res.stderr)
    assert failed and failed.group(1) == "3", res.stderr  # the file's line number, not the chunk's
    assert sorted(m["content"] for m in memories(base_url, alice)["memories"]) == sorted(facts)

    out = tmp_path / "alice.jsonl"
    res = invoke(base_url, "export", "--user", alice, "-o", str(out))
    assert res.exit_code == 0, res.output
    assert f"exported 4 memories of user {alice!r} to {out}" in res.stderr
    *exported, end = [json.loads(line) for line in out.read_text().splitlines()]
    assert end == {"end_of_export": {"memories": 4, "unreadable": []}}
    assert sorted(e["content"] for e in exported) == sorted(facts) and not (tmp_path / "alice.jsonl.part").exists()

    res = invoke(base_url, "export", "--user", alice)  # to stdout
    assert res.exit_code == 0 and sorted(res.stdout.splitlines()) == sorted(out.read_text().splitlines())

    res = invoke(base_url, "import", str(out), "--user", alice)
    assert res.exit_code == 0 and "imported 0, skipped 4 duplicates, 0 failed" in res.stderr, res.output

    # an export names its owner: another user cannot import it (every line fails, exit 1)
    res = invoke(base_url, "import", str(out), "--user", bob)
    assert res.exit_code == 1 and "imported 0, skipped 0 duplicates, 4 failed" in res.stderr, res.output
    assert "belongs to another user" in res.stderr
    assert memories(base_url, bob)["total"] == 0 and memories(base_url, alice)["total"] == 4


def test_import_and_export_report_api_errors(base_url, tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"content": "hello"}) + "\n")
    too_long = "u" * 300  # the owner id rule: at most 256 characters
    res = invoke(base_url, "import", str(f), "--user", too_long)
    assert res.exit_code == 2 and "HTTP 400 invalid_request" in res.stderr, res.output
    res = invoke(base_url, "export", "--user", too_long, "-o", str(tmp_path / "out.jsonl"))
    assert res.exit_code == 2 and "HTTP 400" in res.stderr and not (tmp_path / "out.jsonl").exists()


def test_consolidate_prints_the_pass_report(base_url):
    carol = user()
    h = {"x-authz-user-id": carol}
    for content in ("I like green tea", "Deploys happen on Fridays", "My cat is called Miso"):
        r = httpx.post(f"{base_url}/v1/memory", json={"memories": [{"content": content}]}, headers=h)
        assert r.status_code == 201, r.text
    res = invoke(base_url, "consolidate", "--user", carol, "--role", "admin")
    assert res.exit_code == 0, res.output
    row = re.search(rf"│\s*{carol}\s*│\s*(\d+)\s*│\s*(\d+)\s*│", res.stdout)
    assert row and row.group(1) == "3", res.stdout  # examined: her three active memories
    assert "1 users consolidated:" in res.stderr


def small_sample(sessions: int, questions: int) -> dict:
    """The first LoCoMo conversation cut to its first ``sessions`` sessions and the first
    ``questions`` scored questions whose evidence lies in them."""
    path = locomo.default_path()
    if not path.exists():
        pytest.skip(f"{path} is absent")
    sample = locomo.load_samples(path, 1)[0]
    conv = sample["conversation"]
    keep = locomo.sessions(sample)[:sessions]
    cut = {k: v for k, v in conv.items() if k.startswith("speaker_")}
    for n in keep:
        cut[f"session_{n}"] = conv[f"session_{n}"]
        cut[f"session_{n}_date_time"] = conv[f"session_{n}_date_time"]
    ids = {t["dia_id"] for n in keep for t in conv[f"session_{n}"]}
    qa = [
        q
        for q in sample["qa"]
        if q.get("category") in locomo.SCORED_CATEGORIES and q.get("evidence") and set(q["evidence"]) <= ids
    ]
    return {"sample_id": f"s{uuid.uuid4().hex[:6]}", "conversation": cut, "qa": qa[:questions]}


def test_replay_locomo_rest_evaluate_and_cleanup(base_url, tmp_path):
    sample = small_sample(sessions=2, questions=4)
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([sample]))
    owner = f"cli-locomo-{sample['sample_id']}"
    n_turns = len(locomo.turns(sample))

    res = invoke(base_url, "replay-locomo", str(data), "--user-prefix", "cli-locomo-", "--batch", "8", "--evaluate")
    assert res.exit_code == 0, res.output
    stored = memories(base_url, owner)
    assert stored["total"] == n_turns
    assert {m["metadata"]["dia_id"] for m in stored["memories"]} == {t.dia_id for t in locomo.turns(sample)}
    assert re.search(rf"│\s*{owner}\s*│\s*{n_turns}\s*│\s*{n_turns}\s*│", res.stdout), res.stdout
    overall = re.search(r"│\s*overall\s*│\s*(\d+)\s*│\s*([\d.]+)\s*│\s*([\d.]+)\s*│", res.stdout)
    assert overall and overall.group(1) == str(len(sample["qa"])), res.stdout
    # the same figures as computing recall here from the service's own search answers
    rows = []
    for q in locomo.questions(sample):
        hits = httpx.post(
            f"{base_url}/v1/memory/search", json=locomo.search_body(q.question), headers={"x-authz-user-id": owner}
        ).json()["memories"]
        ranked = [locomo.dia_ids_of(m["metadata"]) for m in hits]
        rows.append((q.category, locomo.recall_at_k(ranked, q.evidence, 5), locomo.recall_at_k(ranked, q.evidence, 10)))
    expected = locomo.summarize(rows)["overall"]
    assert (overall.group(2), overall.group(3)) == (f"{expected['r@5']:.3f}", f"{expected['r@10']:.3f}")

    res = invoke(base_url, "replay-locomo", str(data), "--user-prefix", "cli-locomo-", "--cleanup")
    assert res.exit_code == 0, res.output
    assert "deleted the memories of 1 users" in res.stderr and memories(base_url, owner)["total"] == 0


def test_replay_locomo_chat_stores_through_auto_store(base_url, tmp_path):
    sample = small_sample(sessions=1, questions=2)
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([sample]))
    owner = f"cli-chat-{sample['sample_id']}"
    requests = locomo.chat_requests(sample)

    res = invoke(base_url, "replay-locomo", str(data), "--mode", "chat", "--user-prefix", "cli-chat-", "--evaluate")
    assert res.exit_code == 0, res.output
    stored = memories(base_url, owner)
    assert stored["total"] > 0
    assert {m["created_via"] for m in stored["memories"]} <= {"auto_store", WINDOW_CREATED_VIA}
    sent = sum(r.turns for r in requests)
    assert re.search(rf"│\s*{owner}\s*│\s*{sent}\s*│\s*{stored['total']}\s*│", res.stdout), res.stdout
    assert re.search(r"│\s*overall\s*│\s*" + str(len(sample["qa"])), res.stdout), res.stdout
