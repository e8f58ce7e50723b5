"""A Ray cluster of several nodes on one machine, started with the ``ray`` command line
(tests and benchmarks: ``tests/cluster/test_multi_node.py``, ``benchmarks/autoscaling.py``).

Each node is one ``ray start --block`` process started in a new session, so the node's
processes (its raylet, agents, log monitor, the workers its raylet starts and, on the head,
the GCS and the dashboard) share the process group of that command. Every node has its own
``--temp-dir`` (Ray 2.60 takes one per node) and its own ports, chosen free, so the cluster
does not touch another Ray instance of the machine (the default ports 6379, 8265, 10001 and
52365, and ``/tmp/ray``).

Stopping never uses ``ray stop``, which stops every Ray process of the machine: a node is
stopped by its process group (SIGTERM, then SIGKILL), and then by pid every other process of
the node: the workers its raylet starts run in process groups of their own and rename
themselves (``ray::ServeReplica:...``), so they are found by a variable naming the node's
temp dir in their environment (``NODE_MARKER``: workers inherit the raylet's environment),
and any process whose command line names the temp dir. ``kill()``
is the abrupt form: SIGKILL at once, as a machine that fails.

Token authentication (Ray's default once a token exists) is on, with a token of this cluster's
own: ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH`` (a file in the cluster's directory) in
every node's environment and ``serve deploy``'s; REST calls send it as ``Authorization:
Bearer`` (``auth_headers``). Nothing is read from or written to ``~/.ray``.

No Ray import here: the nodes are separate processes, driven through the ``ray`` executable
next to this interpreter.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .net import free_port

NODE_MARKER = "MEMORY_ROUTER_RAY_NODE"
"""The environment variable naming a node's temp dir in each of its processes."""


def ray_executable() -> str:
    """The ``ray`` command of this interpreter's environment."""
    candidate = Path(sys.executable).parent / "ray"
    if not candidate.is_file():
        raise RuntimeError(f"no ray executable next to {sys.executable} (pip install 'ray[serve]')")
    return str(candidate)


def _pids_where(name: str, matches: Callable[[bytes], bool]) -> list[int]:
    """Pids of this machine's processes, other than this one, whose ``/proc/<pid>/<name>``
    satisfies ``matches`` (processes that vanish or cannot be read are skipped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            content = (entry / name).read_bytes()
        except OSError:
            continue
        if matches(content):
            found.append(int(entry.name))
    return sorted(found)


def _processes_naming(text: str) -> list[int]:
    """Pids of this machine's processes whose command line names the path ``text`` (itself or
    below it)."""
    needles = (f"{text}/".encode(), f"{text}\0".encode(), f"{text} ".encode())
    return _pids_where("cmdline", lambda c: c.endswith(text.encode()) or any(n in c for n in needles))


def _processes_with_env(entry: str) -> list[int]:
    """Pids of this machine's processes whose environment holds ``entry`` (``NAME=value``,
    exactly)."""
    needle = entry.encode()
    return _pids_where("environ", lambda environ: needle in environ.split(b"\0"))


def _group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes in process group ``pgid``."""

    def in_group(stat: bytes) -> bool:
        # the fields after the command name (which may hold spaces) end with ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        return len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z"  # a zombie is dead already

    return _pids_where("stat", in_group)


@dataclass
class RayNode:
    """One node: the ``ray start --block`` process (``process``, leader of its own process
    group), its ``temp_dir`` and the file its output goes to (``log_path``)."""

    name: str
    temp_dir: Path
    process: subprocess.Popen
    log_path: Path
    resources: dict[str, float] = field(default_factory=dict)
    node_id: str | None = None
    """Ray's id of the node, once the head lists it (``LocalRayCluster`` sets it)."""

    @property
    def pgid(self) -> int:
        """The node's process group id (the ``ray start`` process's pid)."""
        return self.process.pid

    @property
    def marker(self) -> str:
        """``NAME=value`` in the environment of every process of this node: the raylet's
        workers (Serve replicas, actors) inherit it, though they are in a process group of
        their own and rename their process title (``ray::ServeReplica:...``)."""
        return f"{NODE_MARKER}={self.temp_dir}"

    def pids(self) -> list[int]:
        """Every live process of this node: its process group, any process whose command
        line names its temp dir, and any process with its ``marker`` in its environment."""
        return sorted(
            set(_group_members(self.pgid))
            | set(_processes_naming(str(self.temp_dir)))
            | set(_processes_with_env(self.marker))
        )

    def alive(self) -> bool:
        """Whether the ``ray start`` process still runs."""
        return self.process.poll() is None

    def output(self) -> str:
        """What ``ray start`` printed so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def kill(self, timeout_s: float = 15) -> list[int]:
        """SIGKILL every process of the node at once (a machine that fails), again until none
        is left (a process can be starting while the first list is taken, and a killed one
        is listed until the kernel has ended it) or ``timeout_s`` passed; returns the pids
        killed. The ``ray start`` process is reaped."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed.update(pids)
            time.sleep(0.1)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        return sorted(killed)

    def stop(self, grace_s: float = 5) -> None:
        """SIGTERM the node's process group, wait up to ``grace_s`` for its processes to
        exit, then SIGKILL whatever of the node is left. (Ray's GCS and raylet take longer
        than that to shut down gracefully on SIGTERM, and a test
        cluster keeps nothing worth the wait: the application's data is in its store.)"""
        if self.alive():
            try:
                os.killpg(self.pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.25)
        self.kill()


@dataclass
class LocalRayCluster:
    """A head and worker nodes on this machine, each with its own temp dir and ports.

    ``env``: extra environment for every node (Ray workers inherit the raylet's environment:
    ``PYTHONPATH`` is how the replicas import this checkout's code). Use as a context
    manager, or call ``stop()`` in a ``finally``: it stops every node it started, by process
    group and pid, and removes nothing else.
    """

    env: dict[str, str] = field(default_factory=dict)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mr-ray-")))
    nodes: list[RayNode] = field(default_factory=list)
    gcs_port: int = 0
    dashboard_port: int = 0
    node_ip: str = "127.0.0.1"
    token: str = field(default_factory=lambda: secrets.token_hex(32))

    def __post_init__(self) -> None:
        self.token_path = self.root / "auth_token"
        self.token_path.touch(mode=0o600)
        self.token_path.write_text(self.token)

    @property
    def auth_headers(self) -> dict[str, str]:
        """The header the dashboard's REST API wants with this cluster's token."""
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def gcs_address(self) -> str:
        """``ip:port`` of the head's GCS (what ``ray start --address`` and ``ray.init`` take)."""
        return f"{self.node_ip}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        """The head's dashboard (``serve deploy --address`` and the REST API)."""
        return f"http://{self.node_ip}:{self.dashboard_port}"

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        env.pop("RAY_AUTH_TOKEN", None)
        env.update(
            {
                "RAY_USAGE_STATS_ENABLED": "0",
                "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(self.token_path),
            }
        )
        env.update(self.env)
        return env

    def _start(self, name: str, args: list[str], resources: dict[str, float]) -> RayNode:
        temp_dir = self.root / name
        temp_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.root / f"{name}.log"
        command = [
            ray_executable(),
            "start",
            "--block",
            "--disable-usage-stats",
            f"--node-ip-address={self.node_ip}",
            f"--temp-dir={temp_dir}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--resources={json.dumps(resources)}",
            *args,
        ]
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self._environment(), NODE_MARKER: str(temp_dir)},
                start_new_session=True,
            )
        node = RayNode(name, temp_dir, process, log_path, resources)
        self.nodes.append(node)
        return node

    def start_head(
        self, *, num_cpus: float = 1, resources: dict[str, float] | None = None, timeout_s: float = 90
    ) -> RayNode:
        """Start the head (GCS, dashboard on a free port) and wait until the dashboard
        answers. Raises ``RuntimeError`` when it does not within ``timeout_s``."""
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        head = self._start(
            "head",
            [
                "--head",
                f"--port={self.gcs_port}",
                f"--num-cpus={num_cpus}",
                "--include-dashboard=true",
                f"--dashboard-host={self.node_ip}",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port()}",
            ],
            resources or {},
        )

        def listed() -> bool:
            heads = [n for n in self.alive_nodes() if n.get("is_head_node")]
            if heads:
                head.node_id = heads[0]["node_id"]
            return bool(heads)

        self._wait(listed, timeout_s, "the head listed by its dashboard", head)
        return head

    def add_node(
        self, name: str, *, num_cpus: float = 1, resources: dict[str, float] | None = None, timeout_s: float = 90
    ) -> RayNode:
        """Start a worker node joined to the head and wait until the head lists it alive
        (with its custom resources, when it has any). Raises ``RuntimeError`` on timeout."""
        before = {n["node_id"] for n in self.alive_nodes()}
        if not before:
            raise RuntimeError("the head lists no live node: start the head first")
        node = self._start(name, [f"--address={self.gcs_address}", f"--num-cpus={num_cpus}"], resources or {})

        def joined() -> bool:
            new = [n for n in self.alive_nodes() if n["node_id"] not in before]
            if len(new) != 1:
                return False
            total = new[0].get("resources_total") or {}
            if all(total.get(k) == v for k, v in (resources or {}).items()):
                node.node_id = new[0]["node_id"]
                return True
            return False

        self._wait(joined, timeout_s, f"node {name} alive", node)
        return node

    def _get(self, path: str, timeout: float = 10) -> Any:
        try:
            r = httpx.get(f"{self.dashboard_url}{path}", headers=self.auth_headers, timeout=timeout)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def _wait(self, ready, timeout_s: float, what: str, node: RayNode) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            if not node.alive():
                raise RuntimeError(f"{what}: ray start exited {node.process.returncode}:\n{node.output()[-3000:]}")
            time.sleep(0.5)
        raise RuntimeError(f"{what}: not within {timeout_s:.0f}s:\n{node.output()[-3000:]}")

    def alive_nodes(self) -> list[dict[str, Any]]:
        """The cluster's live nodes from the dashboard's state API (``node_id``,
        ``resources_total``, ``is_head_node``, ...); empty when the dashboard does not answer."""
        body = self._get("/api/v0/nodes?detail=true&limit=100")
        if not body:
            return []
        return [n for n in body["data"]["result"]["result"] if n.get("state") == "ALIVE"]

    def node_ids_with(self, resource: str) -> set[str]:
        """Ids of the live nodes that advertise ``resource``."""
        return {n["node_id"] for n in self.alive_nodes() if resource in (n.get("resources_total") or {})}

    def serve_applications(self) -> dict[str, Any] | None:
        """``GET /api/serve/applications/``: Serve's applications, deployments and replicas
        (with ``node_id``/``node_ip``); None when the dashboard does not answer."""
        return self._get("/api/serve/applications/", timeout=15)

    def serve_deploy(self, config_path: Path, timeout_s: float = 120) -> subprocess.CompletedProcess:
        """``serve deploy <config> --address <dashboard>``; raises ``RuntimeError`` when it fails."""
        serve = str(Path(sys.executable).parent / "serve")
        done = subprocess.run(
            [serve, "deploy", str(config_path), "--address", self.dashboard_url],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self._environment(),
        )
        if done.returncode != 0:
            raise RuntimeError(f"serve deploy failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    def pids(self) -> list[int]:
        """Every live process of every node started here."""
        return sorted({pid for node in self.nodes for pid in node.pids()})

    def stop(self) -> None:
        """Stop every node, workers first, then the head (by process group, then by pid)."""
        for node in reversed(self.nodes):
            node.stop()

    def remove(self) -> None:
        """Delete the cluster's directory (temp dirs, logs, token); only once it is stopped.
        Raises ``RuntimeError`` while a process of it runs."""
        if self.pids():
            raise RuntimeError(f"the cluster in {self.root} still runs: stop() it first")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()  # the directory stays: its logs explain a failure

    def logs(self, tail: int = 2000) -> Iterator[tuple[str, str]]:
        """(node name, the end of its ``ray start`` output), for a failure message."""
        for node in self.nodes:
            yield node.name, node.output()[-tail:]
