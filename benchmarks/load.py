"""Bounded load on a running memory-router over loopback: N concurrent users, each chatting
and writing memories for a fixed duration, then a check that no acknowledged write was lost.

Each simulated user loops until the deadline over: a chat completion that states a fact
(``POST /v1/chat/completions``: memory retrieval, injection, auto-store), one memory written
through ``POST /v1/memory`` (its id recorded when answered 201), and a search every third
round. After the run every acknowledged write is read back (``GET /v1/memory/{id}``): a
write answered 2xx and absent afterwards is a *lost write*. Stops by itself.

Prints, per N: requests/s, latency p50/p95/p99 (ms) by request kind and overall, the error
rate (non-2xx answers and transport errors; 429 from backpressure counted apart), the status
counts, and lost writes.

    python -m benchmarks.load --url http://127.0.0.1:8000 --users 1,8,32 --duration 30

Measured figures are in the README ("Measured"). Compare runs as ratios in one session: the
machine's speed drifts.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field

import httpx
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False)
console = Console()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 100] of ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, int(round(q / 100 * len(ordered) + 0.5)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class LoadResult:
    """One run: ``users`` concurrent users for ``seconds``."""

    users: int
    seconds: float
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter = field(default_factory=Counter)
    acknowledged: list[tuple[str, str]] = field(default_factory=list)  # (user, memory id)
    lost: int = 0
    transport_errors: int = 0

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies_ms.values())

    @property
    def errors(self) -> int:
        """Answers that are neither 2xx nor a backpressure 429, and transport errors."""
        return self.transport_errors + sum(n for s, n in self.statuses.items() if not (200 <= s < 300 or s == 429))

    def as_dict(self) -> dict:
        every = [x for v in self.latencies_ms.values() for x in v]
        return {
            "users": self.users,
            "seconds": round(self.seconds, 1),
            "requests": self.requests,
            "rps": round(self.requests / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": round(percentile(every, 50), 1),
            "p95_ms": round(percentile(every, 95), 1),
            "p99_ms": round(percentile(every, 99), 1),
            "error_rate": round(self.errors / max(1, self.requests), 4),
            "server_errors_5xx": sum(n for s, n in self.statuses.items() if s >= 500),
            "rejected_429": self.statuses.get(429, 0),
            "acknowledged_writes": len(self.acknowledged),
            "lost_writes": self.lost,
            "by_kind": {
                k: {
                    "n": len(v),
                    "p50_ms": round(percentile(v, 50), 1),
                    "p95_ms": round(percentile(v, 95), 1),
                    "p99_ms": round(percentile(v, 99), 1),
                }
                for k, v in sorted(self.latencies_ms.items())
            },
            "statuses": dict(sorted(self.statuses.items())),
        }


async def _timed(result: LoadResult, kind: str, request: Awaitable[httpx.Response]) -> httpx.Response | None:
    started = time.perf_counter()
    try:
        response = await request
    except httpx.HTTPError:
        result.transport_errors += 1
        result.latencies_ms.setdefault(kind, []).append((time.perf_counter() - started) * 1000)
        return None
    result.latencies_ms.setdefault(kind, []).append((time.perf_counter() - started) * 1000)
    result.statuses[response.status_code] += 1
    return response


async def _user(client: httpx.AsyncClient, user_id: str, deadline: float, result: LoadResult) -> None:
    headers = {"x-authz-user-id": user_id}
    n = 0
    while time.monotonic() < deadline:
        n += 1
        chat = {
            "model": "assistant",
            "messages": [{"role": "user", "content": f"Please remember: my locker number {n} is {1000 + n}."}],
        }
        await _timed(result, "chat", client.post("/v1/chat/completions", json=chat, headers=headers))
        body = {"memories": [{"content": f"Load fact {n} of {user_id}: the blue key opens door {n}."}]}
        r = await _timed(result, "write", client.post("/v1/memory", json=body, headers=headers))
        if r is not None and r.status_code == 201:
            result.acknowledged.extend((user_id, m["id"]) for m in r.json()["memories"])
        if n % 3 == 0:
            query = {"query": f"which door does the blue key open {n}", "limit": 5}
            await _timed(result, "search", client.post("/v1/memory/search", json=query, headers=headers))


async def _lost_writes(client: httpx.AsyncClient, acknowledged: list[tuple[str, str]]) -> int:
    sem = asyncio.Semaphore(16)

    async def present(user_id: str, memory_id: str) -> bool:
        async with sem:
            for _ in range(5):
                try:
                    r = await client.get(f"/v1/memory/{memory_id}", headers={"x-authz-user-id": user_id})
                except httpx.HTTPError:
                    await asyncio.sleep(1)
                    continue
                if r.status_code in (200, 404):
                    return r.status_code == 200
                await asyncio.sleep(1)  # 503/429: the service is catching up; ask again
            return False

    found = await asyncio.gather(*(present(u, i) for u, i in acknowledged))
    return sum(1 for ok in found if not ok)


async def run_load(
    url: str, users: int, duration_s: float, *, timeout_s: float = 60.0, cleanup: bool = True
) -> LoadResult:
    """``users`` concurrent simulated users against ``url`` for ``duration_s`` seconds, then the
    lost-write check (and, with ``cleanup``, the users' memories deleted)."""
    run = uuid.uuid4().hex[:8]
    ids = [f"load-{run}-{i}" for i in range(users)]
    limits = httpx.Limits(max_connections=users + 16, max_keepalive_connections=users + 16)
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:
        started = time.monotonic()
        deadline = started + duration_s
        result = LoadResult(users=users, seconds=0.0)
        await asyncio.gather(*(_user(client, u, deadline, result) for u in ids))
        result.seconds = time.monotonic() - started
        result.lost = await _lost_writes(client, result.acknowledged)
        if cleanup:
            for u in ids:
                await client.delete(
                    "/v1/memory",
                    params={"all": "true"},
                    headers={"x-authz-user-id": u} | {"content-type": "application/json"},
                )
    return result


@app.command()
def main(
    url: str = typer.Option("http://127.0.0.1:8000", help="base URL of the running service"),
    users: str = typer.Option("1,8,32", help="comma-separated numbers of concurrent users, one run each"),
    duration: float = typer.Option(30.0, min=1.0, help="seconds of load per run"),
    keep: bool = typer.Option(False, help="keep the memories written (default: delete them after each run)"),
) -> None:
    """Run the load for each N in ``--users`` and print the figures."""
    table = Table("users", "req/s", "p50 ms", "p95 ms", "p99 ms", "error rate", "5xx", "429", "acked writes", "lost")
    for n in [int(x) for x in users.split(",") if x.strip()]:
        result = asyncio.run(run_load(url, n, duration, cleanup=not keep))
        d = result.as_dict()
        console.print(d)
        table.add_row(
            str(n), str(d["rps"]), str(d["p50_ms"]), str(d["p95_ms"]), str(d["p99_ms"]), str(d["error_rate"]),
            str(d["server_errors_5xx"]), str(d["rejected_429"]), str(d["acknowledged_writes"]), str(d["lost_writes"]),
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    app()
