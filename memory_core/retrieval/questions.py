"""Whether a memory asks rather than states.

A conversation stored turn by turn holds questions ("What kind of music do you play?") next to
the statements that answer them ("I play the clarinet"). A search is after what was said:
a memory that only asks states nothing of its own, though it often shares the search's words
("music", "play") and its topic. So hybrid retrieval ranks such a memory a little lower
(``retrieval.question_weight``, ``memory_core.retrieval.fusion``) while its own match still
lends its neighbours context (the answer that follows it).

The rule (``is_question``): the memory's text, its speaker's name taken off, ends with a
question mark (``?``, the full-width ``？``, the Arabic ``؟``, the Greek question mark
``;`` is not read: it is also the semicolon), trailing white space and closing quotes or
brackets aside. A text that asks and then states ("Did you go? We did.") states; a shared
photo's caption after a question (``"… right? [shares a photo: …]"``) states too.

Linear in the text (one pass from its end); no regular expression.
"""

from __future__ import annotations

QUESTION_MARKS = frozenset("?？؟")
_CLOSING = frozenset("\"'”’»)）]】」』")
"""Closing quotes and brackets that may follow a question's mark."""


def is_question(text: str) -> bool:
    """True when ``text`` ends with a question mark (module docstring).

    >>> is_question("What kind of music do you play?")
    True
    >>> is_question('She asked "why?"  ')
    True
    >>> is_question("Did you go? We did.")
    False
    """
    i = len(text)
    while i > 0 and (text[i - 1].isspace() or text[i - 1] in _CLOSING):
        i -= 1
    return i > 0 and text[i - 1] in QUESTION_MARKS
