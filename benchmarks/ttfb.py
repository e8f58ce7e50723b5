"""Time to first byte of a streamed chat completion: through the service against the upstream's
own, in one run, so the difference is what the service adds before the first token.

The upstream is the echo (``deployments.echo``) as a separate HTTP server that streams like a
slow model: its first event after ``--first-chunk-delay-ms`` (prefill), each next one after
``--chunk-delay-ms``. By default the script starts it and ``serve run`` of ``serve_config.yaml``
pointed at it (fresh data in a temporary directory, a free port), and stops both at the end
(SIGTERM to each process group). ``--url URL --upstream BASE_URL`` measure a running service
and the upstream it is configured with instead.

Per round, one request of each kind, interleaved, each a ``stream: true`` chat completion
read on a keep-alive connection (the time from sending the request to the first byte of the
response body, i.e. the first event):

- ``upstream``: straight to the upstream (``{BASE_URL}/chat/completions``);
- ``proxy, memory``: through the service as a user with ``--memories`` memories (the default
  route: retrieval, reflection gate, injection; the turn is stored after each stream);
- ``proxy, no memory``: through the service without a user (memory skipped: the proxy alone).

Prints p50/p95 (ms) of each, and the differences to the upstream's.

    python -m benchmarks.ttfb --requests 200
    python -m benchmarks.ttfb --url http://127.0.0.1:8000 --upstream http://127.0.0.1:8001/v1
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import typer
import yaml
from rich.console import Console
from rich.table import Table

from benchmarks.load import percentile
from deployments.serve_env import apply_serve_env
from memory_core.testing.haproxy import set_local_service_defaults, stop_orphaned_haproxies
from memory_core.testing.net import free_port

app = typer.Typer(add_completion=False)
console = Console(width=110)
ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is my locker code?"
FACTS = [
    "My locker code is 4817.",
    "I park on level B, spot 77.",
    "My favourite tea is genmaicha.",
    "The team stand-up is at 9:30 every weekday.",
    "My dentist is Dr. Okafor.",
    "I prefer window seats on trains.",
]


def wait_for(url: str, timeout_s: float, process: subprocess.Popen, what: str) -> None:
    """Poll ``url`` until it answers 200; raise ``RuntimeError`` when ``process`` exits or
    ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready within {timeout_s:.0f}s")


def serve_run_environment() -> dict[str, str]:
    """The environment for a benchmark's own ``serve run``: this process's, without
    ``RAY_ADDRESS`` (a Ray instance of its own), with the project on ``PYTHONPATH``, usage
    stats off, the model hub offline, ``serve.env``'s serving mode unless this process's
    environment says otherwise, and free ports for the mode's fixed listeners (HAProxy's
    stats and metrics: two services may run at once), and a stopping ingress replica's drain
    of 1 s instead of the mode's 30 s for a load balancer (README "Serving mode"; a run's stop
    only). Also stops a HAProxy that outlived its Ray instance (``stop_orphaned_haproxies``),
    which would hold the ports the new one binds."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1")
    apply_serve_env(env)
    set_local_service_defaults(env)  # free ports, a 1 s drain (HAProxy alone in front)
    stop_orphaned_haproxies()
    return env


def stop(process: subprocess.Popen, timeout_s: float = 60) -> None:
    """SIGTERM to the process group of ``process`` (started with ``start_new_session``), then
    SIGKILL if it is still there after ``timeout_s``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def started_service(first_chunk_delay_ms: float, chunk_delay_ms: float) -> Iterator[tuple[str, str]]:
    """The echo upstream and ``serve run`` of ``serve_config.yaml`` pointed at it, each in its
    own process group; yields ``(service URL, upstream base URL)``."""
    upstream_port, service_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    with tempfile.TemporaryDirectory(prefix="ttfb-") as work:
        echo = subprocess.Popen(
            [
                sys.executable, "-m", "deployments.echo", "--port", str(upstream_port),
                "--first-chunk-delay-ms", str(first_chunk_delay_ms), "--chunk-delay-ms", str(chunk_delay_ms),
            ],
            cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
        service = None
        try:
            wait_for(f"{upstream}/models", 60, echo, "the echo upstream")
            config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
            config["http_options"]["port"] = service_port
            application = config["applications"][0]
            application["args"]["config"]["global"]["upstream"] = {"base_url": upstream}
            # with an upstream URL there is no EchoUpstream deployment to configure
            application["deployments"] = [d for d in application["deployments"] if d["name"] != "EchoUpstream"]
            (Path(work) / "serve_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            env = serve_run_environment()
            serve = Path(sys.executable).with_name("serve")
            with open(Path(work) / "serve.log", "w") as log:
                service = subprocess.Popen(
                    [str(serve), "run", "serve_config.yaml"],
                    cwd=work,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            url = f"http://127.0.0.1:{service_port}"
            console.print(f"starting serve run on {url} against the echo at {upstream} ...")
            try:
                wait_for(f"{url}/health", 300, service, "serve run")
            except RuntimeError:
                console.print((Path(work) / "serve.log").read_text()[-3000:])
                raise
            yield url, upstream
        finally:
            if service is not None:
                stop(service)
                stop_orphaned_haproxies()  # throughput mode: a HAProxy that outlived its Ray instance
            stop(echo)


def first_byte_ms(client: httpx.Client, url: str, body: dict, headers: dict) -> tuple[float, httpx.Headers]:
    """Send ``body`` (a streamed chat completion) and read the whole stream; the time (ms) from
    sending to the first byte of the response body, and the response headers."""
    started = time.perf_counter()
    first = None
    with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url} answered {r.status_code}: {r.read()[:300]!r}")
        for chunk in r.iter_raw():
            if chunk and first is None:
                first = time.perf_counter()
        response_headers = r.headers
    if first is None:
        raise RuntimeError(f"{url} answered an empty stream")
    return (first - started) * 1000, response_headers


def measure(url: str, upstream: str, requests: int, warmup: int, memories: int) -> dict[str, list[float]]:
    """The TTFB series (ms) by kind, ``requests`` rounds after ``warmup`` unrecorded ones."""
    user = f"ttfb-{uuid.uuid4().hex[:8]}"
    facts = [FACTS[i % len(FACTS)] + ("" if i < len(FACTS) else f" (note {i})") for i in range(memories)]
    if facts:
        r = httpx.post(
            f"{url}/v1/memory",
            json={"memories": [{"content": f} for f in facts]},
            headers={"x-authz-user-id": user},
            timeout=120,
        )
        r.raise_for_status()
    body = {"model": "assistant", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    kinds = {
        "upstream": (f"{upstream}/chat/completions", {}),
        "proxy, memory": (f"{url}/v1/chat/completions", {"x-authz-user-id": user}),
        "proxy, no memory": (f"{url}/v1/chat/completions", {}),
    }
    series: dict[str, list[float]] = {k: [] for k in kinds}
    injected: list[int] = []
    with httpx.Client(timeout=60) as client:
        for i in range(warmup + requests):
            for kind, (target, headers) in kinds.items():
                ms, response_headers = first_byte_ms(client, target, body, headers)
                if i >= warmup:
                    series[kind].append(ms)
                    if kind == "proxy, memory":
                        injected.append(int(response_headers.get("x-memory-injected", "0")))
    console.print(
        f"memories injected per 'proxy, memory' request: min {min(injected)} max {max(injected)}"
        if injected
        else "no memory requests"
    )
    if facts:
        httpx.delete(
            f"{url}/v1/memory",
            params={"all": "true"},
            headers={"x-authz-user-id": user} | {"content-type": "application/json"},
            timeout=60,
        )
    return series


def report(series: dict[str, list[float]]) -> None:
    base = series["upstream"]
    table = Table("path", "n", "TTFB p50 ms", "TTFB p95 ms", "p50 − upstream", "p95 − upstream")
    for kind, values in series.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        d50, d95 = p50 - percentile(base, 50), p95 - percentile(base, 95)
        table.add_row(kind, str(len(values)), f"{p50:.1f}", f"{p95:.1f}", f"{d50:+.1f}", f"{d95:+.1f}")
    console.print(table)


@app.command()
def main(
    url: str | None = typer.Option(None, help="a running service (default: start one with serve run)"),
    upstream: str | None = typer.Option(None, help="its upstream's base URL, e.g. http://127.0.0.1:8001/v1"),
    requests: int = typer.Option(100, min=1, help="measured rounds (one request of each kind per round)"),
    warmup: int = typer.Option(10, min=0, help="unrecorded rounds first"),
    memories: int = typer.Option(20, min=0, help="memories of the 'proxy, memory' user"),
    first_chunk_delay_ms: float = typer.Option(100.0, help="the started echo's delay before its first event"),
    chunk_delay_ms: float = typer.Option(5.0, help="the started echo's delay between events"),
) -> None:
    """Measure and print the TTFB of the three paths."""
    if (url is None) != (upstream is None):
        raise typer.BadParameter("give both --url and --upstream, or neither")
    if url is not None and upstream is not None:
        report(measure(url.rstrip("/"), upstream.rstrip("/"), requests, warmup, memories))
        return
    with started_service(first_chunk_delay_ms, chunk_delay_ms) as (service_url, upstream_url):
        report(measure(service_url, upstream_url, requests, warmup, memories))


if __name__ == "__main__":
    app()
