"""Linear-time patterns for every rule that reads caller text.

Python's ``re`` is a backtracking engine: a pattern such as ``(^|\\n)\\s*x`` or ``\\w+(-\\w+)+``
takes time quadratic (or worse) in the text when it fails to match, and caller text is
hostile. Rules that read caller text compile their patterns here, on RE2 (``google-re2``,
https://github.com/google/re2/wiki/Syntax), whose matching time is linear in the text by
construction: RE2 has no backreferences and no lookaround, and ``compile`` raises
``re2.error`` for them instead of falling back to a backtracking engine.

RE2's ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII-only, where Python's are Unicode. So that
a rule reads every script as Python's ``re`` did, ``compile`` refuses those four escapes
(``ValueError``) and rules spell what they mean with the constants below:

- ``WORD`` (one letter, digit or underscore of any script) and ``NOT_WORD``;
- ``DIGIT`` (a decimal digit of any script);
- ``SPACE`` (ASCII whitespace plus every Unicode separator) and ``NOT_SPACE``;
- ``START`` / ``END``: a word's edges (``(?:^|[^…])`` / ``(?:[^…]|$)``). Unlike ``\\b``
  they consume the neighbouring character, which ``search`` and ``fullmatch`` do not mind;
  a rule that replaces or finds every match keeps that character in its own group.

Costs: RE2 matching is linear, but the Python binding adds a few microseconds per match
(each match maps UTF-8 offsets back to characters): prefer ``search`` over ``findall`` on
long texts, and bound the number of matches a rule asks for.
"""

from __future__ import annotations

import re
from typing import TypeAlias

import re2

WORD = r"[\p{L}\p{N}\p{M}_]"
"""One letter, digit, combining mark or underscore, of any script (Python's ``\\w``)."""
NOT_WORD = r"[^\p{L}\p{N}\p{M}_]"
DIGIT = r"\p{Nd}"
"""One decimal digit of any script (Python's ``\\d``)."""
SPACE = r"[\t\n\v\f\r\p{Z}\x{85}]"
"""One whitespace character: ASCII whitespace and every Unicode separator (Python's ``\\s``)."""
NOT_SPACE = r"[^\t\n\v\f\r\p{Z}\x{85}]"
START = r"(?:^|" + NOT_WORD + r")"
"""The start of a word: the text's start or a character that is not ``WORD`` (consumed)."""
END = r"(?:" + NOT_WORD + r"|$)"
"""The end of a word: a character that is not ``WORD`` (consumed) or the text's end."""

IGNORECASE = re.IGNORECASE
MULTILINE = re.MULTILINE
DOTALL = re.DOTALL
_FLAG_PREFIX = ((IGNORECASE, "i"), (MULTILINE, "m"), (DOTALL, "s"))
_ASCII_ONLY = re.compile(r"(?<!\\)(?:\\\\)*\\[wdsbWDSB]")

Pattern: TypeAlias = re2._Regexp
"""The compiled pattern type (``search``, ``match``, ``fullmatch``, ``finditer``, ``findall``,
``sub``, ``split``, as ``re.Pattern`` has them)."""


def compile(pattern: str, flags: int = 0) -> Pattern:
    """``pattern`` compiled by RE2 (linear-time matching), with ``flags`` from this module
    (``IGNORECASE``, ``MULTILINE``, ``DOTALL``; others raise ``ValueError``).

    Raises ``ValueError`` when ``pattern`` uses ``\\w \\d \\s \\b`` (or their negations):
    they are ASCII-only in RE2, so use ``WORD``, ``DIGIT``, ``SPACE``, ``START``/``END``;
    ``re2.error`` for syntax RE2 lacks (backreferences, lookaround)."""
    if _ASCII_ONLY.search(pattern):
        raise ValueError(f"ASCII-only escape in {pattern!r}: use linear_re.WORD, DIGIT, SPACE, START or END")
    unknown = flags & ~(IGNORECASE | MULTILINE | DOTALL)
    if unknown:
        raise ValueError(f"unsupported flags: {unknown}")
    prefix = "".join(letter for flag, letter in _FLAG_PREFIX if flags & flag)
    options = re2.Options()
    options.max_mem = 64 << 20
    return re2.compile(f"(?{prefix}){pattern}" if prefix else pattern, options=options)


def compile_operator(pattern: str, *, ignore_case: bool = False, field: str = "pattern") -> Pattern:
    """An operator's configured pattern (routing ``regex``, reflection ``block_patterns``)
    compiled by RE2 as written, so that it, too, runs in time linear in the caller text it
    reads. It is RE2 syntax (https://github.com/google/re2/wiki/Syntax): Python's syntax
    without backreferences and lookaround, and ``\\w \\d \\s \\b`` are ASCII-only there.
    Raises ``ValueError`` naming ``field`` when RE2 cannot compile it."""
    options = re2.Options()
    options.max_mem = 64 << 20
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options=options)
    except re2.error as e:
        raise ValueError(
            f"{field} {pattern!r} is not a valid RE2 pattern (no backreferences or lookaround): {e}"
        ) from e
