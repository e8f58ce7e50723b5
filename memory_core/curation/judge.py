"""How a new statement relates to an older one of the same user, by deterministic rules (no
model call): ``duplicate`` (the same fact), ``refines`` (the same fact with more detail),
``supersedes`` (same subject, new value: the old one is no longer true) or ``compatible``
(both true together).

A statement is read into three parts (``read_statement``):

- **values**: what can change while the subject stays — numbers (``$10,000``, ``9:30``,
  ``555-0142``, ``7``, ``third``, ``two``), dates (``March 3``), proper names (``Boston``,
  ``Dana Whitfield``, ``Tesla Model 3``: capitalised words that are not sentence-initial, or
  that the other statement also capitalises), lexicon values (colours, diets, relationship and
  work status), and in Chinese the place after a residence/work verb (``住在上海``). Each value
  has a kind (``number``, ``date``, ``name``, ``colour``, ``diet``...);
- **subject**: the content terms left (``memory_core.retrieval.lexical.tokenize``: stemmed,
  stop words out), and the **frames** they belong to (residence: live/moved/住/搬; work;
  vehicle; diet; age; name...), so that "I live in Boston" and "I moved to San Francisco"
  share a subject without sharing a word;
- **markers**: change markers (``now``, ``moved``, ``changed``, ``switched``, ``no longer``,
  ``rebooked``, ``turned``, 搬到, 改成, 现在...), additive markers (``also``, ``too``,
  ``another``, 也, 还), a ``from X to Y`` pattern, and negated phrases (``not docker push``),
  and the people it is about (``my sister`` is not ``I``).

Rules, in order (``judge``):

1. equal normalised text, or the same terms and values → ``duplicate``;
2. one's terms contain the other's, values likewise, no change marker → ``refines`` when the
   new one adds something (keep the richer text), else ``duplicate``;
3. an additive marker without a change marker, or different people → ``compatible``;
4. either statement longer than ``MAX_SUPERSEDE_WORDS`` → ``compatible`` (several things
   said at once are never replaced wholesale); a pair with one longer than
   ``MAX_JUDGED_CHARS`` is not read at all: its normalised texts alike → ``duplicate``, the
   old within the new (at least half of it) → ``refines``, the new within the old →
   ``duplicate``, else ``compatible``;
5. the same subject (a shared subject term, or a shared frame, or ``from <old value>``) and a
   value conflict (an old value of some kind replaced by a new value of the same kind, or an
   old value negated in the new statement, or a change marker with an old value gone) →
   ``supersedes``;
6. in any language of ``change_cues`` (``_moved_on``): a cue of the new statement the old
   one lacks — ending, a plan then no plan, or change with an old value gone — about the
   same subject and the same people, nothing added ("also"), no passing state ("today"),
   no other place or time of day ("at home" / "at work") → ``supersedes``; an old statement
   of a finished past time ("last summer") or another dated occasion stays compatible, and
   so does, whatever the cue, an old statement of what was already over when it was said
   ("I used to…", "my first job was…", "as a kid…", 小时候; ``_over_already``) unless the new
   one corrects it ("actually", "never");
7. otherwise → ``compatible``.

Names a statement addresses ("Hey Gina!", "Thanks, Jon.") are not read as values.

The rules are general (no list of example sentences): the lexicons are vocabulary of the
kinds of facts users state. Values and frames are read in English and Chinese; the cues of
rule 6 (``memory_core.curation.change_cues``) also in Spanish, French, German, Italian,
Portuguese and Japanese; a pair with no cue in another language stays compatible.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import cachetools

from .. import linear_re
from ..retrieval.lexical import tokenize
from .change_cues import (
    ANOTHER_STRETCH,
    COPULAS,
    NAMING_WORDS,
    PRONOUNS,
    RELATIONSHIP_NOUNS,
    TIME_OF_DAY_WORDS,
    Cues,
    additive_cjk,
    read_cues,
)


class Verdict(str, Enum):
    """How a new statement relates to an older one (see the module docstring)."""

    DUPLICATE = "duplicate"
    REFINES = "refines"
    SUPERSEDES = "supersedes"
    COMPATIBLE = "compatible"


# --------------------------------------------------------------------------- vocabulary
_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "hundred": 100,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10,
}  # fmt: skip
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
_LEXICON_VALUES = {
    "colour": {
        "red", "blue", "green", "yellow", "orange", "purple", "violet", "pink", "black", "white", "grey",
        "gray", "brown", "silver", "gold", "beige", "teal", "navy", "maroon", "turquoise",
    },
    "diet": {"vegetarian", "vegan", "pescatarian", "omnivore", "carnivore", "keto", "paleo", "halal", "kosher"},
    "relationship": {"single", "married", "divorced", "engaged", "widowed", "separated", "dating"},
    "work_status": {"employed", "unemployed", "retired", "freelance", "freelancer", "student", "intern"},
    "level": {"junior", "senior", "mid-level", "lead", "principal", "staff", "head", "chief", "associate",
              "assistant", "beginner", "intermediate", "advanced", "expert"},
}  # fmt: skip
_FRAMES = {
    "residence": {"live", "lives", "living", "lived", "moved", "move", "moving", "relocated", "relocate",
                  "based", "reside", "resides", "home", "address", "住", "搬", "居住", "住址"},
    "work": {"work", "works", "working", "worked", "job", "employer", "joined", "hired", "company",
             "position", "role", "工作", "上班", "公司"},
    "vehicle": {"drive", "drives", "driving", "car", "vehicle", "车"},
    "diet": {"vegetarian", "vegan", "pescatarian", "omnivore", "eat", "eating", "diet", "meat", "fish", "吃"},
    "age": {"old", "age", "aged", "turned", "turns", "birthday", "岁"},
    "name": {"name", "named", "called", "名字", "叫"},
    "schedule": {"schedule", "scheduled", "at", "every", "daily", "weekly"},
    "contact": {"phone", "number", "email", "address", "电话", "邮箱"},
}  # fmt: skip
_CHANGE_MARKERS = re.compile(
    r"\b(now|new|newly|moved|move|changed|change|switched|switch|swapped|replaced|sold|no longer|anymore|"
    r"instead|turned|became|become|started|stopped|quit|left|rebooked|rescheduled|postponed|pushed|cancell?ed|"
    r"delayed|brought forward|updated|upgraded|downgraded|relocated|transferred|promoted|renamed|"
    r"from now on|these days|nowadays|starting|as of|going forward)\b",
    re.I,
)
_CHANGE_MARKERS_ZH = ("搬到", "搬去", "搬了", "改成", "改为", "改到", "换成", "换到", "换了", "变成", "现在",
                      "不再", "已经", "推迟", "提前", "新的", "新")  # fmt: skip
_ADDITIVE = re.compile(
    r"\b(also|too|as well|another(?!\s+(?:"
    + "|".join(sorted(ANOTHER_STRETCH))
    + r")\b)|additionally|in addition|besides|plus(?!\s+(?:aucun|aucune|de|jamais|rien|personne|du|d)\b))\b",
    re.I,
)
_PEOPLE = {
    "sister", "brother", "mother", "mom", "mum", "father", "dad", "wife", "husband", "partner",
    "girlfriend", "boyfriend", "friend", "son", "daughter", "kid", "kids", "child", "children",
    "boss", "manager", "colleague", "coworker", "neighbor", "neighbour", "cousin", "aunt", "uncle",
    "grandma", "grandpa", "grandmother", "grandfather", "roommate", "he", "she", "they",
    "姐姐", "妹妹", "哥哥", "弟弟", "妈妈", "爸爸", "妻子", "丈夫", "朋友", "女儿", "儿子", "孩子", "老板", "同事",
}  # fmt: skip
_PERSON = re.compile(
    r"\b(?:(?:my|our|your|his|her|their)\s+(?:(?:new|old|former|current|ex|little|older|younger|big|best|"
    r"two|three|four|eldest|youngest)\s+)*({people})|(he|she|they))\b".format(
        people="|".join(
            sorted((p for p in _PEOPLE if p.isascii() and p not in ("he", "she", "they")), key=len, reverse=True)
        )
    )
)
"""A person a statement is about: a possessive before a person noun (``my sister``, ``my new
manager``; ``password manager`` is not one), or a third-person pronoun."""
_SENTENCE_START = re.compile(r"(?:^|[.!?。！？]\s+)([A-Z][\w'-]*)")
_NUMBER = re.compile(
    r"(?P<cur>[$€£¥])?\d[\d,]*(?:\.\d+)?(?P<sep>(?:[:/-]\d+)*)\s?(?P<unit>st|nd|rd|th|am|pm|%|percent|k\b|km|kg|lbs?|miles?|years?|yrs?|months?|weeks?|days?|hours?|minutes?|dollars?|euros?|usd|eur)?",
    re.I,
)
_W = linear_re.WORD[1:-1]  # the inside of the word class, to build classes with it
_EMAIL = linear_re.compile(rf"[{_W}.+-]+@[{_W}-]+(?:\.[{_W}-]+)+")
"""An e-mail address (RE2: Python's ``re`` rescans a run of ``[\\w.+-]`` from every start)."""
_CODE_RUN = re.compile(r"[\w-]+")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class _Span:
    """A match found without a regex (``_codes``): ``group(0)`` and ``span()`` as ``re.Match``."""

    text: str
    begin: int
    finish: int

    def group(self, _: int = 0) -> str:
        return self.text

    def span(self) -> tuple[int, int]:
        return self.begin, self.finish

    def start(self) -> int:
        return self.begin

    def end(self) -> int:
        return self.finish


def _codes(text: str) -> list[_Span]:
    """Words mixing letters and digits (``sunflower42``, ``4B``, ``Q3``, ``1Password``): a code
    or a name. Each maximal run of ``[\\w-]`` without its outer hyphens, when at least 2
    characters long with an ASCII letter and a digit: what ``\\b(?=[\\w-]*[A-Za-z])(?=[\\w-]*\\d)
    [\\w-]{2,}\\b`` finds, in one pass (that pattern rescans the run from every start)."""
    out = []
    for run in _CODE_RUN.finditer(text):
        word = run.group(0)
        core = word.strip("-")
        if len(core) >= 2 and _ASCII_LETTER.search(core) and _DIGIT.search(core):
            begin = run.start() + len(word) - len(word.lstrip("-"))
            out.append(_Span(core, begin, begin + len(core)))
    return out


_DATE = re.compile(
    rf"\b({_MONTHS})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b|\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS})\b", re.I
)
_NEGATED = re.compile(
    r"(?:\b(?:not|no longer|never|instead of|rather than|cancell?ed|quit|left|stopped|dropped|sold|gave up|"
    r"ended|finished|got rid of|replaced|traded(?: in)?|ditched|deleted|uninstalled|swapped|dumped)|n't)\s+(?:the\s+|a\s+|an\s+|my\s+|our\s+|with\s+|via\s+|through\s+)?"
    r"([\w'-]+(?:\s+(?!(?:and|or|but|to|so|then|because|with|for|in|on|at)\b)[\w'-]+)?)",
    re.I,
)
"""What a statement says is over: ``not docker push``, ``cancelled Planet Fitness``, ``don't
drink tea``."""
_VOCATIVE = re.compile(
    r"\b(?:hey|hi|hello|thanks|thank you|cheers|bye|congrats|congratulations|wow|yeah|yes|no|oh|sorry|"
    r"dear|good morning|good night)\s*,?\s+([A-Z][\w'-]*)(?=\s*[!,.?]|$)"
    r"|,\s*([A-Z][\w'-]*)\s*(?=[!?.]|$)",
    re.I,
)
"""A name the statement addresses rather than states: "Hey Gina!", "Thanks, Jon.", "..., Gina!"
(blanked before reading: the person spoken to is not a value of the statement)."""
MAX_SUPERSEDE_WORDS = 30
"""A statement longer than this (words) is several things said at once: it neither
supersedes nor is superseded wholesale (the pair stays compatible, both kept)."""
MAX_JUDGED_CHARS = 1_000
"""Longest statement (characters, as the rules would read it) the rules read
(``PairReading``). A longer one says many things at once (rule 4's words many times over):
it is not read, its normalised text alone says whether the pair is a duplicate or a
refinement, else it is compatible. Why a bound: reading costs ~1.5 ms a
kilobyte and curation judges each memory written against up to ``curation.candidates``
others, so a maximal ``POST /v1/memory`` batch of similar 4 KB memories kept its store
shard's writer busy ~70 s (README, "What a maximal write costs the writer"); every labelled pair and LoCoMo turn is
shorter than 450 characters."""
_HONORIFIC = re.compile(r"\b(Dr|Mr|Mrs|Ms|Mx|Prof|Rev|Sr|Jr|St)\.(?=\s+[A-Z])")
"""A title's period is not a sentence end: ``Dr. Patel`` reads as the name ``dr patel``."""
MAX_FROM_VALUE_CHARS = 200
"""Longest old value a ``from X to Y`` phrase is read with (characters of X): the phrase is
looked for in a bounded window after each ``from``, so reading it is linear in the text."""
_FROM_TO = re.compile(
    rf"\bfrom\s+(?:the\s+|a\s+|an\s+|my\s+)?(.{{1,{MAX_FROM_VALUE_CHARS}}}?)\s+(?:to|into|for)\s+", re.I
)
_ZH_FRAME_VALUE = re.compile(r"(?:住在|搬到了|搬到|搬去了|搬去|在)([\u4e00-\u9fff]{1,6}?)(?:工作|上班|住|了|。|，|,|$)")
_CAPITALISED = re.compile(r"\b([A-Z][\w'-]*(?:\s+(?:[A-Z][\w'-]*|\d+))*)")


@dataclass
class Statement:
    """What ``judge`` reads of one text (see the module docstring)."""

    text: str
    norm: str
    terms: set[str]
    values: dict[str, set[str]]  # kind → normalised values
    frames: set[str]
    people: set[str]
    change: bool
    additive: bool
    negated: set[str] = field(default_factory=set)
    from_values: set[str] = field(default_factory=set)
    persons: frozenset[str] | None = field(default=None, compare=False, repr=False)
    """The people read by ``_persons`` (set on the first reading: several rules ask)."""
    person_names: frozenset[str] | None = field(default=None, compare=False, repr=False)
    """The names read by ``_person_names`` (likewise)."""

    def all_values(self) -> set[str]:
        return {v for vs in self.values.values() for v in vs}


_S = linear_re.SPACE
_LEAD_IN_WORDS = (
    # en
    "remember|note|please note|keep in mind|don'?t forget|do not forget|fyi|for the record|just so you know|"
    "heads up|btw|by the way|for your information|bear in mind|just so you're aware|for your reference|"
    "for future reference|keep this in mind|"
    "let'?s (?:just )?say|"
    # es, fr, de, it, pt, nl
    "recuerda|recuerde|ten en cuenta|tenga en cuenta|para que (?:lo )?sepas|para tu informaci[óo]n|por cierto|"
    "rappelle-toi|souviens-toi|retiens|note bien|pour info|pour information|pour ton information|au fait|"
    "n'oublie pas|"
    "merk dir|merke dir|merken sie sich|merkt euch|denk daran|denke daran|zur info|zur information|nur damit du es wei[ßs]t|[üu]brigens|"
    "vergiss nicht|"
    "ricorda|ricordati|tieni presente|tieni a mente|per tua informazione|per info|a proposito|non dimenticare|"
    "lembre-se(?: de)?|lembra|lembre|tenha em mente|para constar|s[óo] (?:para|pra) voc[êe] saber|"
    "para sua informa[çc][ãa]o|"
    "ali[áa]s|n[ãa]o esque[çc]a|"
    # id
    "tolong (?:diingat|ingat|dicatat|catat)|ingat ya|ingat|sebagai informasi|asal kamu tahu|"
    "onthoud|ter info|ter informatie|vergeet niet|"
    # ru, pl, tr
    "запомни|запомните|имей в виду|имейте в виду|к сведению|к твоему сведению|к вашему сведению|для справки|"
    "кстати|на заметку|не забудь|"
    "zapami[ęe]taj|pami[ęe]taj|miej na uwadze|dla informacji|do wiadomo[śs]ci|dla (?:twojej|twej|pana|pani) "
    "(?:wiadomo[śs]ci|informacji)|przy okazji|nie zapomnij|"
    "unutma|hat[ıi]rla|bilgin olsun|ak[ıi]nda olsun|"
    # hi (Devanagari and Latin), ar
    "याद रखना|याद रखें|याद रखिए|याद रखो|ध्यान रखें|ध्यान रखना|ध्यान दें|वैसे|yaad rakhna|yaad rakho|"
    "تذكر|تذكّر|للعلم|بالمناسبة|لا تنس|لا تنسى"
)
"""Lead-ins in scripts that separate words: followed by a separator or a space."""
_LEAD_IN_CJK = (
    "请记住|请记得|記住|记住|請記住|請記得|记得|記得|请注意|請注意|备注|備註|顺便说一下|順便說一下|顺便说|順便說|"
    "提醒一下|告诉你|告訴你|"
    "覚えておいてください|覚えておいて|覚えといて|覚えてて|メモして|ちなみに|参考までに|"
    "念のため(?:に)?言っておくと|念のため(?:に)?言っておきますが|言っておくと|念のため|"
    "기억해 ?주세요|기억해 ?줘|기억해 ?둬|기억해|참고로|알아 ?둬|메모해 ?줘"
)
"""Lead-ins in Chinese, Japanese and Korean: the separator may be nothing ("请记住我对花生过敏")."""
_LEAD_IN_CONNECTOR = "that|this|que|qu'|che|dass|что|że|ki"
_LEAD_IN_CONNECTOR_AFTER_COMMA = "que|che|dass|что|że|ki"
"""The connectors a comma may stand before ("Запомни, что…", "Zapamiętaj, że…"); not English
"that"/"this", which after a comma belong to the fact ("FYI, this is my work email")."""
_LEAD_IN_WITH_MARK = "make a note(?: of (?:this|that))?|take note|save this|write this down|merken|bitte merken"
"""Lead-ins that are also requests' openings ("Write this down as a haiku", "Make a note of
everything we discussed"): one only before a colon, a comma or "that" ("Make a note that I'm
vegan")."""
_LEAD_IN_SEPARATOR = rf"(?:{_S}*[:,\-：，、،]{_S}*|{_S}+)"
_LEAD_IN = linear_re.compile(
    rf"^{_S}*(?:(?:(?:please|just|bitte|por favor|per favore|proszę|пожалуйста|s'il te pla[îi]t),?{_S}+)?"
    rf"(?:{_LEAD_IN_WORDS})(?:{_S}+(?:{_LEAD_IN_CONNECTOR})|{_S}*,{_S}*(?:{_LEAD_IN_CONNECTOR_AFTER_COMMA}))?"
    rf"{_LEAD_IN_SEPARATOR}"
    rf"|(?:(?:please|just|bitte),?{_S}+)?(?:{_LEAD_IN_WITH_MARK})(?:{_S}*[:,：，]{_S}*|{_S}+that{_S}+)"
    rf"|(?:{_LEAD_IN_CJK})(?:{_S}*[:,\-：，、]?{_S}*))+",
    linear_re.IGNORECASE,
)
"""RE2: the whitespace around the separator can be split many ways, which Python's ``re``
tries one by one. A Latin-script lead-in must end in a separator or a space ("Notebooks are
cheap" keeps its "Note")."""


def strip_lead_in(text: str) -> str:
    """``text`` without a leading "remember:"-style phrase ("Please remember that", "FYI,",
    "Note:", "请记住：", "覚えておいて、", "참고로,", "Recuerda que", "Запомни:"): words
    addressed to the assistant, not part of the fact. Extraction stores the fact without them
    and the judge compares facts without them."""
    return _LEAD_IN.sub("", text, count=1)


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[^\w\s$:/-]", " ", text)
    return " ".join(text.split())


_ORDINALS = {"first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"}
_UNIT_KIND = {
    "am": "time", "pm": "time", "%": "percent", "percent": "percent", "st": "ordinal", "nd": "ordinal",
    "rd": "ordinal", "th": "ordinal", "k": "money", "dollar": "money", "dollars": "money", "euro": "money",
    "euros": "money", "usd": "money", "eur": "money", "km": "distance", "mile": "distance", "miles": "distance",
    "kg": "weight", "lb": "weight", "lbs": "weight", "year": "duration", "years": "duration", "yr": "duration",
    "yrs": "duration", "month": "duration", "months": "duration", "week": "duration", "weeks": "duration",
    "day": "duration", "days": "duration", "hour": "duration", "hours": "duration", "minute": "duration",
    "minutes": "duration",
}  # fmt: skip


def _number_kind(m: re.Match[str]) -> str:
    """The role of a number, so only numbers of one role conflict: money, time, year, a code
    with separators (phone, version), ordinal, percent, a measure, or a plain count."""
    token = m.group(0).strip()
    if m.group("cur"):
        return "money"
    unit = (m.group("unit") or "").lower()
    if unit in _UNIT_KIND:
        return _UNIT_KIND[unit]
    if ":" in (m.group("sep") or ""):
        return "time"
    if m.group("sep"):
        return "code"
    digits = token.split()[0].replace(",", "")
    if re.fullmatch(r"(19|20)\d\d", digits):
        return "year"
    return "count"


def _num(token: str) -> str:
    t = token.lower().lstrip("$").replace(",", "")
    return re.sub(r"(st|nd|rd|th)$", "", t) if re.match(r"^\d+(st|nd|rd|th)$", t) else t


_ORDINAL_OR_MEASURE = re.compile(r"\d+(?:st|nd|rd|th|am|pm|k|km|kg|lbs?|%)", re.I)
_NUMBER_WORD = re.compile(r"\b(" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")\b", re.I)


def _drop_vocatives(text: str) -> str:
    """``text`` with the addressed names (``_VOCATIVE``) removed, the case of the rest kept:
    a vocative name is blanked, a case-insensitive greeting word must not capitalise a name."""

    def blank(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if not name[0].isupper():
            return m.group(0)  # "thanks, mate" — not a name
        return m.group(0).replace(name, "")

    return _VOCATIVE.sub(blank, text)


class _ValueReader:
    """The values of one normalised statement, read kind by kind (``Statement.values``:
    kind → values), each value's characters blanked from ``blank`` so that a later kind and
    the subject terms never read them again."""

    def __init__(self, text: str):
        self.text = text
        self.values: dict[str, set[str]] = {}
        self.blank = list(text)  # the text with every value blanked out: what the subject terms come from

    def add(self, kind: str, value: str, span: tuple[int, int] | None = None) -> None:
        self.values.setdefault(kind, set()).add(value.strip())
        if span is not None:
            for i in range(*span):
                self.blank[i] = " "

    def free(self, m: re.Match[str] | _Span) -> bool:
        """Whether no character of ``m`` is part of a value read already."""
        return all(self.blank[i] != " " or self.text[i] == " " for i in range(m.start(), m.end()))

    def dates_emails_codes(self) -> None:
        for m in _DATE.finditer(self.text):
            month = (m.group(1) or m.group(4)).lower()[:3]
            self.add("date", f"{month} {int(m.group(2) or m.group(3))}", m.span())
        for m in _EMAIL.finditer(self.text):
            if self.free(m):
                self.add("email", m.group(0).lower(), m.span())
        for code in _codes(self.text):
            if self.free(code) and not _ORDINAL_OR_MEASURE.fullmatch(code.group(0)):
                self.add("code", code.group(0).lower(), code.span())

    def names(self, other: str) -> None:
        """Capitalised runs as names, weekdays or months. A capitalised sentence start counts
        as a name only if ``other`` capitalises the word inside a sentence too."""
        text = self.text
        initial = {m.group(1) for m in _SENTENCE_START.finditer(text)}
        other_starts = {m.group(1) for m in _SENTENCE_START.finditer(other)}
        other_inner_caps = {w for w in re.findall(r"\b[A-Z][\w'-]*", other) if w not in other_starts}
        first_at: dict[str, int] = {}  # word → its first place in the text (one search per word)

        def first(word: str) -> int:
            if word not in first_at:
                first_at[word] = text.find(word)
            return first_at[word]

        for m in _CAPITALISED.finditer(text):
            if not self.free(m):
                continue
            parts = m.group(1).split()
            start = m.start()
            if parts[0] in initial and start == first(parts[0]) and parts[0] not in other_inner_caps:
                start += len(parts[0]) + 1
                parts = parts[1:]
            while parts and parts[0] in ("I", "I'm", "I've", "I'd", "I'll"):
                start += len(parts[0]) + 1
                parts = parts[1:]
            if parts:
                self._name(" ".join(parts).lower(), (start, m.end()))
        for m in re.finditer(r"\b\d+[A-Z][\w-]*", text):  # "1Password"
            if self.free(m):
                self.add("name", m.group(0).lower(), m.span())

    def _name(self, name: str, span: tuple[int, int]) -> None:
        if name.rstrip("s") in _WEEKDAYS:
            self.add("weekday", name.rstrip("s"), span)
        elif re.fullmatch(rf"(?:{_MONTHS})", name):
            self.add("month", name[:3], span)
        else:
            self.add("name", name, span)

    def numbers(self) -> None:
        text = self.text
        for m in _NUMBER.finditer(text):
            if self.free(m) and not (m.start() and text[m.start() - 1].isascii() and text[m.start() - 1].isalpha()):
                digits = text[m.start() : m.end()].split()[0] if m.group("unit") else m.group(0)
                self.add(f"number:{_number_kind(m)}", _num(digits.strip()), m.span())
        for m in _NUMBER_WORD.finditer(text):
            w = m.group(1).lower()
            self.add("number:ordinal" if w in _ORDINALS else "number:count", str(_NUMBER_WORDS[w]), m.span())

    def lexicon_values(self) -> None:
        for m in re.finditer(r"[\w'-]+", self.text):
            w = m.group(0).lower()
            for kind, lexicon in _LEXICON_VALUES.items():
                if w in lexicon:
                    self.add(kind, w, m.span())
        for m in _ZH_FRAME_VALUE.finditer(self.text):
            self.add("place", m.group(1), m.span(1))


def _prepared(text: str) -> str:
    """``text`` as the rules read it: whitespace runs as one space, a lead-in ("Remember:")
    and the names it addresses ("Hey Gina!") out, a title's period kept from ending a
    sentence."""
    return _HONORIFIC.sub(r"\1", _drop_vocatives(strip_lead_in(" ".join(text.split()))))


def read_statement(text: str, other: str = "") -> Statement:
    """Read ``text`` into a ``Statement``. ``other`` (the statement it is compared with) lets
    a sentence-initial capitalised word count as a name when ``other`` capitalises it too.

    Linear in the length of both texts: whitespace runs are read as one space (so no
    pattern can split a run many ways), patterns that would rescan a run from every start
    are RE2 (``_EMAIL``, ``_LEAD_IN``) or one pass (``_codes``), ``from X to Y`` is read in a
    bounded window (``MAX_FROM_VALUE_CHARS``), at most ``MAX_PHRASES`` negated and ``from``
    phrases are kept (each is compared with the other statement's whole text)."""
    text, other = _prepared(text), _prepared(other)
    norm = _norm(text)
    reader = _ValueReader(text)
    reader.dates_emails_codes()
    reader.names(other)
    reader.numbers()
    reader.lexicon_values()
    terms = set(tokenize("".join(reader.blank)))
    words = re.findall(r"[\w'-]+", norm)
    raw_words = set(words) | {c for c in text if "\u4e00" <= c <= "\u9fff"}
    frames = {
        name for name, vocab in _FRAMES.items() if raw_words & vocab or any(v in text for v in vocab if not v.isascii())
    }
    people = {m.group(1) or m.group(2) for m in _PERSON.finditer(norm)} | {
        p for p in _PEOPLE if not p.isascii() and p in text
    }
    change = bool(_CHANGE_MARKERS.search(text)) or any(m in text for m in _CHANGE_MARKERS_ZH)
    additive = bool(_ADDITIVE.search(text)) or additive_cjk(text)
    negated = _first_phrases([*_NEGATED.finditer(text), *_GONE.finditer(text)])
    from_values = _first_phrases(_FROM_TO.finditer(text))
    return Statement(text, norm, terms, reader.values, frames, people, change, additive, negated, from_values)


MAX_PHRASES = 16
"""Most negated phrases (``not docker push``) and ``from X`` values read from one statement:
each is looked for in the other statement's text, so their number is bounded (a statement
saying more is long: it supersedes nothing, rule 4)."""


_GONE = linear_re.compile(
    rf"([\p{{L}}\p{{N}}][\p{{L}}\p{{N}}'’-]*){_S}+(?:(?:finally|officially|just|now){_S}+)?"
    rf"(?:(?:is|are|was|were){_S}+)?(?:gone|dead|history|behind{_S}+me|died){linear_re.END}",
    linear_re.IGNORECASE,
)
"""What a statement says is over, named before its verb: "Slack is gone", "the Corolla
finally died", "Hackney is behind me" (the word before, as ``_NEGATED``'s phrases)."""


def _first_phrases(matches: Iterable[Any]) -> set[str]:
    """The first ``MAX_PHRASES`` distinct normalised ``group(1)`` of ``matches``."""
    out: set[str] = set()
    for m in matches:
        out.add(_norm(m.group(1)))
        if len(out) >= MAX_PHRASES:
            break
    return out


# frames too generic to make two statements about the same subject on their own
_WEAK_FRAMES = {"schedule", "contact"}


def _same_subject(old: Statement, new: Statement) -> bool:
    if old.terms & new.terms:
        return True
    if any(any(_names_value(p, v) for v in old.all_values()) for p in new.negated):
        return True  # "instead of Delta" where the old statement's value is Delta
    if (old.frames & new.frames) - _WEAK_FRAMES:
        return True
    old_values = old.all_values()
    return any(any(v in f or f in v for v in old_values) for f in new.from_values if f)


def _names_value(phrase: str, value: str) -> bool:
    """Whether a negated ``phrase`` names ``value``: equal, the value one of its words, or its
    words all in the value ("sold the Civic" for ``honda civic``)."""
    words = phrase.split()
    return bool(words) and (value == phrase or value in words or set(words) <= set(value.split()))


def _narrows(value: str, other: str) -> bool:
    """Whether ``other`` names a part of ``value``'s place or name: it begins with ``value``
    and goes on (杭州 → 杭州西湖区, ``hamburg`` → ``hamburg-altona``, ``san diego`` →
    ``san diego county``), at a word's edge in scripts with spaces. ``york`` does not narrow
    to ``new york``."""
    if len(other) <= len(value) or not other.startswith(value):
        return False
    return bool(_CJK_CHAR.match(value[-1:])) or other[len(value)] in " -,/"


_NARROWING_KINDS = frozenset({"place", "name"})


def _value_conflict(old: Statement, new: Statement) -> bool:
    for kind, old_values in old.values.items():
        new_values = new.values.get(kind, set())
        gone = old_values - new_values
        if kind in _NARROWING_KINDS:  # "杭州" / "杭州西湖区": the same place, said more precisely
            gone = {v for v in gone if not any(_narrows(v, nv) for nv in new_values)}
        if gone and new_values - old_values:
            return True  # an old value of this kind replaced by a new one of the same kind
    old_words = {w for v in old.all_values() for w in v.split()} | set(old.norm.split())
    for phrase in new.negated:
        if phrase and phrase in old.norm and phrase.split()[0] not in {"a", "the"}:
            return True  # "not docker push" where the old statement says "docker push"
        if phrase and set(phrase.split()) <= old_words and phrase in old.norm:
            return True
    old_values = old.all_values()
    if any(any(v in f or f in v for v in old_values) for f in new.from_values if f):
        return True  # "switched from Bitwarden to 1Password"
    if new.change and (old_values - new.all_values()) and new.all_values():
        return True
    return False


_ENGLISH = frozenset(
    "i i'm my me we our you your is are was were am be the a an to of in on at for and it this that have has".split()
)
_FRAME_TERMS = frozenset(t for vocab in _FRAMES.values() for w in vocab if w.isascii() for t in tokenize(w))
_WEAK_TERMS = frozenset({"go", "get", "use", "make", "take", "have", "do"}) | frozenset(
    tokenize("favourite favorite preferred usual regular main current best")
)
"""Verbs and modifiers that name no subject on their own: "my favourite band" and "my
favourite movie" share only ``favourite``, two different things."""
_MARKER_TERMS = frozenset(
    tokenize("now new moved changed switched sold instead turned became started stopped quit left rebooked "
             "rescheduled postponed pushed delayed updated upgraded relocated cancelled renamed")
)  # fmt: skip


def _read_language(s: Statement) -> bool:
    """Whether the rules can read ``s``: English (it has an English function word) or
    Chinese. Other languages never get a supersession from these rules."""
    return bool(set(s.norm.split()) & _ENGLISH) or bool(re.search(r"[\u4e00-\u9fff]", s.text))


def _different_things(old: Statement, new: Statement, changed: bool) -> bool:
    """Each statement names its own thing: they share only a predicate ("is called", "lives
    in": "my dog is called Max" / "my cat is called Luna"), or, without a change marker, an
    attribute of two different things ("my locker code" / "my bike lock code"). ``changed``:
    ``new`` has a change marker or cue."""
    shared = old.terms & new.terms
    own_old = old.terms - shared - _FRAME_TERMS - _MARKER_TERMS - _WEAK_TERMS
    own_new = new.terms - shared - _FRAME_TERMS - _MARKER_TERMS - _WEAK_TERMS
    if not (shared and own_old and own_new):
        return False
    return not (shared - _FRAME_TERMS - _WEAK_TERMS) or not changed


def _negates(old: Statement, new: Statement) -> bool:
    """``new`` says something of ``old`` is over: ``not docker push`` where ``old`` says
    ``docker push``, ``cancelled Planet Fitness``."""
    if any(phrase and phrase in old.norm for phrase in new.negated):
        return True
    # "I don't drink tea anymore" after "I prefer tea": with a change marker, the negated
    # phrase's object (its last word) being a subject term of the old statement is enough
    return new.change and any(
        phrase and (obj := set(tokenize(phrase.split()[-1]))) and obj <= old.terms - _WEAK_TERMS
        for phrase in new.negated
    )


class PairReading:
    """One reading of a pair of statements of the same user, ``old_text`` then ``new_text``,
    for every question curation asks of it: ``verdict()`` (``judge``), ``on_purpose()``
    (``compatible_on_purpose``) and ``same_values()`` (``same_values``). Each statement is
    read once (``read_statement``, ``read_cues``), whatever is asked and in which order; the
    verdict is kept, the other two answers are derived from the readings at each call.
    Built by ``read_pair``.

    A pair with a statement longer than ``MAX_JUDGED_CHARS`` as the rules would read it
    (``_prepared``: whitespace runs, a lead-in, the names it addresses out) is not read
    (``long``): rules 1 and 2 are taken on its normalised text (``Statement.norm``: case and
    punctuation aside) — the same text is a ``duplicate``, the old text within the new one
    (a note with a paragraph added, at least half of it the old one) ``refines`` it, the new
    within the old is a ``duplicate`` —, and anything else is ``compatible`` on purpose
    (``"long"``, rule 4), naming the same values only when the two normalise alike. Pure;
    one caller at a time."""

    def __init__(self, old_text: str, new_text: str):
        self.long = False
        self._verdict: Verdict | None = None
        if max(len(old_text), len(new_text)) > MAX_JUDGED_CHARS:  # the common case skips this
            (old_chars, self._old_norm), (new_chars, self._new_norm) = _long_form(old_text), _long_form(new_text)
            self.long = max(old_chars, new_chars) > MAX_JUDGED_CHARS
        if self.long:
            return
        self.old = read_statement(old_text, new_text)
        self.new = read_statement(new_text, old_text)
        self.old_cues, self.new_cues = read_cues(self.old.text), read_cues(self.new.text)

    def verdict(self) -> Verdict:
        """``judge(old_text, new_text)``."""
        if self._verdict is None:
            self._verdict = (
                self._long_verdict() if self.long else _decide(self.old, self.new, self.old_cues, self.new_cues)
            )
        return self._verdict

    def _long_verdict(self) -> Verdict:
        old, new = self._old_norm, self._new_norm
        if old == new:
            return Verdict.DUPLICATE
        if old and old in new and 2 * len(old) >= len(new):
            return Verdict.REFINES
        if new and new in old:
            return Verdict.DUPLICATE  # the new one says less: the old one already holds it
        return Verdict.COMPATIBLE

    def on_purpose(self) -> str | None:
        """``compatible_on_purpose(old_text, new_text)``."""
        if self.long:
            return "long" if self.verdict() == Verdict.COMPATIBLE else None
        return _on_purpose(self.old, self.new, self.old_cues, self.new_cues)

    def same_values(self) -> bool:
        """``same_values(old_text, new_text)``."""
        if self.long:
            return self._old_norm == self._new_norm
        return self.old.all_values() == self.new.all_values()


LONG_FORM_CACHE_BYTES = 16 * 1024 * 1024
"""Weight bound of ``_long_form``'s cache of recent texts (each entry weighs the text and its
normalised form as Python holds them, plus ``_LONG_FORM_ENTRY_BYTES``). A memory written is
judged against each of its candidates, and they against later ones: a maximal ``POST
/v1/memory`` batch of distinct 3.9 KB notes (~2.3 MB of entries) is judged within itself with
each note read once. With the 32 entries kept before, such a batch read its notes again ~2,000
times (0.4 s of the store shard's GIL per batch, py-spy ``--gil``, 2026-12-07)."""

_LONG_FORM_ENTRY_BYTES = 300
_long_forms: cachetools.LRUCache[str, tuple[int, str, int]] = cachetools.LRUCache(
    LONG_FORM_CACHE_BYTES, getsizeof=lambda held: held[2]
)
_long_forms_lock = threading.Lock()


def _long_form(text: str) -> tuple[int, str]:
    """The length of ``_prepared(text)`` and its normalised text (``Statement.norm``), kept for
    recent texts up to ``LONG_FORM_CACHE_BYTES`` (thread-safe)."""
    with _long_forms_lock:
        held = _long_forms.get(text)
    if held is not None:
        return held[0], held[1]
    prepared = _prepared(text)
    chars, norm = len(prepared), _norm(prepared)
    weight = sys.getsizeof(text) + sys.getsizeof(norm) + _LONG_FORM_ENTRY_BYTES
    with contextlib.suppress(ValueError), _long_forms_lock:  # heavier than the whole budget: not kept
        _long_forms[text] = (chars, norm, weight)
    return chars, norm


def read_pair(old_text: str, new_text: str) -> PairReading:
    """``PairReading`` of ``new_text`` written after ``old_text``: linear in both texts, and
    at most ``2 × MAX_JUDGED_CHARS`` characters read by the rules whatever their length
    (characters as written: NFKC may expand some, such as U+FDFA, up to 18-fold in the
    normalised text the rules also read)."""
    return PairReading(old_text, new_text)


def judge(old_text: str, new_text: str) -> Verdict:
    """The ``Verdict`` for ``new_text`` written after ``old_text`` by the same user (rules of
    the module docstring). Pure and deterministic."""
    return read_pair(old_text, new_text).verdict()


def judged(old_text: str, new_text: str, *, why: bool = False) -> tuple[Verdict, str | None]:
    """``judge(old_text, new_text)`` and, when ``why`` and the verdict is ``compatible``,
    ``compatible_on_purpose`` of the pair (else None), from one reading of the two texts."""
    pair = read_pair(old_text, new_text)
    verdict = pair.verdict()
    return verdict, pair.on_purpose() if why and verdict == Verdict.COMPATIBLE else None


def _decide(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> Verdict:
    """The rules of ``judge`` on two read statements."""
    if old.norm == new.norm or (old.terms == new.terms and old.all_values() == new.all_values() and old.terms):
        return Verdict.DUPLICATE
    readable = _read_language(old) and _read_language(new)
    negates = readable and _negates(old, new)
    how = _moved_on(old, new, old_cues, new_cues)
    moved_on = how is not None
    over = how in ("ends", "done")  # the old state is over by itself, whatever else is said
    if not new.change and not negates and not moved_on and old.people == new.people:
        ov, nv = old.all_values(), new.all_values()
        if old.terms <= new.terms and ov <= nv and old.terms:
            grows = new.terms - old.terms or nv - ov
            if not grows:
                return Verdict.DUPLICATE
            if len(old.terms) / len(new.terms) >= 0.5:
                return Verdict.REFINES
        if new.terms <= old.terms and nv <= ov and new.terms:
            return Verdict.DUPLICATE  # the new one says less: the old one already holds it
    if _unasserted(old, new, old_cues):
        return Verdict.COMPATIBLE  # "if I ever got a remote job I'd move to Vermont"; "should I move?"
    if _one_off(old, new):
        return Verdict.COMPATIBLE  # "standup every day" / "tomorrow's standup is cancelled"
    if _status_changed(old, new, old_cues, new_cues) or _born_after_expecting(old, new, old_cues, new_cues):
        return (
            Verdict.SUPERSEDES
        )  # "Ich bin verlobt." / "Wir haben im Mai geheiratet."; "I'm pregnant" / "she was born"
    if not readable:
        return Verdict.SUPERSEDES if moved_on else Verdict.COMPATIBLE
    if new.additive and not new.change:
        return Verdict.COMPATIBLE
    if _someone_else(old, new, old_cues, new_cues) and not moved_on:
        return Verdict.COMPATIBLE  # about someone else: "my sister lives in Boston" vs "I moved to Paris"
    if _different_things(old, new, new.change or new_cues.shifts) and not over:
        return Verdict.COMPATIBLE
    if max(len(old.norm.split()), len(new.norm.split())) > MAX_SUPERSEDE_WORDS:
        return Verdict.COMPATIBLE  # several things said at once: never replaced wholesale
    if _two_settings(old, new, old_cues, new_cues):
        return Verdict.COMPATIBLE  # "a Mac at work" / "Windows at home": two places, two habits
    if new_cues.additive and not old_cues.additive:
        return Verdict.COMPATIBLE  # "我老婆现在在上海工作" after "我在北京工作"; "now … as well"
    if _over_already(old, new) or _tells_the_past(old, new, old_cues, new_cues):
        return Verdict.COMPATIBLE  # "my first job was at a bakery" / "I work in insurance now", and back
    if moved_on:
        return Verdict.SUPERSEDES
    if not negates and (_PAST_TIME.search(old.text) or _another_occasion(old, new)):
        return Verdict.COMPATIBLE  # a past event, or another dated occasion: both stay true
    if _same_subject(old, new) and (negates or _value_conflict(old, new)):
        return Verdict.SUPERSEDES
    return Verdict.COMPATIBLE


_PERIODS = "week|weekend|month|year|summer|winter|spring|autumn|fall|night|term|semester"
_PAST_TIME = linear_re.compile(
    rf"{linear_re.START}(?:last{_S}+(?:{_PERIODS})|ago|yesterday|when{_S}+i{_S}+was|"
    r"el año pasado|l'année dernière|l'an dernier|letztes jahr|letzten sommer|letzten monat)"
    rf"{linear_re.END}|去年|上个月|昨年|先月",
    linear_re.IGNORECASE,
)
"""A statement about a finished past time ("I spent last summer in Portugal"): a new value
said later is another time, not a correction (only an ending or change cue supersedes it)."""
_TIME_KINDS = frozenset({"date", "month", "weekday", "number:year"})
_FORMER_THINGS = (
    "job|jobs|car|house|flat|apartment|home|place|boss|manager|school|company|employer|phone|"
    "bike|partner|girlfriend|boyfriend|husband|wife|dog|cat|pet|team|band|language"
)
_FORMER = linear_re.compile(
    rf"{linear_re.START}(?:used{_S}+to|"
    rf"my{_S}+(?:first|old|former|previous|ex){_S}+(?:{_FORMER_THINGS}){_S}+(?:was|were)|"
    rf"as{_S}+a{_S}+(?:kid|child|teenager|teen)|growing{_S}+up|grew{_S}+up|crecí|me{_S}+crié|j'ai{_S}+grandi|"
    rf"aufgewachsen|sono{_S}+cresciut[oa]|cresci|"
    rf"when{_S}+i{_S}+was{_S}+(?:a|little|young|younger|{linear_re.DIGIT}+)|"
    rf"solía|solia|de{_S}+(?:niño|niña|pequeño|pequeña|joven)|cuando{_S}+era{_S}+(?:niño|niña|pequeño|pequeña|joven)|"
    rf"mi{_S}+(?:primer|antiguo){_S}+(?:trabajo|empleo|coche|piso|jefe|novio){_S}+fue|"
    rf"quand{_S}+j'étais{_S}+(?:petit|petite|enfant|jeune|étudiant|étudiante)|autrefois|"
    rf"mon{_S}+(?:premier|ancien){_S}+(?:travail|emploi|job|appartement|patron|copain){_S}+(?:était|a{_S}+été)|"
    rf"als{_S}+kind|mein{_S}+(?:erster|alter){_S}+(?:job|wagen|chef|freund){_S}+war)"
    rf"{linear_re.END}|^{_S}*früher{linear_re.END}|früher{_S}*,"
    rf"|小时候|小時候|(?:^|[，,。；;！!？?]|{_S}|我|我们|咱们)(?:以前|从前)|子供の頃|子どもの頃|昔は|第一份工作是|最初の仕事は"
    rf"|(?:^|我|我们)在[^，,。！!？?]{{1,12}}长大|で育(?:ち|った)",
    linear_re.IGNORECASE,
)
"""A statement of what is already over when said ("I used to…", "my first job was…", "as a
kid…", "I grew up in…", "de niño…", "Früher, …", 我以前…, 我在…长大, 小时候, 子供の頃): nothing said later can make it
untrue. "Former" things are named (``_FORMER_THINGS``: "my first meeting was at 9" is a
daily habit, not a past); "früher" only opens a sentence or a clause ("ich stehe früher auf"
is "earlier"); 以前 only after a clause start or a pronoun ("十点以前" is "before ten")."""
_ACCUSTOMED = linear_re.compile(
    rf"(?:{linear_re.START}(?:am|is|are|be|been|being|get|gets|got|getting|was|were)|['’](?:m|s|re)){_S}+used{_S}+to"
    rf"{linear_re.END}",
    linear_re.IGNORECASE,
)
""""I'm used to waking at 6", "a tool that is used to edit": "used to" as accustomed or as a
passive, not as "formerly"."""
_CORRECTION = linear_re.compile(
    rf"{linear_re.START}(?:never|actually|in{_S}+fact|sorry|nunca|jamás|en{_S}+realidad|jamais|en{_S}+fait|"
    rf"nie|eigentlich|tatsächlich){linear_re.END}|从来没|从没|其实|一度も|実は",
    linear_re.IGNORECASE,
)
"""A new statement that corrects what the old one said ("Actually I never lived in Leeds")."""


_PRESENT_TOO = linear_re.compile(
    rf"{linear_re.START}(?:still|todavía|aún|toujours|encore|noch|ancora|ainda|"
    rf"(?:where|donde|où|wo|dove|onde){_S}+(?:i{_S}+|je{_S}+|j['’]|ich{_S}+|yo{_S}+|io{_S}+|eu{_S}+)?"
    rf"(?:grew|crecí|me{_S}+crié|ai{_S}+grandi|sono{_S}+cresciut|cresci|bin{_S}+aufgewachsen|aufgewachsen)|"
    rf"grew{_S}+up{_S}+in{_S}*(?:[.!?,;]|$)){linear_re.END}|还|现在|今も|今でも|まだ",
    linear_re.IGNORECASE,
)
"""What is over said beside a present that goes on: "still" ("I grew up in Leeds and still live
there", 现在还住在成都, 今も), or the past only as a relative clause ("the town I grew up in",
"where I grew up", "donde crecí")."""


def _over_already(old: Statement, new: Statement) -> bool:
    """``old`` says what is already over (``_FORMER``, not "used to" as accustomed:
    ``_ACCUSTOMED``) and ``new`` does not, nor corrects it (``_CORRECTION``: "actually",
    "never"): a later value is the present, not a correction ("I used to live in Leeds" /
    "I live in York now"). Both saying it (two accounts of one past) is left to the other
    rules."""
    if not _FORMER.search(old.text) or _FORMER.search(new.text) or _CORRECTION.search(new.text):
        return False
    if _PRESENT_TOO.search(old.text):
        return False  # "I live in the town I grew up in": the present is what a move ends
    return not (_ACCUSTOMED.search(old.text) and not _FORMER.search(_ACCUSTOMED.sub(" ", old.text)))


def _tells_the_past(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> bool:
    """``new`` tells what was already over (``_FORMER``: "I used to be a barista before I got
    into tech"), ``old`` does not, and the two share no value and no content term: a past
    beside the present, not the present ended ("I work as a software engineer" stays
    true). "I used to live in Leeds" after "I live in Leeds", or "I used to smoke" after "I
    smoke", share what ends, and a change said beside the past ("I grew up in Cork and moved
    back there") is a change: the other rules read them."""
    if not _FORMER.search(new.text) or _FORMER.search(old.text) or _CORRECTION.search(new.text):
        return False
    if _ACCUSTOMED.search(new.text) and not _FORMER.search(_ACCUSTOMED.sub(" ", new.text)):
        return False
    if new.change or new_cues.shifts or _PRESENT_TOO.search(new.text):
        return False  # "I grew up in Cork and moved back there", "…, now I'm in real estate"
    shared = (old_cues.terms & new_cues.terms | _compound_parts(old_cues.words, new_cues.words)) - _WEAK_TERMS
    return not shared and not old.all_values() & new.all_values()


_STATUS_PHRASES = {
    "single": rf"single|soltero|soltera|célibataire|ledig|not{_S}+seeing{_S}+anyone",
    "dating": rf"dating|seeing{_S}+someone|in{_S}+a{_S}+relationship|(?:have|got){_S}+a{_S}+(?:boyfriend|girlfriend)|"
    rf"en{_S}+couple|en{_S}+pareja|tengo{_S}+(?:novio|novia)|in{_S}+einer{_S}+beziehung|vergeben",
    "engaged": rf"engaged|fiancé|fiancée|fiancés|fiancée?s|prometido|prometida|comprometido|comprometida|"
    rf"nos{_S}+comprometimos|verlobt",
    "married": rf"married|casado|casada|casados|nos{_S}+casamos|marié|mariée|mariés|verheiratet|geheiratet",
    "apart": rf"divorced|separated|broke{_S}+up|split{_S}+up|divorciado|divorciada|divorciados|nos{_S}+divorciamos|"
    rf"nos{_S}+separamos|separados|divorcé|divorcée|divorcés|séparés|séparées|geschieden|getrennt",
    "widowed": r"widowed|widow|widower|viudo|viuda|veuf|veuve|verwitwet",
}
_STATUS_CJK = {
    "single": ("单身", "独身"),
    "dating": ("谈恋爱", "有男朋友", "有女朋友", "付き合って", "彼氏ができ", "彼女ができ"),
    "engaged": ("订婚", "婚約"),
    "married": ("结婚", "领证", "已婚", "結婚"),
    "apart": ("离婚", "分手", "離婚", "別れ"),
}
_STATUS = {
    name: linear_re.compile(rf"{linear_re.START}(?:{phrases}){linear_re.END}", linear_re.IGNORECASE)
    for name, phrases in _STATUS_PHRASES.items()
}
_STATUS_NEGATION = linear_re.compile(
    rf"{linear_re.START}(?:not|never|no|nunca|pas|plus|jamais|nicht|nie|kein|keine)"
    rf"{linear_re.END}|n't|n’t|不|没|ない|ません",
    linear_re.IGNORECASE,
)
"""A negation anywhere in a statement: its relationship status is not read ("I'm not married
yet" says no status)."""


def relationship_status(text: str) -> str | None:
    """The one relationship status ``text`` states of its speaker (``single``, ``dating``,
    ``engaged``, ``married``, ``apart``, ``widowed``), in English, Spanish, French, German,
    Chinese or Japanese; None when it states none, several, or holds a negation. Linear in
    the text (RE2 and substring tests)."""
    if _STATUS_NEGATION.search(text):
        return None
    found = {name for name, pattern in _STATUS.items() if pattern.search(text)}
    found |= {name for name, words in _STATUS_CJK.items() if any(w in text for w in words)}
    return found.pop() if len(found) == 1 else None


def _status_changed(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> bool:
    """Both statements state the speaker's relationship status (``relationship_status``) and
    the statuses differ ("single" / "in a relationship", "verlobt" / "geheiratet", 订婚 /
    领证结婚), about the same people (a partner aside), nothing added, nothing already over or
    passing: the new status replaces the old one."""
    if (
        _someone_else(old, new, old_cues, new_cues)
        or (new_cues.additive and not old_cues.additive)
        or _over_already(old, new)
    ):
        return False
    if new_cues.transient or _PAST_TIME.search(old.text):
        return False
    before, after = relationship_status(old.text), relationship_status(new.text)
    return before is not None and after is not None and before != after


_EXPECTING = linear_re.compile(
    rf"{linear_re.START}(?:pregnant|pregnancy|expecting{_S}+(?:a{_S}+|our{_S}+|my{_S}+)?"
    rf"(?:baby|child|first|second|third|twins|boy|girl|son|daughter)|trying{_S}+for{_S}+a{_S}+baby|"
    rf"embarazada|esperamos{_S}+(?:un|una){_S}+(?:bebé|bebe|hijo|hija|niño|niña)|enceinte|"
    rf"attend(?:ons)?{_S}+un{_S}+(?:bébé|enfant)|schwanger|erwarten{_S}+(?:ein|unser){_S}+(?:baby|kind)|"
    rf"incinta|grávida){linear_re.END}|怀孕|备孕|怀了|妊娠|身ごも|おめでた",
    linear_re.IGNORECASE,
)
"""A pregnancy (or trying for one) stated: the state a birth ends."""
_BORN = linear_re.compile(
    rf"{linear_re.START}(?:born|gave{_S}+birth|delivered|nació|nacido|nacida|dio{_S}+a{_S}+luz|né|née|nés|"
    rf"accouché|geboren|zur{_S}+welt|entbunden|nato|nata|nasceu)"
    rf"{linear_re.END}|出生|生了|生下|满月|生まれ|出産|産まれ",
    linear_re.IGNORECASE,
)
_ARRIVED = linear_re.compile(
    rf"{linear_re.START}(?:arrived|is{_S}+here|llegó|est{_S}+arrivée?|ist{_S}+da|kam)"
    rf"{linear_re.END}|来了|到来",
    linear_re.IGNORECASE,
)
"""A birth said as an arrival ("our daughter Maya arrived"), read only of the couple's baby (``_OURS``)."""
_SON_OR_DAUGHTER = frozenset(
    "son daughter hijo hija fils fille sohn tochter figlio figlia filho filha 女儿 儿子 宝宝 娘 息子 長男 長女 次男 次女 "
    "赤ちゃん".split()
)
_NEWBORN = frozenset("baby twins newborn bebé bebe bébé jumeaux jumelles zwillinge 双子".split())
_PARENTS_AND_BABY = (
    RELATIONSHIP_NOUNS | _SON_OR_DAUGHTER | frozenset("kid kids child children hijos enfants kinder 孩子".split())
)
"""The people a pregnancy and a birth are about: the partner and the child."""


_YEAR = linear_re.compile(r"(?:^|[^0-9])(?:19|20)[0-9][0-9](?:[^0-9]|$)")
_SOMEONES = linear_re.compile(
    rf"[\p{{L}}]+(?:['’]s|s['’]){_S}+(?:baby|babies|son|daughter|child|twins|kid)", linear_re.IGNORECASE
)
_CJK_WORD = {w for w in _SON_OR_DAUGHTER | _NEWBORN if any("\u3040" <= c <= "\u9fff" for c in w)}
_OURS = linear_re.compile(
    rf"{linear_re.START}(?:our|my|nuestro|nuestra|mi|notre|mon|ma|unser|unsere|unseren|nostro|nostra|mio|mia|"
    rf"nosso|nossa|meu|minha){_S}+(?:[\p{{L}}]+{_S}+)?"
    rf"(?:{'|'.join(sorted((_SON_OR_DAUGHTER | _NEWBORN) - _CJK_WORD))}){linear_re.END}|{'|'.join(sorted(_CJK_WORD))}",
    linear_re.IGNORECASE,
)
"""The couple's own baby ("our son", "mi hija", "notre fille", "unser Sohn", 宝宝): "the baby
next door" or "a baby on our street" is not."""


def _born_after_expecting(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> bool:
    """``old`` states a pregnancy (``_EXPECTING``: "pregnant", "expecting a baby / our
    first", not "expecting guests") of the speaker or their partner (no other person in it)
    and ``new`` a baby's birth or arrival (``_BORN`` or ``_ARRIVED``, of the couple's own baby:
    ``_OURS``) with
    no negation, no year (not a birth long ago), nobody's but the couple's (the partner and
    the child aside; not "my daughter's baby"): the pregnancy is over ("I'm pregnant with our first" / "Our daughter was born on Tuesday", "我老婆怀孕六个月了"
    / "宝宝上周出生了"). Not "my sister is pregnant" / "my niece was born"."""
    if not _EXPECTING.search(old.text) or _EXPECTING.search(new.text) or _STATUS_NEGATION.search(new.text):
        return False
    if not ((_BORN.search(new.text) or _ARRIVED.search(new.text)) and _OURS.search(new.text)):
        return False  # a baby's: "I was born in Leeds", "my niece was born" end no pregnancy
    if _YEAR.search(new.text) or _SOMEONES.search(new.text):
        return False  # a birth years ago ("our son was born in 2019"), someone's baby ("my daughter's baby")
    old_people = (set(old.people) | set(old_cues.people)) - PRONOUNS
    new_people = (set(new.people) | set(new_cues.people)) - PRONOUNS
    return not old_people - RELATIONSHIP_NOUNS and not new_people - _PARENTS_AND_BABY


def _another_occasion(old: Statement, new: Statement) -> bool:
    """Both statements are dated and differ in their time and in another value, without a
    change marker: two occasions ("a trip to Japan in April" / "a trip to Scotland in
    August"), not one moved."""
    if new.change:
        return False
    kinds = old.values.keys() & new.values.keys()
    time_differs = any(old.values[k] != new.values[k] for k in kinds & _TIME_KINDS)
    other_differs = any(old.values[k] != new.values[k] for k in kinds - _TIME_KINDS)
    return time_differs and other_differs


MAX_MOVED_ON_CHARS = 300
"""Longest statement (characters) ``_moved_on`` reads: a longer one says several things
(``MAX_SUPERSEDE_WORDS``), and the compound test below is pairwise in the terms."""
MIN_COMPOUND_PART = 4
"""Shortest term (characters) read as part of a compound of the other statement
(``türcode`` holds ``code``, ``arzttermin`` holds ``termin``)."""


def _compound_parts(old: frozenset[str], new: frozenset[str]) -> set[str]:
    """Words of one statement that are part of a compound word of the other (German, Dutch:
    ``türcode`` holds ``code``, ``arzttermin`` holds ``termin``), as terms. Called with at
    most ``MAX_MOVED_ON_CHARS`` characters a side: the pairwise test is bounded."""
    parts = set()
    for a in old:
        for b in new:
            short, long_ = (a, b) if len(a) <= len(b) else (b, a)
            if short != long_ and len(short) >= MIN_COMPOUND_PART and short in long_:
                parts.update(tokenize(short))
    return parts


_CJK_CHAR = re.compile(r"[\u3040-\u9fff]")
_OPEN_KINDS = frozenset({"name", "number:count", "code"})
"""Value kinds that name no slot on their own (any name, any count): two statements with a
weight each are about one weight; two with a name each may be about two things."""


_IMPERSONAL_THEY = linear_re.compile(
    rf"{linear_re.START}(?:they|ellos){_S}+(?:ve{_S}+|have{_S}+|had{_S}+)?(?:[\p{{L}}]+ly{_S}+)?[\p{{L}}]+{_S}+(?:me|us)"
    rf"{linear_re.END}|{linear_re.START}they{_S}+(?:ve{_S}+|have{_S}+|had{_S}+)?(?:postponed|rescheduled|cancell?ed|"
    rf"moved|pushed|delayed|changed|bumped|shifted|brought{_S}+forward){_S}+(?:the|our|my){linear_re.END}|{linear_re.START}ils{_S}+(?:m|nous)(?:['’]|{_S})|{linear_re.START}sie{_S}+haben{_S}+(?:mich|uns)"
    rf"{linear_re.END}",
    linear_re.IGNORECASE,
)
"""An impersonal "they" acting on the speaker, the speaker the object of its verb ("they hired
me", "they took me on", "they finally moved me onto days", "ils m'ont embauchée"), or
rescheduling the speaker's thing ("they postponed the wedding", "they moved our meeting"):
an employer, an office or organisers, nobody the statement is about. "They moved to Denver, near my
office", "they moved near us" and "they eat meat now, it drives me crazy" are about
someone."""
_NOT_A_PRONOUN = {
    "he": linear_re.compile(
        rf"{linear_re.START}he{_S}+[\p{{L}}]+(?:ado|ido|ada|ida|to|cho){linear_re.END}", linear_re.IGNORECASE
    ),
    "il": linear_re.compile(
        rf"{linear_re.START}il{_S}+(?:y{_S}+a|faut|pleut|s'agit|est{_S}+temps|fait{_S}+(?:beau|froid|chaud|nuit|jour|gris)|"
        rf"reste{_S}+(?:un|une|deux|trois|des|du|de|peu|encore)){linear_re.END}",
        linear_re.IGNORECASE,
    ),
}
"""A word that is a pronoun only elsewhere: Spanish "he" before a participle ("he bajado a
71 kg": I have), French impersonal "il" ("il y a trois mois", "il faut"). It is not read as a
person only when every occurrence in the statement is of this kind ("Il a déménagé à Paris
il y a un mois" is about him)."""
_PRONOUN_WORD = {
    w: linear_re.compile(rf"{linear_re.START}{w}{linear_re.END}", linear_re.IGNORECASE) for w in _NOT_A_PRONOUN
}
_COMPANION = linear_re.compile(
    rf"{linear_re.START}(?:with|chez|bei|con|avec|mit|com){_S}+(?:my|our|mes|mon|ma|nos|mis|mi|meinen|meiner|meinem|"
    rf"unseren|unserer|nuestros|nuestra|nuestro|meus|minha|meu){_S}+([\p{{L}}]+)(?:{_S}+([\p{{L}}]+))?",
    linear_re.IGNORECASE,
)
"""A person the speaker lives with ("still living with my parents", "chez mes parents", "bei
meinen Eltern", "with my older sister": the possessive's next two words), read in a
statement about where one lives (the ``residence`` frame): how the speaker lives, not
someone else the statement is about ("a 1:1 with my manager" is)."""
_NAMED_PERSON = linear_re.compile(
    rf"([\p{{L}}]+){_S}*(?:,{_S}*)?(?:(?:{'|'.join(sorted(COPULAS))}){_S}+|"
    rf"(?:(?:{'|'.join(sorted(COPULAS))}){_S}+|se{_S}+|s['’]|si{_S}+)?(?:{'|'.join(sorted(NAMING_WORDS))}){_S}+)?"
    rf"([\p{{Lu}}][\p{{L}}'-]*)"
)
"""A person noun and the name that follows it, directly or after a copula or a naming verb
(``change_cues.COPULAS``, ``NAMING_WORDS``, with a reflexive "se"/"s'"/"si"): "my girlfriend
Priya", "my boss is Tomasz", "my son is called Leo", "mi novia se llama Marta"."""


def _person_names(s: Statement, cues: Cues) -> set[str]:
    """The names ``s`` gives its person nouns (``_NAMED_PERSON``), lower case."""
    if s.person_names is None:
        nouns = set(s.people) | set(cues.people) | _companions(s, cues)
        s.person_names = frozenset(
            m.group(2).lower() for m in _NAMED_PERSON.finditer(s.text) if m.group(1).lower() in nouns
        )
    return set(s.person_names)


_PLACE_OF = linear_re.compile(
    rf"{linear_re.START}(?:at|in|into|of|from){_S}+(?:my|our){_S}+([\p{{L}}]+)(?:['’]s?)?{_S}+"
    rf"(?:place|house|home|flat|apartment|basement)",
    linear_re.IGNORECASE,
)
"""A person's home the speaker lives at, moves into or out of ("staying at my aunt's place",
"moved out of my parents' place"); not "my parents' house is in Ohio" (theirs)."""


def _companions(s: Statement, cues: Cues) -> set[str]:
    """The people ``s`` says the speaker lives with or at (``_COMPANION``, ``_PLACE_OF``), in
    a statement about where one lives."""
    if "residence" not in s.frames | cues.frames:
        return set()
    out = {w.lower() for m in _COMPANION.finditer(s.norm) for w in m.groups() if w}
    return out | {m.group(1).lower() for m in _PLACE_OF.finditer(s.text)}


def _persons(s: Statement, cues: Cues) -> set[str]:
    """The people ``s`` is about other than the speaker: both readings (the judge's English
    ``_PERSON`` and ``change_cues``' multilingual one), without the people the speaker lives
    with (``_companions``) and words that are no pronoun here (``_NOT_A_PRONOUN``); a
    pronoun beside a person noun of ``s`` stands for it ("my sister is back in the UK, she
    lives in Reading"), an impersonal "they" (``_IMPERSONAL_THEY``) is nobody, and any other
    pronoun is a person of its own: it is never bound to the other statement's person ("my
    brother lives in Madrid" / "she moved to Paris" are two people)."""
    if s.persons is None:
        s.persons = frozenset(_read_persons(s, cues))
    return set(s.persons)


def _read_persons(s: Statement, cues: Cues) -> set[str]:
    """``_persons``, read."""
    found = (set(s.people) | set(cues.people)) - _companions(s, cues)
    for word, pattern in _NOT_A_PRONOUN.items():
        if word in found and len(pattern.findall(s.norm)) == len(_PRONOUN_WORD[word].findall(s.norm)):
            found.discard(word)
    pronouns = found & PRONOUNS
    nouns = found - pronouns
    if nouns:
        return nouns
    if pronouns <= {"they", "ellos", "ils"} and _IMPERSONAL_THEY.search(s.norm):
        return set()  # "they hired me full-time"
    return found


def _someone_else(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> bool:
    """One statement is about a person the other is not ("mi hermana vive en Sevilla" after
    "vivo en Madrid"; people read by ``_persons``). Not someone else: a partner in two
    statements about the relationship (its value), and one person said two ways — one
    statement names its person ("my girlfriend Priya", "my boss is Tomasz": ``_NAMED_PERSON``)
    and the other names that name with no person of its own ("Priya and I broke up",
    "Tomasz retired, I report to Ines now"). A shared name of a place, employer or brand
    ("I work at Google" / "my brother quit Google") is not a person."""
    before, after = _persons(old, old_cues), _persons(new, new_cues)
    named = _person_names(old, old_cues)
    if named & new.values.get("name", set()) and not after - PRONOUNS:
        return False  # "Priya and I broke up, she moved out": the pronoun stands for the name beside it
    named = _person_names(new, new_cues)
    if named & old.values.get("name", set()) and not before - PRONOUNS:
        return False
    couple = "relationship" in old_cues.frames & new_cues.frames
    partners = RELATIONSHIP_NOUNS if couple else frozenset()
    if couple:  # "she said yes, we're engaged": in the couple's own news a pronoun is the partner
        before, after = (
            people - PRONOUNS if _WE.search(s.text) else people for s, people in ((old, before), (new, after))
        )
    return bool((before ^ after) - partners)


_WE = linear_re.compile(
    rf"{linear_re.START}(?:we|we['’]re|we['’]ve|us|our|nous|nos|nosotros|nosotras|wir|uns|noi|nós){linear_re.END}"
    r"|我们|咱们|私たち|僕ら",
    linear_re.IGNORECASE,
)
"""The speaker and someone as one subject ("we", "nous", "wir", 我们)."""


def _moved_on(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> str | None:
    """Rule 5, in any language of ``change_cues``: ``new`` has a cue ``old`` lacks — an
    ending cue ("no longer", quit, sold, broke up, graduated...) or a change cue ("now",
    moved, switched, rescheduled...) with a value of ``old`` gone and a new one said — about
    the same subject (a shared content term, frame or value) and the same people, and
    adds nothing (no "also"). ``"ends"`` (an ending cue, or a negation of all ``old`` says),
    ``"done"`` (``old`` a plan, ``new`` none about the same thing), ``"shift"``, or ``None``."""
    if max(len(old.text), len(new.text)) > MAX_MOVED_ON_CHARS:
        return None  # (Chinese and Japanese have no spaces to count words by)
    content = old_cues.terms - _WEAK_TERMS
    ends = (new_cues.ends and not old_cues.ends) or bool(
        not old_cues.negated
        and content
        and content <= new_cues.negated
        and not new_cues.negated - old_cues.terms - _WEAK_TERMS
    )  # "no soy alérgico a la penicilina" after "soy alérgico a la penicilina" (not "… with milk")
    done = old_cues.plans and not new_cues.plans  # a plan, then what came of it
    shifts = new_cues.shifts and not old_cues.shifts
    if not (ends or done or shifts) or (new_cues.additive and not old_cues.additive):
        return None
    if new_cues.transient and not old_cues.transient:
        return None  # "closed early today", "not working this week": a passing state
    if _two_settings(old, new, old_cues, new_cues):
        return None  # "a Mac at work" / "Windows at home": two places, two habits
    if _someone_else(old, new, old_cues, new_cues):
        return None
    if max(len(old.norm.split()), len(new.norm.split())) > MAX_SUPERSEDE_WORDS:
        return None
    shared = (old_cues.terms & new_cues.terms | _compound_parts(old_cues.words, new_cues.words)) - _WEAK_TERMS
    if done and shared:
        return "done"
    if not (ends or shifts):
        return None
    slots = {k for k in old.values.keys() & new.values.keys() if k not in _OPEN_KINDS}
    if ends and (shared or old.all_values() & new.all_values() or old_cues.frames & new_cues.frames - {"diet"}):
        return "ends"  # what ends is named: a shared term, value or activity ("vegetarian" / "no eggs": no)
    same = bool(shared or old_cues.frames & new_cues.frames or old.all_values() & new.all_values() or slots)
    if not shifts or not (same or (_read_language(old) and not _CJK_CHAR.search(old.text) and _same_subject(old, new))):
        return None  # (the English reading's subject terms of Chinese are single characters: not a subject)
    old_values = old.all_values() | (old_cues.words & RELATIONSHIP_NOUNS)  # "my boyfriend is Sam": two values
    kept = old_values - _left_behind(old_values, new)
    if kept and kept <= new.all_values() | (new_cues.words & RELATIONSHIP_NOUNS):
        return None  # every value of the old statement kept ("at Google" / "my team at Google … now")
    old_only = old_cues.terms - new_cues.terms or old.all_values() - new.all_values()
    new_only = new_cues.terms - old_cues.terms or new.all_values() - old.all_values()
    return "shift" if old_only and new_only else None


_TIMES_OF_DAY = frozenset({"morning", "evening"})
_TIME_OF_DAY_TERMS = frozenset(tokenize(" ".join(sorted(TIME_OF_DAY_WORDS))))


def _two_settings(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> bool:
    """The two statements hold in different settings (``change_cues``: "at work" / "at home",
    "in the morning" / "in the evening"): two habits, both true ("a Mac at work" / "Windows at
    home"). A time of day with a change said ("evenings work better for my workouts now",
    跑步改成晚上) is the one habit moved, unless each statement names its own thing ("café le
    matin" / "le soir … maintenant du thé": two habits)."""
    if not (old_cues.settings and new_cues.settings and old_cues.settings != new_cues.settings):
        return False
    times_only = (old_cues.settings | new_cues.settings) <= _TIMES_OF_DAY
    old_terms, new_terms = old_cues.terms - _TIME_OF_DAY_TERMS, new_cues.terms - _TIME_OF_DAY_TERMS
    two_things = bool(old_terms - new_terms and new_terms - old_terms)
    return not (times_only and (new.change or new_cues.shifts or new_cues.ends) and not two_things)


def _left_behind(values: set[str], new: Statement) -> set[str]:
    """Those of ``values`` that ``new`` names as what is over or replaced: the whole thing
    after an ending verb (``_NEGATED``: "replaced my Fitbit", "dropped Adobe entirely",
    "sold the Civic"; not a part of it: "swapped my Garmin strap", "deleted the Slack app")
    or before "is gone"/"died" (``_GONE``), or as the "from" of a change ("switched from
    Slack to Teams"). Named in ``new``, they are not kept."""
    return {
        v
        for v in values
        if any(_names_only(p, v) for p in new.negated) or any(v in f or f in v for f in new.from_values if f)
    }


_AFTER_THE_THING = frozenset("entirely completely altogether for good now today yesterday finally".split())


def _names_only(phrase: str, value: str) -> bool:
    """Whether ``phrase`` (what follows an ending verb) names ``value`` and nothing else: its
    words, adverbs ("entirely", ``_AFTER_THE_THING``) aside, all in the value ("the Civic" for
    ``honda civic``; not "Garmin strap" for ``garmin``)."""
    words = [w for w in phrase.split() if w not in _AFTER_THE_THING and not w.endswith("ly")]
    return bool(words) and set(words) <= set(value.split())


def same_values(a: str, b: str) -> bool:
    """Whether two statements name the same values (numbers, dates, names...); for a
    statement longer than ``MAX_JUDGED_CHARS``, whether the two texts normalise alike."""
    return read_pair(a, b).same_values()


def compatible_on_purpose(old_text: str, new_text: str) -> str | None:
    """Why the rules hold ``new_text`` compatible with ``old_text`` whatever else is said, or
    None: the reasons of ``judge`` that say both stay true — ``"additive"`` ("also", "too",
    "as well", in any language of ``change_cues``), ``"someone else"`` (the statements are
    about different people), ``"another setting"`` ("at work" / "at home"), ``"passing"``
    (a state bounded by a stretch of time: "this week", "for now", "tonight", 这周; "today"
    alone is not held, it may date a change for good: "my braces came off today"), ``"another occasion"`` (an old statement of a
    finished past time or of what was already over, or two dated occasions), ``"long"`` (more than
    ``MAX_SUPERSEDE_WORDS`` words: several things said at once). A second opinion
    (``curation.second_opinion``) never overrides these. Linear in the texts (the readers
    ``judge`` uses; a pair with a statement beyond ``MAX_JUDGED_CHARS`` is not read: ``"long"``
    unless its normalised texts make it a duplicate or a refinement, then None)."""
    return read_pair(old_text, new_text).on_purpose()


def _on_purpose(old: Statement, new: Statement, old_cues: Cues, new_cues: Cues) -> str | None:
    """``compatible_on_purpose`` on two read statements."""
    if max(len(old.norm.split()), len(new.norm.split())) > MAX_SUPERSEDE_WORDS:
        return "long"
    if (new.additive and not new.change) or (new_cues.additive and not old_cues.additive):
        return "additive"
    if _someone_else(old, new, old_cues, new_cues):
        return "someone else"
    if _unasserted(old, new, old_cues):
        return "unasserted"
    if _two_settings(old, new, old_cues, new_cues):
        return "another setting"
    if new_cues.period and not old_cues.period:
        return "passing"  # "this week": bounded; "today" alone may date a change for good: the opinion may say
    if (
        _PAST_TIME.search(old.text)
        or _over_already(old, new)
        or _tells_the_past(old, new, old_cues, new_cues)
        or _another_occasion(old, new)
        or _habit_then_occasion(old, new, new_cues)
        or _one_off(old, new)
    ):
        return "another occasion"
    return None


_CLAUSE = r"[^.!?;。！？；]*"
_ROMANCE_CONDITIONAL = (
    rf"(?:(?:me|te|se|nos|os|mi|ti|ci|vi|si|y|en|je|tu|il|elle|on|nous|vous|ils|elles|yo){_S}+|[jm]['’])"
    r"\p{L}+(?:ría|rías|ríamos|rían|rais|rait|rions|riez|raient|rei|resti|rebbe|remmo|rebbero|ria|riam)"
    rf"{linear_re.END}"
)
"""A Romance conditional after its subject pronoun or clitic ("me mudaría", "je partirais",
"j'irais", "mi trasferirei"): a noun in -ría ("una librería", "la panadería") is none."""
_UNASSERTED = linear_re.compile(
    rf"{linear_re.START}if{linear_re.END}{_CLAUSE}(?:{linear_re.START}(?:would|could|might|ever){linear_re.END}|['’]d{linear_re.END})"
    rf"|(?:{linear_re.START}(?:would|could|might){linear_re.END}|['’]d{linear_re.END}){_CLAUSE}{linear_re.START}if{linear_re.END}"
    rf"|{linear_re.START}(?:what{_S}+if|(?:should|shall){_S}+(?:i|we)|do{_S}+you{_S}+think{_S}+(?:i|we){_S}+should|"
    rf"y{_S}+si|et{_S}+si|soll{_S}+ich|sollte{_S}+ich|sollen{_S}+wir|devrais-je|"
    rf"debería{_S}+(?:yo{_S}+)?(?:\p{{L}}+){_S}*\?){linear_re.END}"
    rf"|{linear_re.START}si{linear_re.END}{_CLAUSE}{_ROMANCE_CONDITIONAL}"
    rf"|{linear_re.START}(?:wenn|falls){linear_re.END}{_CLAUSE}{linear_re.START}(?:würde|würden|wäre|wären|hätte|hätten|"
    rf"könnte|könnten){linear_re.END}"
    rf"|{linear_re.START}se{linear_re.END}{_CLAUSE}{_ROMANCE_CONDITIONAL}"
    rf"|如果|要是|假如|万一|要不要|该不该|(?:^|[、。，,！!？?「]|{_S})もし",
    linear_re.IGNORECASE,
)
"""A statement that says what would be, or asks what to do: a condition with what would
follow ("if I ever got a remote job I'd move to Vermont", "si me saliera, me mudaría",
"wenn ich könnte, würde ich…", 如果…的话, もし… at a clause's start: not the もし of
手伝いもしてます), or a question about what to do ("should I move to Manchester?", "what if
we sold the house", 要不要). English "if" counts only with a "would"/"could"/"'d"/"ever"
in its sentence: "if you're wondering, we moved" asserts the move."""
_NOT_SO = linear_re.compile(
    rf"{linear_re.START}(?:if|whether|would|could|might|should|maybe|perhaps|si|se|wenn|falls|würde|würden|wäre|wären|hätte|"
    rf"hätten|könnte|könnten|vielleicht|quizás|quizá|peut-être|forse|talvez){linear_re.END}|['’]d{linear_re.END}|"
    rf"{_ROMANCE_CONDITIONAL}|{linear_re.START}(?:should|shall){_S}+(?:i|we)|soll{_S}+ich|sollte{_S}+ich|"
    rf"sollen{_S}+wir|devrais-je|debería{linear_re.END}|如果|要是|假如|万一|可能|要不要|该不该|的话|もし|かも|たら|なら",
    linear_re.IGNORECASE,
)
"""A clause of a statement ``_UNASSERTED`` reads that is part of what would be (a condition,
what would follow, a maybe) rather than said to be so."""
_CLAUSES = linear_re.compile(r"[^.!?;。！？；,，、—–]+")


def _unasserted(old: Statement, new: Statement, old_cues: Cues) -> bool:
    """``new`` says what would be or asks what to do (``_UNASSERTED``), ``old`` does not, and
    none of ``new``'s other clauses (split at sentence ends and commas; a clause of the
    condition or of what would follow, ``_NOT_SO``, aside) states a change ("Should I move
    to Manchester? Rents are crazy" / "I live in Sheffield": Sheffield stays; "I quit my
    job at Amazon, should I take a break?", "We just moved to Denver, so if you ever…",
    我搬到上海了，如果你来… state the change). The opinion is not asked: nothing in ``new``
    is said to be so."""
    if not _UNASSERTED.search(new.text) or _UNASSERTED.search(old.text):
        return False
    rest = " ".join(m.group(0) for m in _CLAUSES.finditer(new.text) if not _NOT_SO.search(m.group(0)))
    if not rest.strip():
        return True
    cues = read_cues(rest)
    changed = _CHANGE_MARKERS.search(rest) or any(m in rest for m in _CHANGE_MARKERS_ZH)
    if cues.ends or cues.shifts or changed:
        return False
    if _UNASSERTED.search(rest):
        return True  # the rest asks or supposes too ("do you think I should…"): nothing said
    # what the rest says, alone ("I went vegan last month" after "I'm vegetarian"); _UNASSERTED
    # does not read it (above), so the rules below read no further
    said = read_statement(rest, old.text)
    return _decide(old, said, old_cues, cues) != Verdict.SUPERSEDES


_HABIT = linear_re.compile(
    rf"{linear_re.START}(?:every|each|daily|weekly|monthly|usually|always|most{_S}+days|"
    rf"cada|todos{_S}+los|todas{_S}+las|siempre|chaque|tous{_S}+les|toutes{_S}+les|toujours|"
    rf"jeden|jede|jedes|immer|ogni|sempre|todos{_S}+os|todas{_S}+as|"
    rf"mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekdays|weekends|"
    rf"(?:los|le){_S}+(?:lunes|martes|miércoles|jueves|viernes|sábados|domingos|lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche)|"
    rf"montags|dienstags|mittwochs|donnerstags|freitags|samstags|sonntags|werktags){linear_re.END}|每|毎|いつも",
    linear_re.IGNORECASE,
)
"""A statement of a recurring habit ("every Saturday", "on Tuesdays", "cada lunes", "le
lundi", "tous les jours", "dienstags", 每天)."""
_WEEKDAY_NAMES = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_THIS_ONE = linear_re.compile(
    rf"{linear_re.START}(?:tomorrow|tonight|today['’]s|this{_S}+(?:week|morning|evening|afternoon|{_WEEKDAY_NAMES})|"
    rf"next{_S}+(?:{_WEEKDAY_NAMES})|esta{_S}+semana|este{_S}+(?:lunes|martes|miércoles|jueves|viernes|sábado|domingo)|"
    rf"demain|cette{_S}+semaine|ce{_S}+(?:lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche)|diese{_S}+woche|"
    rf"diesen{_S}+(?:montag|dienstag|mittwoch|donnerstag|freitag|samstag|sonntag)|questa{_S}+settimana|"
    rf"esta{_S}+noite){linear_re.END}|明天|明日|这周|本周|今週",
    linear_re.IGNORECASE,
)
"""One occasion of a habit named by its day ("tomorrow's standup", "this Tuesday's lesson",
"ce jeudi", "diesen Freitag", 明天). Not "mañana" or "Morgen", which also say "morning"."""
_FOR_GOOD = linear_re.compile(
    rf"{linear_re.START}(?:from{_S}+now{_S}+on|as{_S}+of|starting{_S}+(?:tomorrow|today|tonight|next|this|on|in|from|"
    rf"{_WEEKDAY_NAMES})|anymore|any{_S}+more|no{_S}+longer|permanently|for{_S}+good|from{_S}+then{_S}+on|going{_S}+forward|"
    rf"onwards|a{_S}+partir{_S}+de|désormais|dorénavant|desde{_S}+(?:ahora|hoy|entonces)|de{_S}+ahora{_S}+en{_S}+adelante|"
    rf"ab{_S}+(?:jetzt|sofort|morgen|nächste|nächster|nächsten)|dauerhaft|ya{_S}+no|nicht{_S}+mehr|"
    rf"d['’]ora{_S}+in{_S}+poi){linear_re.END}|以后|从[^，,。！!？?]{{1,8}}开始|今後|これから|もう",
    linear_re.IGNORECASE,
)
"""A change said to last ("from now on", "as of today", "starting tomorrow", "no longer",
"désormais", "ab morgen", 以后, 从下周开始, 今後): not one occasion. "Starting" only before a
time ("starting at 8" is one game's start)."""


def _one_off(old: Statement, new: Statement) -> bool:
    """``old`` states a habit (``_HABIT``) and ``new`` changes one occasion of it, named by its
    day (``_THIS_ONE``; "today" alone may date an ending: "I quit smoking today"), not for
    good (``_FOR_GOOD``): "I have standup at 9:30 every day" / "Tomorrow's standup is
    cancelled"; "piano lessons on Tuesdays" / "this Tuesday's lesson got moved to
    Wednesday". The habit stays. "Starting tomorrow standup is at 10" changes it."""
    if not _HABIT.search(old.text) or _HABIT.search(new.text) or _FOR_GOOD.search(new.text):
        return False
    return bool(_THIS_ONE.search(new.text))


def _habit_then_occasion(old: Statement, new: Statement, new_cues: Cues) -> bool:
    """``old`` states a recurring habit and ``new`` one occasion (a date, month or weekday
    ``old`` does not name, or a day's occasion: ``_ONE_OCCASION``) without a change marker or cue: "I run 5 km every
    Saturday" / "I signed up for a half marathon in October" — the habit stays."""
    if not _HABIT.search(old.text) or _HABIT.search(new.text) or new.change or new_cues.shifts or new_cues.ends:
        return False
    if _FOR_GOOD.search(new.text):
        return False  # "starting tomorrow, standup is at 10": the habit itself changes
    if _ONE_OCCASION.search(new.text):
        return True  # "I usually go to bed around 11" / "stayed up till 2am last night"
    return any(new.values.get(k, set()) - old.values.get(k, set()) for k in _TIME_KINDS)


_ONE_OCCASION = linear_re.compile(
    rf"{linear_re.START}(?:yesterday|last{_S}+night|tonight|tomorrow|this{_S}+(?:morning|evening|afternoon)|"
    rf"anoche|ayer|esta{_S}+(?:noche|mañana|tarde)|hier|demain|ce{_S}+(?:soir|matin)|cette{_S}+nuit|"
    rf"gestern|heute{_S}+(?:abend|morgen|früh)|letzte{_S}+nacht){linear_re.END}"
    r"|昨天|昨晚|明天|今晚|今天早上|昨日|昨夜|明日|今夜|今朝",
    linear_re.IGNORECASE,
)
"""One day's occasion ("last night", "tomorrow", "ayer", "hier soir", "gestern", 昨晚, 昨夜)."""
