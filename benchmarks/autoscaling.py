"""The Embedder autoscaling under a bounded load: replica counts over time.

Drives ``--clients`` concurrent callers of ``POST /v1/embeddings`` (``--texts`` sentences per
request) for ``--load`` seconds, then idles up to ``--idle`` seconds, and samples every second
the Embedder's replicas from the Ray dashboard's ``GET /api/serve/applications/``: RUNNING
replicas, replicas starting or stopping, and Serve's target replica count. Prints one row per
second (t, load on/off, requests answered in the second before t, running, target, other
states at t),
then the maximum running replica count, when it was first reached, and the time from the end
of the load until the Embedder ran one replica again.

By default it starts what it measures: a one-node Ray cluster (``ray start --head`` with its
own temp dir and ports, stopped by process group and pid at the end:
``memory_core.testing.ray_cluster``) and ``serve deploy`` of the root ``serve_config.yaml``
with the Embedder's ``autoscaling_config`` replaced (``--min-replicas`` 1, ``--max-replicas``,
``--target-ongoing``, the delays) and ``num_cpus: 0`` replicas, so four fit on two cores. On
a cluster the same block holds with ``num_gpus`` (``cluster/serve_config.gpu.yaml``).

    python -m benchmarks.autoscaling                          # starts and stops its own cluster
    python -m benchmarks.autoscaling --url http://127.0.0.1:8000 --dashboard http://127.0.0.1:8265 \\
        --token-file ~/.ray/auth_token                        # a running service, as deployed

Against a running service the Embedder's autoscaling config is whatever that deployment has.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml
from rich.console import Console
from rich.table import Table

from memory_core.testing.net import free_port, wait_healthy
from memory_core.testing.ray_cluster import LocalRayCluster

app = typer.Typer(add_completion=False)
console = Console()

REPO_ROOT = Path(__file__).resolve().parents[1]
APP = "memory-router"
WORDS = (
    "the quarterly report lists revenue by region and the north office grew fastest while travel costs "
    "fell after the new policy on shared rides and remote meetings took effect in spring"
).split()


@dataclass
class Sample:
    """One second of the run: ``completed`` requests answered 200 in the second before ``t``
    (``load``: that second began before the load ended), the Embedder's ``running`` and
    ``target`` replica counts and its replicas in ``other`` states at ``t``."""

    t: int
    load: bool
    completed: int
    running: int
    target: int
    other: dict[str, int] = field(default_factory=dict)


def autoscaling_config(
    max_replicas: int, target_ongoing: float, upscale_delay_s: float, downscale_delay_s: float, look_back_s: float
) -> dict[str, Any]:
    """The Embedder's ``autoscaling_config`` of this demonstration (min 1 replica)."""
    return {
        "min_replicas": 1,
        "max_replicas": max_replicas,
        "target_ongoing_requests": target_ongoing,
        "upscale_delay_s": upscale_delay_s,
        "downscale_delay_s": downscale_delay_s,
        "look_back_period_s": look_back_s,
        # Serve 2.60 still reads this (deprecated) field for how often handles and replicas
        # report their ongoing requests: the default, 10 s, would dominate a one-minute demo
        "metrics_interval_s": 1.0,
    }


def demo_serve_config(store_dir: Path, http_port: int, autoscaling: dict[str, Any]) -> dict[str, Any]:
    """The root ``serve_config.yaml`` with the Embedder autoscaling on ``num_cpus: 0`` replicas,
    its store in ``store_dir`` and the proxy on ``http_port``."""
    doc = copy.deepcopy(yaml.safe_load((REPO_ROOT / "serve_config.yaml").read_text()))
    doc["http_options"]["port"] = http_port
    (application,) = doc["applications"]
    memory = application["args"]["config"]["global"]["stores"]["memory"]
    memory["milvus"]["uri"] = str(store_dir / "memory.db")
    application["args"]["config"]["global"]["access"]["api_keys"]["path"] = str(store_dir / "access.sqlite")
    (embedder,) = [d for d in application["deployments"] if d["name"] == "Embedder"]
    embedder["ray_actor_options"] = {"num_cpus": 0, "num_gpus": 0}
    embedder["autoscaling_config"] = autoscaling
    return doc


def embedder_state(dashboard: str, headers: dict[str, str]) -> tuple[int, int, dict[str, int]] | None:
    """(running replicas, target replicas, other replica states → count) of the Embedder, from
    the dashboard; None when it does not answer."""
    try:
        r = httpx.get(f"{dashboard}/api/serve/applications/", headers=headers, timeout=5)
        deployment = r.json()["applications"][APP]["deployments"]["Embedder"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None
    states = Counter(rep["state"] for rep in deployment["replicas"])
    running = states.pop("RUNNING", 0)
    return running, int(deployment["target_num_replicas"]), dict(states)


CALLER = {"x-authz-user-id": "autoscaling-bench"}
"""The load's identity (trusted_header mode): requests without one are rate limited per client
address (``global.access.anonymous``), which would cap the load this benchmark means to apply."""


async def drive(
    url: str,
    dashboard: str,
    headers: dict[str, str],
    *,
    clients: int,
    texts: int,
    load_s: float,
    idle_s: float,
    settle_s: float,
) -> tuple[list[Sample], Counter]:
    """The load for ``load_s`` seconds, then idle until the Embedder runs one replica (and its
    target is 1) for ``settle_s`` seconds, or ``idle_s`` seconds passed; a ``Sample`` per second."""
    completed: Counter = Counter()  # second → requests answered 200 in that second
    statuses: Counter = Counter()
    started = time.monotonic()
    load_end = started + load_s
    body = {"input": [" ".join(WORDS[i % 7 :] + WORDS[: i % 7]) for i in range(texts)]}

    async def caller(client: httpx.AsyncClient) -> None:
        while time.monotonic() < load_end:
            try:
                r = await client.post(f"{url}/v1/embeddings", json=body, headers=CALLER)
                statuses[r.status_code] += 1
                if r.status_code == 200:
                    completed[int(time.monotonic() - started)] += 1
            except httpx.HTTPError as e:
                statuses[type(e).__name__] += 1

    samples: list[Sample] = []

    async def sampler() -> None:
        settled_since: float | None = None
        tick = 0
        while True:
            tick += 1
            await asyncio.sleep(max(0.0, started + tick - time.monotonic()))
            now = time.monotonic()
            state = await asyncio.to_thread(embedder_state, dashboard, headers)
            running, target, other = state if state is not None else (-1, -1, {"dashboard": 1})
            # row t: the requests answered in the second before t (under load if it began
            # before the load ended), the replicas as the dashboard lists them at t
            samples.append(
                Sample(tick, started + tick - 1 < load_end, completed.get(tick - 1, 0), running, target, other)
            )
            if now >= load_end:
                settled = running == 1 and target == 1 and not other
                settled_since = (settled_since or now) if settled else None
                if settled_since is not None and now - settled_since >= settle_s:
                    return
                if now >= load_end + idle_s:
                    return

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(sampler(), *(caller(client) for _ in range(clients)))
    return samples, statuses


def summary(samples: list[Sample], load_s: float) -> dict[str, Any]:
    """Maximum running replicas, when first reached (s from the start of the load), and the
    seconds from the end of the load until one replica ran again (None: not within the run)."""
    peak = max((s.running for s in samples), default=0)
    first_peak = next((s.t for s in samples if s.running == peak), None)
    peak_end = max((s.t for s in samples if s.running == peak), default=0)
    back = next((s.t for s in samples if s.t >= max(load_s, peak_end) and s.running == 1 and s.target == 1), None)
    loaded = [s.completed for s in samples if s.load]
    return {
        "max_running_replicas": peak,
        "max_target_replicas": max((s.target for s in samples), default=0),
        "max_reached_at_s": first_peak,
        "back_to_1_replica_s_after_load": None if back is None else round(back - load_s, 1),
        "mean_requests_per_s_under_load": round(sum(loaded) / max(1, len(loaded)), 1),
    }


@app.command()
def main(
    url: str = typer.Option("", help="a running service (empty: start a one-node cluster and deploy it here)"),
    dashboard: str = typer.Option("", help="the Ray dashboard of that service (with --url)"),
    token_file: Path | None = typer.Option(None, help="Ray's auth token for the dashboard (with --url)"),
    clients: int = typer.Option(16, min=1, help="concurrent callers during the load"),
    texts: int = typer.Option(8, min=1, help="sentences per /v1/embeddings request"),
    load: float = typer.Option(60.0, min=1.0, help="seconds of load"),
    idle: float = typer.Option(120.0, min=0.0, help="at most this many seconds of idling after the load"),
    settle: float = typer.Option(5.0, min=0.0, help="stop idling once one replica ran this many seconds"),
    max_replicas: int = typer.Option(4, min=1),
    target_ongoing: float = typer.Option(2.0, min=0.1, help="target_ongoing_requests"),
    upscale_delay: float = typer.Option(3.0, min=0.0, help="upscale_delay_s"),
    downscale_delay: float = typer.Option(15.0, min=0.0, help="downscale_delay_s"),
    look_back: float = typer.Option(5.0, min=1.1, help="look_back_period_s"),
    json_out: Path | None = typer.Option(None, help="write the samples and the summary here as JSON"),
) -> None:
    """Run the load, print the replica counts per second and the summary."""
    cluster: LocalRayCluster | None = None
    headers: dict[str, str] = {}
    autoscaling = autoscaling_config(max_replicas, target_ongoing, upscale_delay, downscale_delay, look_back)
    try:
        if url:
            if not dashboard:
                raise typer.BadParameter("--dashboard is needed with --url")
            if token_file is not None:
                headers = {"Authorization": f"Bearer {token_file.expanduser().read_text().strip()}"}
            autoscaling = {}
        else:
            cluster = LocalRayCluster(env={"PYTHONPATH": str(REPO_ROOT)})
            console.print(f"starting a one-node Ray cluster in {cluster.root} ...")
            cluster.start_head(num_cpus=2)
            http_port = free_port()
            config_path = cluster.root / "serve_config.yaml"
            config_path.write_text(
                yaml.safe_dump(demo_serve_config(cluster.root, http_port, autoscaling), sort_keys=False)
            )
            started = time.monotonic()
            cluster.serve_deploy(config_path)
            url, dashboard, headers = f"http://127.0.0.1:{http_port}", cluster.dashboard_url, cluster.auth_headers
            wait_healthy(url, timeout_s=300, interval_s=1)
            console.print(f"deployed (serve deploy) and healthy after {time.monotonic() - started:.0f}s")
        state = embedder_state(dashboard, headers)
        if state is None:
            raise RuntimeError(f"no Embedder of application {APP!r} at {dashboard}/api/serve/applications/")
        console.print(
            f"Embedder autoscaling_config: {json.dumps(autoscaling) if autoscaling else '(as deployed)'}; "
            f"load: {clients} clients x {texts} sentences per request for {load:.0f}s"
        )
        samples, statuses = asyncio.run(
            drive(url, dashboard, headers, clients=clients, texts=texts, load_s=load, idle_s=idle, settle_s=settle)
        )
    finally:
        if cluster is not None:
            cluster.stop()
            left = cluster.pids()
            console.print(f"cluster stopped; processes left: {left}")
            if not left:
                cluster.remove()

    table = Table("t s", "load", "req/s", "running", "target", "other replicas")
    for s in samples:
        table.add_row(
            str(int(s.t)), "on" if s.load else "off", str(s.completed), str(s.running), str(s.target),
            " ".join(f"{k}={v}" for k, v in sorted(s.other.items())),
        )  # fmt: skip
    console.print(table)
    result = summary(samples, load)
    result["answers"] = {str(k): v for k, v in statuses.items()}
    console.print(result)
    if json_out is not None:
        json_out.write_text(json.dumps({"summary": result, "samples": [asdict(s) for s in samples]}, indent=1))


if __name__ == "__main__":
    app()
