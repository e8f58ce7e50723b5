"""The text the model reads: one normalisation for the renderer and for screening.

A memory is injected as one line of the ``<memory_context>`` block (``chat.inject``), and
screening (``curation.screening``) judges that same line, so that nothing the renderer
removes or folds can hide an instruction from the rules. ``model_text`` is that line before
the block's HTML escaping:

1. control (Cc) and format (Cf) characters are dropped (a zero-width space, joiner, soft
   hyphen or word joiner cannot split a word or hide one), and so are the default-ignorable
   and blank code points of ``sanitize.is_visible`` (variation selectors, Hangul fillers...);
   whitespace controls (tab, newline...) are kept for step 3;
2. NFKC: full-width forms, mathematical letters (𝐬𝐲𝐬𝐭𝐞𝐦), ligatures and compatibility
   spaces become their plain characters;
3. every run of whitespace and line/paragraph separators becomes one space (the memory is
   one line), outer whitespace removed;
4. confusable folding of mixed-script words: in a word (a run of letters and marks) that
   holds Latin letters and letters of another script, each letter that Unicode's
   confusables list (``confusable_homoglyphs``, UTS #39 data) gives a Latin look-alike is
   replaced by it (``іgnоre`` with Cyrillic і and о reads ``ignore``). Words of one script
   are kept as written: Russian stays Cyrillic, Turkish ``ı`` stays ``ı``.

``skeleton`` goes one step further for screening only (it is not what the model reads): every
character with an ASCII look-alike is folded (whole-Cyrillic ``ЅУЅТЕМ``, Latin small
capitals ``ᴅᴇᴠ``, a modifier-letter colon) and the text is case-folded, so an English rule
also reads a text spelled entirely in look-alikes.

Both functions take and return ``str``, raise nothing, run in time linear in the text and
are idempotent (``model_text(model_text(t)) == model_text(t)``).
"""

from __future__ import annotations

import functools
import unicodedata

from confusable_homoglyphs import categories as _categories
from confusable_homoglyphs import utils as _confusable_data

from .sanitize import is_visible

__all__ = ["model_text", "skeleton"]


def _ascii_lookalikes() -> dict[str, str]:
    """Every non-ASCII character that Unicode's confusables data maps to one printable ASCII
    character (``а`` → ``a``, ``꞉`` → ``:``), plus the Latin small capitals (``ᴅ`` → ``d``),
    which the data maps to Cherokee only."""
    table: dict[str, str] = {}
    for char, glyphs in _confusable_data.load("confusables.json").items():
        if len(char) != 1 or char.isascii():
            continue
        for glyph in glyphs:
            c = glyph["c"]
            if len(c) == 1 and c.isascii() and c.isprintable() and not c.isspace():
                table[char] = c
                break
    for code in range(0x1D00, 0x1D2C):  # Phonetic Extensions: the small capitals
        name = unicodedata.name(chr(code), "")
        prefix = "LATIN LETTER SMALL CAPITAL "
        if name.startswith(prefix) and len(name) == len(prefix) + 1:
            table[chr(code)] = name[-1].lower()
    for char in ("\u0280", "\u0262", "\u026a", "\u0274", "\u028f", "\u0299", "\u029c", "\u029f"):
        name = unicodedata.name(char)  # IPA small capitals: ʀ ɢ ɪ ɴ ʏ ʙ ʜ ʟ
        table[char] = name[-1].lower()
    return table


_LOOKALIKE = _ascii_lookalikes()
_LATIN_LOOKALIKE = {c: a for c, a in _LOOKALIKE.items() if a.isalpha()}


@functools.lru_cache(maxsize=4096)
def _script(char: str) -> str:
    """The script alias of a letter (``LATIN``, ``CYRILLIC``, ``GREEK``...; ``COMMON`` for
    punctuation), from the confusables package's Unicode script table."""
    if char.isascii():
        return "LATIN" if char.isalpha() else "COMMON"
    return _categories.alias(char)


def _dropped(char: str) -> bool:
    """Characters the model never sees: controls other than whitespace, format characters,
    and default-ignorable or blank code points."""
    if char.isspace():
        return False
    if unicodedata.category(char) in ("Cc", "Cf"):
        return True
    return not char.isascii() and not is_visible(char) and not char.isspace()


def _fold_mixed_word(word: str) -> str:
    scripts = {_script(c) for c in word if c.isalpha()}
    if "LATIN" not in scripts or len(scripts - {"COMMON", "INHERITED"}) < 2:
        return word
    return "".join(_LATIN_LOOKALIKE.get(c, c) if _script(c) != "LATIN" else c for c in word)


def _fold_mixed_scripts(text: str) -> str:
    out: list[str] = []
    word: list[str] = []
    for char in text:
        if char.isalpha() or unicodedata.category(char).startswith("M"):
            word.append(char)
            continue
        if word:
            out.append(_fold_mixed_word("".join(word)))
            word = []
        out.append(char)
    if word:
        out.append(_fold_mixed_word("".join(word)))
    return "".join(out)


def model_text(content: str) -> str:
    """``content`` as the model reads it in the memory block (module docstring: format
    characters dropped, NFKC, whitespace folded to single spaces on one line, mixed-script
    words folded to Latin), before HTML escaping. Linear in ``len(content)``."""
    visible = "".join(c for c in content if not _dropped(c))
    text = unicodedata.normalize("NFKC", visible)
    text = "".join(c for c in text if not _dropped(c))  # NFKC can expose none, but cheap
    text = " ".join(text.split())
    return _fold_mixed_scripts(text)


def skeleton(text: str) -> str:
    """``text`` with every character that has an ASCII look-alike replaced by it, then
    case-folded: a view for screening rules, never shown to the model. Linear."""
    return "".join(_LOOKALIKE.get(c, c) for c in text).casefold()
