"""Reflection gate: which retrieved memories are injected (pure, no model calls, no I/O).

``HeuristicGate.apply`` runs, in this order:

1. **block** — drop candidates whose content matches any ``block_patterns`` regex
   (RE2 ``search``, linear time, case-insensitive; compiled once per pattern tuple);
2. **recency decay** — ``score × exp(−ln2 · age_days / recency_half_life_days)``: the score
   halves every half-life (exponential recency decay as in Park et al. 2023, "Generative
   Agents: Interactive Simulacra of Human Behavior", whose recency factor decays per hour
   since last access; here per day since ``updated_at``, else ``created_at``). Age is measured
   to ``now``; a timestamp in the future, or none at all, gives age 0 (no decay). A negative
   score (fused scores can be: a cosine below 0, the question discount) loses ``1 − factor``
   instead (``decayed_score``), so that age ranks it lower too — multiplied, an older
   negative score would rise above a newer one;
3. **sort** — by decayed score, descending; ties broken by memory id, ascending (stable);
4. **dedup** — a candidate whose word-level Jaccard similarity with a higher-ranked kept one is
   ``>= dedup_threshold`` (inclusive) is dropped (near-duplicate detection by Jaccard
   resemblance of word sets; words are lowercase ``\\w+`` tokens, each CJK character a token,
   see ``memory_core.chat.tokens.word_tokens``);
5. **token budget** — memories are kept in rank order while the running total of their
   token counts (``estimate_tokens(content)``, or the tokenizer when
   ``exact_token_count``) stays ``<= max_inject_tokens``; the first memory that does not fit
   ends the list. The top memory is always kept, even when it alone is over the budget.

Output: new ``ScoredMemory`` objects (same ``memory`` and ``similarity``; ``score`` = the
decayed score), in rank order; inputs are never mutated. Cost: O(n log n) plus O(n·k) set
intersections for dedup (k kept), most of it tokenising the kept contents (figures:
``benchmarks/gate.py``, README "Measured").

``get_gate(name)`` selects a gate by name (``heuristic``, ``noop``); ``select_gate(settings)``
gives ``noop`` when ``settings.enabled`` is false.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from .. import linear_re
from ..config import ReflectionSettings
from ..types import ScoredMemory
from .tokens import jaccard, token_counter, word_tokens

_LN2 = math.log(2.0)
_SECONDS_PER_DAY = 86400.0


@functools.lru_cache(maxsize=64)
def compile_block_patterns(patterns: tuple[str, ...]) -> tuple[linear_re.Pattern, ...]:
    """The patterns as one case-insensitive RE2 alternation ``(?:p1)|(?:p2)`` (cached per
    tuple; ``linear_re.compile_operator``: matching is linear in the memory text, which is
    caller text). Matches exactly when some pattern does. Raises ``ValueError`` for a
    pattern RE2 cannot compile (``ReflectionSettings`` rejects those at load)."""
    for i, p in enumerate(patterns):
        linear_re.compile_operator(p, ignore_case=True, field=f"block_patterns[{i}]")
    return (linear_re.compile_operator("|".join(f"(?:{p})" for p in patterns), ignore_case=True),)


def decayed_score(score: float, factor: float) -> float:
    """``score`` after a recency ``factor`` in [0, 1]: ``score × factor`` for a score ≥ 0, and
    ``score − (1 − factor)`` for a negative one (older ranks lower whatever the sign; finite
    and never above a non-negative score's decay)."""
    return score * factor if score >= 0 else score - (1.0 - factor)


def recency_factor(timestamp: datetime | None, now: datetime, half_life_days: float) -> float:
    """``exp(−ln2 · age_days / half_life_days)`` in (0, 1]; ``age_days = (now − timestamp)``
    in days, clamped at 0 (future timestamps, or ``None``, give 1.0). Naive datetimes are
    taken as UTC. Raises ``ValueError`` when ``half_life_days <= 0``."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be > 0")
    if timestamp is None:
        return 1.0
    if timestamp.tzinfo is None:
        timestamp = timestamp.replace(tzinfo=UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    age_days = (now - timestamp).total_seconds() / _SECONDS_PER_DAY
    if age_days <= 0:
        return 1.0
    return math.exp(-_LN2 * age_days / half_life_days)


@runtime_checkable
class ReflectionGate(Protocol):
    """``apply(candidates, settings, now) -> list[ScoredMemory]``: a pure selection of the
    memories to inject, in injection order. Must not mutate ``candidates``. ``drops``, when
    given, receives the candidates dropped per reason (``blocked``, ``duplicate``, ``budget``;
    added to what it holds)."""

    name: str

    def apply(
        self,
        candidates: Sequence[ScoredMemory],
        settings: ReflectionSettings,
        now: datetime,
        drops: dict[str, int] | None = None,
    ) -> list[ScoredMemory]: ...


def _rank_key(c: ScoredMemory) -> tuple[float, str]:
    return (-c.score, c.memory.id)


class NoopGate:
    """Returns the candidates unchanged (same objects, no decay, nothing dropped), sorted by
    score descending, ties by memory id."""

    name = "noop"

    def apply(
        self,
        candidates: Sequence[ScoredMemory],
        settings: ReflectionSettings,
        now: datetime,
        drops: dict[str, int] | None = None,
    ) -> list[ScoredMemory]:
        return sorted(candidates, key=_rank_key)


class HeuristicGate:
    """block → recency decay → sort → dedup → token budget (see the module docstring)."""

    name = "heuristic"

    def apply(
        self,
        candidates: Sequence[ScoredMemory],
        settings: ReflectionSettings,
        now: datetime,
        drops: dict[str, int] | None = None,
    ) -> list[ScoredMemory]:
        if not candidates:
            return []
        blocks = compile_block_patterns(tuple(settings.block_patterns)) if settings.block_patterns else ()
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        half_life = settings.recency_half_life_days

        ranked: list[tuple[float, str, ScoredMemory]] = []
        blocked = duplicates = 0
        for c in candidates:
            content = c.memory.content
            if blocks and any(p.search(content) for p in blocks):
                blocked += 1
                continue
            m = c.memory
            decayed = decayed_score(c.score, recency_factor(m.updated_at or m.created_at, now, half_life))
            ranked.append((-decayed, m.id, c))
        ranked.sort(key=lambda t: (t[0], t[1]))

        count = token_counter(settings)
        budget = settings.max_inject_tokens
        threshold = settings.dedup_threshold
        kept: list[ScoredMemory] = []
        kept_words: list[tuple[set[str], int]] = []
        used = 0
        for neg_score, _, c in ranked:
            content = c.memory.content
            words = word_tokens(content)
            n = len(words)
            # Jaccard <= min(|a|,|b|)/max(|a|,|b|): sizes outside [n·t, n/t] cannot reach t
            # (bounds widened by 1e-9 so only the exact division below decides at the boundary)
            lo, hi = n * threshold - 1e-9, n / threshold + 1e-9
            duplicate = False
            for w, wn in kept_words:
                if lo <= wn <= hi:
                    if n == 0 or wn == 0:
                        duplicate = jaccard(words, w) >= threshold
                    else:
                        inter = len(words & w)
                        duplicate = inter / (n + wn - inter) >= threshold
                    if duplicate:
                        break
            if duplicate:
                duplicates += 1
                continue
            tokens = count(content)
            if kept and used + tokens > budget:
                break
            used += tokens
            kept_words.append((words, n))
            kept.append(ScoredMemory.model_construct(memory=c.memory, score=-neg_score, similarity=c.similarity))
        if drops is not None:
            over_budget = len(ranked) - len(kept) - duplicates
            for reason, n in (("blocked", blocked), ("duplicate", duplicates), ("budget", over_budget)):
                if n:
                    drops[reason] = drops.get(reason, 0) + n
        return kept


GATES: dict[str, type] = {"heuristic": HeuristicGate, "noop": NoopGate}
"""Gate registry: ``ReflectionSettings.algorithm`` names → classes."""


@functools.cache
def get_gate(name: str) -> ReflectionGate:
    """The gate registered as ``name`` (a shared, stateless instance). Raises ``ValueError``
    for an unknown name."""
    try:
        return GATES[name]()
    except KeyError:
        raise ValueError(f"unknown reflection gate {name!r}; known: {sorted(GATES)}") from None


def select_gate(settings: ReflectionSettings) -> ReflectionGate:
    """``noop`` when reflection is disabled (``settings.enabled`` false), else
    ``get_gate(settings.algorithm)``."""
    return get_gate("noop") if not settings.enabled else get_gate(settings.algorithm)
