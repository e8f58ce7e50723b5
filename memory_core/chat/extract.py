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

from .. import linear_re
from ..curation.judge import strip_lead_in
from ..sanitize import MAX_CONTENT_BYTES, is_visible
from ..sentences import join_sentences, split_sentences
from ..types import Memory, MemoryType
from .inject import content_text, strip_memory_block
from .routing import is_greeting, is_punctuation_only
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

_QA_PREFIX = re.compile(r"^\s*[QA]:\s*")


def _normalize(text: str) -> str:
    """Lowercase, word tokens only, single-spaced (punctuation/markup ignored)."""
    return " ".join(re.findall(r"\w+", text.lower()))


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
                for sentence in split_sentences(line):
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
        kept = [s.strip() for s in split_sentences(line) if not quotes.quoted(s)]
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
_S = linear_re.SPACE
_W = linear_re.WORD
_REQUEST_VERBS = (
    "explain|summari[sz]e|translate|describe|compare|calculate|generate|compose|recommend|suggest|rephrase|"
    "rewrite|reword|paraphrase|proofread|brainstorm|define|elaborate|recap"
)
"""English verbs that open a one-off request to the assistant whatever follows ("Explain
recursion", "Compare Python and Go")."""
_REQUEST_VERBS_WITH_OBJECT = (
    "write|teach|quiz|create|draft|outline|convert|tell|give|show|make|list|find|book|help|check|fix|send|plan|"
    "share|name|play|draw|sing|guess|continue|imagine|pretend|act|look|search|sort|rank|count|estimate|predict|"
    "solve|recite|spell|review|edit|analy[sz]e|read|remind|quote|pick|choose|debug"
)
"""English verbs that are also nouns or adjectives: a request only when an object, a question
word or a particle follows (``_REQUEST_OBJECT``)."""
_REQUEST_OBJECT = (
    "me|us|him|her|them|it|this|that|these|those|my|our|your|you|a|an|the|some|any|one|two|three|four|five|six|"
    "seven|eight|nine|ten|few|several|all|each|every|more|another|how|what|why|where|when|who|which|whether|if|as|"
    "up|out|with|about|on|for|to|like|ideas?|something|anything|[0-9]+"
)
"""What follows a request verb, in lower case: an object, a question word or a particle. A
noun right after the verb reads as a statement ("Share prices fell", "Play is important",
"Show jumping is my hobby"), and so do a capitalised name ("Find My iPhone found…",
"Imagine Dragons is my favourite band") and words glued to the verb ("Write-ups",
"Check-in")."""
_ANSWER_VERBS = "answer|respond|reply"
"""English verbs asking how to answer ("Answer yes or no.", "Reply in one word", "Respond
only with a number"): a request when one of ``_ANSWER_HOW`` (in any case) follows."""
_ANSWER_HOW = (
    "yes|no|in|with|using|by|as|me|us|this|that|the|these|those|each|every|briefly|"
    "concisely|honestly|truthfully|simply|only|just|exactly|precisely|shortly|quickly"
)
_REQUEST_ARTIFACTS = (
    "poems?|limericks?|haikus?|stor(?:y|ies)|jokes?|songs?|lyrics|essays?|summar(?:y|ies)|lists?|recipes?|"
    "e-?mails?|letters?|captions?|slogans?|titles?|names?|ideas?|tips|suggestions|examples?|quiz(?:zes)?|"
    "riddles?|puns?|fun facts?|facts?|translations?|outlines?|scripts?|speech(?:es)?|toasts?|tweets?|posts?"
)
"""What an assistant is asked to make: after "I want/need/'d like a …" and a particle ("I need
a limerick about a cat"), a request; "I need a new laptop" names no such thing and stays a
statement."""
_REQUEST_START = linear_re.compile(
    rf"^{_S}*(?i:(?:please|pls|kindly){_S}+)?"
    rf"(?:(?i:(?:i{_S}*(?:'d|would){_S}+like|i{_S}+(?:want|need)){_S}+you{_S}+to){_S}+{_W}|"
    rf"(?i:(?:i{_S}*(?:'d|would){_S}+like|i{_S}+(?:want|need)){_S}+(?:a|an|some|[0-9]+){_S}+"
    rf"(?:{_REQUEST_ARTIFACTS}){_S}+(?:about|for|on|of|that|to|in|with){linear_re.NOT_WORD})|"
    rf"(?i:(?:can|could|would|will){_S}+you|let'?s){_S}+{_W}|"
    rf"(?i:{_REQUEST_VERBS}){_S}+(?:{_W}|['\"‘“«])|"
    rf"(?i:{_REQUEST_VERBS_WITH_OBJECT}){_S}+(?:(?:{_REQUEST_OBJECT})(?:{linear_re.NOT_WORD}|$)|['\"‘“«])|"
    rf"(?i:{_ANSWER_VERBS}){_S}+(?i:{_ANSWER_HOW})(?:{linear_re.NOT_WORD}|$))"
)
"""RE2: a one-off request to the assistant in English, by its first words (verbs in any
case, the word after a two-way verb in lower case)."""
_REQUEST_START_OTHER = linear_re.compile(
    # es, fr, de, it, pt, nl, ru, pl, ar: imperatives at the start of the sentence
    rf"^{_S}*(?:por favor,?{_S}+|s'il te plaît,?{_S}+|bitte,?{_S}+|per favore,?{_S}+|пожалуйста,?{_S}+)?"
    r"(?:dime|cu[ée]ntame|escr[ií]be(?:me)?|expl[ií]ca(?:me)?|dame|hazme|mu[ée]strame|comp[áa]rte(?:me)?|"
    r"recomi[ée]nda(?:me)?|sugi[ée]re(?:me)?|traduce|res[úu]me(?:me)?|enumera|descr[ií]be(?:me)?|ay[úu]dame|"
    r"dibuja|calcula|genera|"
    r"dis-moi|raconte(?:-moi)?|[ée]cris(?:-moi)?|explique(?:-moi)?|donne(?:-moi)?|fais(?:-moi)?|montre(?:-moi)?|"
    r"recommande(?:-moi)?|sugg[èe]re(?:-moi)?|traduis|r[ée]sume(?:-moi)?|d[ée]cris(?:-moi)?|aide-moi|dessine|"
    r"erz[äa]hl(?:e)?|schreib(?:e)?|erkl[äa]r(?:e)?|gib|zeig(?:e)?|sag(?:e)?|empfiehl|[üu]bersetz(?:e)?|"
    r"beschreib(?:e)?|hilf|zeichne|berechne|nenne|"
    r"dimmi|raccontami|racconta|scrivi(?:mi)?|spiega(?:mi)?|dammi|fammi|mostrami|consigliami|suggerisci(?:mi)?|"
    r"traduci|riassumi|descrivi(?:mi)?|aiutami|disegna|calcola|elenca|"
    r"diga(?:-me)?|me diga|conte(?:-me)?|me conte|escreva|explique|me explique|d[êe]-me|me d[êe]|mostre(?:-me)?|"
    r"recomende|sugira|traduza|resuma|descreva|ajude-me|me ajude|desenhe|calcule|liste|"
    r"me conta|conta-me|me fala|fala-me|me mostra|mostra-me|me explica|explica-me|me d[áa]|d[áa]-me|me ajuda|"
    r"ajuda-me|me manda|me recomenda|me sugere|me escreve|escreve-me|traduz|descreve|desenha|"
    r"vertel|schrijf|leg uit|geef|laat (?:me|zien)|"
    r"расскажи(?:те)?|напиши(?:те)?|объясни(?:те)?|дай(?:те)?|покажи(?:те)?|поделись|посоветуй(?:те)?|"
    r"предложи(?:те)?|переведи(?:те)?|опиши(?:те)?|помоги(?:те)?|нарисуй|посчитай|перечисли|назови|придумай|"
    r"opowiedz|napisz|wyja[śs]nij|wyt[łl]umacz|daj|poka[żz]|podaj|pole[ćc]|zaproponuj|przet[łl]umacz|opisz|"
    r"pom[óo][żz]|narysuj|oblicz|wymie[ńn]|stre[śs][ćc]|"
    r"أخبرني|اخبرني|اكتب|اشرح|أعطني|اعطني|أرني|ترجم|لخص|صف|ساعدني|اقترح)"
    r"(?:[^\p{L}\p{N}\p{M}_'-]|$)"
    # id: imperatives (most with -kan) and "tolong" (please) opening the sentence
    rf"|^{_S}*(?:tolong|ceritakan|jelaskan|buatkan|berikan|tuliskan|sebutkan|terjemahkan|ringkaskan|rangkumkan|"
    rf"rangkum|carikan|cariin|bantu{_S}+(?:aku|saya)|kasih{_S}+tahu|beritahu|tunjukkan|sarankan|rekomendasikan|hitungkan|"
    r"gambarkan|bandingkan|bikinin|bikinkan)(?:[^\p{L}\p{N}\p{M}_'-]|$)"
    # zh: a request opening (please, help me, tell me, give me) or a verb with a measure word
    r"|^(?:请|請|麻烦|麻煩|帮我|幫我|给我|給我|告诉我|告訴我|为我|為我|替我)"
    r"|^(?:写|寫|讲|講|说|說|推荐|推薦|介绍|介紹|列出|列举|列舉|总结|總結|解释|解釋|翻译|翻譯|描述|画|畫|编|編|想)"
    r"(?:一|个|個|几|幾|些|首|篇|段|封|份|本|道|下)",
    linear_re.IGNORECASE,
)
"""RE2: one-off requests in other languages, by the sentence's first words."""
_REQUEST_END = linear_re.compile(
    # ja, ko, tr, hi: the imperative ends the sentence
    r"(?:て|てください|て下さい|てくれ|てくれる|てちょうだい|ください|下さい|なさい|"
    r"줘|줘요|주세요|주십시오|줄래|줄래요|해봐|봐요|"
    r"anlat|yaz|açıkla|göster|öner|çevir|özetle|söyle|anlatır mısın|"
    r"बताओ|बताइए|बताइये|लिखो|लिखिए|समझाओ|समझाइए|दिखाओ|दीजिए|सुनाओ|सुनाइए|बनाओ|बनाइए|भेजो|भेजिए|सुझाओ|"
    r"सुझाइए|ढूंढो|ढूँढो|गिनाओ)"
    rf"{_S}*[.!。！?？।]*{_S}*$",
    linear_re.IGNORECASE,
)
"""RE2: requests in languages whose imperative ends the sentence (Japanese, Korean, Turkish,
Hindi)."""


def is_request(sentence: str) -> bool:
    """Whether ``sentence`` is a one-off request to the assistant ("Share a surprising fact
    about Chile", "Tell me a joke", "I want you to write a limerick", "Dime un chiste",
    "给我讲个笑话", "詩を書いて", "시를 써 줘"), by its first (or, for Japanese, Korean, Turkish
    and Hindi, its last) words. Statements that open with the same word as a noun ("Share
    prices fell", "Show jumping is my hobby") are not requests. Linear (RE2)."""
    return bool(
        _REQUEST_START.search(sentence) or _REQUEST_START_OTHER.search(sentence) or _REQUEST_END.search(sentence)
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
"""A sentence with fewer words (and no digit) is too short to state a fact ("why?", "lol"),
unless it is a two-word statement of what the speaker is (``_short_self_statement``)."""

_SELF_COPULAS = frozenset({"i'm", "i’m", "im", "soy", "sou", "sono", "suis", "bin", "я", "ben", "jestem", "sunt"})
"""First-person "I am" forms that carry their own subject (en; es and pt: their copula of what
one is, "soy"/"sou", not "estoy"/"estou" of how one is now; it, fr after "je", de after "ich",
ru, tr, pl, ro), lower case."""
_PASSING_STATES = frozenset(
    {
        # en: how one is now, where, whether ready; moods and bodily states
        "fine",
        "good",
        "ok",
        "okay",
        "great",
        "well",
        "tired",
        "hungry",
        "thirsty",
        "bored",
        "busy",
        "back",
        "here",
        "there",
        "ready",
        "done",
        "sorry",
        "confused",
        "lost",
        "sleepy",
        "late",
        "home",
        "in",
        "out",
        "happy",
        "sad",
        "excited",
        "nervous",
        "anxious",
        "stressed",
        "curious",
        "sick",
        "ill",
        "cold",
        "hot",
        "awake",
        "angry",
        "upset",
        "worried",
        "scared",
        "afraid",
        "glad",
        "relieved",
        "lonely",
        "exhausted",
        "hungover",
        "drunk",
        "full",
        "free",
        "available",
        "away",
        "off",
        "online",
        "offline",
        "working",
        "driving",
        "leaving",
        "going",
        "coming",
        "joking",
        "kidding",
        "serious",
        "sure",
        "right",
        "wrong",
        "not",
        "so",
        "very",
        "really",
        "just",
        "still",
        "also",
        "almost",
        "alright",
        "cool",
        "stuck",
        "early",
        "outside",
        "inside",
        "pumped",
        "thrilled",
        # es, pt, it, fr, de, ru: the same kinds
        "bien",
        "aquí",
        "aqui",
        "listo",
        "lista",
        "feliz",
        "triste",
        "enfermo",
        "enferma",
        "ocupado",
        "ocupada",
        "aburrido",
        "aburrida",
        "cansado",
        "cansada",
        "pronto",
        "pronta",
        "stanco",
        "stanca",
        "qui",
        "felice",
        "malato",
        "malata",
        "occupato",
        "occupata",
        "doente",
        "fatigué",
        "fatiguée",
        "prêt",
        "prête",
        "content",
        "contente",
        "malade",
        "occupé",
        "occupée",
        "là",
        "müde",
        "da",
        "fertig",
        "krank",
        "glücklich",
        "traurig",
        "beschäftigt",
        "hier",
        "устал",
        "устала",
        "здесь",
        "готов",
        "готова",
        "занят",
        "занята",
        "болен",
        "больна",
        "рад",
        "рада",
    }
)
"""What "I'm …" says of a moment, not of the speaker ("I'm tired", "I'm excited", "sono
stanco"): too short to keep."""


def _short_self_statement(words: list[str]) -> bool:
    """Whether a two-word sentence states what the speaker is ("I'm diabetic", "Sou
    vegetariana", "sono celiaco", "Я вегетарианец"): a first-person copula
    (``_SELF_COPULAS``) then a word that is not a passing state (``_PASSING_STATES``)."""
    return len(words) == 2 and words[0].casefold() in _SELF_COPULAS and words[1].casefold() not in _PASSING_STATES


SKIP_REASONS = ("empty", "punctuation", "question", "greeting", "refusal", "request", "too_short")
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
    if is_punctuation_only(s):
        return "punctuation"
    if is_greeting(s):
        return "greeting"
    if _REFUSAL.match(s):
        return "refusal"
    if s.rstrip().endswith(("?", "？")) or (_QUESTION_START.match(s) and not s.rstrip().endswith(".")):
        return "question"
    words = re.findall(r"[\w'-]+", s)
    cjk = len(re.findall(r"[\u4e00-\u9fff\u3040-\u30ff\uac00-\ud7af]", s))
    if len(words) + cjk // 2 < MIN_STATEMENT_WORDS and not re.search(r"\d", s) and not _short_self_statement(words):
        return "too_short"
    if _STANDING.search(s) and (_ASSISTANT_BEHAVIOUR.search(s) or re.search(r"\b(call|name|address)\b", s, re.I)):
        return MemoryType.PROCEDURAL
    if is_request(s):
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


_FIRST_PERSON_ES = frozenset(
    "yo soy estoy tengo vivo trabajo estudio me mi mis mío mía nosotros nosotras somos estamos tenemos vivimos "
    "nuestro nuestra nuestros nuestras he hemos prefiero odio amo quiero necesito".split()
)
"""Words that make a Spanish clause speak of the speaker (first person)."""
_NOT_A_STATEMENT_ES = frozenset(
    "si cuando qué que cómo como dónde donde cuál cuáles quién por para entre en aparte hablando sabes".split()
)
"""First words of a Spanish clause that is a condition, a topic or a question, not a statement."""


def _before_inverted_question(sentence: str) -> str:
    """The clause before a question that Spanish opens mid-sentence with "¿" after a comma or
    a semicolon, when it states something of the speaker ("Soy vegetariana, ¿me recomiendas
    una receta?" → "Soy vegetariana": a first-person word, ``_FIRST_PERSON_ES``, and not a
    condition or a topic, ``_NOT_A_STATEMENT_ES``), or "" otherwise. Linear."""
    at = sentence.find("¿")
    if at <= 0:
        return ""
    clause = sentence[:at].rstrip()
    if not clause.endswith((",", ";")):
        return ""
    clause = clause[:-1].rstrip()
    words = [w.casefold() for w in re.findall(r"\w+", clause)]
    if not words or words[0] in _NOT_A_STATEMENT_ES or not _FIRST_PERSON_ES.intersection(words):
        return ""  # "Si tuviera un perro, ¿…?", "Qué hora es en Tokio, ¿sabes?"
    return clause


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
    for sentence in split_sentences(strip_lead_in(user_text)):
        sentence = strip_lead_in(sentence)
        kind = classify_sentence(sentence)
        if kind == "question":  # "Soy vegetariana, ¿me recomiendas una receta?": the statement before it
            sentence = _before_inverted_question(sentence)
            kind = classify_sentence(sentence) if sentence else kind
        if isinstance(kind, MemoryType):
            kept.setdefault(kind, []).append(sentence)
        elif first_reason is None:
            first_reason = kind
    for kind in (MemoryType.SEMANTIC, MemoryType.PROCEDURAL, MemoryType.EPISODIC):
        if kind in kept:
            text = truncate_utf8(join_sentences(kept[kind]), MAX_CONTENT_BYTES)
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
