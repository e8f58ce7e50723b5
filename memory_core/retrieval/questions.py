"""Whether a memory asks rather than states.

A conversation stored turn by turn holds questions ("What kind of music do you play?") next to
the statements that answer them ("I play the clarinet"). A search is after what was said:
a memory that only asks states nothing of its own, though it often shares the search's words
("music", "play") and its topic. So hybrid retrieval ranks such a memory a little lower
(``retrieval.question_weight``, ``memory_core.retrieval.fusion``) while its own match still
lends its neighbours context (the answer that follows it).

The rule (``is_question``): the memory's text, its speaker's name taken off, ends with a
question mark: ``?``, the full-width ``？``, the Arabic ``؟``, ``‽``, ``❓``, ``❔``, or a
character whose compatibility form (NFKC) holds ``?`` (``⁇``, ``⁈``, ``⁉``, the small and
vertical forms ``﹖`` ``︖``); the Greek question mark ``;`` is not read: it is also the
semicolon. What may follow the mark is set aside: white space, ``!`` and ``！`` ("Really?!"),
closing and quoting punctuation of any script (Unicode categories Pe, Pf, Pi: ``)`` ``]``
``}`` ``”`` ``“`` ``»`` ``›`` ``》`` ``」``...), format characters (Cf: zero-width space, BOM),
marks (Mn: emoji variation selectors), symbols (So, Sk: emoji, skin tones), the markdown
emphasis characters ``*`` ``_`` `````` ``~`` and straight quotes. A text that asks and then
states ("Did you go? We did.") states; a shared photo's caption after a question
(``"… right? [shares a photo: …]"``) states too. Reported speech ending in a quoted
question (``She asked "why?"``) counts as asking: the rule does not read quotes' pairing.

Constant time: at most ``MAX_TRAILING`` characters after the mark are looked at (a text
that ends in a longer run of such characters does not ask); no regular expression.
"""

from __future__ import annotations

import unicodedata

QUESTION_MARKS = frozenset("?？؟‽❓❔")
"""Question marks read as they are; any other character whose NFKC form holds ``?`` asks too."""
MAX_TRAILING = 64
"""Most characters looked at after a question's mark (module docstring)."""
_TRAILING_CATEGORIES = frozenset({"Pe", "Pf", "Pi", "Cf", "Mn", "So", "Sk"})
_TRAILING = frozenset("!！\"'*_`~")


def _is_mark(ch: str) -> bool:
    return ch in QUESTION_MARKS or (not ch.isascii() and "?" in unicodedata.normalize("NFKC", ch))


def _may_follow(ch: str) -> bool:
    return ch.isspace() or ch in _TRAILING or unicodedata.category(ch) in _TRAILING_CATEGORIES


def is_question(text: str) -> bool:
    """True when ``text`` ends with a question mark, what may follow one aside (module
    docstring). Looks at most at its last ``MAX_TRAILING`` + 1 characters.

    >>> is_question("What kind of music do you play?")
    True
    >>> is_question("How are you? 😊")
    True
    >>> is_question("Did you go? We did.")
    False
    """
    for i in range(len(text) - 1, max(len(text) - MAX_TRAILING - 2, -1), -1):
        ch = text[i]
        if _is_mark(ch):
            return True
        if not _may_follow(ch):
            return False
    return False
