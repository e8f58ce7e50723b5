"""The audit log through the real ingress application (``MemoryIngress`` routes, its error
handlers and middleware, ``audit_hook``), without Ray: the replica's instance is built with
an in-memory store and handed to Serve's class-based view the way a replica does
(``serve.get_replica_context().servable_object``).

Each admin route produces an entry; an admin acting on another user's memories produces an
entry naming that user; a user on their own memories produces none; a non-admin is refused
the audit log (and that is recorded); no content, query text or key ever reaches the file;
an append that fails after the answer is counted and logged, and from then on admin actions
are refused before they run (fail closed) until the log accepts writes again."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
import types
from pathlib import Path

import pytest
from ray import serve
from starlette.testclient import TestClient

from deployments.http import audit_hook, ingress
from deployments.http.audit_hook import ACTIONS
from memory_core.audit import AuditLog, AuditQuery
from memory_core.config import RouterConfig
from memory_core.errors import AuditUnavailable
from memory_core.stores import InMemoryStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory

SECRET = "My locker code is QX4817 and my cat is called Zanzibar"
QUERY = "what is the locker code of the zanzibar owner"
CLIENT = ("203.0.113.9", 40000)


class RecordingMetrics:
    def __init__(self) -> None:
        self.counted: list[str] = []

    def count(self, name: str, tags=None, value: float = 1.0) -> None:
        self.counted.append(name)


class Rig:
    """The ingress application over one replica instance; ``keys``: role name → API key."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch):
        config = RouterConfig.model_validate(
            {
                "global": {
                    "access": {"mode": "api_key", "api_keys": {"path": str(tmp / "access.sqlite")}},
                    "audit": {"path": str(tmp / "audit.sqlite")},
                },
                "routing": {"decisions": [{"name": "default", "plugins": []}]},
            }
        )
        wrapper = ingress.MemoryIngress.func_or_class
        user_class = wrapper.__mro__[1]
        self.instance = object.__new__(user_class)  # the class under Serve's ASGI wrapper (no ASGI app state)
        user_class._build(self.instance, config, None, None, echo=object())
        self.instance.store = InMemoryStore(embed=CountingEmbed(), dimension=DIM)
        self.metrics = RecordingMetrics()
        self.instance.audit.metrics = self.metrics
        self.audit = self.instance.audit.log
        replica = types.SimpleNamespace(servable_object=self.instance)
        monkeypatch.setattr(serve, "get_replica_context", lambda: replica)
        # the application object of the class Serve deployed (its module globals)
        self.app = user_class.__init__.__globals__["app"]
        registry = self.instance.registry
        self.keys = {
            "admin": registry.create("ops", "admin")[0],
            "alice": registry.create("alice", "user")[0],
            "bob": registry.create("bob", "user")[0],
        }
        self.memory = asyncio.run(self.instance.store.store(Memory(user_id="alice", content=SECRET)))

    def client(self, peer: tuple[str, int] = CLIENT) -> TestClient:
        return TestClient(self.app, client=peer, raise_server_exceptions=False)

    def call(self, who: str, method: str, path: str, **kw):
        headers = {"authorization": f"Bearer {self.keys[who]}", **kw.pop("headers", {})}
        if method in ("POST", "PATCH", "DELETE"):
            headers.setdefault("content-type", "application/json")
        return self.client().request(method, path, headers=headers, **kw)

    def entries(self, **filters):
        return list(reversed(self.audit.query(AuditQuery(limit=500, **filters)).entries))  # oldest first


@pytest.fixture
def rig(tmp_path, monkeypatch):
    rig = Rig(tmp_path, monkeypatch)
    yield rig
    rig.audit.close()
    rig.instance.registry.close()
    audit_hook.configure_recorder(None)  # the recorder holds a connection: nothing of it stays for later tests


def test_every_admin_route_produces_an_entry(rig):
    created = rig.call("admin", "POST", "/v1/admin/keys", json={"user_id": "carol", "role": "user"})
    assert created.status_code == 201
    key_id = created.json()["key_id"]
    answers = [
        rig.call("admin", "GET", "/v1/admin/users"),
        rig.call("admin", "GET", "/v1/admin/stats"),
        rig.call("admin", "GET", "/v1/admin/keys", params={"user_id": "carol"}),
        rig.call("admin", "DELETE", f"/v1/admin/keys/{key_id}"),
        rig.call("admin", "GET", "/v1/admin/audit"),
    ]
    assert [r.status_code for r in answers] == [200] * 5
    entries = rig.entries()
    assert [e.action for e in entries] == [
        "admin.keys.create",
        "admin.users.list",
        "admin.stats",
        "admin.keys.list",
        "admin.keys.revoke",
        "admin.audit.read",
    ]
    assert all(e.actor.user_id == "ops" and e.actor.role == "admin" and e.status in (200, 201) for e in entries)
    assert all(e.actor.credential == "api_key" and (e.actor.key_id or "").startswith("key_") for e in entries)
    assert all(e.client_address == CLIENT[0] and e.peer_address == CLIENT[0] for e in entries)
    create, _, _, listing, revoke, _ = entries
    assert (create.target_user_id, create.target) == ("carol", key_id)
    assert listing.target_user_id == "carol"
    assert (revoke.target_user_id, revoke.target) == ("carol", key_id)
    assert [e.sequence for e in entries] == list(range(1, 7))


def test_admin_access_to_another_users_memories_names_the_target_user(rig):
    owner = {"user_id": "alice"}
    answers = [
        rig.call("admin", "GET", "/v1/memory", params=owner),
        rig.call("admin", "GET", f"/v1/memory/{rig.memory.id}", params=owner),
        rig.call("admin", "POST", "/v1/memory/search", params=owner, json={"query": QUERY}),
        rig.call("admin", "GET", "/v1/memory/export", params=owner),
        rig.call("admin", "DELETE", f"/v1/memory/{rig.memory.id}", params=owner),
    ]
    assert [r.status_code for r in answers] == [200] * 5
    entries = rig.entries()
    assert [e.action for e in entries] == [
        "memory.list",
        "memory.get",
        "memory.search",
        "memory.export",
        "memory.delete",
    ]
    assert all(e.target_user_id == "alice" and e.actor.user_id == "ops" for e in entries)
    assert [e.target for e in entries] == [None, rig.memory.id, None, None, rig.memory.id]
    assert rig.entries(target_user="alice") == entries


def test_a_users_access_to_their_own_memories_produces_no_entry(rig):
    answers = [
        rig.call("alice", "GET", "/v1/memory"),
        rig.call("alice", "GET", "/v1/memory", params={"user_id": "alice"}),  # naming oneself
        rig.call("alice", "GET", f"/v1/memory/{rig.memory.id}"),
        rig.call("alice", "GET", "/v1/memory/export"),
        rig.call("alice", "GET", "/v1/me"),
        rig.call("admin", "GET", "/v1/memory"),  # an admin's own memories: no admin power used
    ]
    assert [r.status_code for r in answers] == [200] * 6
    assert rig.entries() == []


def test_a_user_is_refused_the_audit_log_and_other_users_memories_and_both_are_recorded(rig):
    refused = rig.call("bob", "GET", "/v1/admin/audit")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    other = rig.call("bob", "GET", "/v1/memory", params={"user_id": "alice"})
    assert other.status_code == 403
    audit_read, snoop = rig.entries()
    assert (audit_read.action, audit_read.actor.user_id, audit_read.status) == ("admin.audit.read", "bob", 403)
    assert audit_read.error_code == "forbidden"
    assert (snoop.action, snoop.actor.user_id, snoop.target_user_id, snoop.status) == (
        "memory.list",
        "bob",
        "alice",
        403,
    )


def test_admin_only_routes_outside_admin_paths_and_early_refusals_are_recorded(rig):
    consolidate = rig.call("bob", "POST", "/v1/memory/consolidate")  # needs the admin role
    bad_body = rig.call("admin", "POST", "/v1/admin/keys", json={"user_id": "carol", "role": "root"})
    cross_site = rig.call(
        "admin", "POST", "/v1/admin/keys", json={"user_id": "carol"}, headers={"sec-fetch-site": "cross-site"}
    )
    assert (consolidate.status_code, bad_body.status_code, cross_site.status_code) == (403, 400, 403)
    entries = rig.entries()
    assert [(e.action, e.actor.user_id, e.status, e.error_code) for e in entries] == [
        ("memory.consolidate", "bob", 403, "forbidden"),
        ("admin.keys.create", "ops", 400, "invalid_request"),  # refused by validation, before the route
        ("admin.keys.create", "ops", 403, "forbidden"),  # refused by the browser guard
    ]
    assert len(rig.instance.registry.keys("carol")) == 0
    assert rig.call("bob", "GET", "/v1/admin/stats", headers={"authorization": "Bearer mr_unknown"}).status_code == 401
    assert len(rig.entries()) == 3  # no identity: not recorded


def test_no_content_query_text_or_key_reaches_the_audit_file(rig):
    created = rig.call("admin", "POST", "/v1/admin/keys", json={"user_id": "carol", "name": "carols laptop"})
    new_key = created.json()["key"]
    rig.call("admin", "POST", "/v1/memory/search", params={"user_id": "alice"}, json={"query": QUERY})
    rig.call("admin", "GET", "/v1/memory", params={"user_id": "alice"})
    rig.call("admin", "GET", "/v1/memory/export", params={"user_id": "alice"})
    rig.call(
        "admin",
        "PATCH",
        f"/v1/memory/{rig.memory.id}",
        params={"user_id": "alice"},
        json={"content": SECRET + " (edited)"},
    )
    assert len(rig.entries()) == 5
    rig.audit.close()
    stored = b"".join(p.read_bytes() for p in Path(rig.audit.path).parent.glob("audit.sqlite*"))
    for secret in (SECRET, "QX4817", "Zanzibar", QUERY, "zanzibar owner", new_key, rig.keys["admin"], "carols laptop"):
        assert secret.encode() not in stored, secret


def test_reading_the_log_filters_and_pages_with_a_cursor(rig):
    for _ in range(3):
        rig.call("admin", "GET", "/v1/admin/stats")
    rig.call("admin", "GET", "/v1/memory", params={"user_id": "alice"})
    first = rig.call("admin", "GET", "/v1/admin/audit", params={"action": "admin.stats", "limit": 2}).json()
    assert [e["sequence"] for e in first["entries"]] == [3, 2] and first["next_cursor"] == 2
    rest = rig.call("admin", "GET", "/v1/admin/audit", params={"action": "admin.stats", "cursor": 2}).json()
    assert [e["sequence"] for e in rest["entries"]] == [1] and rest["next_cursor"] is None
    by_target = rig.call("admin", "GET", "/v1/admin/audit", params={"target_user": "alice"}).json()
    assert [e["action"] for e in by_target["entries"]] == ["memory.list"]
    assert rig.call("admin", "GET", "/v1/admin/audit", params={"limit": 501}).status_code == 400
    assert rig.call("admin", "GET", "/v1/admin/audit", params={"since": "yesterday"}).status_code == 400
    for bad in (
        {"cursor": str(2**64)},  # beyond SQLite's integers
        {"since": "9999-12-31T23:00:00-05:00"},  # past the calendar in UTC
        {"until": "0001-01-01T00:30:00+01:00"},
    ):
        answer = rig.call("admin", "GET", "/v1/admin/audit", params=bad)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request", bad


def test_after_a_failed_append_admin_actions_are_refused_before_they_run_until_the_log_recovers(
    rig, monkeypatch, caplog
):
    monkeypatch.setattr(audit_hook, "RECOVERY_PROBE_S", 3600.0)  # no background recovery meanwhile
    working = rig.audit.append

    def broken(entry):
        raise AuditUnavailable("disk full")

    monkeypatch.setattr(rig.audit, "append", broken)
    with caplog.at_level(logging.ERROR, logger="ray.serve"):
        first = rig.call("admin", "GET", "/v1/admin/stats")  # the answer was out before the append
    assert first.status_code == 200
    assert rig.metrics.counted == ["memory_audit_append_failures"]
    assert any("admin.stats" in r.getMessage() and "disk full" in r.getMessage() for r in caplog.records)
    assert not rig.instance.audit.healthy

    created = rig.call("admin", "POST", "/v1/admin/keys", json={"user_id": "carol"})
    snoop = rig.call("admin", "GET", "/v1/memory", params={"user_id": "alice"})
    own = rig.call("alice", "GET", "/v1/memory")  # not audited: served
    assert created.status_code == 503 and created.json()["error"]["code"] == "audit_unavailable"
    assert created.headers["retry-after"] == "1"
    assert snoop.status_code == 503 and own.status_code == 200
    assert rig.instance.registry.keys("carol") == []  # the action did not run

    monkeypatch.setattr(rig.audit, "append", working)
    assert rig.instance.audit.probe()  # what the background recovery runs
    assert rig.call("admin", "POST", "/v1/admin/keys", json={"user_id": "carol"}).status_code == 201
    assert [e.action for e in rig.entries()] == ["admin.keys.create"]


def test_the_recovery_probe_reports_a_locked_log_as_failing(rig):
    rig.audit.close()
    rig.audit = rig.instance.audit.log = AuditLog(rig.audit.path, timeout_s=0.05)
    locker = sqlite3.connect(rig.audit.path, timeout=0)
    locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        assert rig.instance.audit.probe() is False
    finally:
        locker.rollback()
        locker.close()
    assert rig.instance.audit.probe() is True


async def test_the_background_recovery_probes_until_the_log_accepts_writes(rig, monkeypatch):
    monkeypatch.setattr(audit_hook, "RECOVERY_PROBE_S", 0.0)
    results = iter([False, False, True])
    probes: list[bool] = []

    def probe() -> bool:
        probes.append(next(results))
        rig.instance.audit.healthy = probes[-1]
        return probes[-1]

    monkeypatch.setattr(rig.instance.audit, "probe", probe)
    rig.instance.audit._failed()
    assert not rig.instance.audit.healthy
    await rig.instance.audit._recovery
    assert probes == [False, False, True] and rig.instance.audit.healthy


def test_the_client_address_comes_from_x_forwarded_for_only_through_a_trusted_proxy(rig):
    headers = {"authorization": f"Bearer {rig.keys['admin']}", "x-forwarded-for": "198.51.100.7, 127.0.0.1"}
    rig.client(("127.0.0.1", 5000)).get("/v1/admin/stats", headers=headers)  # through the local proxy
    rig.client(("192.0.2.66", 5000)).get("/v1/admin/stats", headers=headers)  # around it: the claim ignored
    through, around = rig.entries()
    assert (through.client_address, through.peer_address) == ("198.51.100.7", "127.0.0.1")
    assert (around.client_address, around.peer_address) == ("192.0.2.66", "192.0.2.66")


def test_malformed_caller_values_are_refused_or_left_out_never_copied(rig):
    long_scope = "fe80::1%" + "x" * 500  # an IPv6 address with a very long zone id
    headers = {"authorization": f"Bearer {rig.keys['admin']}", "x-forwarded-for": long_scope}
    bad_owner = rig.client(("127.0.0.1", 5000)).get("/v1/memory", params={"user_id": " x" * 300}, headers=headers)
    assert bad_owner.status_code == 400
    (entry,) = rig.entries()
    assert (entry.action, entry.status, entry.target_user_id) == ("memory.list", 400, None)
    assert (entry.client_address, entry.peer_address) == ("127.0.0.1", "127.0.0.1")


def test_an_unexpected_error_is_recorded_as_a_500(rig, monkeypatch):
    async def broken(owner):
        raise RuntimeError("a bug")

    monkeypatch.setattr(rig.instance.store, "counts", broken)
    answer = rig.call("admin", "GET", "/v1/admin/stats")
    assert answer.status_code == 500
    (entry,) = rig.entries()
    assert (entry.action, entry.status, entry.error_code) == ("admin.stats", 500, "internal_error")


def test_every_memory_and_admin_route_has_an_audit_action():
    user_class = ingress.MemoryIngress.func_or_class.__mro__[1]
    schema = user_class.__init__.__globals__["app"].openapi()
    operations = {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        if path.startswith(("/v1/memory", "/v1/admin"))
        for method in item
    }
    assert operations and operations <= set(ACTIONS), sorted(operations - set(ACTIONS))
    assert len(set(ACTIONS.values())) == len(ACTIONS)


MCP_HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}


def test_mcp_tool_calls_on_another_users_memories_are_recorded_and_refused_while_the_log_fails(rig):
    """The owner an MCP tool acts for travels in the JSON-RPC body, not the query: still
    recorded (with the tool error's code: the HTTP answer is a 200), and refused with the
    REST API while the audit log fails."""
    with TestClient(rig.app, client=CLIENT, raise_server_exceptions=False) as client:

        def tool(who: str, name: str, arguments: dict):
            message = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
            headers = {"authorization": f"Bearer {rig.keys[who]}", "content-type": "application/json", **MCP_HEADERS}
            return client.post("/mcp", json=message, headers=headers)

        assert tool("admin", "get_memory", {"memory_id": rig.memory.id, "user_id": "alice"}).status_code == 200
        assert tool("bob", "list_memories", {"user_id": "alice"}).status_code == 200  # a tool error: forbidden
        assert tool("alice", "list_memories", {}).status_code == 200  # her own: not recorded
        wait = time.monotonic() + 5
        while len(rig.entries(action="mcp.tool_call")) < 2 and time.monotonic() < wait:
            time.sleep(0.05)
        entries = rig.entries(action="mcp.tool_call")
        assert [(e.actor.user_id, e.target_user_id, e.error_code) for e in entries] == [
            ("ops", "alice", None),
            ("bob", "alice", "forbidden"),
        ]
        rig.instance.audit.healthy = False
        answer = tool("admin", "list_memories", {"user_id": "alice"}).json()
        assert answer["result"]["isError"] and "audit_unavailable" in json.dumps(answer["result"])
        assert "Zanzibar" not in json.dumps(answer)
