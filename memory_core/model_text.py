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
import itertools
import unicodedata

from confusable_homoglyphs import categories as _categories
from confusable_homoglyphs import utils as _confusable_data

from . import linear_re
from .sanitize import _BLANK  # the one list of default-ignorable and blank code points

__all__ = ["model_lines", "model_text", "skeleton"]


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
_SKELETON = str.maketrans(_LOOKALIKE)


@functools.lru_cache(maxsize=4096)
def _script(char: str) -> str:
    """The script alias of a letter (``LATIN``, ``CYRILLIC``, ``GREEK``...; ``COMMON`` for
    punctuation), from the confusables package's Unicode script table."""
    if char.isascii():
        return "LATIN" if char.isalpha() else "COMMON"
    return _categories.alias(char)


def _dropped_table() -> dict[int, None]:
    """``str.translate`` table deleting what the model never sees: controls other than
    whitespace (tab, line feed... U+001C-001F and U+0085 are whitespace and are folded
    instead), format characters (Cf: zero-width space and joiners, soft hyphen, word joiner,
    bidi controls; planes 0, 1 and 14 hold them all) and the default-ignorable or blank code
    points of ``sanitize.is_visible``."""
    table: dict[int, None] = {}
    for code in itertools.chain(range(0x20000), range(0xE0000, 0xE1000)):
        char = chr(code)
        category = unicodedata.category(char)
        if (category == "Cc" and not char.isspace()) or category == "Cf" or _BLANK.match(char):
            table[code] = None
    return table


_DROPPED = _dropped_table()
_MIXED_WORD = linear_re.compile(
    r"[\p{L}\p{M}]*(?:[A-Za-z][\p{L}\p{M}]*[^\x00-\x7f\P{L}]|[^\x00-\x7f\P{L}][\p{L}\p{M}]*[A-Za-z])[\p{L}\p{M}]*"
)
"""A word (a run of letters and marks) holding an ASCII letter and a non-ASCII letter."""


def _fold_mixed_word(match) -> str:
    return _fold_word(match.group())


@functools.lru_cache(maxsize=4096)
def _fold_word(word: str) -> str:
    scripts = {_script(c) for c in word if c.isalpha()}
    if len(scripts - {"COMMON", "INHERITED"}) < 2:
        return word  # Latin letters only (é, ı, ş...): not mixed
    return "".join(c if _script(c) == "LATIN" else _LATIN_LOOKALIKE.get(c, c) for c in word)


def model_text(content: str) -> str:
    """``content`` as the model reads it in the memory block (module docstring: format
    characters dropped, NFKC, whitespace folded to single spaces on one line, mixed-script
    words folded to Latin), before HTML escaping. Linear in ``len(content)``."""
    text = unicodedata.normalize("NFKC", content.translate(_DROPPED))
    text = " ".join(text.translate(_DROPPED).split())  # NFKC exposes no dropped character: cheap
    return _fold_mixed_scripts(text)


def _fold_mixed_scripts(text: str) -> str:
    """``text`` (NFKC) with its mixed-script words folded to Latin, NFKC again (a folded
    letter can compose with the mark after it: Cyrillic е + U+0308 becomes ë)."""
    if text.isascii():
        return text
    folded = _MIXED_WORD.sub(_fold_mixed_word, text)
    return folded if folded == text else unicodedata.normalize("NFKC", folded)


def model_lines(content: str) -> str:
    """``content``'s lines as the model would read each on a line of its own: ``model_text``
    of every line, empty ones left out, joined by ``"\\n"`` (screening's view of where a line
    started before the renderer folded it). Linear in ``len(content)``."""
    text = unicodedata.normalize("NFKC", content.translate(_DROPPED))
    lines = (" ".join(line.split()) for line in text.translate(_DROPPED).splitlines())
    return _fold_mixed_scripts("\n".join(line for line in lines if line))


def skeleton(text: str) -> str:
    """``text`` with every character that has an ASCII look-alike replaced by it, then
    case-folded: a view for screening rules, never shown to the model. Linear."""
    return text.translate(_SKELETON).casefold()
