"""LoCoMo: the dataset, the requests that replay it into a running service, and evidence recall.

One module for the ``memory-router replay-locomo`` command and the benchmarks
(``benchmarks/locomo.py``, ``locomo_chat.py``, ``locomo_offline.py``, ``locomo_loo.py``).

Data: ``../shared/data/locomo/locomo_dev.json`` (Maharana et al., "Evaluating Very Long-Term
Conversational Memory of LLM Agents", ACL 2024; CC BY-NC 4.0). See ``shared/README.md``.

Replay convention, REST (one memory per dialogue turn, ``memory_batches`` / ``ingest_rest``):

- content: ``"Speaker: text"``, plus ``" [shares a photo: <blip_caption>]"`` when the turn has a
  caption;
- metadata: ``{"dia_id"}`` only, so that recall can be scored — what a client has. No speaker,
  session or session date: the service reads the speaker from the content's leading
  ``"Name: "`` and groups neighbouring turns by ``created_at`` (README "API", "What a memory's
  content and time mean to ranking"), as it must for any client;
- created_at: the parsed session date (``memory_core.retrieval.timeparse.parse_session_date``) plus the
  turn's index within its session in seconds, so turns keep their order when listed by time;
- conversation_id: the sample id (one conversation per user).

Replay convention, chat (``chat_requests`` / ``feed_chat``): session by session, one
``POST /v1/chat/completions`` per turn of the first speaker (the user), its ``messages`` the
session so far (the first speaker's turns as ``user`` messages, the other speaker's as
``assistant``); memories then come only from the service's auto-store.

Evidence recall@k of a question = |evidence ∩ dia_ids of the top-k memories| / |evidence|,
averaged over the category 1–4 questions that have evidence. A memory built from several turns
counts all of its dia_ids (see ``recall_at_k``). A memory's dia_ids come from its metadata
(REST replay, ``dia_ids_of``) or, for memories the service wrote itself, from the turns whose
text it contains (``found_turns``).

Nothing here looks at answers or evidence except ``Question`` (for scoring) — the replay side
(``turns``, ``memory_batches``, ``chat_requests``) only reads the conversation. No Ray: the
HTTP helpers take an ``httpx.AsyncClient`` whose ``base_url`` is the service.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx
from rich.table import Table

from .retrieval.timeparse import parse_session_date

DEFAULT_PATH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo_dev.json"
"""``<repo>/../shared/data/locomo/locomo_dev.json``; override with ``$LOCOMO_PATH``."""

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SCORED_CATEGORIES = (1, 2, 3, 4)

_SESSION_KEY = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class Turn:
    """One dialogue turn ready to store as a memory."""

    sample_id: str
    dia_id: str
    speaker: str
    text: str
    session: int
    session_date: str
    index_in_session: int
    content: str
    metadata: dict[str, Any] = field(hash=False, compare=False)

    @property
    def created_at(self) -> datetime:
        """Parsed session date (UTC) + ``index_in_session`` seconds."""
        return parse_session_date(self.session_date) + timedelta(seconds=self.index_in_session)


@dataclass(frozen=True)
class Question:
    """A scored question: ``evidence`` is a tuple of dia_ids (for scoring only)."""

    sample_id: str
    question: str
    category: int
    evidence: tuple[str, ...]
    answer: Any = None


def default_path() -> Path:
    """``$LOCOMO_PATH`` when set, else ``DEFAULT_PATH``."""
    return Path(os.environ.get("LOCOMO_PATH", DEFAULT_PATH))


def load_samples(path: str | Path | None = None, limit: int | None = None) -> list[dict]:
    """The LoCoMo samples (list of dicts, see shared/README.md); the first ``limit`` if given.
    Raises ``FileNotFoundError`` when the file is absent."""
    with open(path or default_path(), encoding="utf-8") as fh:
        samples = json.load(fh)
    return samples[:limit] if limit else samples


def sessions(sample: dict) -> list[int]:
    """Session numbers of ``sample`` in ascending order."""
    conv = sample["conversation"]
    return sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)) and isinstance(conv[k], list))


def turn_content(turn: dict) -> str:
    """``"Speaker: text"`` (+ ``" [shares a photo: caption]"`` when the turn has a caption)."""
    content = f"{turn['speaker']}: {turn.get('text', '')}"
    caption = turn.get("blip_caption")
    if caption:
        content += f" [shares a photo: {caption}]"
    return content


def turns(sample: dict) -> list[Turn]:
    """All turns of ``sample`` in conversation order (session, then position)."""
    conv = sample["conversation"]
    out: list[Turn] = []
    for n in sessions(sample):
        date = conv.get(f"session_{n}_date_time", "")
        for i, t in enumerate(conv[f"session_{n}"]):
            meta = {"dia_id": t["dia_id"]}
            out.append(
                Turn(
                    sample_id=sample["sample_id"],
                    dia_id=t["dia_id"],
                    speaker=t["speaker"],
                    text=t.get("text", ""),
                    session=n,
                    session_date=date,
                    index_in_session=i,
                    content=turn_content(t),
                    metadata=meta,
                )
            )
    return out


def _split_evidence(evidence: Iterable[str]) -> tuple[str, ...]:
    """Evidence ids; an entry holding several ids separated by ``;`` (one in the data:
    ``"D8:6; D9:17"``) is split. Malformed ids are kept as they are (they count as misses)."""
    out: list[str] = []
    for e in evidence:
        out.extend(p.strip() for p in str(e).split(";") if p.strip())
    return tuple(dict.fromkeys(out))


def questions(sample: dict, categories: Sequence[int] = SCORED_CATEGORIES) -> list[Question]:
    """The questions of ``sample`` in ``categories`` that have evidence."""
    out = []
    for q in sample.get("qa", []):
        if q.get("category") not in categories:
            continue
        ev = _split_evidence(q.get("evidence") or [])
        if not ev:
            continue
        out.append(
            Question(
                sample_id=sample["sample_id"],
                question=q["question"],
                category=int(q["category"]),
                evidence=ev,
                answer=q.get("answer", q.get("adversarial_answer")),
            )
        )
    return out


def recall_at_k(retrieved: Sequence[str | Iterable[str]], evidence: Iterable[str], k: int) -> float:
    """|evidence ∩ dia_ids of the top-``k`` retrieved| / |evidence| in [0, 1].

    ``retrieved`` is ranked best first; each item is one dia_id or an iterable of dia_ids (a
    memory built from several turns counts all of them). Raises ``ValueError`` when
    ``evidence`` is empty or ``k`` ≤ 0.
    """
    ev = set(evidence)
    if not ev:
        raise ValueError("evidence is empty")
    if k <= 0:
        raise ValueError("k must be positive")
    found: set[str] = set()
    for item in retrieved[:k]:
        if isinstance(item, str):
            found.add(item)
        else:
            found.update(item)
    return len(ev & found) / len(ev)


def dia_ids_of(metadata: dict[str, Any]) -> list[str]:
    """dia_ids a stored memory stands for: ``metadata["dia_ids"]`` (list) or ``["dia_id"]``."""
    if isinstance(metadata.get("dia_ids"), list):
        return [str(x) for x in metadata["dia_ids"]]
    if metadata.get("dia_id"):
        return [str(metadata["dia_id"])]
    return []


def summarize(rows: Iterable[tuple[int, float, float]]) -> dict[str, dict[str, float]]:
    """Aggregate ``(category, recall@5, recall@10)`` rows into
    ``{"overall"|"cat<N> <name>": {"n", "r@5", "r@10"}}`` (macro over questions)."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for cat, r5, r10 in rows:
        groups.setdefault("overall", []).append((r5, r10))
        groups.setdefault(f"cat{cat} {CATEGORY_NAMES.get(cat, '?')}", []).append((r5, r10))
    return {
        name: {"n": len(v), "r@5": sum(a for a, _ in v) / len(v), "r@10": sum(b for _, b in v) / len(v)}
        for name, v in sorted(groups.items(), key=lambda kv: (kv[0] != "overall", kv[0]))
    }


def recall_table(rows: Iterable[tuple[int, float, float]], title: str) -> Table:
    """``summarize(rows)`` as a rich table: questions, n, recall@5, recall@10 per line."""
    table = Table(title=title)
    for col in ("questions", "n", "recall@5", "recall@10"):
        table.add_column(col)
    for name, s in summarize(rows).items():
        table.add_row(name, str(s["n"]), f"{s['r@5']:.3f}", f"{s['r@10']:.3f}")
    return table


def normalize(text: str) -> str:
    """Lower-cased, whitespace collapsed: how turn texts and memory contents are compared."""
    return " ".join(text.lower().split())


def turn_texts(sample: dict) -> dict[str, str]:
    """``{dia_id: normalized text}`` of every turn of ``sample`` (for ``found_turns``)."""
    return {t.dia_id: normalize(t.text) for t in turns(sample)}


def found_turns(content: str, texts: dict[str, str]) -> list[str]:
    """dia_ids of the turns whose (normalised, non-empty) text ``content`` contains;
    ``texts`` as ``turn_texts`` gives it."""
    c = normalize(content)
    return [dia for dia, text in texts.items() if text and text in c]


# --------------------------------------------------------------------------- requests
def memory_body(turn: Turn) -> dict[str, Any]:
    """One ``POST /v1/memory`` item for ``turn``: an episodic memory, source ``locomo``,
    conversation id the sample id, metadata and ``created_at`` as the module docstring says."""
    return {
        "content": turn.content,
        "type": "episodic",
        "metadata": turn.metadata,
        "created_at": turn.created_at.isoformat(),
        "source": "locomo",
        "conversation_id": turn.sample_id,
    }


def memory_batches(sample: dict, batch: int) -> list[dict[str, Any]]:
    """The ``POST /v1/memory`` bodies (``{"memories": [...]}``, at most ``batch`` items each)
    storing every turn of ``sample`` in conversation order. Raises ``ValueError`` if
    ``batch`` < 1."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    items = turns(sample)
    return [{"memories": [memory_body(t) for t in items[i : i + batch]]} for i in range(0, len(items), batch)]


@dataclass(frozen=True)
class ChatRequest:
    """One chat request of a replay: ``messages`` (the session so far, ending with a user
    turn) and ``turns``, how many turns of the conversation it adds to the previous request
    (the user's turn and the other speaker's turns since the last one)."""

    session: int
    messages: list[dict[str, str]] = field(hash=False)
    turns: int = 0


def chat_requests(sample: dict) -> list[ChatRequest]:
    """The chat requests replaying ``sample``: one per turn of the first speaker
    (``speaker_a``, else the first session's first speaker), holding the session up to that
    turn. The other speaker's turns at the end of a session are in no request."""
    conv = sample["conversation"]
    user_speaker = conv.get("speaker_a") or conv[f"session_{sessions(sample)[0]}"][0]["speaker"]
    out = []
    for n in sessions(sample):
        history: list[dict[str, str]] = []
        sent = 0
        for t in conv[f"session_{n}"]:
            text = t.get("text", "")
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            role = "user" if t["speaker"] == user_speaker else "assistant"
            history.append({"role": role, "content": text})
            if role == "user":
                out.append(ChatRequest(session=n, messages=list(history), turns=len(history) - sent))
                sent = len(history)
    return out


def search_body(query: str, limit: int = 10, threshold: float | None = None) -> dict[str, Any]:
    """A ``POST /v1/memory/search`` body; no ``threshold`` key when ``threshold`` is None
    (the service's default: no similarity floor)."""
    body: dict[str, Any] = {"query": query, "limit": limit}
    if threshold is not None:
        body["threshold"] = threshold
    return body


# --------------------------------------------------------------------------- HTTP (a running service)
OnProgress = Callable[[int], None]
"""``on_progress(n)``: ``n`` more turns (or questions) done."""


async def ingest_rest(
    client: httpx.AsyncClient,
    sample: dict,
    *,
    headers: dict[str, str],
    batch: int = 32,
    params: dict[str, str] | None = None,
    on_progress: OnProgress | None = None,
) -> int:
    """Store every turn of ``sample`` as one memory through ``POST /v1/memory`` (bodies from
    ``memory_batches``), one request at a time, as the caller ``headers`` identify (and
    ``params``, e.g. ``{"user_id": owner}``). Returns the number of turns stored. Raises
    ``httpx.HTTPStatusError`` on an error status (batches sent before it stay stored),
    ``httpx.TransportError`` when the service cannot be reached."""
    stored = 0
    for body in memory_batches(sample, batch):
        r = await client.post("/v1/memory", json=body, headers=headers, params=params)
        r.raise_for_status()
        stored += len(body["memories"])
        if on_progress is not None:
            on_progress(len(body["memories"]))
    return stored


async def feed_chat(
    client: httpx.AsyncClient,
    sample: dict,
    *,
    headers: dict[str, str],
    model: str = "assistant",
    on_progress: OnProgress | None = None,
) -> int:
    """Send ``chat_requests(sample)`` to ``POST /v1/chat/completions`` in order, one at a time
    (``model``: a routing decision with the memory plugin; ``headers`` identify the user).
    ``on_progress`` gets each request's ``turns``. Returns the number of requests. Raises as
    ``ingest_rest``."""
    requests = chat_requests(sample)
    for req in requests:
        r = await client.post("/v1/chat/completions", json={"model": model, "messages": req.messages}, headers=headers)
        r.raise_for_status()
        if on_progress is not None:
            on_progress(req.turns)
    return len(requests)


async def memory_total(
    client: httpx.AsyncClient, *, headers: dict[str, str], params: dict[str, Any] | None = None
) -> int:
    """``total`` of ``GET /v1/memory`` (every state unless ``params`` says ``state``)."""
    r = await client.get("/v1/memory", params={**(params or {}), "limit": 1}, headers=headers)
    r.raise_for_status()
    return int(r.json()["total"])


async def settle(
    client: httpx.AsyncClient,
    *,
    headers: dict[str, str],
    params: dict[str, str] | None = None,
    quiet_s: float = 3.0,
    timeout_s: float = 300.0,
) -> int:
    """Wait until the user's memory count has not changed for ``quiet_s`` seconds (auto-store
    runs after the chat answer), at most ``timeout_s``. Returns the last count (also when the
    time ran out)."""
    last, since, deadline = -1, time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        total = await memory_total(client, headers=headers, params=params)
        if total != last:
            last, since = total, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        await asyncio.sleep(0.5)
    return last


Match = Literal["metadata", "content"]
"""How a retrieved memory's dia_ids are found: its metadata (``dia_ids_of``, REST replay) or
the turns whose text it contains (``found_turns``, memories the service wrote)."""


async def evaluate(
    client: httpx.AsyncClient,
    sample: dict,
    *,
    headers: dict[str, str],
    params: dict[str, str] | None = None,
    match: Match = "metadata",
    limit: int = 10,
    threshold: float | None = None,
    on_progress: OnProgress | None = None,
) -> list[tuple[int, float, float]]:
    """Ask every scored question of ``sample`` through ``POST /v1/memory/search`` (``limit``
    hits) and return ``(category, recall@5, recall@10)`` per question, in question order
    (``summarize`` aggregates them). ``on_progress(1)`` after each question. Raises as
    ``ingest_rest``."""
    texts = turn_texts(sample) if match == "content" else {}
    rows = []
    for q in questions(sample):
        r = await client.post(
            "/v1/memory/search", json=search_body(q.question, limit, threshold), headers=headers, params=params
        )
        r.raise_for_status()
        memories = r.json()["memories"]
        if match == "content":
            ranked = [found_turns(m["content"], texts) for m in memories]
        else:
            ranked = [dia_ids_of(m.get("metadata") or {}) for m in memories]
        rows.append((q.category, recall_at_k(ranked, q.evidence, 5), recall_at_k(ranked, q.evidence, 10)))
        if on_progress is not None:
            on_progress(1)
    return rows
