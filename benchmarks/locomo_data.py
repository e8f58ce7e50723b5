"""LoCoMo dataset helpers shared by the offline benchmark (``benchmarks/locomo_offline.py``) and
the service replay (``benchmarks/locomo.py``).

Data: ``../shared/data/locomo/locomo_dev.json`` (Maharana et al., "Evaluating Very Long-Term
Conversational Memory of LLM Agents", ACL 2024; CC BY-NC 4.0). See ``shared/README.md``.

Replay convention (one memory per dialogue turn):

- content: ``"Speaker: text"``, plus ``" [shares a photo: <blip_caption>]"`` when the turn has a
  caption;
- metadata: ``{"dia_id", "session_date" (the raw ``session_N_date_time`` string),
  "speaker", "session" (N, int)}``;
- created_at: the parsed session date (``memory_core.retrieval.timeparse.parse_session_date``) plus the
  turn's index within its session in seconds, so turns keep their order when listed by time.

Evidence recall@k of a question = |evidence ∩ dia_ids of the top-k memories| / |evidence|,
averaged over the category 1–4 questions that have evidence. A memory built from several turns
counts all of its dia_ids (see ``recall_at_k``).

Nothing here looks at answers or evidence except ``Question`` (for scoring) — the replay side
(``turns``) only reads the conversation.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memory_core.retrieval.timeparse import parse_session_date

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
            meta = {"dia_id": t["dia_id"], "session_date": date, "speaker": t["speaker"], "session": n}
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
