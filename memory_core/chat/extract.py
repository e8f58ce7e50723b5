"""Turn extraction for auto-store (pure, no I/O).

``turn_memory_content`` turns one chat turn into the content of an episodic memory,
``"Q: <user text>\\nA: <assistant answer>"``, keeping only what is new in the turn: the
injected ``<memory_context>`` block is removed, and so are the assistant's sentences that
merely quote an injected memory (otherwise every answer that repeats a memory would store one
more copy of it, and retrieval would fill up with echoes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..sanitize import MAX_CONTENT_BYTES
from ..types import Memory
from .inject import strip_memory_block
from .tokens import jaccard, word_tokens

QUOTE_JACCARD = 0.8
"""A sentence whose word-Jaccard with an injected memory (or one of its sentences) is at
least this is a quote of it."""
MIN_CONTAINED_TOKENS = 3
"""A memory (or memory sentence) must have at least this many word tokens for "the sentence
contains it" to count as a quote (so "Yes." in a memory does not remove every "yes")."""
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
    """The injected memories, preprocessed: whole contents and their sentences/lines."""

    def __init__(self, memories: Iterable[Memory]) -> None:
        self.units: list[tuple[str, set[str]]] = []
        for m in memories:
            pieces = [m.content]
            for line in m.content.splitlines():
                line = _QA_PREFIX.sub("", line)
                pieces.append(line)
                pieces.extend(_sentences(line))
            seen = set()
            for p in pieces:
                norm = _normalize(p)
                if norm and norm not in seen:
                    seen.add(norm)
                    self.units.append((norm, word_tokens(p)))

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


def turn_memory_content(
    user_text: str,
    assistant_text: str,
    injected: list[Memory],
    *,
    max_bytes: int = MAX_CONTENT_BYTES,
) -> str | None:
    """Content of the auto-stored memory for one turn: ``"Q: <user>\\nA: <assistant>"``.

    - ``user_text``: the last user message as sent upstream; any ``<memory_context>`` block is
      removed (``strip_memory_block``). Empty after that (and stripping whitespace) → ``None``:
      nothing of the user's own to remember.
    - ``assistant_text``: the answer; an echoed memory block is removed too, then the
      sentences quoting an ``injected`` memory (``remove_quoted``). An empty answer gives just
      ``"Q: <user>"``; an answer that consisted only of quotes gives ``None``.
    - The result is at most ``max_bytes`` UTF-8 bytes (default ``MAX_CONTENT_BYTES``, the store
      limit): the assistant part is cut first, at a character boundary, ending in ``…``; a
      user text too long on its own is cut the same way and the answer left out.
    """
    user = strip_memory_block(user_text or "").strip()
    if not user:
        return None
    original = strip_memory_block(assistant_text or "").strip()
    answer = remove_quoted(original, injected) if injected else original
    question = f"Q: {user}"
    if not answer:
        # an answer made only of quoted memories teaches nothing new: storing "Q: <question>"
        # would only crowd the same question's future retrievals
        return None if original else truncate_utf8(question, max_bytes)
    content = f"{question}\nA: {answer}"
    if len(content.encode("utf-8")) <= max_bytes:
        return content
    head = f"{question}\nA: "
    room = max_bytes - len(head.encode("utf-8"))
    if room > len(ELLIPSIS.encode("utf-8")):
        return head + truncate_utf8(answer, room)
    return truncate_utf8(question, max_bytes)
