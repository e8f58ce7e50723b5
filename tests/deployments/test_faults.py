"""Faults and load lose nothing: the real application under ``serve.run``, checked through HTTP.

1. A store shard actor killed (``ray.kill``) during a stream of writes, once with restart
   allowed (Ray restarts it) and once for good (StorePool's health check fails and Serve
   replaces the replica, which recreates the shard): every acknowledged write is there
   afterwards, the gap answers 503 + ``Retry-After`` (never 500), chat keeps answering 200,
   and the pool heals by itself.
2. The Embedder replica killed: chat keeps answering, Serve replaces the replica, memory resumes.
3. The hot cache (Valkey) stopped and started again with its persisted data: reads fall through
   to the store, writes and deletes succeed, nothing stale is served afterwards.
4. The application restarted (Milvus Lite file; Valkey store on a persistent server that is
   also restarted): every memory is back, same ids and contents, searchable.
5. Overload is refused (429 + ``Retry-After``), not queued without bound.

Tests 1-3 share one application (``TestFaults``, class scope: it is deleted before 4 and 5
start their own, since every app is served at ``/``). Everything waits in bounded polling
loops.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import httpx
import pytest

from tests.conftest import wait_healthy, wait_until

pytestmark = pytest.mark.integration

APP = "memory-faults"
FACT = "My locker code is 4817"
QUESTION = "What is my locker code?"
HEAL_TIMEOUT_S = 150  # a shard restart reloads the model (and its ONNX copy) on 2 cores
STATUSES_DURING_FAULT = {200, 201, 503}


# ---------------------------------------------------------------------------- helpers
def app_config(
    tmp,
    *,
    backend: str = "milvus",
    valkey_url: str | None = None,
    cache_url: str | None = None,
    upstream_url: str | None = None,
) -> dict:
    memory: dict = {"pool": {"query_embedding": "in_shard"}}  # as serve_config.yaml
    if backend == "milvus":
        memory.update(backend="milvus", milvus={"uri": str(tmp / "memory.db"), "collection": "faults_memory"})
    else:
        memory.update(backend="valkey", valkey={"url": valkey_url, "index": "faults_memory", "prefix": "faults:"})
    if cache_url:
        memory["cache"] = {"enabled": True, "url": cache_url, "ttl_s": 300}
    config = {
        # these tests retry writes through outages: the per-user write limit is not their subject
        "global": {"stores": {"memory": memory}, "access": {"write_rate_limit": {"limit": 0}}},
        "routing": {
            "decisions": [
                # retrieval only: chats of this model never write (no auto-store invalidations)
                {
                    "name": "recall",
                    "match": {"models": ["recall"]},
                    "plugins": [{"type": "memory", "configuration": {"auto_store": False}}],
                },
                {"name": "default", "plugins": [{"type": "memory", "configuration": {"enabled": True}}]},
            ]
        },
    }
    if upstream_url:
        config["global"]["upstream"] = {"base_url": upstream_url, "timeout_s": 30}
    return config


def user(kind: str = "u") -> str:
    return f"faults-{kind}-{uuid.uuid4().hex[:8]}"


def hdr(user_id: str) -> dict:
    return {"x-authz-user-id": user_id}


def healthy(url: str) -> bool:
    return httpx.get(f"{url}/health", timeout=10).status_code == 200


def write(url: str, user_id: str, content: str, client: httpx.Client | None = None) -> httpx.Response:
    c = client or httpx
    return c.post(f"{url}/v1/memory", json={"memories": [{"content": content}]}, headers=hdr(user_id), timeout=60)


def chat(
    url: str,
    user_id: str | None,
    text: str,
    model: str = "recall",
    client: httpx.Client | None = None,
    timeout: float = 60,
) -> httpx.Response:
    c = client or httpx
    return c.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}]},
        headers=hdr(user_id) if user_id else {},
        timeout=timeout,
    )


def echoed(response: httpx.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


def search(url: str, user_id: str, query: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/memory/search", json={"query": query, "threshold": 0.3}, headers=hdr(user_id), timeout=60
    )


def all_memories(url: str, user_id: str) -> list[dict]:
    r = httpx.get(f"{url}/v1/memory", params={"limit": 1000}, headers=hdr(user_id), timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == len(body["memories"]), body["total"]
    return body["memories"]


def assert_unavailable_answer(r: httpx.Response, codes: set[str]) -> None:
    """A non-2xx answer during a fault: 503, ``Retry-After``, an error body of ``codes``."""
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.headers.get("retry-after") == "1", dict(r.headers)
    assert r.json()["error"]["code"] in codes, r.text


def actor_info(actor_id_hex: str) -> dict:
    """Ray's actor table entry (``State``, ``NumRestarts``, ``Pid``). Ray's private state API:
    the public ``ray.util.state`` needs the dashboard, which this test session does not run."""
    import ray

    return ray._private.state.actors(actor_id_hex)


def store_shard(app_name: str, required: bool = True):
    """The ``StoreShard`` actor of ``app_name``: found by name among Ray's named actors
    (``memory-store-<key>-<i>``), matched by actor id with the shards its StorePool holds;
    None when it has no live named shard and not ``required``."""
    import ray
    from ray import serve

    pool_ids = {
        h._actor_id
        for h in serve.get_deployment_handle("StorePool", app_name=app_name).shard_handles.remote().result(timeout_s=60)
    }
    assert len(pool_ids) == 1, pool_ids
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith("memory-store-"):
            handle = ray.get_actor(entry["name"], namespace=entry["namespace"])
            if handle._actor_id in pool_ids:
                return handle
    if not required:
        return None
    pytest.fail(f"no named StoreShard actor of {app_name} among {ray.util.list_named_actors(all_namespaces=True)}")


def embedder_replicas(app_name: str) -> list[str]:
    """Names (namespace ``serve``) of the running Serve replica actors of ``Embedder``."""
    import ray

    return sorted(
        e["name"]
        for e in ray.util.list_named_actors(all_namespaces=True)
        if e["namespace"] == "serve"
        and e["name"].startswith("SERVE_REPLICA::")
        and f"{app_name}#Embedder#" in e["name"]
    )


@dataclass
class Traffic:
    """Requests made by background loops: ``(kind, user, content, response | exception, t0, t1)``."""

    records: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *record) -> None:
        with self.lock:
            self.records.append(record)

    def of(self, kind: str) -> list:
        with self.lock:
            return [r for r in self.records if r[0] == kind]


def built(config: dict):
    from deployments.app import build_application

    return build_application({"config": config})


def run_app(port: int, app) -> str:
    """``serve.run`` ``app`` as ``APP`` at ``/``; its URL once ``/health`` answers 200."""
    from ray import serve

    serve.run(app, name=APP, route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, timeout=240)
    return url


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="class")
def cache_server(tmp_path_factory):
    from memory_core.testing.valkey_server import start_valkey_server

    server = start_valkey_server(search=True, persistent=True, workdir=tmp_path_factory.mktemp("cache"))
    yield server
    server.stop()


@pytest.fixture(scope="class")
def faults_app(serve_http_port, tmp_path_factory, cache_server):
    """The application of tests 1-3: Milvus Lite, in-shard query embedding, hot cache on."""
    from ray import serve

    config = app_config(tmp_path_factory.mktemp("faults"), cache_url=cache_server.url_db(1))
    started = time.monotonic()
    url = run_app(serve_http_port, built(config))
    print(f"\n[faults] application healthy after {time.monotonic() - started:.1f}s")
    yield url
    serve.delete(APP)


# ---------------------------------------------------------------------------- tests 1-3
class TestFaults:
    @pytest.mark.parametrize("restart", [True, False], ids=["ray-restarts-the-shard", "shard-cannot-restart"])
    def test_killed_store_shard_loses_no_acknowledged_write_and_heals(self, faults_app, restart):
        """``restart``: Ray restarts the killed shard (``no_restart=False``, the issue's case).
        Otherwise the shard is gone for good (``no_restart=True``): StorePool's health check
        fails, Serve replaces the replica, whose new shard reopens the store."""
        import ray

        url = faults_app
        reader = user("reader")
        assert write(url, reader, FACT).status_code == 201
        writers = [user("writer") for _ in range(3)]
        shard = store_shard(APP)
        shard_id = shard._actor_id.hex()
        before = actor_info(shard_id)
        assert before["State"] == "ALIVE"

        traffic = Traffic()
        stop = threading.Event()

        def write_loop(user_id: str) -> None:
            with httpx.Client(timeout=90) as client:
                k = 0
                while not stop.is_set():
                    content = f"{user_id} note number {k}"
                    t0 = time.monotonic()
                    try:
                        r = write(url, user_id, content, client)
                    except httpx.HTTPError as e:  # recorded: a hang or a dropped connection fails the test
                        r = e
                    traffic.add("write", user_id, content, r, t0, time.monotonic())
                    k += 1

        def read_loop() -> None:
            with httpx.Client(timeout=90) as client:
                while not stop.is_set():
                    for kind, call in (
                        ("list", lambda: client.get(f"{url}/v1/memory", headers=hdr(reader))),
                        ("chat", lambda: chat(url, reader, QUESTION, client=client)),
                    ):
                        t0 = time.monotonic()
                        try:
                            r = call()
                        except httpx.HTTPError as e:
                            r = e
                        traffic.add(kind, reader, None, r, t0, time.monotonic())
                    time.sleep(0.1)

        def shard_back() -> str | None:
            """ "restarted": the same actor, restarted by Ray in a new process; "recreated": a
            new shard actor, made by a replacement StorePool replica."""
            info = actor_info(shard_id)
            if (
                info["State"] == "ALIVE"
                and info["NumRestarts"] > before["NumRestarts"]
                and info["Pid"] != before["Pid"]
            ):
                return "restarted"
            fresh = store_shard(APP, required=False)
            if (
                fresh is not None
                and fresh._actor_id.hex() != shard_id
                and actor_info(fresh._actor_id.hex())["State"] == "ALIVE"
            ):
                return "recreated"
            return None

        threads = [threading.Thread(target=write_loop, args=(u,), daemon=True) for u in writers]
        threads.append(threading.Thread(target=read_loop, daemon=True))
        for t in threads:
            t.start()
        try:
            wait_until(
                lambda: sum(1 for r in traffic.of("write") if getattr(r[3], "status_code", 0) == 201) >= 6,
                60,
                "writes before the kill",
            )
            killed_at = time.monotonic()
            ray.kill(shard, no_restart=not restart)  # Ray's own API, by actor
            how = wait_until(shard_back, HEAL_TIMEOUT_S, "the store shard back (restarted or recreated)")
            if not restart:
                assert how == "recreated" and actor_info(shard_id)["State"] == "DEAD"
            shard_back_at = time.monotonic()
            # healed without anyone restarting anything: /health 200 and fresh writes succeed
            wait_until(lambda: healthy(url), HEAL_TIMEOUT_S, "/health 200 after the shard came back")
            wait_until(
                lambda: (
                    sum(
                        1
                        for r in traffic.of("write")
                        if r[4] > shard_back_at and getattr(r[3], "status_code", 0) == 201
                    )
                    >= 6
                ),
                HEAL_TIMEOUT_S,
                "writes succeeding again after the shard came back",
            )
            healed_at = time.monotonic()
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a request hung"

        records = traffic.records
        failures = [r for r in records if not isinstance(r[3], httpx.Response)]
        assert not failures, failures[:3]
        statuses = Counter((r[0], r[3].status_code) for r in records)
        slowest = max(r[5] - r[4] for r in records)
        print(
            f"\n[shard kill, no_restart={not restart}] shard {how} after {shard_back_at - killed_at:.1f}s, healed "
            f"(health 200, writes ok) after {healed_at - killed_at:.1f}s; answers {dict(statuses)}; "
            f"slowest answer {slowest:.1f}s"
        )
        for kind, _, _, r, _, _ in records:
            if r.status_code not in STATUSES_DURING_FAULT:
                pytest.fail(f"{kind} answered {r.status_code}: {r.text}")
            if r.status_code == 503:
                assert kind != "chat", "a chat failed because of memory"
                assert_unavailable_answer(r, {"store_unavailable"})
        assert all(r[3].status_code == 200 for r in traffic.of("chat")), "chat must never fail because of memory"
        assert statuses[("write", 201)] >= 12

        # every acknowledged write is there, with its content
        acked = {r[3].json()["memories"][0]["id"]: (r[1], r[2]) for r in traffic.of("write") if r[3].status_code == 201}
        for user_id in writers:
            stored = {m["id"]: m["content"] for m in all_memories(url, user_id)}
            mine = {i: c for i, (u, c) in acked.items() if u == user_id}
            missing = set(mine) - set(stored)
            assert not missing, f"{len(missing)} acknowledged writes of {user_id} lost"
            assert all(stored[i] == c for i, c in mine.items())
        for memory_id, (user_id, content) in list(acked.items())[:: max(1, len(acked) // 10)]:
            got = httpx.get(f"{url}/v1/memory/{memory_id}", headers=hdr(user_id), timeout=30)
            assert got.status_code == 200 and got.json()["content"] == content, got.text
        # and memory still works end to end
        assert "4817" in echoed(chat(url, reader, QUESTION))
        assert httpx.get(f"{url}/v1/memory", headers=hdr(reader), timeout=30).status_code == 200

    def test_killed_embedder_replica_is_replaced_and_memory_resumes(self, faults_app):
        """Chat needs no Embedder to retrieve (``query_embedding: in_shard``): it keeps
        answering 200 through the gap; what needs the Embedder (a new memory, /v1/embeddings,
        the auto-store behind a chat) waits for the new replica or is refused with 503 +
        ``Retry-After``."""
        import ray

        url = faults_app
        alice = user("emb")
        assert write(url, alice, FACT).status_code == 201
        (old,) = embedder_replicas(APP)

        traffic = Traffic()
        stop = threading.Event()

        def loop(kind: str, call) -> None:
            with httpx.Client(timeout=90) as client:
                k = 0
                while not stop.is_set():
                    t0 = time.monotonic()
                    try:
                        r = call(client, k)
                    except httpx.HTTPError as e:
                        r = e
                    traffic.add(kind, alice, None, r, t0, time.monotonic())
                    k += 1
                    time.sleep(0.1)

        calls = {
            "chat": lambda c, k: chat(url, alice, QUESTION, client=c),
            "chat+store": lambda c, k: chat(url, alice, f"{QUESTION} (asked {k})", model="assistant", client=c),
            "embed": lambda c, k: c.post(f"{url}/v1/embeddings", json={"input": [f"hello {k}"]}),
            "write": lambda c, k: write(url, alice, f"gap note {k}", c),
        }
        threads = [threading.Thread(target=loop, args=item, daemon=True) for item in calls.items()]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(traffic.records) >= 8, 60, "traffic before the kill")
            killed_at = time.monotonic()
            ray.kill(ray.get_actor(old, namespace="serve"), no_restart=True)
            wait_until(
                lambda: (lambda now: now and old not in now)(embedder_replicas(APP)),
                HEAL_TIMEOUT_S,
                "Serve replacing the Embedder replica",
            )
            replaced_at = time.monotonic()
            wait_until(lambda: healthy(url), HEAL_TIMEOUT_S, "/health 200 after the replacement")
            wait_until(
                lambda: any(r[4] > replaced_at and getattr(r[3], "status_code", 0) == 201 for r in traffic.of("write")),
                HEAL_TIMEOUT_S,
                "a write after the replacement",
            )
            healed_at = time.monotonic()
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a request hung"

        records = traffic.records
        failures = [r for r in records if not isinstance(r[3], httpx.Response)]
        assert not failures, failures[:3]
        in_gap = [r for r in records if r[5] > killed_at and r[4] < replaced_at]
        print(
            f"\n[embedder kill] new replica after {replaced_at - killed_at:.1f}s, healed after "
            f"{healed_at - killed_at:.1f}s; answers {dict(Counter((r[0], r[3].status_code) for r in records))}; "
            f"during the gap {dict(Counter((r[0], r[3].status_code) for r in in_gap))}; slowest "
            f"{ {k: round(max((r[5] - r[4] for r in records if r[0] == k), default=0), 1) for k in calls} }s; "
            f"chat x-memory-injected during the gap "
            f"{dict(Counter(r[3].headers.get('x-memory-injected') for r in in_gap if r[0] == 'chat'))}"
        )
        assert in_gap, "no request overlapped the gap"
        for kind, _, _, r, _, _ in records:
            if kind.startswith("chat"):
                assert r.status_code == 200, r.text  # answered, with or without memory
            elif r.status_code != (201 if kind == "write" else 200):
                assert_unavailable_answer(r, {"embedding_unavailable", "service_unavailable"})

        # memory resumes: a new memory is written, embedded and injected into the next chat
        (new,) = embedder_replicas(APP)
        assert new != old
        r = write(url, alice, "My parking spot is number 77 on level B")
        assert r.status_code == 201, r.text
        answer = chat(url, alice, "Where is my parking spot?")
        assert answer.status_code == 200 and "77" in echoed(answer), answer.text
        assert int(answer.headers["x-memory-injected"]) >= 1
        embedded = httpx.post(f"{url}/v1/embeddings", json={"input": ["hello"]}, timeout=30)
        assert embedded.status_code == 200, embedded.text
        # and the auto-store behind a chat works again
        turn = chat(url, alice, "Please remember that my bike is a green Gazelle", model="assistant")
        assert turn.status_code == 200
        wait_until(
            lambda: any("Gazelle" in m["content"] for m in all_memories(url, alice)),
            30,
            "the auto-stored turn after the replacement",
        )

    def test_cache_outage_falls_through_and_nothing_stale_comes_back(self, faults_app, cache_server):
        import valkey

        url = faults_app
        alice = user("cache")
        ids = {}
        for content in (FACT, "I prefer window seats on trains"):
            r = write(url, alice, content)
            assert r.status_code == 201, r.text
            ids[content] = r.json()["memories"][0]["id"]
        locker, seats = ids[FACT], ids["I prefer window seats on trains"]

        def found(query: str) -> list[str]:
            r = search(url, alice, query)
            assert r.status_code == 200, r.text
            return [m["id"] for m in r.json()["memories"]]

        # cached before the outage: the search and the chat's retrieval, asked twice each
        for _ in range(2):
            assert locker in found(QUESTION)
            assert "4817" in echoed(chat(url, alice, QUESTION))
        cache = valkey.Valkey.from_url(cache_server.url_db(1))
        user_hash = hashlib.sha256(alice.encode()).hexdigest()[:32]  # CachingStore's key of the user
        cached_before = {k for k in cache.keys("*") if f"r:{user_hash}:".encode() in k}
        assert len(cached_before) >= 2, cache.keys("*")
        cache.close()

        cache_server.halt()
        down_at = time.monotonic()
        try:
            # reads fall through to the store; writes and deletes succeed
            assert locker in found(QUESTION)
            r = chat(url, alice, QUESTION)
            assert r.status_code == 200 and "4817" in echoed(r), r.text
            deleted = httpx.delete(
                f"{url}/v1/memory/{locker}", headers=hdr(alice) | {"content-type": "application/json"}, timeout=30
            )
            assert deleted.status_code == 200, deleted.text
            created = write(url, alice, "My gym locker code is 2290")
            assert created.status_code == 201, created.text
            gym = created.json()["memories"][0]["id"]
            assert locker not in found(QUESTION) and gym in found(QUESTION)
            assert "4817" not in echoed(chat(url, alice, QUESTION))
            assert healthy(url)  # a down cache does not make the service unhealthy (fail-open)
        finally:
            cache_server.restart()
        print(
            f"\n[cache outage] {time.monotonic() - down_at:.1f}s down; {len(cached_before)} entries of the user "
            "cached before it"
        )

        # the restarted cache still holds the entries cached before the outage (persisted) ...
        cache = valkey.Valkey.from_url(cache_server.url_db(1))
        assert cached_before <= set(cache.keys("*")), "premise: the pre-outage entries were persisted"
        # ... and none of them is served: the deleted memory never comes back
        for _ in range(2):
            assert locker not in found(QUESTION)
            r = chat(url, alice, QUESTION)
            assert r.status_code == 200 and "4817" not in echoed(r) and "2290" in echoed(r), r.text
        assert gym in found(QUESTION) and seats in found("Which seats do I prefer?")
        assert httpx.get(f"{url}/v1/memory/{locker}", headers=hdr(alice), timeout=30).status_code == 404
        # the cache serves again (fresh entries for the user after the invalidation)
        assert {k for k in cache.keys("*") if f"r:{user_hash}:".encode() in k} - cached_before
        cache.close()


# ---------------------------------------------------------------------------- test 4
@pytest.mark.parametrize("backend", ["milvus", "valkey"])
def test_every_memory_is_back_after_an_application_restart(serve_http_port, tmp_path, backend):
    from ray import serve

    from memory_core.testing.valkey_server import start_valkey_server

    server = (
        start_valkey_server(search=True, persistent=True, workdir=tmp_path / "valkey") if backend == "valkey" else None
    )
    config = app_config(tmp_path, backend=backend, valkey_url=server.url_db(0) if server else None)
    alice, bob = user("restart"), user("restart")
    contents = {
        alice: [FACT, "I prefer window seats on trains", "日本語 ✓ line\u2028separator"],
        bob: ["Deploy with make release", "My dentist is Dr. Okafor"],
    }
    kept = {"access_count", "last_accessed"}  # read bookkeeping, not content
    try:
        started = time.monotonic()
        url = run_app(serve_http_port, built(config))
        first_start = time.monotonic() - started
        try:
            for user_id, texts in contents.items():
                r = httpx.post(
                    f"{url}/v1/memory",
                    json={"memories": [{"content": t, "metadata": {"n": i}} for i, t in enumerate(texts)]},
                    headers=hdr(user_id),
                    timeout=60,
                )
                assert r.status_code == 201, r.text
            assert chat(url, alice, "Remember that my cat is called Miso", model="assistant").status_code == 200
            wait_until(lambda: len(all_memories(url, alice)) == 4, 30, "the auto-stored turn")
            before = {
                u: {m["id"]: {k: v for k, v in m.items() if k not in kept} for m in all_memories(url, u)}
                for u in contents
            }
        finally:
            serve.delete(APP)
        if server is not None:
            server.restart()  # the Valkey server restarts too: its append-only file holds the data

        started = time.monotonic()
        url = run_app(serve_http_port, built(config))
        second_start = time.monotonic() - started
        try:
            for user_id, memories in before.items():
                after = {m["id"]: {k: v for k, v in m.items() if k not in kept} for m in all_memories(url, user_id)}
                assert after == memories
                for memory_id, memory in memories.items():
                    got = httpx.get(f"{url}/v1/memory/{memory_id}", headers=hdr(user_id), timeout=30)
                    assert got.status_code == 200 and got.json()["content"] == memory["content"], got.text
                    r = httpx.post(
                        f"{url}/v1/memory/search", json={"query": memory["content"]}, headers=hdr(user_id), timeout=30
                    )
                    assert r.status_code == 200, r.text
                    assert r.json()["memories"][0]["id"] == memory_id, (memory["content"], r.json())
            assert "4817" in echoed(chat(url, alice, QUESTION))
        finally:
            serve.delete(APP)
        print(f"\n[restart {backend}] started in {first_start:.1f}s, restarted in {second_start:.1f}s")
    finally:
        if server is not None:
            server.stop()


# ---------------------------------------------------------------------------- test 5
def test_overload_is_refused_with_429_not_queued(serve_http_port, tmp_path, upstream_server):
    """Against the test upstream process, asked to take 1 s per completion (``x-fault``)."""
    from ray import serve

    from deployments.app import build_application

    slow = {"x-fault": "delay=1"}
    # tiny limits: one request running in the ingress, one waiting in the proxy's queue
    tight = build_application(
        {"config": app_config(tmp_path, upstream_url=upstream_server.base_url)},
        overrides={"MemoryIngress": {"max_ongoing_requests": 1, "max_queued_requests": 1}},
    )
    url = run_app(serve_http_port, tight)
    try:
        one = chat(url, None, "hello", model="assistant")
        assert one.status_code == 200 and echoed(one) == "user: hello", one.text

        async def burst(n: int) -> list:
            async with httpx.AsyncClient(timeout=30) as client:
                return await asyncio.gather(
                    *(
                        client.post(
                            f"{url}/v1/chat/completions",
                            json={"model": "assistant", "messages": [{"role": "user", "content": f"request {i}"}]},
                            headers=slow,
                        )
                        for i in range(n)
                    ),
                    return_exceptions=True,
                )

        started = time.monotonic()
        answers = asyncio.run(burst(12))
        took = time.monotonic() - started
        errors = [a for a in answers if not isinstance(a, httpx.Response)]
        assert not errors, errors  # none hangs (a 30 s timeout would be an error here)
        statuses = Counter(a.status_code for a in answers)
        print(f"\n[overload] 12 concurrent chats against a 1 s upstream: {dict(statuses)} in {took:.1f}s")
        assert set(statuses) <= {200, 429}, statuses
        assert statuses[429] >= 1 and statuses[200] >= 1, statuses
        for a in answers:
            if a.status_code == 429:
                assert a.headers.get("retry-after") == "1", dict(a.headers)
        # at most a few were admitted (1 running + 1 queued at a time), and they ran, not hung
        assert took < 15
        # after the burst the service answers normally again
        again = chat(url, None, "again", model="assistant")
        assert again.status_code == 200, again.text
    finally:
        serve.delete(APP)
