"""The memory-router CLI without the service: option checks and error paths against a small
in-process HTTP stub (``Stub``: canned answers per route, the requests it received), and
``migrate`` store to store. The happy paths against the real application are in
``test_cli_service.py``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from typer.testing import CliRunner

from memory_core import cli
from memory_core.cli import common
from tests.conftest import free_port

runner = CliRunner()


@dataclass
class Answer:
    """A canned answer: ``body`` (dict → JSON, str → text), extra ``headers``, ``delay`` s."""

    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


class Stub:
    """An HTTP server on a free loopback port answering ``routes[(method, path)]``: a list of
    ``Answer`` given in order, the last one repeated; 404 for other routes."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Answer]] = {}
        self.received: list[Received] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                url = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                stub.received.append(
                    Received(
                        self.command,
                        url.path,
                        parse_qs(url.query),
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                answers = stub.routes.get((self.command, url.path)) or [
                    Answer(404, {"error": {"code": "not_found", "message": "no route"}})
                ]
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                time.sleep(answer.delay)
                data = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
                payload = data.encode()
                self.send_response(answer.status)
                self.send_header("content-type", "text/plain" if isinstance(answer.body, str) else "application/json")
                self.send_header("content-length", str(len(payload)))
                for k, v in answer.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def stub(monkeypatch) -> Iterator[Stub]:
    monkeypatch.delenv(common.API_KEY_ENV, raising=False)
    monkeypatch.delenv(common.URL_ENV, raising=False)
    server = Stub()
    yield server
    server.close()


def run(stub: Stub, *args: str):
    return runner.invoke(cli.app, [*args, "--base-url", stub.url])


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, {"error": {"code": code, "message": message}}, headers or {})


# --------------------------------------------------------------------------- identity options
def test_identity_options_are_checked_before_any_request(stub):
    res = run(stub, "stats")
    assert res.exit_code == 2 and "no identity" in res.output and "--api-key" in res.output
    res = run(stub, "stats", "--api-key", "mr_x", "--user", "ops")
    assert res.exit_code == 2 and "not both" in res.output
    res = run(stub, "stats", "--api-key", "mr_x", "--role", "admin")
    assert res.exit_code == 2 and "--role goes with --user" in res.output
    res = run(stub, "consolidate", "--user", "ops", "--user-id", "a", "--all")
    assert res.exit_code == 2 and "not both" in res.output
    res = run(stub, "replay-locomo", "--mode", "chat", "--api-key", "mr_x")
    assert res.exit_code == 2 and "--mode chat sends each conversation as its own user" in res.output
    assert stub.received == []


def test_api_key_from_the_environment_goes_as_bearer_and_headers_mode_sends_user_and_role(stub, monkeypatch):
    stub.routes[("POST", "/v1/memory/consolidate")] = [
        Answer(
            body={
                "user_id": "bob",
                "examined": 4,
                "groups": 1,
                "merged": ["m1"],
                "consolidated": 2,
                "expired": 0,
                "seconds": 0.5,
            }
        )
    ]
    monkeypatch.setenv(common.API_KEY_ENV, "mr_secret")
    res = run(stub, "consolidate", "--user-id", "bob")
    assert res.exit_code == 0, res.output
    sent = stub.received[-1]
    assert sent.headers["authorization"] == "Bearer mr_secret" and sent.query == {"user_id": ["bob"]}
    assert "x-authz-user-id" not in sent.headers
    assert sent.body == b"" and sent.headers["content-type"] == "application/json"  # body-less, still JSON (415)

    monkeypatch.setenv(common.API_KEY_ENV, "")  # an empty variable is no key
    res = run(stub, "consolidate", "--user", "ops", "--role", "admin")
    assert res.exit_code == 0, res.output
    sent = stub.received[-1]
    assert sent.headers["x-authz-user-id"] == "ops" and sent.headers["x-authz-role"] == "admin"
    assert "authorization" not in sent.headers and sent.query == {}


# --------------------------------------------------------------------------- errors
def test_unreachable_service_exits_2_naming_the_url(monkeypatch):
    monkeypatch.delenv(common.API_KEY_ENV, raising=False)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for args in (
        ["export", "-u", "a"],
        ["stats", "-u", "a"],
        ["keys", "list", "-u", "a"],
        ["replay-locomo", "-n", "1"],
    ):
        res = runner.invoke(cli.app, [*args, "--base-url", url])
        assert res.exit_code == 2, (args, res.output)
        assert f"cannot reach the service at {url}" in res.output, res.output


def test_api_errors_show_status_code_message_and_a_hint(stub):
    stub.routes[("GET", "/v1/admin/stats")] = [
        error(401, "invalid_api_key", "unknown or revoked API key"),
        error(403, "forbidden", "the admin API needs the admin role"),
        error(403, "untrusted_identity", "identity headers from 10.0.0.9 are not trusted"),
        Answer(500, "Internal Server Error"),
    ]
    res = run(stub, "stats", "--api-key", "mr_bad")
    assert res.exit_code == 2
    assert "GET /v1/admin/stats: HTTP 401 invalid_api_key: unknown or revoked API key" in res.output
    assert "hint: authenticate with --api-key" in res.output
    res = run(stub, "stats", "--user", "alice")
    assert res.exit_code == 2 and "HTTP 403 forbidden" in res.output and "--role admin" in res.output
    res = run(stub, "stats", "--user", "alice")
    assert res.exit_code == 2 and "untrusted_identity" in res.output and "use --api-key" in res.output
    res = run(stub, "stats", "--user", "alice", "--role", "admin")
    assert res.exit_code == 2 and "HTTP 500: Internal Server Error" in res.output


def test_a_service_without_the_admin_api_gets_a_hint(stub):
    res = run(stub, "keys", "list", "--user", "ops", "--role", "admin")
    assert res.exit_code == 2 and "HTTP 404 not_found" in res.output and "admin API" in res.output


def test_429_is_retried_after_retry_after_then_reported(stub, monkeypatch):
    monkeypatch.setattr(common, "MAX_RETRY_AFTER_S", 0.05)
    limited = error(429, "rate_limited", "too many writes", {"retry-after": "1"})
    stub.routes[("DELETE", "/v1/admin/keys/key_1")] = [limited, limited, Answer(body={"revoked": "key_1"})]
    res = run(stub, "keys", "revoke", "key_1", "--user", "ops", "--role", "admin")
    assert res.exit_code == 0 and "revoked key_1" in res.output, res.output
    assert len(stub.received) == 3
    assert all(r.headers["content-type"] == "application/json" for r in stub.received)  # a DELETE too

    stub.received.clear()
    stub.routes[("DELETE", "/v1/admin/keys/key_2")] = [limited]
    res = run(stub, "keys", "revoke", "key_2", "--user", "ops", "--role", "admin")
    assert res.exit_code == 2 and "HTTP 429 rate_limited" in res.output and "rate limited after" in res.output
    assert len(stub.received) == common.RETRY_429 + 1


def test_timeout_says_so(stub):
    stub.routes[("GET", "/v1/admin/keys")] = [Answer(body={"keys": []}, delay=1.0)]
    res = run(stub, "keys", "list", "--user", "ops", "--role", "admin", "--timeout", "0.2")
    assert res.exit_code == 2 and "did not answer within 0.2 s" in res.output and "raise --timeout" in res.output


def test_unexpected_answers_are_errors_not_tracebacks(stub):
    stub.routes[("GET", "/v1/admin/users")] = [Answer(body={"people": []})]
    stub.routes[("POST", "/v1/memory/consolidate")] = [Answer(body={"user_id": "a"})]
    stub.routes[("POST", "/v1/admin/keys")] = [Answer(201, "not json")]
    res = run(stub, "consolidate", "--all", "--user", "ops", "--role", "admin")
    assert res.exit_code == 2 and "unexpected answer of /v1/admin/users" in res.output
    res = run(stub, "consolidate", "--user", "ops")
    assert res.exit_code == 2 and "unexpected consolidation answer" in res.output
    res = run(stub, "keys", "create", "--user-id", "bob", "--user", "ops", "--as-role", "admin")
    assert res.exit_code == 2 and "not a JSON answer" in res.output


def test_consolidate_all_lists_failed_users_exits_1_and_stops_on_403(stub):
    report = {"examined": 3, "groups": 1, "merged": ["m9"], "consolidated": 2, "expired": 1, "seconds": 0.25}
    stub.routes[("GET", "/v1/admin/users")] = [
        Answer(body={"users": [{"user_id": u, "memories": 3, "keys": 0} for u in ("a", "b")], "total": 3}),
        Answer(body={"users": [{"user_id": "c", "memories": 3, "keys": 0}], "total": 3}),
    ]
    answers = [
        Answer(body={"user_id": "a", **report}),
        error(503, "store_unavailable", "shard restarting"),
        Answer(body={"user_id": "c", **report}),
    ]
    stub.routes[("POST", "/v1/memory/consolidate")] = list(answers)
    res = run(stub, "consolidate", "--all", "--user", "ops", "--role", "admin")
    assert res.exit_code == 1, res.output
    pages = [r.query for r in stub.received if r.method == "GET"]
    assert pages == [{"limit": ["500"], "offset": ["0"]}, {"limit": ["500"], "offset": ["2"]}]  # until total
    assert [r.query["user_id"] for r in stub.received if r.method == "POST"] == [["a"], ["b"], ["c"]]
    assert "failed b: POST /v1/memory/consolidate: HTTP 503 store_unavailable: shard restarting" in res.output
    assert "2 users consolidated: 2 groups merged, 4 memories consolidated, 2 expired purged; 1 failed" in res.output

    stub.received.clear()
    stub.routes[("POST", "/v1/memory/consolidate")] = [error(403, "forbidden", "needs the admin role")]
    res = run(stub, "consolidate", "--all", "--user", "ops")
    assert res.exit_code == 2 and "HTTP 403 forbidden" in res.output
    assert len([r for r in stub.received if r.method == "POST"]) == 1


def test_export_that_fails_leaves_no_file(stub, tmp_path):
    stub.routes[("GET", "/v1/memory")] = [Answer(body={"memories": [], "total": 2, "limit": 1, "offset": 0})]
    stub.routes[("GET", "/v1/memory/export")] = [error(503, "store_unavailable", "shard restarting")]
    out = tmp_path / "a.jsonl"
    res = run(stub, "export", "--user", "a", "-o", str(out))
    assert res.exit_code == 2 and "HTTP 503 store_unavailable" in res.output
    assert list(tmp_path.iterdir()) == []


def test_import_stopped_midway_says_which_lines_were_sent(stub, tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"content": f"c{i}"}) + "\n" for i in range(5)))
    stub.routes[("POST", "/v1/memory/import")] = [
        Answer(body={"imported": 2, "skipped_duplicates": 0, "failed": [], "renamed": []}),
        error(503, "store_unavailable", "shard restarting"),
    ]
    res = run(stub, "import", str(f), "--user", "a", "--chunk-lines", "2")
    assert res.exit_code == 2 and "HTTP 503" in res.output
    assert "lines 1–2 were sent (2 imported, 0 already there); rerunning the import is safe" in res.output
    lines = f.read_text().split("\n")
    assert [r.body.decode() for r in stub.received] == ["\n".join(lines[0:2]), "\n".join(lines[2:4])]
    assert {r.headers["content-type"] for r in stub.received} == {"application/x-ndjson"}


def test_replay_locomo_of_a_missing_file_is_an_error(stub, tmp_path):
    res = run(stub, "replay-locomo", str(tmp_path / "absent.json"))
    assert res.exit_code == 2 and "cannot read LoCoMo data" in res.output and stub.received == []


# --------------------------------------------------------------------------- migrate (no service)
def test_migrate_command_reembeds_into_new_collection(tmp_path, local_encoder, bundled_settings):
    """Old memories (8-dim fake model, identity aaaa…) → bundled MiniLM collection, twice."""
    pytest.importorskip("milvus_lite")
    import asyncio

    import yaml

    from memory_core.config import MilvusSettings
    from memory_core.embedding import compute_identity
    from memory_core.stores.milvus import MilvusStore
    from memory_core.types import Memory
    from tests.ids import tid
    from tests.memory_core.test_migration import fake_embed

    db = tmp_path / "memory.db"
    old_digest = "a" * 64

    async def seed():
        store = MilvusStore(
            MilvusSettings(uri=str(db), collection=f"agentic_memory__{'a' * 12}"),
            embed=fake_embed(8),
            dimension=8,
            identity=old_digest,
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
            MilvusSettings(uri=str(db), collection=f"agentic_memory__{new.short}"),
            embed=None,
            dimension=384,
            identity=new.digest,
        )
        got = await store.get(tid("m3"), "alice")
        await store.close()
        return got

    got = asyncio.run(check())
    assert np.allclose(got.embedding, local_encoder.encode([got.content]).vectors[0], atol=1e-4)

    res = runner.invoke(cli.app, args[:-2] + ["--to-identity", "ffffffffffff"])
    assert res.exit_code == 2 and "target identity" in res.output


def test_service_strings_are_printed_as_text_not_rich_markup(stub):
    """User ids and error messages come from callers: ``[/]`` or ``[link=…]`` must print as
    written (no crash, no hidden text)."""
    stub.routes[("GET", "/v1/admin/stats")] = [
        Answer(200, {"users": 2, "memories": 3, "by_state": {"active": 3}, "by_type": {"semantic": 3}, "keys": 1})
    ]
    stub.routes[("GET", "/v1/admin/users")] = [
        Answer(
            200,
            {
                "users": [
                    {"user_id": "[/]", "memories": 1, "keys": 0},
                    {"user_id": "[link=x]bob[/link]", "memories": 2, "keys": 1},
                ],
                "total": 2,
            },
        )
    ]
    res = run(stub, "stats", "--user", "ops", "--role", "admin")
    assert res.exit_code == 0, res.output
    assert "[/]" in res.output and "[link=x]bob[/link]" in res.output
    stub.routes[("GET", "/v1/admin/stats")] = [Answer(403, {"error": {"code": "forbidden", "message": "no [/] way"}})]
    res = run(stub, "stats", "--user", "ops", "--role", "admin")
    assert res.exit_code == 2 and "no [/] way" in res.output


def _export_answer(*lines: dict) -> Answer:
    return Answer(body="".join(json.dumps(x) + "\n" for x in lines))


MEMORY_LINE = {"id": "0" * 32, "content": "I like green tea.", "type": "semantic"}


@pytest.mark.parametrize(
    "body, message",
    [
        # the store failed after the first page: the stream ends with an error line
        (
            _export_answer(MEMORY_LINE, {"error": {"code": "store_unavailable", "message": "shard restarting"}}),
            "the export failed: store_unavailable: shard restarting",
        ),
        # a body that ended cleanly without its end line (what a failure looked like before)
        (_export_answer(MEMORY_LINE), "does not end with its end_of_export line"),
        (Answer(body=""), "does not end with its end_of_export line"),
        # an end line that counts more lines than arrived
        (
            _export_answer(MEMORY_LINE, {"end_of_export": {"memories": 2, "unreadable": []}}),
            "its end line counts 2 memories, 1 arrived",
        ),
    ],
    ids=["error-line", "no-end-line", "empty", "count-differs"],
)
def test_an_export_that_failed_midway_exits_non_zero_and_leaves_no_file(stub, tmp_path, body, message):
    stub.routes[("GET", "/v1/memory")] = [Answer(body={"memories": [], "total": 1, "limit": 1, "offset": 0})]
    stub.routes[("GET", "/v1/memory/export")] = [body]
    out = tmp_path / "a.jsonl"
    res = run(stub, "export", "--user", "a", "-o", str(out))
    assert res.exit_code == 2 and message in res.output, res.output
    assert list(tmp_path.iterdir()) == []


def test_a_complete_export_keeps_its_end_line_and_a_partial_one_exits_1(stub, tmp_path):
    stub.routes[("GET", "/v1/memory")] = [Answer(body={"memories": [], "total": 1, "limit": 1, "offset": 0})]
    end = {"end_of_export": {"memories": 1, "unreadable": []}}
    stub.routes[("GET", "/v1/memory/export")] = [_export_answer(MEMORY_LINE, end)]
    out = tmp_path / "a.jsonl"
    res = run(stub, "export", "--user", "a", "-o", str(out))
    assert res.exit_code == 0 and "exported 1 memories of user 'a'" in res.output, res.output
    assert [json.loads(x) for x in out.read_text().splitlines()] == [MEMORY_LINE, end]

    unreadable = {"end_of_export": {"memories": 1, "unreadable": ["f" * 32]}}
    stub.routes[("GET", "/v1/memory/export")] = [_export_answer(MEMORY_LINE, unreadable)]
    res = run(stub, "export", "--user", "a", "-o", str(out))
    assert res.exit_code == 1 and "partial export: 1 stored memories could not be read" in res.output, res.output
    assert "f" * 32 in res.output
    assert [json.loads(x) for x in out.read_text().splitlines()] == [MEMORY_LINE, unreadable]
