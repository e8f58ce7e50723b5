"""Sentences of a text, and sentences joined back, as every script writes them (pure, linear).

``split_sentences`` cuts a text at line breaks, after a CJK full stop (``。！？``, with or
without a space after it) and after a word ending in ``.``, ``!`` or ``?`` (or in one of them
and a closing quote or bracket, before a capital) followed by a space, except where the
period belongs to the word rather than ending the sentence:

- a title or a common abbreviation (``ABBREVIATIONS``: "Dr. Seuss", "Mrs. Smith", "St. Louis",
  "Sra. López", "l'Ing. Bianchi", "approx. 5 km", "No. 5", "usw. im Garten");
- a dotted acronym or abbreviation: two or more parts of one or two letters, each with its
  period ("U.S.", "e.g.", "a.m.", "Ph.D.", "J.K. Rowling", "z.B.", "all'O.N.U.");
- a single capital letter: an initial ("C. S. Lewis", "M. Lefèvre", "John F. Kennedy").

A word that keeps its period ends the sentence all the same when the next word opens
sentences (``SENTENCE_STARTERS``: "I start at 9 a.m. What…", "I got an A. Then…",
"etc. Ahora…", "¿…"); after a title only a pronoun, an article or a question word
(``NOT_NAMES``: "Dr. Le" goes on), and after an initial that follows a name only such a word
that is not also a name (``NAME_LIKE``: "Ursula K. Le Guin", "J. M. G. Le Clézio" go on). These are the
abbreviation, initial and orthographic rules of sentence segmenters such as Punkt (Kiss &
Strunk 2006, "Unsupervised Multilingual Sentence Boundary Detection") reduced to fixed word
lists, with no model. What they still get wrong: a sentence that ends with such a word before
a name or a word not in the list ("…Michael Evans Jr. People always…" stays one sentence).
For memory, that is one statement of two facts, where the cut it replaces stored fragments
such as "Would Caroline likely have Dr." as facts. Measured on a blind set
(``benchmarks/segmentation.py``).

``join_sentences`` is the inverse for storage: no space where the script writes none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TITLES = frozenset(
    {
        # English titles, forms of address and names' prefixes
        "mr", "mrs", "ms", "mx", "dr", "prof", "st", "sr", "mt", "rev", "hon", "col", "lt", "capt", "sgt", "gov",
        "supt", "fr", "vs", "cf",
        # other languages' (es, pt, fr, de, it, nl)
        "sra", "srta", "dra", "dña", "sto", "sta", "mme", "mlle", "mgr", "hr", "frl", "sig", "dott", "ing", "avv",
        "mevr", "dhr",
    }
)  # fmt: skip
"""Abbreviations (lower case, without their period) that stand before a name: the period does
not end the sentence before a capitalised word ("Dr. Le", "Mr. Will Smith"), only before a
pronoun or another word that cannot be a name (``NOT_NAMES``)."""
TRAILING = frozenset({"jr", "etc", "usw", "bzw", "vgl", "ecc", "enz", "approx", "ft", "dept", "univ"})
"""Abbreviations that end a name or a list, or stand before a number or a lower-case word
("King Jr. gave", "pears etc. in", "approx. 5"): a capitalised word after them starts a new
sentence ("…etc. Sarah is allergic…")."""
BEFORE_NUMBER = frozenset({"no", "nr", "nos", "vol", "fig"})
"""Abbreviations that keep their sentence only before a digit ("No. 5"): a sentence that
answers "no" ends with it."""
ABBREVIATIONS = TITLES | TRAILING | BEFORE_NUMBER
"""Every word that a period may follow without ending the sentence."""

SENTENCE_STARTERS = frozenset(
    """
    i i'm i've i'd i'll it it's he he's she she's we we're they they're you you're my our your his her their
    the this that these those there then now so but and or also anyway what what's when where who why how which
    do does did is are was were can could would should will any please thanks yes ok let's let if since after
    before last next today yesterday tomorrow
    yo ya el los las mi pero qué cómo dónde cuándo hoy ayer es ahora entonces luego después
    eu já os meu minha mas hoje ontem onde como não agora então depois
    je j'ai il elle nous vous ils elles le la les mon ma mes mais et c'est ce aujourd'hui hier comment où quand
    pourquoi maintenant alors puis ensuite
    ich er sie es wir der die das mein meine aber und heute gestern wie wo wann warum was jetzt dann danach
    io lui lei noi lo gli mio mia ma oggi ieri come dove quando perché cosa ora adesso allora poi dopo
    ik hij zij ze het de een mijn maar en vandaag gisteren hoe waar wanneer waarom wat nu toen daarna
    """.split()
)
"""Words (lower case) that open sentences far more often than they follow a name: function
words of English, Spanish, Portuguese, French, German, Italian and Dutch (pronouns,
articles, possessives, conjunctions, question words, adverbs of time). Capitalised after a word that
keeps its period ("Ph.D.", "p.m.", "Jr.", an initial), one of them starts a new sentence ("I
start at 9 a.m. What…", "an A. Then…"); a name or another word does not ("Dr. Seuss",
"M. Lefèvre")."""

NAME_LIKE = frozenset("le la de ma mi mia lo lui lei gli".split())
"""Words of ``SENTENCE_STARTERS`` that are also names or names' particles, capitalised ("Le
Guin", "De Souza", "Lo Bianco"). Not "Will" or "Das": after an initial they open a question
or a sentence far more often ("I take Vitamin D. Will that help?", "Blutgruppe A. Das ist
selten")."""

NOT_NAMES = frozenset(
    """
    i i'm i've i'd i'll it it's he he's she she's we we're they they're you you're my our your his their the this
    that these those there then what what's when where who why how which
    yo él ella nosotros ellos eu ele ela nós eles je il elle nous vous ils elles ich er sie wir io lui noi ik hij
    zij wij
    """.split()
)
"""Of ``SENTENCE_STARTERS``, the words that are not also surnames or first names ("Le",
"Ma", "De", "Will", "Mia" are): after a title or a run of initials, only these open a
sentence."""

_STARTERS_NOT_NAME_LIKE = SENTENCE_STARTERS - NAME_LIKE
_CJK_STOP = re.compile(r"(?<=[。！？])\s*")
_HEAD = re.compile(r"[^\W\d_][\w'’]*")
_CLOSING = "\"'”’»)]}"
_TOKEN = re.compile(r"\S+")
_OPENING = "([{\"'“‘«¿¡"
_DOTTED = re.compile(r"(?:[^\W\d_]{1,2}\.){2,}")
_INITIAL = re.compile(r"[^\W\d_]\.")


def _starts_sentence(token: str, starters: frozenset[str] = SENTENCE_STARTERS) -> bool:
    """Whether ``token`` opens a sentence for certain: an inverted mark ("¿", "¡") or a
    capitalised word of ``starters``."""
    if token[:1] in "¿¡":
        return True
    head = _HEAD.match(token.lstrip(_OPENING))
    return bool(head and head.group(0)[0].isupper() and head.group(0).replace("’", "'").casefold() in starters)


def _keeps_going(token: str, before: str | None, after: str) -> bool:
    """Whether the period ending ``token`` belongs to it (an abbreviation, an acronym, an
    initial) rather than ending the sentence; ``before``/``after``: the tokens around it
    (``None`` at the start of the text). A word that opens sentences after it ends the
    sentence all the same (``SENTENCE_STARTERS``)."""
    if token.endswith(".."):  # an ellipsis ends a sentence
        return False
    word = re.split(r"['’]", token.lstrip(_OPENING))[-1]  # after an elided article: "l'Ing.", "all'O.N.U."
    stem = word[:-1]
    folded = stem.casefold()
    previous = before.lstrip(_OPENING) if before is not None else ""
    if len(stem) == 1 and stem.isupper() and (_INITIAL.fullmatch(previous) or previous[:1].isupper()):
        # an initial after a name or another initial: a name goes on ("J. M. G. Le Clézio",
        # "Ursula K. Le Guin"), unless a sentence-opening word that is not also a name
        # follows ("We visited D. C. I loved it", "I have Hepatitis B. Can you…")
        return not _starts_sentence(after, _STARTERS_NOT_NAME_LIKE)
    if folded in TITLES:
        return not _starts_sentence(after, NOT_NAMES)
    if folded in TRAILING:
        return not after.lstrip(_OPENING)[:1].isupper() and not _starts_sentence(after)
    if folded in BEFORE_NUMBER:
        return after[:1].isdigit()
    if _starts_sentence(after):
        return False
    if _DOTTED.fullmatch(word):
        return True
    if len(stem) == 1 and stem.isalpha() and stem.isupper():
        # an initial: before another initial or a name ("C. S. Lewis", "M. Lefèvre"), or
        # after a name ("John F. Kennedy"); before a lower-case word, it goes on too
        return not after[:1].isdigit()
    return False


def _split_line(line: str) -> list[str]:
    out: list[str] = []
    for piece in _CJK_STOP.split(line):
        spans = [(m.start(), m.end()) for m in _TOKEN.finditer(piece)]
        start: int | None = None
        for i, (a, b) in enumerate(spans):
            if start is None:
                start = a
            if i + 1 == len(spans):
                continue
            token = piece[a:b]
            bare = token.rstrip(_CLOSING)  # a sentence may end inside its quote: 'noon." She…'
            if bare and bare[-1] in ".!?" and (bare == token or piece[spans[i + 1][0]].isupper()):
                before = piece[spans[i - 1][0] : spans[i - 1][1]] if i else None
                after = piece[spans[i + 1][0] : spans[i + 1][1]]
                if bare[-1] != "." or not _keeps_going(bare, before, after):
                    out.append(piece[start:b])
                    start = None
        if start is not None:
            out.append(piece[start : spans[-1][1]])
    return out


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see the module docstring), each stripped, none empty; the
    text between two cuts is kept as written (its inner spaces unchanged). Linear in
    ``len(text)``: one pass over the tokens, each looked at with its two neighbours."""
    out: list[str] = []
    for line in text.splitlines():
        out.extend(s for s in _split_line(line) if s)
    return out


_NO_SPACE_AFTER = frozenset("。！？｡")
"""Sentence ends of scripts written without spaces between sentences."""


def _unspaced(ch: str) -> bool:
    """Whether ``ch`` is of a script written without spaces between words and sentences
    (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar, full-width forms)."""
    o = ord(ch)
    return (
        0x3000 <= o <= 0x9FFF  # CJK punctuation, kana, CJK unified ideographs (and extension A)
        or 0xF900 <= o <= 0xFAFF  # CJK compatibility ideographs
        or 0xFF00 <= o <= 0xFFEF  # half- and full-width forms
        or 0x0E00 <= o <= 0x0EFF  # Thai, Lao
        or 0x1780 <= o <= 0x17FF  # Khmer
        or 0x1000 <= o <= 0x109F  # Myanmar
        or 0x20000 <= o <= 0x3FFFF  # CJK extensions B–H
    )


def join_sentences(sentences: Sequence[str], *, glue_unspaced: bool = True) -> str:
    """``sentences`` joined as their script writes them: no space after a CJK full stop
    ("我住在上海。" + "我的猫叫咪咪。" → "我住在上海。我的猫叫咪咪。", whatever follows it) and,
    with ``glue_unspaced``, none between two characters of unspaced scripts (``_unspaced``:
    Chinese, Japanese, Thai…: pieces one text was cut into, whose spaces were the cut's); one
    space elsewhere (Latin, Cyrillic, Korean, Arabic…). Whole texts joined (consolidation's
    merge) pass ``glue_unspaced=False``: a Chinese text without a final stop or a Thai
    sentence (Thai separates sentences by a space) keeps a space as its boundary."""
    out: list[str] = []
    for sentence in sentences:
        if not sentence:
            continue
        if out:
            left = out[-1][-1]
            glued = glue_unspaced and _unspaced(left) and _unspaced(sentence[0])
            if not (left in _NO_SPACE_AFTER or glued):
                out.append(" ")
        out.append(sentence)
    return "".join(out)
