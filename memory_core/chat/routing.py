"""Decision matching and the effective memory policy of a request (pure, no I/O).

``select_decision`` picks the first ``routing.decisions[]`` entry whose match rules all hold;
``effective_policy`` merges the global ``global.stores.memory`` settings with that decision's
``memory`` plugin configuration; ``skip_reason`` says why memory is skipped for a request
(each reason is counted by the service), or ``None`` when memory runs.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from .. import linear_re
from ..config import Decision, MatchRules, ReflectionSettings, RouterConfig

SKIP_REASONS = (
    "header_disabled",
    "no_user",
    "decision_disabled",
    "model_disabled",
    "plugin_disabled",
    "not_user_turn",
    "empty_message",
    "punctuation",
    "greeting",
)
"""Every value ``skip_reason`` may return, in the order they are checked."""


# --------------------------------------------------------------------------- matching


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> linear_re.Pattern:
    """A decision's ``regex`` on RE2 (linear in the user message it reads)."""
    return linear_re.compile_operator(pattern, field="regex")


def rules_match(rules: MatchRules, *, model: str | None, last_user_message: str, headers: Mapping[str, str]) -> bool:
    """Whether every non-empty rule of ``rules`` holds (see ``MatchRules``). ``headers``: by
    lower-case name, as ``sanitize.normalize_headers`` returns them (a rule's header name is
    matched case-insensitively)."""
    if rules.models and model not in rules.models:
        return False
    text = last_user_message or ""
    if rules.keywords:
        low = text.casefold()
        if not any(k.casefold() in low for k in rules.keywords):
            return False
    if rules.regex and not any(_compiled(p).search(text) for p in rules.regex):
        return False
    for name, value in rules.headers.items():
        got = headers.get(name.lower())
        if got is None or str(got).strip() != value.strip():
            return False
    return True


def select_decision(
    config: RouterConfig, *, model: str | None, last_user_message: str, headers: Mapping[str, str]
) -> Decision | None:
    """The first decision of ``config.routing.decisions`` (in order) whose rules all match:
    ``models`` exact model name; ``keywords`` any, case-insensitive substring of the last user
    message; ``regex`` any RE2 ``search`` on it (linear time); ``headers`` each named header (name
    case-insensitive) equal to the value. A decision without rules matches every request (a
    default). ``None`` when no decision matches (or there are none). ``headers``: the
    request's, normalised at the edge (``sanitize.normalize_headers``: lower-case names),
    read as they are."""
    for decision in config.routing.decisions:
        if rules_match(decision.match, model=model, last_user_message=last_user_message, headers=headers):
            return decision
    return None


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class MemoryPolicy:
    """What memory does for one request.

    ``decision_name``: the matched decision (``None``: no decision). ``retrieval_limit``:
    memories retrieved (before the reflection gate). ``similarity_threshold``: inclusive
    cosine floor. ``reflection``: the merged gate settings. ``placement``: ``current_turn`` or
    ``after_system``. ``hybrid``/``lexical_weight``/``temporal_boost``/``second_hop``/``diversity``:
    retrieval ranking (``global.stores.memory.retrieval``, ``RetrievalSettings.ranking_options``:
    ``second_hop`` is its ``hop_weight`` > 0 and ``diversity`` its ``diversity_weight``, both
    only with ``hybrid``).
    """

    decision_name: str | None
    enabled: bool
    retrieval_limit: int
    similarity_threshold: float
    auto_store: bool
    reflection: ReflectionSettings
    placement: str
    hybrid: bool
    lexical_weight: float
    temporal_boost: bool
    second_hop: bool
    diversity: float


def _merge_reflection(base: ReflectionSettings, override) -> ReflectionSettings:
    if override is None:
        return base
    updates = {k: v for k, v in override.model_dump(exclude_none=True).items()}
    if not updates:
        return base
    return ReflectionSettings.model_validate({**base.model_dump(), **updates})


def effective_policy(config: RouterConfig, decision: Decision | None) -> MemoryPolicy:
    """Global ``global.stores.memory`` settings overridden, field by field, by the fields the
    decision's ``memory`` plugin sets explicitly (not ``None``); the reflection override is
    merged field by field too. Unset fields inherit the global value, and an explicit
    ``enabled: false`` / ``auto_store: false`` wins over a global ``true`` (as an explicit
    ``true`` wins over a global ``false``: the plugin is the more specific setting).

    Memory is opt-in per decision: when the config has decisions, a decision without a memory
    plugin, or no matching decision (``decision is None``), gives ``enabled=False``. When the
    config has no decisions at all, the global settings apply as they are.
    """
    mem = config.memory
    enabled = mem.enabled
    limit = mem.default_retrieval_limit
    threshold = mem.default_similarity_threshold
    auto_store = mem.auto_store
    reflection = mem.reflection
    placement = mem.injection.placement
    plugin = decision.memory_plugin() if decision is not None else None
    if plugin is not None:
        if plugin.enabled is not None:
            enabled = plugin.enabled
        if plugin.retrieval_limit is not None:
            limit = plugin.retrieval_limit
        if plugin.similarity_threshold is not None:
            threshold = plugin.similarity_threshold
        if plugin.auto_store is not None:
            auto_store = plugin.auto_store
        if plugin.placement is not None:
            placement = plugin.placement
        reflection = _merge_reflection(reflection, plugin.reflection)
    elif config.routing.decisions:
        enabled = False
    return MemoryPolicy(
        decision_name=decision.name if decision is not None else None,
        enabled=enabled,
        retrieval_limit=limit,
        similarity_threshold=threshold,
        auto_store=auto_store,
        reflection=reflection,
        placement=placement,
        **mem.retrieval.ranking_options(),
    )


# --------------------------------------------------------------------------- skipping

GREETING_PHRASES = frozenset(
    {
        # English greetings / acknowledgements / goodbyes
        "hi",
        "hii",
        "hello",
        "hey",
        "heya",
        "hiya",
        "howdy",
        "yo",
        "sup",
        "greetings",
        "hi there",
        "hello there",
        "hey there",
        "hello again",
        "hi again",
        "hey again",
        "good morning",
        "good afternoon",
        "good evening",
        "good night",
        "morning",
        "evening",
        "thanks",
        "thank you",
        "thank u",
        "thx",
        "ty",
        "tysm",
        "thanks a lot",
        "thanks so much",
        "thank you so much",
        "thank you very much",
        "many thanks",
        "cheers",
        "much appreciated",
        "appreciate it",
        "ok",
        "okay",
        "k",
        "kk",
        "okie",
        "alright",
        "all right",
        "cool",
        "great",
        "nice",
        "awesome",
        "perfect",
        "wonderful",
        "excellent",
        "good",
        "fine",
        "sure",
        "yes",
        "yeah",
        "yep",
        "yup",
        "got it",
        "gotcha",
        "understood",
        "sounds good",
        "will do",
        "noted",
        "lol",
        "haha",
        "bye",
        "goodbye",
        "bye bye",
        "see you",
        "see ya",
        "see you later",
        "later",
        "cya",
        "take care",
        "welcome",
        "you re welcome",
        "np",
        "no problem",
        # Spanish, French, German, Italian, Portuguese
        "hola",
        "gracias",
        "muchas gracias",
        "adios",
        "adiós",
        "bonjour",
        "salut",
        "merci",
        "merci beaucoup",
        "au revoir",
        "hallo",
        "danke",
        "danke schön",
        "tschüss",
        "ciao",
        "grazie",
        "olá",
        "ola",
        "obrigado",
        "obrigada",
        # Chinese
        "你好",
        "您好",
        "嗨",
        "哈喽",
        "谢谢",
        "谢谢你",
        "谢谢您",
        "多谢",
        "感谢",
        "好的",
        "好",
        "嗯",
        "早上好",
        "早安",
        "晚上好",
        "晚安",
        "再见",
        "拜拜",
        "收到",
        "明白",
        "没问题",
        # Japanese
        "こんにちは",
        "こんばんは",
        "おはよう",
        "おはようございます",
        "ありがとう",
        "ありがとうございます",
        "どうも",
        "どうもありがとう",
        "はい",
        "了解",
        "さようなら",
        "またね",
        "よろしく",
        "よろしくお願いします",
        "おやすみ",
        "おやすみなさい",
        # Korean
        "안녕",
        "안녕하세요",
        "안녕하십니까",
        "감사합니다",
        "고마워",
        "고마워요",
        "고맙습니다",
        "네",
        "넵",
        "좋아요",
        "알겠습니다",
        "잘가",
        "안녕히 가세요",
        "안녕히 계세요",
        # negatives and declines (the whole message is "no")
        "no",
        "nope",
        "nah",
        "no thanks",
        "no thank you",
        "not really",
        "not now",
        "not yet",
        "no way",
        "never mind",
        "nevermind",
        "nvm",
        "no need",
        "i m good",
        "im good",
        "all good",
        "no worries",
        # small talk
        "what s up",
        "whats up",
        "wassup",
        "wazzup",
        "how are you",
        "how are u",
        "how r u",
        "how are you doing",
        "how s it going",
        "how is it going",
        "how have you been",
        "what s new",
        "how do you do",
        "and you",
        # acknowledgements and reactions
        "right",
        "exactly",
        "of course",
        "absolutely",
        "definitely",
        "certainly",
        "agreed",
        "me too",
        "same",
        "same here",
        "i see",
        "oh",
        "ah",
        "oh ok",
        "ah ok",
        "hmm",
        "hm",
        "mhm",
        "uh huh",
        "wow",
        "makes sense",
        "fair enough",
        "sounds great",
        "that s fine",
        "that s great",
        "thats fine",
        "sure thing",
        "sorry",
        "oops",
        "my bad",
        "interesting",
        "true",
        "indeed",
        "maybe",
        "good to know",
        "nice one",
        "brilliant",
        # es, pt, fr, de, it, nl
        "no gracias",
        "sí",
        "si",
        "vale",
        "claro",
        "de acuerdo",
        "qué tal",
        "que tal",
        "nada",
        "perfecto",
        "bueno",
        "genial",
        "não",
        "nao",
        "sim",
        "valeu",
        "beleza",
        "tudo bem",
        "tudo bom",
        "não obrigado",
        "não obrigada",
        "certo",
        "non",
        "non merci",
        "oui",
        "d accord",
        "ça va",
        "ca va",
        "pas de souci",
        "pas de problème",
        "bien sûr",
        "parfait",
        "super",
        "nein",
        "nein danke",
        "ja",
        "genau",
        "alles klar",
        "wie geht s",
        "wie geht es dir",
        "kein problem",
        "stimmt",
        "gut",
        "prima",
        "no grazie",
        "sì",
        "va bene",
        "come stai",
        "nessun problema",
        "perfetto",
        "nee",
        "ja hoor",
        "dank je",
        "dank je wel",
        "bedankt",
        # ru, pl, tr, ar, hi
        "нет",
        "да",
        "спасибо",
        "большое спасибо",
        "привет",
        "здравствуйте",
        "хорошо",
        "ладно",
        "понятно",
        "как дела",
        "пока",
        "окей",
        "nie",
        "tak",
        "dzięki",
        "dziękuję",
        "cześć",
        "dobrze",
        "jasne",
        "hayır",
        "evet",
        "teşekkürler",
        "teşekkür ederim",
        "sağ ol",
        "merhaba",
        "tamam",
        "nasılsın",
        "لا",
        "نعم",
        "شكرا",
        "مرحبا",
        "حسنا",
        "नहीं",
        "हाँ",
        "हां",
        "धन्यवाद",
        "शुक्रिया",
        "नमस्ते",
        "ठीक है",
        # zh, ja, ko: negatives, small talk, acknowledgements
        "不",
        "不是",
        "不用",
        "不用了",
        "不要",
        "没有",
        "没事",
        "对",
        "对的",
        "是的",
        "是",
        "行",
        "可以",
        "你好吗",
        "最近怎么样",
        "怎么样",
        "哦",
        "噢",
        "嗯嗯",
        "いいえ",
        "いや",
        "うん",
        "ううん",
        "そう",
        "そうです",
        "そうですね",
        "なるほど",
        "元気",
        "元気ですか",
        "大丈夫",
        "わかった",
        "わかりました",
        "아니요",
        "아니",
        "아뇨",
        "응",
        "그래",
        "맞아",
        "맞아요",
        "잘 지내",
        "잘 지내요",
        "괜찮아",
        "괜찮아요",
        # time-of-day greetings and farewells, by language (the forms people type: with and
        # without accents, the short forms)
        "gm",
        "gn",
        "good day",
        "night",
        "nighty night",
        "have a nice day",
        "have a good day",
        "have a great day",
        "have a good one",
        "have a good night",
        "ttyl",
        "talk to you later",
        "talk later",
        "bye for now",
        "gotta go",
        "g2g",
        "brb",
        "buenos días",
        "buenos dias",
        "buen día",
        "buen dia",
        "buenas",
        "buenas tardes",
        "buenas noches",
        "hasta luego",
        "hasta mañana",
        "hasta pronto",
        "nos vemos",
        "chao",
        "bonsoir",
        "bonne nuit",
        "bonne journée",
        "bonne soirée",
        "à plus",
        "a plus",
        "à bientôt",
        "a bientot",
        "à demain",
        "a demain",
        "guten morgen",
        "guten tag",
        "guten abend",
        "gute nacht",
        "moin",
        "servus",
        "bis später",
        "bis bald",
        "bis morgen",
        "tschau",
        "buongiorno",
        "buonasera",
        "buonanotte",
        "a dopo",
        "a presto",
        "arrivederci",
        "bom dia",
        "boa tarde",
        "boa noite",
        "até logo",
        "até mais",
        "tchau",
        "goedemorgen",
        "goedenavond",
        "welterusten",
        "doei",
        "tot ziens",
        "доброе утро",
        "добрый день",
        "добрый вечер",
        "спокойной ночи",
        "до свидания",
        "до встречи",
        "увидимся",
        "günaydın",
        "iyi geceler",
        "görüşürüz",
        "hoşça kal",
        "مع السلامة",
        "صباح الخير",
        "مساء الخير",
        "تصبح على خير",
        "السلام عليكم",
        "وعليكم السلام",
        "namaste",
        "namaskar",
        "alvida",
        "phir milenge",
        "नमस्कार",
        "शुभ रात्रि",
        "सुप्रभात",
        "中午好",
        "下午好",
        "早",
        "回头见",
        "明天见",
        "一会儿见",
        "じゃあね",
        "じゃあまた",
        "また明日",
        "バイバイ",
        "お疲れ様",
        "お疲れ様です",
        "좋은 아침",
        "좋은 아침이에요",
        "잘 자",
        "잘 자요",
        "또 봐요",
        "나중에 봐",
        # acknowledgements: spellings and slang
        "okey",
        "oki",
        "okk",
        "okey dokey",
        "okie dokie",
        "allright",
        "alrighty",
        "aight",
        "ight",
        "sounds gd",
        "sgtm",
        "bet",
        "yea",
        "ya",
        "yah",
        "yess",
        "ofc",
        "omg",
        "omfg",
        "oh my god",
        "oh no",
        "dac",
        "d acc",
        "entendu",
        "compris",
        "passt",
        "passt schon",
        "geht klar",
        "klar",
        "verstanden",
        "capito",
        "ho capito",
        "d accordo",
        "entendido",
        "entendi",
        "ок",
        "понял",
        "поняла",
        "ясно",
        "угу",
        "ага",
        "知道了",
        "明白了",
        "懂了",
        "好吧",
        "好嘞",
        "分かった",
        "分かりました",
        "承知しました",
        "かしこまりました",
        "オッケー",
        "알겠어",
        "알겠어요",
        "오케이",
        "theek hai",
        "thik hai",
        "accha",
        "acha",
        "haan",
        "nahi",
        "تمام",
        "ماشي",
        "tamamdır",
        "oké",
        # declines: "not now" and "no, thanks" in other languages
        "ahora no",
        "ahora mismo no",
        "pas maintenant",
        "pas pour l instant",
        "jetzt nicht",
        "nicht jetzt",
        "non ora",
        "non adesso",
        "agora não",
        "agora nao",
        "не сейчас",
        "не надо",
        "今はいい",
        "結構です",
        "いいです",
        "大丈夫です",
        # how are you, and its answers (a passing state, not a fact to keep)
        "how are you doing today",
        "how are you today",
        "how s your day",
        "how s your day been",
        "how s your day going",
        "how was your day",
        "how s everything",
        "how s life",
        "what s going on",
        "what s happening",
        "hru",
        "wbu",
        "hbu",
        "you",
        "what about you",
        "how about you",
        "i m fine",
        "im fine",
        "fine thanks",
        "i m ok",
        "i m okay",
        "i m good you",
        "doing well",
        "doing good",
        "not bad",
        "pretty good",
        "thanks for asking",
        "cómo estás",
        "como estas",
        "cómo va",
        "como va",
        "bien",
        "muy bien",
        "estoy bien",
        "comment ça va",
        "comment ca va",
        "comment vas tu",
        "très bien",
        "je vais bien",
        "wie gehts",
        "wie geht s dir",
        "mir geht s gut",
        "come va",
        "tutto bene",
        "sto bene",
        "bene",
        "como vai",
        "como você está",
        "tudo certo",
        "estou bem",
        "как ты",
        "как жизнь",
        "нормально",
        "你最近好吗",
        "最近好吗",
        "我很好",
        "还不错",
        "お元気ですか",
        "元気です",
        "잘 지냈어요",
        "어떻게 지내요",
        "kaise ho",
        "kya haal hai",
        "كيف حالك",
        "hoe gaat het",
        # fillers and hesitations
        "um", "umm", "uh", "uhm", "erm", "er", "eh", "meh", "mm", "mmm", "hmph",
        # radio-style and closing acknowledgements
        "roger", "roger that", "copy", "copy that", "wilco", "10 4", "affirmative",
        "that s all", "thats all", "that s it", "thats it", "that is all", "for now", "that s all for now",
        "that s it for now", "nothing else", "nothing more", "all set", "i m all set",
        # negatives and acknowledgements in more languages
        "nö", "ne", "näh",
        "hoi", "dag", "goed", "klopt",
        "dobra", "okej", "spoko", "no dobra", "yok", "olur", "peki", "sağol", "selam",
        "了解です", "了解しました",
        "halo", "hai", "gak", "nggak", "enggak", "ga", "tidak", "iya", "oke", "sip", "siap", "makasih",
        "terima kasih", "thanks ya", "oke deh", "baik",
    }
)  # fmt: skip
"""Short greetings/acknowledgements (normalized: lower case, punctuation removed)."""


def _collapse_runs(token: str) -> str:
    """``token`` with every run of one character kept once ("lmaooo" → "lmao")."""
    return "".join(ch for i, ch in enumerate(token) if i == 0 or token[i - 1] != ch)


_GREETINGS_DRAWN_OUT = frozenset(_collapse_runs(p) for p in GREETING_PHRASES if " " not in p)
"""The one-word phrases with every run of a letter kept once ("cool" → "col"): a word typed
with a letter drawn out ("okkk", "nooo", "coooool", "thanksss") is matched through it."""


def _drawn_out_greeting(word: str) -> bool:
    """Whether ``word`` is a one-word greeting typed with a letter drawn out: it repeats a
    letter three times or more, or doubles its last letter ("okk", "yess"), and without the
    repeats it is one (``_GREETINGS_DRAWN_OUT``). Linear in the word."""
    drawn = len(word) >= 3 and (
        word[-1] == word[-2] or any(word[i] == word[i - 1] == word[i - 2] for i in range(2, len(word)))
    )
    return drawn and _collapse_runs(word) in _GREETINGS_DRAWN_OUT


GREETING_MAX_WORDS = 6
_GREETING_MAX_PHRASE_WORDS = max(len(p.split()) for p in GREETING_PHRASES)
_GREETING_MAX_PHRASE_CHARS = max(len(p) for p in GREETING_PHRASES)


def _emoji_mark(ch: str) -> bool:
    """Variation selectors (U+FE00–FE0F, U+E0100–E01EF) and emoji modifiers that follow an
    emoji; other combining marks are parts of letters (Devanagari's virama and vowel signs)."""
    o = ord(ch)
    return 0xFE00 <= o <= 0xFE0F or 0xE0100 <= o <= 0xE01EF or 0x1F3FB <= o <= 0x1F3FF


def _normalize_greeting(text: str) -> str:
    # NFC, case folded; punctuation, symbols (emoji), emoji marks, enclosing marks (keycaps),
    # format and control chars (ZWJ) → space
    out = []
    for ch in unicodedata.normalize("NFC", text).casefold():
        cat = unicodedata.category(ch)
        out.append(" " if cat[0] in "PSZ" or cat in ("Cf", "Me", "Cc") or _emoji_mark(ch) else ch)
    return " ".join("".join(out).split())


_LAUGH_PAIRS = frozenset(
    frozenset(pair)
    for pair in ("ha", "he", "hi", "ja", "je", "ji", "wk", "ха", "хе", "хи", "ㅋㅎ", "ㅋ", "ㅎ", "哈", "呵", "嘿", "嘻")
)
_LAUGH_WORDS = frozenset({"lol", "lmao", "lmfao", "rofl", "mdr", "xd", "kek", "www", "kkk", "555", "草"})


def is_laugh(token: str) -> bool:
    """Whether one normalised word is laughter as people type it: alternations of a laugh's
    two letters in any order and length ("haha", "ahahah", "hehe", "jajaja", "хаха", "ахах"),
    a run of one laugh character ("ㅋㅋㅋ", "哈哈哈", "呵呵"), or a laugh word with its letters
    drawn out ("lol", "loool", "lmaooo", "mdrrr", "xDDD", "kkkk", "ｗｗｗ", "5555", "草").
    Linear in the word."""
    if len(token) >= 2 and frozenset(token) in _LAUGH_PAIRS:  # before NFKC: it recodes "ㅋ"
        return True
    token = unicodedata.normalize("NFKC", token)  # full-width "ｗｗｗ" → "www"
    if len(token) >= 2 and frozenset(token) in _LAUGH_PAIRS:
        return True
    collapsed = _collapse_runs(token)
    if collapsed in _LAUGH_WORDS:
        return True
    # drawn-out forms of the three-letter runs: "kkkk", "wwww", "55555"
    return len(collapsed) == 1 and collapsed * 3 in _LAUGH_WORDS and len(token) >= 3


def _greeting_token(token: str) -> bool:
    """A single space-free token made of greeting phrases glued together (CJK: "你好谢谢")."""
    n = len(token)
    ok = [True] + [False] * n
    for i in range(n):
        if ok[i]:
            for j in range(i + 1, min(n, i + _GREETING_MAX_PHRASE_CHARS) + 1):
                if token[i:j] in GREETING_PHRASES:
                    ok[j] = True
    return ok[n]


def is_punctuation_only(text: str) -> bool:
    """Whether ``text`` holds punctuation and nothing else that is visible ("???", "...",
    "!?", "。。。", "¿?", "~", "^^"): every character is punctuation (Unicode category
    ``P*``), a math or modifier symbol typed like punctuation (``Sm``: "~", "+", "=";
    ``Sk``: "^", "`"), a separator or whitespace, a control or format character, and at
    least one is of the first two kinds. Such a message asks nothing memory could answer and
    states nothing. Emoji are other symbols (``So``), not punctuation: "👍" is an
    acknowledgement (``is_greeting``)."""
    seen = False
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "P" or cat in ("Sm", "Sk"):
            seen = True
        elif not (cat[0] == "Z" or cat in ("Cc", "Cf") or ch.isspace()):
            return False
    return seen


def is_greeting(text: str) -> bool:
    """Whether ``text`` is only a short greeting, acknowledgement, negative or bit of small
    talk ("hi", "Thanks!", "ok 👍", "No", "Nope, all good", "What's up?", "good morning",
    "你好", "不用了", "ありがとう", "안녕하세요", "Нет"): after removing punctuation, emoji and
    case it has at most ``GREETING_MAX_WORDS`` words, all covered by ``GREETING_PHRASES``. An
    emoji-only message ("👍") is an acknowledgement too; a message of punctuation only is not
    a greeting (``is_punctuation_only``). Empty/whitespace text is not a greeting. "hi,
    what's my locker code?" and "No, I moved to Berlin" are not ones."""
    if not text or not text.strip() or is_punctuation_only(text):
        return False
    norm = _normalize_greeting(text)
    if not norm:
        return True  # only emoji (with or without punctuation): "👍", "🙏", "ok!! 👍"
    words = norm.split()
    if len(words) > GREETING_MAX_WORDS:
        return False
    n = len(words)
    ok = [True] + [False] * n
    for i in range(n):
        if not ok[i]:
            continue
        for j in range(i + 1, min(n, i + _GREETING_MAX_PHRASE_WORDS) + 1):
            if " ".join(words[i:j]) in GREETING_PHRASES:
                ok[j] = True
        if (
            is_laugh(words[i])
            or _drawn_out_greeting(words[i])
            or (not words[i].isascii() and _greeting_token(words[i]))
        ):
            ok[i + 1] = True
    return ok[n]


def skip_reason(
    config: RouterConfig,
    policy: MemoryPolicy,
    *,
    model: str | None,
    user_id: str | None,
    memory_disabled: bool = False,
    last_user_message: str,
    last_role: str | None = "user",
) -> str | None:
    """Why memory is skipped for this request, or ``None`` when it runs. Checked in order
    (the first that applies is returned; all are in ``SKIP_REASONS``):

    ``header_disabled`` (``memory_disabled``: the request sent ``x-disable-router-memory:
    true``, see ``sanitize.request_context``), ``no_user`` (no or blank user id),
    ``decision_disabled`` (``policy.decision_name`` in ``memory.disabled_decisions``),
    ``model_disabled`` (``model`` in ``memory.disabled_models``), ``plugin_disabled``
    (``policy.enabled`` is false), ``not_user_turn`` (the request ends with a tool result or
    assistant message — a tool-call loop continuing a turn that already had its memories;
    injecting again would rewrite an earlier user message and store one memory per step),
    ``empty_message`` (blank last user message), ``punctuation`` (only punctuation, see
    ``is_punctuation_only``), ``greeting`` (only a short greeting, acknowledgement, negative
    or small talk, see ``is_greeting``).
    """
    mem = config.memory
    if memory_disabled:
        return "header_disabled"
    if user_id is None or not str(user_id).strip():
        return "no_user"
    if policy.decision_name is not None and policy.decision_name in mem.disabled_decisions:
        return "decision_disabled"
    if model is not None and model in mem.disabled_models:
        return "model_disabled"
    if not policy.enabled:
        return "plugin_disabled"
    if last_role is not None and last_role != "user":
        return "not_user_turn"
    if not last_user_message or not last_user_message.strip():
        return "empty_message"
    if is_punctuation_only(last_user_message):
        return "punctuation"
    if is_greeting(last_user_message):
        return "greeting"
    return None
