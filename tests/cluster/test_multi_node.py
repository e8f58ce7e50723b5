"""The application on a two-node Ray cluster on this machine, deployed as on a real cluster
(``serve deploy`` of a config derived from ``cluster/serve_config.gpu.yaml``), a node lost
mid-traffic.

- **Nodes.** A head (``ray start --head``, 1 CPU, ``memory_router_cpu``) and a second node
  (``ray start --address``, 1 CPU, ``memory_router_gpu``: the "GPU worker"), each a ``ray
  start --block`` process of its own session with its own ``--temp-dir`` and ports
  (``memory_core.testing.ray_cluster``).
- **Config.** ``cluster/serve_config.gpu.yaml`` with what this machine lacks replaced: no GPU
  (``num_gpus: 0``, ``device: cpu``; the Embedder keeps ``resources: {memory_router_gpu: 1}``,
  so it can only run on the second node), Milvus Lite in a file instead of a Milvus server
  (``pool.shards: 1``: one writer), no Valkey cache, the echo upstream, small replica counts,
  ``num_cpus: 0`` for the head's deployments (they are placed by ``memory_router_cpu``),
  ``proxy_location: HeadOnly`` (two nodes of one machine share its ports: a proxy per node
  would bind the same port twice).
- **Checks.** The dashboard REST API (``GET /api/serve/applications/``) lists the application,
  its five deployments and their replicas with their node ids: the Embedder's on the second
  node, every other one (the StorePool, whose store shard holds the Milvus Lite file, too) on
  the head. Traffic is served (a memory written, then injected into a chat). While writers
  post memories and a reader chats, the second node is killed (SIGKILL to every process of
  it at once: its raylet, agents and the Embedder replicas); writes get 201 or 503 with
  ``Retry-After``, chats 200, never another status, and no request hangs (Serve holds calls
  to a deployment without a running replica until one runs: measured, the writes of the
  outage wait for the replacement and then succeed). Recovery is what an operator (or the cluster autoscaler)
  does: a replacement node with the same resource joins; Serve starts the Embedder there,
  writes succeed again, and every write acknowledged with 201, before, during and after the
  outage, is readable with its content.

Bounded: ``TEST_TIMEOUT_S`` overall (a SIGALRM raises in the test, whose ``finally`` stops
every node by process group and pid); every wait has its own limit. Run:
``pytest -m multinode tests/cluster`` (excluded from the default run by ``addopts``).
"""

from __future__ import annotations

import copy
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from memory_core.testing.net import free_port
from memory_core.testing.ray_cluster import LocalRayCluster, RayNode
from tests.conftest import wait_until

pytestmark = pytest.mark.multinode

REPO_ROOT = Path(__file__).resolve().parents[2]
GPU_SERVE_CONFIG = REPO_ROOT / "cluster" / "serve_config.gpu.yaml"
APP = "memory-router"
GPU_RESOURCE, CPU_RESOURCE = "memory_router_gpu", "memory_router_cpu"
EMBEDDER_REPLICAS = 2
TEST_TIMEOUT_S = 420
FACT, QUESTION = "My locker code is 4817", "What is my locker code?"
HEAD_DEPLOYMENTS = {"StorePool", "MemoryIngress", "EchoUpstream", "Consolidator"}


def derived_serve_config(store_dir: Path, http_port: int) -> dict[str, Any]:
    """``cluster/serve_config.gpu.yaml`` for two CPU nodes of this machine (see the module
    docstring for each change and why)."""
    doc = copy.deepcopy(yaml.safe_load(GPU_SERVE_CONFIG.read_text()))
    doc["proxy_location"] = "HeadOnly"
    doc["http_options"] = {"host": "127.0.0.1", "port": http_port}
    (app,) = doc["applications"]
    memory = app["args"]["config"]["global"]["stores"]["memory"]
    memory["milvus"] = {"uri": str(store_dir / "memory.db"), "collection": "agentic_memory"}
    memory["embedding"]["device"] = "cpu"
    memory["cache"] = {"enabled": False}
    memory["pool"] = {"shards": 1, "query_embedding": "embedder"}  # Milvus Lite: one writer
    app["args"]["config"]["global"]["upstream"] = {}  # the offline echo upstream
    deployments = {d["name"]: d for d in app["deployments"]}
    embedder = deployments["Embedder"]
    assert embedder["ray_actor_options"]["resources"] == {GPU_RESOURCE: 1}, "premise: the GPU placement"
    embedder["ray_actor_options"].update(num_cpus=0.5, num_gpus=0)
    embedder.pop("autoscaling_config")
    embedder["num_replicas"] = EMBEDDER_REPLICAS
    embedder["user_config"] = {"max_batch_size": 32, "batch_wait_timeout_s": 0.002}
    for name in ("StorePool", "MemoryIngress", "Consolidator"):
        assert deployments[name]["ray_actor_options"]["resources"] == {CPU_RESOURCE: 1}, name
        deployments[name]["ray_actor_options"]["num_cpus"] = 0
        deployments[name].pop("autoscaling_config", None)
        deployments[name]["num_replicas"] = 1
    deployments["Consolidator"]["user_config"]["interval_s"] = 3600  # no background pass mid-test
    app["deployments"].append(
        {
            "name": "EchoUpstream",
            "num_replicas": 1,
            "ray_actor_options": {"num_cpus": 0, "resources": {CPU_RESOURCE: 1}},
        }
    )
    return doc


# ---------------------------------------------------------------------------- helpers
class Deadline:
    """The test's overall time limit: ``left()`` seconds remain; ``arm()`` makes a SIGALRM
    raise ``TimeoutError`` in the main thread when it is spent (so ``finally`` still runs)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def arm(self) -> None:
        def expired(signum, frame):
            raise TimeoutError(f"the multi-node test ran past {self.seconds:.0f}s")

        signal.signal(signal.SIGALRM, expired)
        signal.alarm(int(self.seconds))

    @staticmethod
    def disarm() -> None:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def hdr(user_id: str) -> dict[str, str]:
    return {"x-authz-user-id": user_id}


def assert_chat_recalls_the_fact(url: str, user_id: str) -> None:
    """A chat of ``user_id`` asking ``QUESTION`` is answered with ``FACT`` injected (the echo
    upstream repeats what it is sent)."""
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "assistant", "messages": [{"role": "user", "content": QUESTION}]},
        headers=hdr(user_id),
        timeout=60,
    )
    assert chat.status_code == 200 and "4817" in chat.json()["choices"][0]["message"]["content"], chat.text


def healthy(url: str) -> bool:
    # the ingress's /health asks the Embedder for at most 3 s (a 503 beyond): keep the client bound above it
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def running_replicas(cluster: LocalRayCluster) -> dict[str, list[dict[str, Any]]]:
    """Deployment name → its RUNNING replicas (``node_id``, ``node_ip``, ``pid``, ...) from the
    dashboard's ``GET /api/serve/applications/``; empty when the API or the app is not there."""
    body = cluster.serve_applications()
    app = (body or {}).get("applications", {}).get(APP)
    if not app:
        return {}
    return {
        name: [r for r in d.get("replicas", []) if r.get("state") == "RUNNING"]
        for name, d in app.get("deployments", {}).items()
    }


def embedders_on(cluster: LocalRayCluster, node: RayNode) -> bool:
    """All ``EMBEDDER_REPLICAS`` Embedder replicas RUNNING, every one on ``node``."""
    replicas = running_replicas(cluster).get("Embedder", [])
    return len(replicas) == EMBEDDER_REPLICAS and all(r["node_id"] == node.node_id for r in replicas)


def store_shard_nodes(cluster: LocalRayCluster) -> list[str]:
    """Node ids of the live ``StoreShard`` actors (dashboard state API ``/api/v0/actors``)."""
    r = httpx.get(
        f"{cluster.dashboard_url}/api/v0/actors",
        params={"detail": "true", "limit": 1000},
        headers=cluster.auth_headers,
        timeout=15,
    )
    r.raise_for_status()
    return [
        a["node_id"]
        for a in r.json()["data"]["result"]["result"]
        if a.get("class_name") == "StoreShard" and a.get("state") == "ALIVE"
    ]


@dataclass
class Call:
    """One request of the traffic: its kind (``write``/``chat``), user, the memory text of a
    write, the response (or the transport error) and when it was sent and answered."""

    kind: str
    user: str
    content: str
    response: httpx.Response | Exception
    t0: float
    t1: float

    @property
    def status(self) -> int:
        return self.response.status_code if isinstance(self.response, httpx.Response) else 0


class Traffic:
    """Threads calling the service until stopped: ``writers`` users each posting one memory
    per request (``POST /v1/memory``), and ``reader`` asking its question in a chat (retrieval
    with the query embedded by the Embedder, the turn auto-stored). Every call is recorded."""

    def __init__(self, url: str, writers: int, reader: str):
        self.url = url
        self.users = [f"mn-writer-{uuid.uuid4().hex[:8]}" for _ in range(writers)]
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._writes, args=(u,), daemon=True) for u in self.users]
        self.threads.append(threading.Thread(target=self._chats, args=(reader,), daemon=True))

    def _record(self, kind: str, user: str, content: str, send) -> None:
        t0 = time.monotonic()
        try:
            r: httpx.Response | Exception = send()
        except httpx.HTTPError as e:  # recorded: a hang or a dropped connection fails the test
            r = e
        with self.lock:
            self.calls.append(Call(kind, user, content, r, t0, time.monotonic()))

    def _writes(self, user_id: str) -> None:
        with httpx.Client(timeout=120) as client:
            k = 0
            while not self.stop.is_set():
                content = f"{user_id} note number {k}"
                body = {"memories": [{"content": content}]}
                self._record(
                    "write",
                    user_id,
                    content,
                    lambda body=body: client.post(f"{self.url}/v1/memory", json=body, headers=hdr(user_id)),
                )
                k += 1
                time.sleep(0.05)

    def _chats(self, user_id: str) -> None:
        body = {"model": "assistant", "messages": [{"role": "user", "content": QUESTION}]}
        with httpx.Client(timeout=120) as client:
            while not self.stop.is_set():
                self._record(
                    "chat",
                    user_id,
                    "",
                    lambda: client.post(f"{self.url}/v1/chat/completions", json=body, headers=hdr(user_id)),
                )
                time.sleep(0.2)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self, timeout: float) -> bool:
        """Stop and wait for the threads; True when none is still in a request."""
        self.stop.set()
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(timeout=max(0.1, end - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)

    def of(self, kind: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.kind == kind]

    def acked_after(self, t: float) -> int:
        """Writes sent after ``t`` and answered 201."""
        return sum(1 for c in self.of("write") if c.t0 > t and c.status == 201)


# ---------------------------------------------------------------------------- the test
def test_a_lost_node_loses_no_acknowledged_write_and_the_app_recovers(tmp_path):
    deadline = Deadline(TEST_TIMEOUT_S)
    started = time.monotonic()
    marks: dict[str, float] = {}
    cluster = LocalRayCluster(env={"PYTHONPATH": str(REPO_ROOT)})
    traffic: Traffic | None = None
    deadline.arm()
    try:
        # 4 replicas take 1 each; the store shard asks for a sliver of the StorePool's (deployments.store_pool)
        head = cluster.start_head(num_cpus=1, resources={CPU_RESOURCE: 8})
        worker = cluster.add_node("gpu-worker", num_cpus=1, resources={GPU_RESOURCE: 4})
        assert head.temp_dir != worker.temp_dir and head.node_id != worker.node_id
        marks["nodes up"] = time.monotonic()

        http_port = free_port()
        config_path = tmp_path / "serve_config.yaml"
        config_path.write_text(yaml.safe_dump(derived_serve_config(tmp_path, http_port), sort_keys=False))
        cluster.serve_deploy(config_path)
        url = f"http://127.0.0.1:{http_port}"
        wait_until(lambda: healthy(url), min(240, deadline.left()), "/health 200 after serve deploy", interval=1)
        marks["app healthy"] = time.monotonic()

        # the dashboard API lists the application, its deployments and replicas with their nodes
        def app_running() -> dict[str, Any] | None:
            app = ((cluster.serve_applications() or {}).get("applications") or {}).get(APP)
            return app if app and app["status"] == "RUNNING" else None

        app = wait_until(app_running, min(120, deadline.left()), "the application RUNNING", interval=1)
        assert set(app["deployments"]) == {"Embedder", *HEAD_DEPLOYMENTS}
        replicas = running_replicas(cluster)
        assert embedders_on(cluster, worker), replicas["Embedder"]
        for name in HEAD_DEPLOYMENTS:
            assert [r["node_id"] for r in replicas[name]] == [head.node_id], (name, replicas[name])
        assert store_shard_nodes(cluster) == [head.node_id]  # the store is on the head's side
        assert app["deployments"]["Embedder"]["required_resources"].get(GPU_RESOURCE) == 1

        # traffic is served: a memory written, then injected into a chat
        alice = f"mn-alice-{uuid.uuid4().hex[:8]}"
        r = httpx.post(f"{url}/v1/memory", json={"memories": [{"content": FACT}]}, headers=hdr(alice), timeout=60)
        assert r.status_code == 201, r.text
        assert_chat_recalls_the_fact(url, alice)

        # the second node lost mid-traffic
        embedder_pids = {r["pid"] for r in replicas["Embedder"]}
        assert embedder_pids <= set(worker.pids()), (embedder_pids, worker.pids())  # the kill reaches them
        traffic = Traffic(url, 3, alice)
        traffic.start()
        wait_until(lambda: traffic.acked_after(0) >= 9, min(60, deadline.left()), "writes before the kill")
        old_worker_id = worker.node_id
        killed = worker.kill()
        marks["killed"] = time.monotonic()
        assert embedder_pids <= set(killed)
        assert worker.pids() == [], "a process of the killed node survived"
        wait_until(
            lambda: old_worker_id not in {n["node_id"] for n in cluster.alive_nodes()},
            min(90, deadline.left()),
            "the head declaring the killed node dead",
        )
        marks["node declared dead"] = time.monotonic()
        # the outage: no node has memory_router_gpu, the Embedder has no running replica
        assert not cluster.node_ids_with(GPU_RESOURCE)
        wait_until(lambda: not running_replicas(cluster).get("Embedder"), 30, "the Embedder replicas gone")

        # an operator (or the cluster autoscaler) brings a replacement node with the resource
        replacement = cluster.add_node("gpu-worker-2", num_cpus=1, resources={GPU_RESOURCE: 4})
        assert replacement.node_id != old_worker_id
        marks["replacement up"] = time.monotonic()
        wait_until(lambda: embedders_on(cluster, replacement), min(180, deadline.left()), "Embedders on the new node")
        marks["embedders running"] = time.monotonic()
        wait_until(
            lambda: traffic.acked_after(marks["embedders running"]) >= 6, min(90, deadline.left()), "writes again"
        )
        marks["writes again"] = time.monotonic()
        assert traffic.join(timeout=150), "a request hung"
        assert healthy(url)

        # what callers got: writes 201, or 503 with Retry-After; chats 200; nothing else
        calls = traffic.calls
        failures = [c for c in calls if not isinstance(c.response, httpx.Response)]
        assert not failures, failures[:3]
        statuses = Counter((c.kind, c.status) for c in calls)
        in_outage = [c for c in calls if c.t1 > marks["killed"] and c.t0 < marks["embedders running"]]
        outage = Counter((c.kind, c.status) for c in in_outage)
        slowest = {k: round(max(c.t1 - c.t0 for c in calls if c.kind == k), 1) for k in ("write", "chat")}
        for c in calls:
            assert isinstance(c.response, httpx.Response)
            if c.kind == "chat":
                assert c.status == 200, c.response.text  # memory failures never fail a chat
                continue
            assert c.status in (201, 503), (c.status, c.response.text)
            if c.status == 503:
                assert c.response.headers.get("retry-after") == "1", dict(c.response.headers)
                assert c.response.json()["error"]["code"] in {"embedding_unavailable", "service_unavailable"}
        assert any(c.kind == "write" for c in in_outage), "no write overlapped the outage"
        codes_503 = Counter(c.response.json()["error"]["code"] for c in calls if c.status == 503)  # type: ignore[union-attr]

        # every acknowledged write is readable, with its content
        acked = [(c.user, c.content, c.response.json()) for c in traffic.of("write") if c.status == 201]  # type: ignore[union-attr]
        assert len(acked) >= 15
        for user_id, content, created in acked:
            memory_id = created["memories"][0]["id"]
            got = httpx.get(f"{url}/v1/memory/{memory_id}", headers=hdr(user_id), timeout=30)
            assert got.status_code == 200, (memory_id, got.text)
            if created["outcomes"][0]["outcome"] == "created":
                assert got.json()["content"] == content
        # and memory works end to end on the replacement node
        assert_chat_recalls_the_fact(url, alice)
        assert store_shard_nodes(cluster) == [head.node_id]
        marks["checked"] = time.monotonic()

        t = {k: round(v - started, 1) for k, v in marks.items()}
        print(
            f"\n[multi-node] timeline (s from start) {t}; killed {len(killed)} processes of the node "
            f"({len(embedder_pids)} Embedder replicas among them); "
            f"node declared dead {marks['node declared dead'] - marks['killed']:.1f}s after the kill; "
            f"Embedders running on the replacement {marks['embedders running'] - marks['replacement up']:.1f}s "
            f"after it joined; answers (kind, status) {dict(statuses)} ({len(acked)} writes acknowledged, all "
            f"readable; 503 codes {dict(codes_503)}), of calls overlapping the outage {dict(outage)}; "
            f"slowest {slowest} s"
        )
    except BaseException:
        for name, tail in cluster.logs():
            print(f"\n--- {name} (ray start output, tail)\n{tail}")
        print(f"the nodes' logs stay in {cluster.root}")
        raise
    finally:
        Deadline.disarm()
        if traffic is not None:
            traffic.stop.set()
        cluster.stop()
        left = cluster.pids()
        print(f"[multi-node] {time.monotonic() - started:.1f}s in all; processes left: {left}")
    assert not left
    cluster.remove()  # passed: its logs are not needed
