"""What a chat turn leaves in memory (auto-store), without a model call (pure, no I/O).

``extract_turn`` reads the user's message of a turn sentence by sentence (the injected
``<memory_context>`` block and ``<think>`` blocks removed, a "remember:"-style lead-in
dropped) and keeps what it *states*:

- ``semantic`` — facts and preferences ("my locker code is 4817", "I prefer aisle seats",
  "the staging database is on port 5432");
- ``procedural`` — standing instructions for how to help ("always answer in French", "call
  me Sam", "from now on keep it short");
- ``episodic`` — events ("yesterday I went to the support group"), with the time expression
  kept in the text and in ``metadata.when``.

Sentences that state nothing are skipped, each with a reason (``SKIP_REASONS``): questions,
greetings and acknowledgements, refusals, one-off requests to the assistant ("write me a
poem"), and fragments too short to mean anything. The kept sentences of one type form one
memory per turn. When the whole message states nothing, the turn's skip reason is the reason
of its first sentence.

Every ``window_every``-th user turn also gives a **window** memory: the last ``window_turns``
exchanges of both speakers (``user: …`` / ``assistant: …`` lines, the current answer
included), so that what the assistant or the other party said can be recalled too (the
reference router keeps 5 turns every 3rd user turn). The answer's sentences that merely quote
an injected memory are removed first (``remove_quoted``: otherwise every answer repeating a
memory would store one more copy of it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..curation.judge import strip_lead_in
from ..sanitize import MAX_CONTENT_BYTES, is_visible
from ..types import Memory, MemoryType
from .inject import content_text, strip_memory_block
from .routing import is_greeting
from .tokens import jaccard, word_tokens

QUOTE_JACCARD = 0.8
"""A sentence whose word-Jaccard with an injected memory (or one of its sentences) is at
least this is a quote of it."""
MIN_CONTAINED_TOKENS = 3
"""A memory (or memory sentence) must have at least this many word tokens for "the sentence
contains it" to count as a quote (so "Yes." in a memory does not remove every "yes")."""
MAX_QUOTE_UNITS = 128
"""Most pieces of the injected memories (whole contents, then their lines and sentences, in
order) an answer's sentences are compared with: each sentence is compared with every piece,
so their number is bounded (a few memories of a few sentences each are far below it)."""
ELLIPSIS = "…"

# Sentence ends: ., !, ? followed by whitespace; CJK full stops with or without a space.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
_QA_PREFIX = re.compile(r"^\s*[QA]:\s*")


def _normalize(text: str) -> str:
    """Lowercase, word tokens only, single-spaced (punctuation/markup ignored)."""
    return " ".join(re.findall(r"\w+", text.lower()))


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_SPLIT.split(text) if s.strip()]


class _Quotes:
    """The injected memories, preprocessed: whole contents and their sentences/lines (at most
    ``MAX_QUOTE_UNITS``, the whole contents first)."""

    def __init__(self, memories: Iterable[Memory]) -> None:
        self.units: list[tuple[str, set[str]]] = []
        memories = list(memories)
        seen: set[tuple[int, str]] = set()

        def add(i: int, piece: str) -> None:
            if len(self.units) >= MAX_QUOTE_UNITS:
                return
            norm = _normalize(piece)
            if norm and (i, norm) not in seen:
                seen.add((i, norm))
                self.units.append((norm, word_tokens(piece)))

        for i, m in enumerate(memories):
            add(i, m.content)
        for i, m in enumerate(memories):
            for line in m.content.splitlines():
                if len(self.units) >= MAX_QUOTE_UNITS:
                    return
                line = _QA_PREFIX.sub("", line)
                add(i, line)
                for sentence in _sentences(line):
                    add(i, sentence)

    def quoted(self, sentence: str) -> bool:
        norm = _normalize(sentence)
        if not norm:
            return False
        toks = word_tokens(sentence)
        padded = f" {norm} "
        for unit_norm, unit_toks in self.units:
            if len(unit_toks) >= MIN_CONTAINED_TOKENS and f" {unit_norm} " in padded:
                return True
            if jaccard(toks, unit_toks) >= QUOTE_JACCARD:
                return True
        return False


def remove_quoted(assistant_text: str, injected: Iterable[Memory]) -> str:
    """``assistant_text`` without the sentences that quote an injected memory: a sentence is
    dropped when its normalized text contains a memory's normalized content (or one of the
    memory's sentences/lines, ``Q:``/``A:`` prefixes ignored) of at least
    ``MIN_CONTAINED_TOKENS`` words, or when its word-Jaccard with one of them is
    ``>= QUOTE_JACCARD``. Line structure is kept; lines left empty are dropped."""
    quotes = _Quotes(injected)
    if not quotes.units:
        return assistant_text.strip()
    kept_lines = []
    for line in assistant_text.splitlines():
        kept = [s.strip() for s in _sentences(line) if not quotes.quoted(s)]
        if kept:
            kept_lines.append(" ".join(kept))
    return "\n".join(kept_lines).strip()


def truncate_utf8(text: str, max_bytes: int, ellipsis: str = ELLIPSIS) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes at a character boundary (never in the
    middle of a multi-byte character), ending in ``ellipsis`` when cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(ellipsis.encode("utf-8"))
    if room <= 0:
        return ""
    return data[:room].decode("utf-8", "ignore") + ellipsis


_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_QUESTION_START = re.compile(
    r"^\s*(what|when|where|who|whom|whose|why|how|which|do|does|did|is|are|was|were|can|could|would|should|"
    r"will|shall|may|might|have|has|had|am|isn't|aren't|don't|doesn't|didn't|won't|wouldn't|couldn't)\b",
    re.IGNORECASE,
)
_STANDING = re.compile(
    r"\b(always|never|from now on|going forward|in (the )?future|every time|whenever|by default|call me|"
    r"address me|refer to me|my name is|don'?t ever|do not ever|remember to)\b",
    re.IGNORECASE,
)
_ASSISTANT_BEHAVIOUR = re.compile(
    r"\b(answer|respond|reply|write|speak|talk|explain|use|format|keep|be|avoid|include|give|show|call|address|"
    r"remind|suggest|recommend)\b",
    re.IGNORECASE,
)
_IMPERATIVE_START = re.compile(
    r"^\s*(please\s+)?(write|tell|give|show|make|create|draft|summari[sz]e|translate|explain|list|find|book|"
    r"help|generate|compose|describe|compare|calculate|check|fix|send|plan|suggest|recommend|can you|could you|"
    r"would you|let'?s)\b",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"^\s*(i'?d rather not|i would rather not|i don'?t want to (talk|say|share)|none of your business|"
    r"no comment|not telling|skip (it|that)|never ?mind|nevermind|forget it)\b",
    re.IGNORECASE,
)
_PAST_EVENT = re.compile(
    r"\b(went|visited|had|got|met|saw|took|came|left|started|finished|bought|moved|joined|attended|watched|"
    r"played|ran|made|gave|won|lost|traveled|travelled|flew|drove|celebrated|\w+ed)\b",
    re.IGNORECASE,
)
_TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|last (night|week|month|year|weekend|summer|winter|spring|fall|\w+day)|"
    r"this (morning|afternoon|week|weekend)|\d+ (days?|weeks?|months?|years?) ago|"
    r"on (monday|tuesday|wednesday|thursday|friday|saturday|sunday)|in (19|20)\d\d)\b",
    re.IGNORECASE,
)
MIN_STATEMENT_WORDS = 3
"""A sentence with fewer words (and no digit) is too short to state a fact ("why?", "lol")."""

SKIP_REASONS = ("empty", "question", "greeting", "refusal", "request", "too_short")
"""Every reason a sentence (and a turn that states nothing) is skipped for."""


def strip_think(text: str) -> str:
    """``text`` without ``<think>…</think>`` blocks (a block left open runs to the end)."""
    return _THINK.sub("", text or "")


def clean_turn_text(text: str) -> str:
    """A message's text as it is remembered: no injected memory block, no ``<think>`` block."""
    return strip_think(strip_memory_block(text or "")).strip()


def classify_sentence(sentence: str) -> MemoryType | str:
    """The memory type a sentence states, or the reason it is skipped (``SKIP_REASONS``).
    See the module docstring."""
    s = sentence.strip()
    if not s or not is_visible(s):
        return "empty"
    if is_greeting(s):
        return "greeting"
    if _REFUSAL.match(s):
        return "refusal"
    if s.rstrip().endswith(("?", "？")) or (_QUESTION_START.match(s) and not s.rstrip().endswith(".")):
        return "question"
    words = re.findall(r"[\w'-]+", s)
    cjk = len(re.findall(r"[\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7af]", s))
    if len(words) + cjk // 2 < MIN_STATEMENT_WORDS and not re.search(r"\d", s):
        return "too_short"
    if _STANDING.search(s) and (_ASSISTANT_BEHAVIOUR.search(s) or re.search(r"\b(call|name|address)\b", s, re.I)):
        return MemoryType.PROCEDURAL
    if _IMPERATIVE_START.match(s):
        return "request"
    if _TIME_WORDS.search(s) and _PAST_EVENT.search(s):
        return MemoryType.EPISODIC
    return MemoryType.SEMANTIC


@dataclass
class ExtractedMemory:
    """One memory a turn leaves: its ``type``, ``content`` and ``metadata``; ``window`` when
    it is a window of the conversation rather than a statement of the user."""

    type: MemoryType
    content: str
    metadata: dict[str, str] = field(default_factory=dict)
    window: bool = False


@dataclass
class TurnExtraction:
    """What ``extract_turn`` found: the memories, and why the user's message gave none
    (``skipped``, one of ``SKIP_REASONS``) — ``None`` when it stated something."""

    memories: list[ExtractedMemory] = field(default_factory=list)
    skipped: str | None = None


def _sentences_of(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(s.strip() for s in _SENTENCE_SPLIT.split(line) if s.strip())
    return out


def _window(messages: Sequence[dict], answer: str, injected: Sequence[Memory], turns: int) -> str | None:
    lines: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        text = clean_turn_text(content_text(m.get("content")))
        if m.get("role") == "assistant" and injected:
            text = remove_quoted(text, injected)
        if text:
            lines.append(f"{m['role']}: {' '.join(text.split())}")
    if answer:
        lines.append(f"assistant: {' '.join(answer.split())}")
    exchanges: list[str] = []
    users = 0
    for line in reversed(lines):  # the last ``turns`` exchanges: up to ``turns`` user lines back
        exchanges.append(line)
        if line.startswith("user: "):
            users += 1
            if users >= turns:
                break
    if users == 0:
        return None
    return truncate_utf8("\n".join(reversed(exchanges)), MAX_CONTENT_BYTES)


def extract_turn(
    messages: Sequence[dict],
    answer: str,
    injected: Sequence[Memory] = (),
    *,
    window_turns: int = 5,
    window_every: int = 3,
) -> TurnExtraction:
    """What one chat turn leaves in memory (module docstring). ``messages``: the request's
    messages as sent upstream (the last user message is the turn's); ``answer``: the
    assistant's answer text; ``injected``: the memories injected into the request.
    ``window_every`` ≤ 0 turns windows off. Contents are at most ``MAX_CONTENT_BYTES``."""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    user_text = clean_turn_text(content_text(users[-1].get("content"))) if users else ""
    answer = clean_turn_text(answer)
    if injected:
        answer = remove_quoted(answer, injected)
    out = TurnExtraction()
    kept: dict[MemoryType, list[str]] = {}
    first_reason: str | None = None
    for sentence in _sentences_of(strip_lead_in(user_text)):
        kind = classify_sentence(strip_lead_in(sentence))
        if isinstance(kind, MemoryType):
            kept.setdefault(kind, []).append(strip_lead_in(sentence))
        elif first_reason is None:
            first_reason = kind
    for kind in (MemoryType.SEMANTIC, MemoryType.PROCEDURAL, MemoryType.EPISODIC):
        if kind in kept:
            text = truncate_utf8(" ".join(kept[kind]), MAX_CONTENT_BYTES)
            metadata = {}
            if kind == MemoryType.EPISODIC:
                when = _TIME_WORDS.search(text)
                if when:
                    metadata["when"] = when.group(0)
            out.memories.append(ExtractedMemory(kind, text, metadata))
    if not out.memories:
        out.skipped = first_reason or "empty"
    if window_every > 0 and len(users) % window_every == 0:
        window = _window(messages, answer, injected, window_turns)
        if window:
            out.memories.append(ExtractedMemory(MemoryType.EPISODIC, window, {"window": "true"}, window=True))
    return out
