"""Bounded load on a running memory-router over loopback: N concurrent users chatting for a
fixed duration, against the model's own rate measured in the same run, then a check that no
acknowledged write was lost.

(a) **the model alone**: the bundled all-MiniLM-L6-v2 encoding the workload's sentences in
    batches (``benchmarks.ingest.model_rate``: this process, all cores), after the runs,
    once the host is quiet (``wait_for_quiet_host``: the service's tail of background work
    after a saturating run, its stores and rechecks, would slow the model and so lower the
    ceiling), twice, the faster of the two kept (a conservative ceiling).
    A chat turn costs the service one embedding for its query plus one per memory the turn
    leaves (its statements, and every few turns a conversation window): the benchmark counts
    them per turn with the service's own extraction rule (``chat.extract.extract_turn`` on
    the messages sent and the answer received), plus the memories written through the API.
    The **chat-turn ceiling** = model sentences/s ÷ embeddings per chat turn.
(b) **the service**: each simulated user holds a conversation (``--workload chat``, the
    default): every turn a question, about one turn in three with a fact stated before it
    ("I started learning the cello in March. Any tips for practising scales?"), the last
    turns of the conversation sent as history (answers cut to 300 characters), memory
    retrieval, injection and auto-store on; every fourth turn the user also saves a note
    through ``POST /v1/memory`` (its id recorded when answered 201). ``--workload supersede``
    is the earlier pattern, labelled: every turn a fact that supersedes the previous one
    ("my locker number n is 1000+n"), a memory written and a search every third round.

After each run every acknowledged write is read back (``GET /v1/memory/{id}``): a write
answered 2xx and absent afterwards is a *lost write*. With ``--metrics-url`` (Ray's Prometheus
endpoint, as in ``benchmarks/locomo_chat.py``) the service's own counters over each run are
read too: chat turns answered but not stored because their user's background stores were at
``global.limits.pending_writes_per_user`` (``memory_extraction{outcome="skipped_writes_pending"}``)
or beyond the write rate limit (``skipped_rate_limited``). Stops by itself.

Prints, per N: chat turns/s and their ratio to the ceiling (goal at N = 32: ≥ 0.5 with p95
≤ 1 s), requests/s, latency p50/p95/p99 (ms) by request kind and overall, the error rate
(non-2xx answers and transport errors; 429 from backpressure counted apart), the status
counts, and lost writes.

    python -m benchmarks.load --url http://127.0.0.1:8000 --users 1,8,32,128 --duration 30

Measured figures are in the README ("Measured"). Compare runs as ratios in one session: the
machine's speed drifts.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field

import httpx
import typer
from rich.console import Console
from rich.table import Table

from benchmarks.cpu_by_process import cpu_since, snapshot
from benchmarks.ingest import model_rate, server_timings
from benchmarks.locomo_chat import scrape
from memory_core.chat.extract import extract_turn
from memory_core.cpu_pool import HostIdleMeter

app = typer.Typer(add_completion=False)
METRICS_SETTLE_S = 12.0
"""Seconds between a run's drain and reading the service's counters: Ray's metrics agent
exports them every ``metrics_report_interval_ms`` (10 s by default)."""
console = Console(width=200)


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
    turns: int = 0  # chat turns sent
    drain_s: float = 0.0  # after the deadline, until every user's marker write was acknowledged
    embeddings: int = 0  # embeddings those turns and the notes cost the service
    texts: list[str] = field(default_factory=list)  # what was embedded (a sample, for the model alone)
    server_ms: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # kind → Server-Timing step → ms
    counters: dict[str, float] | None = None  # the service's counters over the run (--metrics-url)
    cpu_s: dict[str, float] | None = None  # CPU seconds by process name over the run (--cpu-by-process)

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies_ms.values())

    @property
    def sustained(self) -> float:
        """Chat turns/s counting the drain: the turns' auto-stores run after their answers, so
        a run ends when the writes queued behind them are done."""
        total = self.seconds + self.drain_s
        return self.turns / total if total else 0.0

    @property
    def errors(self) -> int:
        """Answers that are neither 2xx nor a backpressure 429, and transport errors."""
        return self.transport_errors + sum(n for s, n in self.statuses.items() if not (200 <= s < 300 or s == 429))

    def as_dict(self) -> dict:
        every = [x for v in self.latencies_ms.values() for x in v]
        return {
            "users": self.users,
            "seconds": round(self.seconds, 1),
            "chat_turns": self.turns,
            "drain_s": round(self.drain_s, 1),
            "answered_turns_per_s": round(self.turns / self.seconds, 2) if self.seconds else 0.0,
            "turns_per_s": round(self.sustained, 2),
            "embeddings_per_turn": round(self.embeddings / max(1, self.turns), 3),
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
            "server_timing_p50_ms": {
                kind: {step: round(percentile(v, 50), 1) for step, v in sorted(steps.items())}
                for kind, steps in sorted(self.server_ms.items())
            },
            "statuses": dict(sorted(self.statuses.items())),
            "service_counters": self.counters,
        }

    def not_stored(self, outcome: str) -> str:
        """Chat turns the service answered without storing, for ``outcome`` (``""``: no
        ``--metrics-url``)."""
        if self.counters is None:
            return ""
        return str(int(self.counters.get(f"memory_extraction:{outcome}", 0.0)))


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
    steps = result.server_ms.setdefault(kind, {})
    for step, seconds_ms in server_timings(response.headers.get("server-timing", "")).items():
        steps.setdefault(step, []).append(seconds_ms)
    return response


FACTS = (
    "I started learning the cello in {month}.",
    "My sister {name} lives in {city} now.",
    "I work as a {job} at a small firm.",
    "My dog {name} is allergic to chicken.",
    "I moved to {city} last {month}.",
    "I prefer window seats on long flights.",
    "My favourite cuisine is {cuisine}.",
    "I run about {n} kilometres every weekend.",
    "I am vegetarian since {month}.",
    "My daughter {name} starts school in {month}.",
    "I drive a {n}-year-old hatchback.",
    "I am allergic to penicillin.",
)
QUESTIONS = (
    "Any tips for practising scales?",
    "What should I cook tonight with leftover rice?",
    "Can you suggest a weekend trip near {city}?",
    "How do I ask my manager for a raise?",
    "What is a good gift for my sister?",
    "Which vaccines does a dog need each year?",
    "How long should I rest between runs?",
    "What should I pack for a week in {city}?",
    "Where do I keep my passport?",
    "Can you recommend a {cuisine} recipe for four?",
    "How can I sleep better before a flight?",
    "What was I learning again?",
)
SLOTS = {
    "month": ("March", "April", "June", "September", "November"),
    "name": ("Ana", "Kenji", "Priya", "Tom", "Lena"),
    "city": ("Denver", "Lisbon", "Osaka", "Toronto", "Nairobi"),
    "job": ("nurse", "data engineer", "teacher", "carpenter", "lawyer"),
    "cuisine": ("Thai", "Ethiopian", "Mexican", "Greek", "Korean"),
    "n": ("5", "8", "12", "15", "21"),
}
HISTORY_MESSAGES = 6
"""Earlier messages a client sends with each turn (three exchanges)."""
ANSWER_CHARS = 300
"""Characters of each earlier answer kept in the history (the echo upstream repeats its input)."""
NOTE_EVERY = 4
"""Every NOTE_EVERY-th turn the user also saves a note through ``POST /v1/memory``."""


def _fill(template: str, rng: random.Random) -> str:
    return template.format(**{k: rng.choice(v) for k, v in SLOTS.items()})


def chat_turn_text(rng: random.Random) -> str:
    """One user turn of the ``chat`` workload: a question, about one in three after a fact."""
    question = _fill(rng.choice(QUESTIONS), rng)
    if rng.random() < 1 / 3:
        return f"{_fill(rng.choice(FACTS), rng)} {question}"
    return question


def embeddings_of_turn(messages: list[dict], answer: str, texts: list[str] | None = None) -> int:
    """Embeddings the service spends on one chat turn: the query, and one per memory the
    service's auto-store extracts from ``messages`` (as sent) and ``answer`` (default
    extraction settings: statements, and a window every third user turn). The embedded
    texts are appended to ``texts`` when given."""
    memories = [m.content for m in extract_turn(messages, answer).memories]
    if texts is not None:
        texts.append(str(messages[-1]["content"]))
        texts.extend(memories)
    return 1 + len(memories)


def _answer_text(response: httpx.Response | None) -> str:
    if response is None or response.status_code != 200:
        return ""
    try:
        return str(response.json()["choices"][0]["message"]["content"] or "")
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


async def _note(client: httpx.AsyncClient, headers: dict, content: str, result: LoadResult, user_id: str) -> None:
    body = {"memories": [{"content": content}]}
    r = await _timed(result, "write", client.post("/v1/memory", json=body, headers=headers))
    result.embeddings += 1
    result.texts.append(content)
    if r is not None and r.status_code == 201:
        result.acknowledged.extend((user_id, m["id"]) for m in r.json()["memories"])


async def _chat_user(client: httpx.AsyncClient, user_id: str, deadline: float, result: LoadResult) -> None:
    """The ``chat`` workload of one user (module docstring) until ``deadline``."""
    headers = {"x-authz-user-id": user_id}
    rng = random.Random(user_id)
    history: list[dict] = []
    n = 0
    while time.monotonic() < deadline:
        n += 1
        text = chat_turn_text(rng)
        messages = [*history[-HISTORY_MESSAGES:], {"role": "user", "content": text}]
        chat = {"model": "assistant", "messages": messages}
        r = await _timed(result, "chat", client.post("/v1/chat/completions", json=chat, headers=headers))
        answer = _answer_text(r)[:ANSWER_CHARS]
        result.turns += 1
        result.embeddings += embeddings_of_turn(messages, answer, result.texts)
        history = [*messages, {"role": "assistant", "content": answer}]
        if n % NOTE_EVERY == 0:
            await _note(client, headers, f"Note {n} of {user_id}: {_fill(rng.choice(FACTS), rng)}", result, user_id)


async def _supersede_user(client: httpx.AsyncClient, user_id: str, deadline: float, result: LoadResult) -> None:
    """The ``supersede`` workload (the earlier one): every chat states a fact superseding the
    last ("my locker number n is 1000+n"), one memory written per round, a search every third."""
    headers = {"x-authz-user-id": user_id}
    n = 0
    while time.monotonic() < deadline:
        n += 1
        messages = [{"role": "user", "content": f"Please remember: my locker number {n} is {1000 + n}."}]
        chat = {"model": "assistant", "messages": messages}
        r = await _timed(result, "chat", client.post("/v1/chat/completions", json=chat, headers=headers))
        result.turns += 1
        result.embeddings += embeddings_of_turn(messages, _answer_text(r), result.texts)
        await _note(client, headers, f"Load fact {n} of {user_id}: the blue key opens door {n}.", result, user_id)
        if n % 3 == 0:
            query = {"query": f"which door does the blue key open {n}", "limit": 5}
            await _timed(result, "search", client.post("/v1/memory/search", json=query, headers=headers))
            result.embeddings += 1
            result.texts.append(query["query"])


WORKLOADS = {"chat": _chat_user, "supersede": _supersede_user}


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
    url: str,
    users: int,
    duration_s: float,
    *,
    workload: str = "chat",
    timeout_s: float = 60.0,
    cleanup: bool = True,
    metrics_url: str | None = None,
    cpu_by_process: bool = False,
) -> LoadResult:
    """``users`` concurrent simulated users of ``workload`` (``WORKLOADS``: ``chat`` or
    ``supersede``) against ``url`` for ``duration_s`` seconds, then the lost-write check (and,
    with ``cleanup``, the users' memories deleted). With ``metrics_url``, the service's
    extraction counters over the run (read ``METRICS_SETTLE_S`` after the drain: Ray exports
    them periodically). With ``cpu_by_process``, the CPU seconds of every process of this
    machine's user from the first request to the end of the drain (``benchmarks.cpu_by_process``;
    Linux). Raises ``KeyError`` for an unknown workload."""
    user_loop = WORKLOADS[workload]
    run = uuid.uuid4().hex[:8]
    ids = [f"load-{run}-{i}" for i in range(users)]
    limits = httpx.Limits(max_connections=users + 16, max_keepalive_connections=users + 16)
    before = await scrape(metrics_url) if metrics_url else {}
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:
        cpu_before = snapshot() if cpu_by_process else None
        started = time.monotonic()
        deadline = started + duration_s
        result = LoadResult(users=users, seconds=0.0)
        await asyncio.gather(*(user_loop(client, u, deadline, result) for u in ids))
        result.seconds = time.monotonic() - started
        # one marker write per user, queued behind that user's pending auto-stores (the
        # Embedder's queue and the user's write lock are first come, first served)
        await asyncio.gather(
            *(_note(client, {"x-authz-user-id": u}, f"Marker of {u}: the run ended.", result, u) for u in ids)
        )
        result.drain_s = time.monotonic() - started - result.seconds
        if cpu_before is not None:
            result.cpu_s = cpu_since(cpu_before)
        result.lost = await _lost_writes(client, result.acknowledged)
        if metrics_url:
            await asyncio.sleep(METRICS_SETTLE_S)
            after = await scrape(metrics_url)
            result.counters = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        if cleanup:
            for u in ids:
                await client.delete(
                    "/v1/memory",
                    params={"all": "true"},
                    headers={"x-authz-user-id": u} | {"content-type": "application/json"},
                )
    return result


def print_cpu_per_turn(result: LoadResult, top: int = 12) -> None:
    """One line per process name: CPU ms per chat turn over ``result``'s run and drain, the
    ``top`` largest, then the rest and the total; "cores busy" is CPU seconds ÷ wall seconds."""
    assert result.cpu_s is not None
    turns = max(1, result.turns)
    wall = result.seconds + result.drain_s
    total = sum(result.cpu_s.values())
    table = Table("process", "CPU s", "ms / chat turn", "cores busy", title=f"CPU by process, N = {result.users}")
    rows = list(result.cpu_s.items())
    for name, seconds in rows[:top]:
        table.add_row(name, f"{seconds:.1f}", f"{1000 * seconds / turns:.1f}", f"{seconds / wall:.2f}")
    rest = sum(seconds for _, seconds in rows[top:])
    table.add_row(
        f"({len(rows) - top if len(rows) > top else 0} others)",
        f"{rest:.1f}",
        f"{1000 * rest / turns:.1f}",
        f"{rest / wall:.2f}",
    )
    table.add_row("total", f"{total:.1f}", f"{1000 * total / turns:.1f}", f"{total / wall:.2f}")
    console.print(table)


QUIET_IDLE = 0.85
"""Share of the host's CPU that must be idle over ``QUIET_WINDOW_S`` before the model alone is
measured (``wait_for_quiet_host``)."""
QUIET_WINDOW_S = 1.0
QUIET_TIMEOUT_S = 120.0


def wait_for_quiet_host(
    min_idle: float = QUIET_IDLE, window_s: float = QUIET_WINDOW_S, timeout_s: float = QUIET_TIMEOUT_S
) -> float | None:
    """Wait until at least ``min_idle`` of the host's CPU was idle over one ``window_s`` window
    (``memory_core.cpu_pool.HostIdleMeter``, Linux ``/proc/stat``), at most ``timeout_s``
    seconds. Returns the last window's idle share (None where it cannot be read)."""
    meter = HostIdleMeter()
    if not meter.available:
        return None
    deadline = time.monotonic() + timeout_s
    idle: float | None = None
    while time.monotonic() < deadline:
        time.sleep(window_s)
        idle = meter.fraction()
        if idle is not None and idle >= min_idle:
            break
    return idle


def model_alone(
    texts: list[str], batch: int, most: int = 2048, model: str = "bundled:all-MiniLM-L6-v2", device: str | None = None
) -> float:
    """Sentences/s of ``model`` alone on ``device`` on up to ``most`` of ``texts`` (an even
    sample, in batches of ``batch``: ``benchmarks.ingest.model_rate``)."""
    step = max(1, len(texts) // most)
    return model_rate(texts[::step][:most], batch, model, device)


@app.command()
def main(
    url: str = typer.Option("http://127.0.0.1:8000", help="base URL of the running service"),
    users: str = typer.Option("1,8,32,128", help="comma-separated numbers of concurrent users, one run each"),
    duration: float = typer.Option(30.0, min=1.0, help="seconds of load per run"),
    workload: str = typer.Option("chat", help="chat (a question, sometimes a fact) or supersede (the earlier one)"),
    model_batch: int = typer.Option(32, min=1, max=256, help="batch size of the model-alone measurement"),
    keep: bool = typer.Option(False, help="keep the memories written (default: delete them after each run)"),
    metrics_url: str = typer.Option(None, help="Ray's Prometheus endpoint: the service's own counters per run"),
    model: str = typer.Option(
        "bundled:all-MiniLM-L6-v2", help="the model alone: the service's embedding.model (bundled name or local path)"
    ),
    device: str = typer.Option(None, help="the model alone: cpu or cuda (default: a GPU when torch sees one)"),
    cpu_by_process: bool = typer.Option(
        False, help="print each process's CPU ms per chat turn over each run (Linux /proc; the service on this machine)"
    ),
) -> None:
    """Run the load for each N in ``--users``, then the model alone on the texts the runs
    embedded (the service idle), and print the figures against the chat-turn ceiling."""
    if workload not in WORKLOADS:
        raise typer.BadParameter(f"--workload: one of {sorted(WORKLOADS)}")
    results = []
    for n in [int(x) for x in users.split(",") if x.strip()]:
        result = asyncio.run(
            run_load(
                url, n, duration, workload=workload, cleanup=not keep, metrics_url=metrics_url,
                cpu_by_process=cpu_by_process,
            )
        )  # fmt: skip
        console.print(result.as_dict())
        if result.cpu_s is not None:
            print_cpu_per_turn(result)
        results.append(result)
    texts = [t for r in results for t in r.texts]
    started = time.monotonic()
    quiet = wait_for_quiet_host()
    waited = time.monotonic() - started
    rates = [model_alone(texts, model_batch, model=model, device=device) for _ in range(2)]
    rate = max(rates)
    console.print(
        f"host idle share before the model alone: {'unknown' if quiet is None else f'{quiet:.2f}'} "
        f"(waited {waited:.0f} s for ≥ {QUIET_IDLE}{'' if quiet is None or quiet >= QUIET_IDLE else ': not reached'}); "
        "model alone twice: " + ", ".join(f"{r:.1f}" for r in rates) + " sentences/s (the faster kept)"
    )
    per_turn = sum(r.embeddings for r in results) / max(1, sum(r.turns for r in results))
    ceiling = rate / per_turn
    console.print(
        f"model alone ({model} on {device or 'the default device'}): {rate:.1f} sentences/s (batches of {model_batch}, {min(len(texts), 2048)} of the "
        f"texts embedded); {per_turn:.2f} embeddings per chat turn → ceiling {ceiling:.1f} chat turns/s"
    )
    table = Table(
        "users", "turns/s", "/ ceiling", "emb/turn", "req/s", "chat p50", "chat p95", "p95 ms", "p99 ms",
        "error rate", "5xx", "429", "acked writes", "lost", "not stored: pending", "not stored: rate",
        title=f"workload {workload}",
    )  # fmt: skip
    for result in results:
        d = result.as_dict()
        chat = d["by_kind"].get("chat", {})
        table.add_row(
            str(d["users"]), str(d["turns_per_s"]), f"{d['turns_per_s'] / ceiling:.2f}", str(d["embeddings_per_turn"]),
            str(d["rps"]), str(chat.get("p50_ms", "")), str(chat.get("p95_ms", "")), str(d["p95_ms"]),
            str(d["p99_ms"]), str(d["error_rate"]), str(d["server_errors_5xx"]), str(d["rejected_429"]),
            str(d["acknowledged_writes"]), str(d["lost_writes"]),
            result.not_stored("skipped_writes_pending"), result.not_stored("skipped_rate_limited"),
        )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    app()
