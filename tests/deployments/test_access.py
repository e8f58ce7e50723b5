"""Identity and access through the real application (``global.access``): API keys and roles,
the isolation matrix (every endpoint × {owner, other user, admin, no identity}), the write
rate limit, and ``trusted_header`` mode refusing identity headers from untrusted peers.

Keys are created in the application's key database (``KeyRegistry`` on the same file) before
it starts, as an operator bootstrapping with ``memory-router keys create --db`` would."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from memory_core.access import KeyRegistry
from tests.conftest import wait_healthy

pytestmark = pytest.mark.integration

SECRET = "My locker code is 4817 and my cat is called Zanzibar."
"""Alice's memory: no other caller may ever see any part of it."""
LEAKS = ("4817", "Zanzibar")
WRITE_LIMIT = 40
ALLOWED_ORIGIN = "https://review.example"
"""The one origin besides the service's own whose state-changing requests the rig accepts."""
LIMITS = {"import_lines": 20, "memories_per_request": 32, "import_body_bytes": 64 * 1024}
"""``global.limits`` of the rig (smaller than the defaults, so that each bound is reached)."""


def app_config(tmp, access: dict) -> dict:
    return {
        "global": {
            "stores": {
                "memory": {
                    "backend": "milvus",
                    "milvus": {"uri": str(tmp / "memory.db"), "collection": "access_memory"},
                    "pool": {"query_embedding": "in_shard"},
                }
            },
            "access": access,
            "limits": LIMITS,
        },
        "routing": {"decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {}}]}]},
    }


@dataclass
class Rig:
    url: str
    keys: dict[str, str]
    registry: KeyRegistry
    alice: str = field(default_factory=lambda: f"alice-{uuid.uuid4().hex[:6]}")

    def h(self, who: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {self.keys[who]}"} if who else {}


@pytest.fixture(scope="module")
def rig(serve_http_port, tmp_path_factory):
    from ray import serve

    from deployments.app import build_app

    tmp = tmp_path_factory.mktemp("access")
    registry = KeyRegistry(tmp / "access.sqlite")
    alice = f"alice-{uuid.uuid4().hex[:6]}"
    keys = {
        "owner": registry.create(alice, "user")[0],
        "other": registry.create(f"bob-{uuid.uuid4().hex[:6]}", "user")[0],
        "admin": registry.create("ops", "admin")[0],
        "limited": registry.create(f"carol-{uuid.uuid4().hex[:6]}", "user")[0],
        "batch": registry.create(f"dave-{uuid.uuid4().hex[:6]}", "user")[0],
        "importer": registry.create(f"erin-{uuid.uuid4().hex[:6]}", "user")[0],
    }
    access = {
        "mode": "api_key",
        "api_keys": {"path": str(tmp / "access.sqlite")},
        "write_rate_limit": {"limit": WRITE_LIMIT, "window_s": 60},
        "allowed_origins": [ALLOWED_ORIGIN],
    }
    serve.run(
        build_app({"config": app_config(tmp, access)}),
        name="access-it",
        route_prefix="/",
        blocking=False,
        logging_config={"encoding": "JSON"},  # as serve_config.yaml
    )
    url = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(url)
    yield Rig(url, keys, registry, alice)
    serve.delete("access-it")
    registry.close()


JSON = {"content-type": "application/json"}
NDJSON = {"content-type": "application/x-ndjson"}


def call(rig: Rig, who: str | None, method: str, path: str, **kw) -> httpx.Response:
    """``method path`` as ``who`` (a key of ``rig.keys``, None: no identity), saying JSON
    unless ``headers`` say otherwise (a state-changing request needs it, body or not)."""
    headers = JSON | rig.h(who) | kw.pop("headers", {})
    return httpx.request(method, rig.url + path, headers=headers, timeout=60, **kw)


def leaks(response: httpx.Response, *ids: str) -> list[str]:
    return [s for s in (*LEAKS, *ids) if s in response.text]


def create(rig: Rig, who: str, content: str, **params) -> dict:
    r = call(rig, who, "POST", "/v1/memory", json={"memories": [{"content": content}]}, params=params)
    assert r.status_code == 201, r.text
    return r.json()["memories"][0]


def test_every_endpoint_for_owner_other_user_admin_and_no_identity(rig):
    """The isolation matrix. ``other`` is a user with a valid key of its own; it tries each
    endpoint on Alice's memory both by id and by naming her (``user_id``)."""
    alice = rig.alice
    memory = create(rig, "owner", SECRET)
    mid = memory["id"]
    assert memory["user_id"] == alice and memory["created_by_user_id"] == alice
    old = create(rig, "owner", "My favourite colour is green.")
    new = create(rig, "owner", "My favourite colour is blue.")
    assert call(rig, "owner", "GET", f"/v1/memory/{old['id']}").json()["state"] == "superseded", new
    export_line = json.dumps({"content": "I was born in Lisbon.", "type": "semantic"})
    search = {"query": "what is my locker code", "threshold": 0.0}
    as_alice = {"user_id": alice}
    # (method, path, kwargs) → expected status for owner, other (by id), other naming alice, admin naming alice, none
    rows = [
        ("GET", "/v1/me", {}, 200, 200, None, 200, 401),
        ("GET", "/v1/memory", {}, 200, 200, 403, 200, 401),
        ("POST", "/v1/memory/search", {"json": search}, 200, 200, 403, 200, 401),
        ("GET", f"/v1/memory/{mid}", {}, 200, 404, 403, 200, 401),
        ("GET", f"/v1/memory/{mid}/history", {}, 200, 404, 403, 200, 401),
        ("PATCH", f"/v1/memory/{mid}", {"json": {"importance": 0.9}}, 200, 404, 403, 200, 401),
        ("GET", "/v1/memory/export", {}, 200, 200, 403, 200, 401),
        ("POST", "/v1/memory/import", {"content": export_line, "headers": NDJSON}, 200, 200, 403, 200, 401),
        ("POST", "/v1/memory", {"json": {"memories": [{"content": "I like tea."}]}}, 201, 201, 403, 201, 401),
        ("POST", "/v1/memory/consolidate", {}, 403, 403, 403, 200, 401),
        ("POST", f"/v1/memory/{old['id']}/restore", {}, 403, 403, 403, 200, 401),
        ("POST", f"/v1/memory/{mid}/unmerge", {}, 403, 403, 403, 400, 401),
        ("DELETE", "/v1/memory", {"params": {"project_id": "nothing-here"}}, 200, 200, 403, 200, 401),
        ("GET", "/v1/admin/users", {}, 403, 403, None, 200, 401),
        ("GET", "/v1/admin/stats", {}, 403, 403, None, 200, 401),
        ("GET", "/v1/admin/keys", {}, 403, 403, 403, 200, 401),
        ("POST", "/v1/admin/keys", {"json": {"user_id": "mallory", "role": "admin"}}, 403, 403, None, 201, 401),
        ("GET", "/v1/models", {}, 200, 200, None, 200, 401),
        ("POST", "/v1/embeddings", {"json": {"input": "hello"}}, 200, 200, None, 200, 401),
        ("DELETE", f"/v1/memory/{mid}", {}, None, 404, 403, 200, 401),  # the admin deletes it last
    ]
    for method, path, kw, owner, other, other_naming, admin, anonymous in rows:
        params = kw.get("params", {})
        expected = {
            ("owner", False): owner,
            ("other", False): other,
            ("other", True): other_naming,
            ("admin", True): admin,
            (None, False): anonymous,
        }
        for (who, naming), status in expected.items():
            if status is None:
                continue
            r = call(rig, who, method, path, **{**kw, "params": params | (as_alice if naming else {})})
            assert r.status_code == status, f"{method} {path} as {who}{' naming alice' if naming else ''}: {r.text}"
            if r.status_code >= 400:
                assert set(r.json()["error"]) == {"code", "message"}
            if who in ("other", None):  # the ids the caller sent may come back in a message
                ids = [i for i in (mid, old["id"]) if i not in path]
                assert not leaks(r, *ids), f"{method} {path} as {who} shows alice's data: {r.text}"
                assert naming or alice not in r.text
    # what the rows did, checked where it landed
    assert call(rig, "owner", "GET", f"/v1/memory/{mid}").status_code == 404  # deleted by the admin
    assert call(rig, "owner", "GET", f"/v1/memory/{old['id']}").json()["state"] == "active"  # restored by the admin
    imported = call(rig, "owner", "GET", "/v1/memory", params={"state": "active"}).json()["memories"]
    assert sum("Lisbon" in m["content"] for m in imported) == 1  # the admin's import found the owner's line
    # provenance: the owner is alice, the writer the admin
    for_alice = create(rig, "admin", "I collect stamps from Iceland.", user_id=alice)
    assert for_alice["user_id"] == alice and for_alice["created_by_user_id"] == "ops"


def test_chat_needs_a_key_and_injects_only_the_callers_memories_whatever_headers_claim(rig):
    create(rig, "owner", SECRET)
    ask = {"model": "assistant", "messages": [{"role": "user", "content": "What is my locker code?"}]}
    anonymous = call(rig, None, "POST", "/v1/chat/completions", json=ask)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
    owner = call(rig, "owner", "POST", "/v1/chat/completions", json=ask)
    assert owner.status_code == 200 and "4817" in owner.text
    # another user, even claiming to be alice through the gateway header, gets none of it
    spoof = {"x-authz-user-id": rig.alice, "x-authz-role": "admin"}
    other = call(rig, "other", "POST", "/v1/chat/completions", json=ask, headers=spoof)
    assert other.status_code == 200 and not leaks(other)
    listing = call(rig, "other", "GET", "/v1/memory", headers=spoof).json()
    assert not any(rig.alice == m["user_id"] for m in listing["memories"])
    assert call(rig, "other", "GET", "/v1/admin/users", headers=spoof).status_code == 403


def test_wrong_and_revoked_keys_are_401_and_keys_are_managed_by_admins(rig):
    wrong = call(rig, None, "GET", "/v1/memory", headers={"authorization": "Bearer mr_not-a-key"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    basic = call(rig, None, "GET", "/v1/memory", headers={"authorization": "Basic YWxpY2U6cGFzcw=="})
    assert basic.status_code == 401

    made = call(rig, "admin", "POST", "/v1/admin/keys", json={"user_id": "dave", "role": "user", "name": "ci"})
    assert made.status_code == 201, made.text
    key, key_id = made.json()["key"], made.json()["key_id"]
    dave = {"authorization": f"Bearer {key}"}
    me = httpx.get(f"{rig.url}/v1/me", headers=dave).json()
    assert me == {"user_id": "dave", "role": "user", "mode": "api_key"}
    listed = call(rig, "admin", "GET", "/v1/admin/keys", params={"user_id": "dave"}).json()["keys"]
    assert [k["key_id"] for k in listed] == [key_id] and key not in json.dumps(listed)

    revoked = call(rig, "admin", "DELETE", f"/v1/admin/keys/{key_id}")
    assert revoked.status_code == 200 and revoked.json()["revoked"] == key_id
    again = httpx.get(f"{rig.url}/v1/me", headers=dave)
    assert again.status_code == 401 and again.json()["error"]["code"] == "invalid_api_key"
    assert call(rig, "admin", "DELETE", "/v1/admin/keys/key_unknown").status_code == 404
    bad_role = call(rig, "admin", "POST", "/v1/admin/keys", json={"user_id": "x", "role": "root"})
    assert bad_role.status_code == 400


def test_admin_lists_users_and_stats_with_counts(rig):
    create(rig, "owner", "I keep my spare key under the blue pot.")
    users = {u["user_id"]: u for u in call(rig, "admin", "GET", "/v1/admin/users?limit=500").json()["users"]}
    assert users[rig.alice]["memories"] >= 1 and users[rig.alice]["keys"] == 1
    stats = call(rig, "admin", "GET", "/v1/admin/stats").json()
    assert stats["users"] == len(users) and stats["memories"] == sum(stats["by_state"].values())
    assert stats["memories"] == sum(u["memories"] for u in users.values()) == sum(stats["by_type"].values())
    assert stats["by_state"]["active"] >= 1 and stats["keys"] >= 4


def test_writes_beyond_the_per_user_limit_are_429_with_retry_after(rig):
    statuses = []
    for i in range(WRITE_LIMIT + 2):
        r = call(rig, "limited", "POST", "/v1/memory", json={"memories": [{"content": f"My pin number {i} is {i}."}]})
        statuses.append(r.status_code)
        if r.status_code == 429:
            refused = r
            break
    assert statuses[:WRITE_LIMIT] == [201] * WRITE_LIMIT and statuses[-1] == 429
    assert refused.json()["error"]["code"] == "rate_limited" and 1 <= int(refused.headers["retry-after"]) <= 60
    # reads go on, and other users are not limited by carol's writes
    assert call(rig, "limited", "GET", "/v1/memory").status_code == 200
    assert call(rig, "other", "POST", "/v1/memory", json={"memories": [{"content": "I like jazz."}]}).status_code == 201
    # chat still answers over the limit; its turn is not stored
    before = call(rig, "limited", "GET", "/v1/memory").json()["total"]
    said = {"model": "assistant", "messages": [{"role": "user", "content": "My boat is called Seahorse."}]}
    assert call(rig, "limited", "POST", "/v1/chat/completions", json=said).status_code == 200
    time.sleep(2)
    assert call(rig, "limited", "GET", "/v1/memory").json()["total"] == before


def batch_of(n: int, start: int = 0) -> dict:
    return {"memories": [{"content": f"My storage unit {start + i} holds box number {start + i}."} for i in range(n)]}


def test_the_write_limit_counts_each_memory_of_a_batch_and_refuses_a_batch_whole(rig):
    assert call(rig, "batch", "POST", "/v1/memory", json=batch_of(30)).status_code == 201
    refused = call(rig, "batch", "POST", "/v1/memory", json=batch_of(11, 100))  # 10 left of 40
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert "this request writes 11" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert call(rig, "batch", "GET", "/v1/memory").json()["total"] == 30  # nothing of it was written
    assert call(rig, "batch", "POST", "/v1/memory", json=batch_of(10, 200)).status_code == 201  # exactly fits
    assert call(rig, "batch", "POST", "/v1/memory", json=batch_of(1, 300)).status_code == 429
    assert call(rig, "batch", "GET", "/v1/memory").json()["total"] == 40


def test_beyond_each_request_bound_the_answer_is_413_naming_the_limit_before_any_write(rig):
    def refused(r: httpx.Response, *words: str) -> None:
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "request_too_large"
        assert all(w in r.json()["error"]["message"] for w in words), r.text

    # more memories than one request takes, and more than the whole write limit
    refused(call(rig, "importer", "POST", "/v1/memory", json=batch_of(33)), "limit is 32", "memories_per_request")
    # import lines: counted before any store work, then charged one write each
    lines = "\n".join(json.dumps({"content": f"My locker number {i} is {1000 + i}."}) for i in range(21))
    refused(
        call(rig, "importer", "POST", "/v1/memory/import", content=lines, headers=NDJSON), "limit is 20", "import_lines"
    )
    blank = lines.replace("\n", "\n\n\n")  # blank lines cost nothing but bytes
    refused(call(rig, "importer", "POST", "/v1/memory/import", content=blank, headers=NDJSON), "limit is 20")
    # import bytes: by Content-Length, and counted while a chunked body streams in
    big = json.dumps({"content": "x" * 16000}) + "\n"
    refused(
        call(rig, "importer", "POST", "/v1/memory/import", content=big * 5, headers=NDJSON),
        "65536 bytes",
        "import_body_bytes",
    )

    def chunks():
        for _ in range(5):
            yield big.encode()

    refused(call(rig, "importer", "POST", "/v1/memory/import", content=chunks(), headers=NDJSON), "65536 bytes")
    assert call(rig, "importer", "GET", "/v1/memory").json()["total"] == 0  # none of it was written
    # within the bounds: an import of 20 lines is 20 writes of the 40
    ok = call(rig, "importer", "POST", "/v1/memory/import", content="\n".join(lines.split("\n")[:20]), headers=NDJSON)
    assert ok.status_code == 200 and ok.json()["imported"] == 20, ok.text
    assert call(rig, "importer", "POST", "/v1/memory", json=batch_of(20)).status_code == 201
    assert (
        call(rig, "importer", "POST", "/v1/memory/import", content=lines.split("\n")[0], headers=NDJSON).status_code
        == 429
    )
    # a body over the search limit (default 128 KiB), whatever it holds
    refused(call(rig, "importer", "POST", "/v1/memory/search", content=b"{" + b" " * 140_000), "search_body_bytes")


def test_admin_users_are_paged_with_the_total(rig):
    first = call(rig, "admin", "GET", "/v1/admin/users", params={"limit": 2}).json()
    assert len(first["users"]) == 2 and first["limit"] == 2 and first["offset"] == 0 and first["total"] >= 6
    rest = call(rig, "admin", "GET", "/v1/admin/users", params={"limit": 500, "offset": 2}).json()
    ids = [u["user_id"] for u in first["users"] + rest["users"]]
    assert ids == sorted(ids) and len(ids) == first["total"]
    assert call(rig, "admin", "GET", "/v1/admin/users", params={"limit": 501}).status_code == 400


# --------------------------------------------------------------------------- request ids in the logs
def log_lines_with(logs_dir: Path, needle: str) -> list[str]:
    lines = []
    for path in logs_dir.rglob("*"):
        if path.is_file() and path.suffix in (".log", ".err", ".out"):
            with path.open(errors="replace") as f:
                lines += [line for line in f if needle in line]
    return lines


def test_one_request_id_runs_through_the_ingress_embedder_and_store_shard_logs(rig, ray_session):
    """A client's ``x-request-id`` comes back on the response and is on the JSON log lines of
    the ingress, the Embedder (Serve carries it through the handle call) and the store shard
    (handed over by the ingress), without the memory's text. The write holds more memories
    than the shard's write lane takes (``pool.in_shard_write_texts``, 8), so the Embedder
    embeds them; a small write's ``embed_write`` in the shard carries the id too."""
    request_id = f"trace-{uuid.uuid4().hex}"
    notes = ["My dentist is Dr. Okafor."] + [f"Drawer {i} holds the spare fuses of room {i}." for i in range(8)]
    r = call(
        rig,
        "owner",
        "POST",
        "/v1/memory",
        json={"memories": [{"content": c} for c in notes]},
        headers={"x-request-id": request_id},
    )
    assert r.status_code == 201 and r.headers["x-request-id"] == request_id
    logs_dir = Path(ray_session._private.worker.global_worker.node.get_logs_dir_path())
    deadline, seen = time.time() + 30, {}
    while time.time() < deadline:
        lines = log_lines_with(logs_dir, request_id)
        records = [json.loads(line[line.index("{") :]) for line in lines if "{" in line]
        seen = {
            # Serve names a deployment's lines "<application>_<deployment>"
            "ingress": [x for x in records if str(x.get("deployment")).endswith("_MemoryIngress")],
            "embedder": [x for x in records if str(x.get("deployment")).endswith("_Embedder")],
            "store": [x for x in records if x.get("event") == "store_call"],
        }
        if all(seen.values()):
            break
        time.sleep(0.5)
    assert all(seen.values()), {k: len(v) for k, v in seen.items()}
    assert all(x["request_id"] == request_id for v in seen.values() for x in v)
    assert {x["operation"] for x in seen["store"]} >= {"write"} and all(x["outcome"] == "ok" for x in seen["store"])
    assert not any("Okafor" in line for line in log_lines_with(logs_dir, request_id))

    small_id = f"trace-{uuid.uuid4().hex}"
    r = call(
        rig,
        "owner",
        "POST",
        "/v1/memory",
        json={"memories": [{"content": "My optician is Ms. Varga."}]},
        headers={"x-request-id": small_id},
    )
    assert r.status_code == 201 and r.headers["x-request-id"] == small_id
    deadline, operations = time.time() + 30, set()
    while time.time() < deadline and not operations >= {"embed_write", "write"}:
        lines = log_lines_with(logs_dir, small_id)
        records = [json.loads(line[line.index("{") :]) for line in lines if "{" in line]
        operations = {x.get("operation") for x in records if x.get("event") == "store_call"}
        time.sleep(0.5)
    assert operations >= {"embed_write", "write"}, operations
    assert not any("Varga" in line for line in log_lines_with(logs_dir, small_id))

    # a chat turn is stored after the answer, in the background: still under its request id
    chat_id = f"trace-{uuid.uuid4().hex}"
    said = {"model": "assistant", "messages": [{"role": "user", "content": "My dentist's office is on Elm Street."}]}
    r = call(rig, "owner", "POST", "/v1/chat/completions", json=said, headers={"x-request-id": chat_id})
    assert r.status_code == 200 and r.headers["x-request-id"] == chat_id
    deadline, writes = time.time() + 30, []
    while time.time() < deadline and not writes:
        lines = log_lines_with(logs_dir, chat_id)
        writes = [line for line in lines if '"store_call"' in line and '"operation": "write"' in line]
        time.sleep(0.5)
    assert writes, "the background store of the chat turn lost the request id"


def test_cross_site_browser_writes_and_form_bodies_are_refused(rig):
    """CSRF: a browser marks another site's requests ``Sec-Fetch-Site: cross-site``; an HTML
    form can only send text/plain, urlencoded or multipart bodies without a preflight."""
    body = {"memories": [{"content": "I planted tulips."}]}
    cross = call(rig, "owner", "POST", "/v1/memory", json=body, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403 and cross.json()["error"]["code"] == "forbidden"
    same = call(rig, "owner", "POST", "/v1/memory", json=body, headers={"sec-fetch-site": "same-origin"})
    assert same.status_code == 201
    assert call(rig, "owner", "GET", "/v1/memory", headers={"sec-fetch-site": "cross-site"}).status_code == 200
    line = json.dumps({"content": "I was planted by another site."})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        form = call(rig, "owner", "POST", "/v1/memory/import", content=line, headers={"content-type": content_type})
        assert form.status_code == 415 and "content-type" in form.json()["error"]["message"], content_type
    listed = call(rig, "owner", "GET", "/v1/memory", params={"limit": 1000}).json()["memories"]
    assert not any("another site" in m["content"] for m in listed)
    ndjson = call(
        rig, "owner", "POST", "/v1/memory/import", content=line, headers={"content-type": "application/x-ndjson"}
    )
    assert ndjson.status_code == 200 and ndjson.json()["imported"] == 1


FORM_TYPES = (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x")
"""What a request without a JSON body type says: nothing, or what an HTML form sends."""


def test_every_state_changing_route_needs_a_json_content_type_before_any_work(rig):
    """Every POST/PATCH/DELETE route (body or none) refuses a missing or form content type
    with 415 before doing anything; with JSON (JSON lines for an import) it does its work."""
    memory = create(rig, "owner", "My bicycle is a green Brompton.")
    old = create(rig, "owner", "My bicycle lock code is 1234.")
    create(rig, "owner", "My bicycle lock code is 9876.")
    key_id = call(rig, "admin", "POST", "/v1/admin/keys", json={"user_id": "form-victim"}).json()["key_id"]
    chat = {"model": "assistant", "messages": [{"role": "user", "content": "Remember: my kayak is red."}]}
    as_alice = {"user_id": rig.alice}
    # (method, path, JSON body or None, who, params, status with JSON)
    routes = [
        ("POST", "/v1/chat/completions", chat, "owner", {}, 200),
        ("POST", "/v1/embeddings", {"input": "hello"}, "owner", {}, 200),
        ("POST", "/v1/memory", {"memories": [{"content": "A form wrote this."}]}, "owner", {}, 201),
        ("POST", "/v1/memory/search", {"query": "bicycle"}, "owner", {}, 200),
        ("PATCH", f"/v1/memory/{memory['id']}", {"importance": 0.99}, "owner", {}, 200),
        ("POST", "/v1/memory/consolidate", None, "admin", as_alice, 200),
        ("POST", f"/v1/memory/{old['id']}/restore", None, "admin", as_alice, 200),
        ("POST", f"/v1/memory/{memory['id']}/unmerge", None, "admin", as_alice, 400),  # not a merged memory
        ("POST", "/v1/admin/keys", {"user_id": "form-made", "role": "admin"}, "admin", {}, 201),
        ("DELETE", f"/v1/admin/keys/{key_id}", None, "admin", {}, 200),
        ("DELETE", "/v1/memory", None, "owner", {"project_id": "bikes"}, 200),
        ("DELETE", f"/v1/memory/{memory['id']}", None, "owner", {}, 200),
        ("PUT", "/v1/memory", {"memories": []}, "owner", {}, 405),  # no such route, the rule first
    ]
    line = json.dumps({"content": "An imported line from a form."})
    for content_type in FORM_TYPES:
        headers = {"content-type": content_type} if content_type else {}
        for method, path, body, who, params, _ in routes:
            data = json.dumps(body) if body is not None else None
            r = httpx.request(method, rig.url + path, content=data, params=params, headers=rig.h(who) | headers)
            assert r.status_code == 415, (method, path, content_type, r.status_code, r.text)
            assert r.json()["error"]["code"] == "unsupported_media_type"
        for wrong in (*FORM_TYPES, "application/json"):  # an import takes JSON lines only
            r = httpx.post(
                rig.url + "/v1/memory/import",
                content=line,
                headers=rig.h("owner") | ({"content-type": wrong} if wrong else {}),
            )
            assert r.status_code == 415, (wrong, r.text)
    # nothing of it happened
    listed = call(rig, "owner", "GET", "/v1/memory", params={"limit": 1000}).json()["memories"]
    assert not any(m["content"] in ("A form wrote this.", "An imported line from a form.") for m in listed)
    assert not any("kayak" in m["content"] for m in listed)  # the chat turn was not stored
    assert call(rig, "owner", "GET", f"/v1/memory/{memory['id']}").json()["importance"] != 0.99
    assert call(rig, "owner", "GET", f"/v1/memory/{old['id']}").json()["state"] == "superseded"
    keys = call(rig, "admin", "GET", "/v1/admin/keys").json()["keys"]
    assert not any(k["user_id"] == "form-made" for k in keys)
    assert next(k for k in keys if k["key_id"] == key_id)["revoked_at"] is None
    # with JSON each route does its work (bodiless ones too)
    for method, path, body, who, params, status in routes:
        r = (
            call(rig, who, method, path, json=body, params=params)
            if body is not None
            else call(rig, who, method, path, params=params)
        )
        assert r.status_code == status, (method, path, r.text)
    r = call(rig, "owner", "POST", "/v1/memory/import", content=line, headers={"content-type": "application/jsonl"})
    assert r.status_code == 200 and r.json()["imported"] == 1
    assert call(rig, "owner", "GET", f"/v1/memory/{old['id']}").json()["state"] == "active"  # restored
    assert call(rig, "owner", "GET", f"/v1/memory/{memory['id']}").status_code == 404  # deleted


def test_cross_origin_writes_are_refused_with_and_without_fetch_metadata(rig):
    """A state-changing request from another origin is 403 whether the browser sends
    ``Sec-Fetch-Site`` or only ``Origin`` (an older browser); the service's own origin (also
    as a proxy in front forwards it) and ``access.allowed_origins`` pass; reads are not
    guarded (no CORS headers are answered, so another site cannot read them)."""
    own = rig.url  # http://127.0.0.1:<port>: the origin of the page /ui is served from
    refused = [
        {"origin": "https://evil.example"},
        {"origin": "null"},  # a sandboxed frame, a file: page
        {"origin": own.replace("http://", "https://")},  # another scheme is another origin
        {"origin": own + "1"},  # another port
        {"sec-fetch-site": "same-site", "origin": "https://sibling.example"},  # a sibling subdomain
        {"sec-fetch-site": "same-site"},
        {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
    ]
    for i, headers in enumerate(refused):
        body = {"memories": [{"content": f"Another site wrote note {i}."}]}
        r = call(rig, "owner", "POST", "/v1/memory", json=body, headers=headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (headers, r.text)
        r = call(rig, "owner", "DELETE", "/v1/memory", params={"all": "true"}, headers=headers)
        assert r.status_code == 403, headers
    ask = {"model": "assistant", "messages": [{"role": "user", "content": "hi"}]}
    assert call(rig, "owner", "POST", "/v1/chat/completions", json=ask, headers=refused[0]).status_code == 403
    listed = call(rig, "owner", "GET", "/v1/memory", params={"limit": 1000}, headers=refused[0])
    assert listed.status_code == 200 and not any("Another site" in m["content"] for m in listed.json()["memories"])
    accepted = [
        {"origin": own},
        {"origin": own, "sec-fetch-site": "same-origin"},
        {"sec-fetch-site": "same-origin"},
        {},  # no browser: the CLI, curl, the openai client
        {"origin": "https://memory.example", "x-forwarded-host": "memory.example", "x-forwarded-proto": "https"},
        {"origin": ALLOWED_ORIGIN},
        {"origin": ALLOWED_ORIGIN, "sec-fetch-site": "cross-site"},
    ]
    for i, headers in enumerate(accepted):
        body = {"memories": [{"content": f"My own page wrote note {i}."}]}
        r = call(rig, "owner", "POST", "/v1/memory", json=body, headers=headers)
        assert r.status_code == 201, (headers, r.text)


# --------------------------------------------------------------------------- trusted_header mode
@pytest.fixture(scope="module")
def gateway_only_url(serve_http_port, tmp_path_factory):
    """An application that trusts identity headers only from 198.51.100.0/24 (TEST-NET-2): the
    test client at 127.0.0.1 is not its gateway, unless it says it is one through
    ``X-Forwarded-For`` (which Serve's uvicorn applies from loopback: ``gateway_peer``)."""
    from ray import serve

    from deployments.app import build_app

    tmp = tmp_path_factory.mktemp("gateway")
    access = {
        "trusted_proxies": ["198.51.100.0/24"],
        "api_keys": {"path": str(tmp / "access.sqlite")},
        "anonymous": {"rate_limit": {"limit": ANONYMOUS_LIMIT, "window_s": 60}},  # allow: gateway (the default)
    }
    serve.run(build_app({"config": app_config(tmp, access)}), name="gateway-it", route_prefix="/gw", blocking=False)
    url = f"http://127.0.0.1:{serve_http_port}/gw"
    wait_healthy(url)
    yield url
    serve.delete("gateway-it")


def test_identity_headers_from_an_untrusted_peer_are_refused(gateway_only_url):
    h = {"x-authz-user-id": "alice"}
    r = httpx.get(f"{gateway_only_url}/v1/memory", headers=h, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "untrusted_identity"
    r = httpx.post(
        f"{gateway_only_url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-authz-user-id": "alice", "x-authz-role": "admin"},
        timeout=30,
    )
    assert r.status_code == 403


ANONYMOUS_LIMIT = 4
"""Requests without identity per client address and minute in the gateway-only application."""
ANONYMOUS_CALLS = [
    ("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/embeddings", {"input": "hello"}),
    ("GET", "/v1/models", None),
]
"""The endpoints that work without a user (chat is served without memory)."""


def gateway_peer(address: str) -> dict[str, str]:
    """Headers that make a loopback request reach the application from ``address`` (Serve's
    uvicorn applies ``X-Forwarded-For`` from ``FORWARDED_ALLOW_IPS``, default loopback)."""
    return {"x-forwarded-for": address}


def anonymous(url: str, method: str, path: str, body: dict | None, headers: dict[str, str]) -> httpx.Response:
    kw = {"json": body} if body is not None else {}
    return httpx.request(method, url + path, headers=headers, timeout=30, **kw)


def test_without_identity_only_the_gateway_is_served_and_the_rest_is_401(gateway_only_url):
    """``access.anonymous.allow: gateway`` (the default) in trusted_header mode: a request
    without identity from a peer that is not a trusted proxy is 401 on every endpoint (no open
    relay to the upstream, no embeddings for anyone); from the gateway, chat (without memory),
    embeddings and models are served, and the memory endpoints still need a user."""
    for method, path, body in ANONYMOUS_CALLS:
        r = anonymous(gateway_only_url, method, path, body, {})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", (path, r.text)
        r = anonymous(gateway_only_url, method, path, body, gateway_peer("203.0.113.50"))  # TEST-NET-3
        assert r.status_code == 401, (path, r.text)
    gateway = gateway_peer("198.51.100.7")
    for method, path, body in ANONYMOUS_CALLS:
        r = anonymous(gateway_only_url, method, path, body, gateway)
        assert r.status_code == 200, (path, r.text)
        if path == "/v1/chat/completions":
            assert r.headers["x-memory-skipped"] == "no_user"
    for method, path, body in [
        ("GET", "/v1/memory", None),
        ("GET", "/v1/me", None),
        ("POST", "/v1/memory/search", {"query": "x"}),
    ]:
        assert anonymous(gateway_only_url, method, path, body, gateway).status_code == 401, path
    # the same gateway address with an identity: the user's memory endpoints
    mine = anonymous(gateway_only_url, "GET", "/v1/me", None, gateway | {"x-authz-user-id": "alice"})
    assert mine.status_code == 200 and mine.json()["user_id"] == "alice"


def test_requests_without_identity_are_rate_limited_per_address(gateway_only_url):
    """What is left open is rate limited per client address (``anonymous.rate_limit``): beyond
    it 429 ``rate_limited`` with ``Retry-After``; another address, and callers with an
    identity from the same address, go on."""
    gateway = gateway_peer("198.51.100.21")
    statuses = [
        anonymous(gateway_only_url, *ANONYMOUS_CALLS[i % len(ANONYMOUS_CALLS)], gateway).status_code
        for i in range(ANONYMOUS_LIMIT + 1)
    ]
    assert statuses == [200] * ANONYMOUS_LIMIT + [429], statuses
    for call_ in ANONYMOUS_CALLS:
        refused = anonymous(gateway_only_url, *call_, gateway)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert anonymous(gateway_only_url, *ANONYMOUS_CALLS[0], gateway_peer("198.51.100.22")).status_code == 200
    alice = gateway | {"x-authz-user-id": "alice"}
    assert anonymous(gateway_only_url, *ANONYMOUS_CALLS[0], alice).status_code == 200
