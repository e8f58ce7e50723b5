"""What a statement says about change, in several languages: the words that tell the judge
(``memory_core.curation.judge``) a fact ended or moved to a new value, read in one pass.

A statement is read into a ``Cues``:

- **ends**: an ending cue — the old state is over by itself: "no longer"/"anymore" and their
  families (``ya no``, ``ne … plus``, ``nicht mehr``/``kein … mehr``, 不再, 不…了, もう…ない),
  verbs of quitting, stopping, breaking up, selling, cancelling, closing, healing, and of a
  plan done (graduated, passed, got into; ``aprobé``, ``réussi``, ``bestanden``, 考上, 合格);
- **shifts**: a change cue — the same slot took a new value: "now"/"these days" families
  (``ahora``, ``maintenant``, ``jetzt``/``inzwischen``, 现在, 今は), verbs of moving,
  switching, changing, rescheduling, raising and lowering (``mudamos``, ``déménagé``,
  ``gezogen``, ``verschoben``, 搬, 改, 换, 変更, 引っ越), ``since``/``depuis``/``seit``;
- **additive**: ``also``/``too`` families (``también``, ``aussi``, ``auch``, 也, も…);
- **people**: person nouns the statement is about other than the speaker (``my sister``,
  ``mi hermana``, ``ma sœur``, ``meine Schwester``, 妹妹, 両親);
- **terms**: content words (stop words of the languages out, by ``stopwordsiso``; stemmed by
  ``memory_core.retrieval.lexical.tokenize``), and for Chinese and Japanese the ideographs
  and katakana runs without function characters;
- **frames**: the slots its words belong to in any of the languages (residence, work,
  relationship...), so that "Ich wohne in Hamburg" and "Wir sind nach Leipzig gezogen" share
  a subject without sharing a word.

Languages: English, Spanish, French, German, Italian, Portuguese (word lexicons), Chinese and
Japanese (substring lexicons). Every lexicon names a class of words (a verb of moving, an
adverb of "now"), never a word of one example.

Linear time: words are found once (``linear_re``), looked up in sets; CJK cues are bounded
substrings looked for with ``in``; the one CJK pattern (不…了) is RE2 with a bounded gap.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import stopwordsiso

from .. import linear_re
from ..retrieval.lexical import tokenize

_LANGS = ("es", "fr", "de", "it", "pt", "nl")
"""Languages whose stop words are dropped here (English ones: ``tokenize`` drops them)."""
_WORDS = linear_re.compile(rf"{linear_re.WORD}+")
_CJK = linear_re.compile(r"[\p{Han}]+|[\p{Katakana}ー]{2,}")
_ZH_NO_LONGER = linear_re.compile(r"(?:不|没)[^。，,.！!？?]{0,6}了")
"""不…了 / 没…了 within a clause: "I no longer …" (我不吃辣了, 现在没有猫了)."""
_JA_NO_LONGER = linear_re.compile(r"もう[^。、,.！!？?]{0,12}(?:ない|ません)")

# ------------------------------------------------------------------ lexicons, by class
_END_WORDS = frozenset(
    # en: quitting, stopping, selling, cancelling, closing, ending, healing, a plan done
    "quit quitting stopped ditched sold cancelled canceled closed graduated finished retired healed anymore "
    "broke divorced dumped left quitting stopping selling cancelling canceling "
    # es
    "dejé deje dejamos dejado vendí vendimos vendido cancelé cancelado cancelada cancelamos cerré cerrado "
    "terminé aprobé aprobado rompimos curado curada abandoné "
    # fr
    "quitté arrêté arrêtée annulé annulée vendu vendue fermé fermée terminé réussi guéri guérie rompu séparés "
    "abandonné "
    # de
    "aufgehört gekündigt verkauft abgeschafft abgesagt geschlossen getrennt bestanden geheilt beendet ausgezogen "
    # it, pt
    "smesso venduto annullato lasciato parei vendi cancelei larguei".split()
)
_END_PHRASES = frozenset(
    {
        ("no", "longer"), ("no", "more"), ("any", "more"), ("gave", "up"), ("given", "up"), ("got", "rid"),
        ("broke", "up"), ("split", "up"), ("passed", "away"), ("came", "off"), ("gone", "off"), ("got", "into"),
        ("moved", "out"), ("used", "to"), ("any", "longer"), ("traded", "in"),
        ("ya", "no"), ("no", "más"), ("nunca", "más"), ("se", "acabó"),
        ("est", "fini"), ("c", "fini"),
        ("nicht", "mehr"), ("kein", "mehr"), ("keine", "mehr"), ("keinen", "mehr"), ("nie", "mehr"),
        ("non", "più"), ("não", "mais"),
    }
)  # fmt: skip
"""Two-word ending cues (consecutive words); ``kein … mehr`` and ``ne … plus`` with a gap are
``_GAPPED_ENDS``."""
_GAPPED_ENDS = (({"ne", "n"}, "plus"), ({"kein", "keine", "keinen", "keiner", "nicht"}, "mehr"))
"""A negation word and, at most ``_GAP`` words later, the word that makes it "no longer"."""
_GAP = 4
_END_CJK = (
    "不再", "离职", "辞职", "分手", "戒", "取消", "卖了", "卖掉", "毕业", "考上", "走丢", "去世", "不当", "已经不",
    "以前", "やめ", "辞め", "前は", "売っ", "売り", "別れ", "キャンセル", "中止", "卒業", "合格", "治っ", "亡くな", "解約", "退職",
)  # fmt: skip
_SHIFT_WORDS = frozenset(
    # en: now families, moving, switching, changing, rescheduling, raising and lowering
    "now nowadays currently moved relocated switched changed swapped replaced rescheduled rebooked postponed "
    "delayed raised increased lowered reduced upgraded downgraded transferred promoted renamed became "
    "since rewrote moving switching changing married engaged started "
    # es
    "ahora actualmente mudamos mudé mude mudado mudó mudaron cambié cambiaron cambiado cambió cambiamos "
    "trasladé trasladado pospuesto aplazado subió bajó desde "
    # fr
    "maintenant désormais actuellement déménagé déménagée déménage changé changée devenu devenue finalement "
    "depuis reporté augmenté baissé passé passée "
    # de
    "jetzt inzwischen mittlerweile nun gezogen umgezogen geändert gewechselt verschoben seit erhöht gesenkt "
    "geworden wieder "
    # it, pt
    "adesso ora trasferito trasferita cambiato spostato agora mudei mudou mudamos mudaram mudou".split()
)
_SHIFT_PHRASES = frozenset(
    {
        ("these", "days"), ("as", "of"), ("from", "now"), ("down", "to"), ("up", "to"), ("went", "up"),
        ("brought", "forward"), ("a", "partir"), ("de", "nuevo"), ("à", "nouveau"), ("di", "nuovo"), ("ab", "jetzt"),
    }
)  # fmt: skip
_END_STEMS = (
    # es: dejar (de), vender, cancelar, terminar, aprobar, romper, cerrar, abandonar
    "dejé",
    "dejamos",
    "dejó",
    "dejado",
    "vendí",
    "vendimos",
    "vendió",
    "cancel",
    "terminé",
    "terminamos",
    "aprob",
    "rompi",
    "rompí",
    "cerré",
    "cerramos",
    "abandon",
    # fr: quitter, arrêter, annuler, vendre (vendu), réussir, guérir, rompre, résilier
    "quitt",
    "arrêté",
    "arrêtée",
    "arrêtés",
    "annul",
    "vendu",
    "réussi",
    "guéri",
    "rompu",
    "résili",
    # de: aufhören, kündigen, verkaufen, abschaffen, absagen, trennen, bestehen, heilen
    "aufgehört",
    "gekündigt",
    "verkauft",
    "abgeschafft",
    "abgesagt",
    "getrennt",
    "bestanden",
    "geheilt",
    # it, pt
    "smess",
    "vendut",
    "annullat",
    "parei",
    "paramos",
    "vendi",
    "cancelei",
    "larguei",
)
"""Word beginnings of the verbs of ending in the inflected languages (a verb family, its
conjugations): a word that starts with one is an ending cue."""
_SHIFT_STEMS = (
    # es: mudarse, cambiar, trasladarse, casarse, aplazar, posponer, subir, bajar
    "mudamos",
    "mudé",
    "mudó",
    "mudado",
    "mudaron",
    "mudarnos",
    "mudarme",
    "cambi",
    "traslad",
    "aplaz",
    "pospus",
    "casé",
    "casamos",
    "casó",
    # fr: déménager, changer, passer à, devenir, reporter, augmenter, baisser, se marier
    "déménag",
    "installé",
    "chang",
    "devenu",
    "reporté",
    "augment",
    "baiss",
    "marié",
    # de: ziehen, umziehen, ändern, wechseln, verschieben, erhöhen, senken, heiraten
    "gezogen",
    "umgezogen",
    "geändert",
    "gewechselt",
    "verschoben",
    "erhöht",
    "gesenkt",
    "geheiratet",
    "umgestiegen",
    # it, pt
    "trasferit",
    "cambiat",
    "spostat",
    "mudei",
    "mudou",
    "mudamos",
    "mudaram",
    "mudança",
)
"""Word beginnings of the verbs of moving, changing and switching (``_END_STEMS``)."""
_SHIFT_CJK = (
    "搬", "改", "换", "现在", "如今", "目前", "已经", "涨", "减到", "调到", "推迟", "提前", "变成",
    "降", "增加", "加到", "结婚了", "今は", "今では", "上が", "下が", "値上げ", "増え", "減っ", "結婚し", "引っ越", "変更", "変わ", "転職", "移っ", "延期", "に変え",
)  # fmt: skip
_PLAN_WORDS = frozenset(
    # en: intending, preparing, looking for, saving for
    "planning plan plans intend intending hoping applying searching looking lookout saving preparing "
    # es
    "planeo planeamos pienso quiero queremos preparando buscando ahorrando "
    # fr
    "prévoit prévois prévoyons compte prépare cherche économise veux voulons "
    # de
    "planen plane will wollen möchte möchten suche suchen spare sparen "
    # it, pt
    "progetto voglio cerco pretendo quero procurando".split()
)
_DETERMINERS = frozenset("the a an my our his her their this that school work church bed".split())


def _going_to_verb(words: list[str]) -> bool:
    """ "going to" before a verb (a plan: "going to run a marathon"), not before a place
    ("going to the gym")."""
    return any(
        a == "going" and b == "to" and c not in _DETERMINERS
        for a, b, c in zip(words, words[1:], words[2:], strict=False)
    )


_DAY_WORDS = frozenset("today hoy aujourd heute oggi hoje".split())
_DAY_PHRASES = frozenset({("this", "morning")})
_DAY_CJK = ("今天", "今日")
"""Transient cues that name a day ("today", "this morning", 今天): what is said may pass with
it, or the day may date an event that ends a state for good ("braces came off today")."""
_STRETCH_WORDS = frozenset("tonight".split())
_STRETCH_PHRASES = frozenset(
    {("this", "week"), ("this", "weekend"), ("for", "now"), ("esta", "semana"), ("cette", "semaine"),
     ("diese", "woche"), ("questa", "settimana"), ("esta", "noche"), ("ce", "soir")}
)  # fmt: skip
_STRETCH_CJK = ("今晚", "这周", "本周", "今晩", "今週")
"""Transient cues that bound a stretch the statement holds for ("this week", "for now",
"tonight", 这周): what is said passes with it (``Cues.period``)."""
_SETTINGS = {
    "work": (("at", "work"), ("for", "work"), ("el", "trabajo"), ("au", "travail"), ("au", "boulot"),
             ("der", "arbeit"), ("al", "lavoro"), ("no", "trabalho")),
    "home": (("at", "home"), ("en", "casa"), ("la", "maison"), ("chez", "moi"), ("zu", "hause"), ("a", "casa"),
             ("em", "casa")),
}  # fmt: skip
_SETTING_WORDS = {
    "morning": frozenset("morning mornings matin morgens morgen mattina manhã".split()),
    "evening": frozenset("evening evenings night nights soir noche noches abends abend sera noite".split()),
}
TIME_OF_DAY_WORDS = _SETTING_WORDS["morning"] | _SETTING_WORDS["evening"]
"""The words that name a time of day as a setting."""
_SETTINGS_CJK = {
    "work": ("在公司", "上班时", "仕事では", "職場"),
    "home": ("在家", "家では", "家で"),
    "morning": ("早上", "早晨", "朝"),
    "evening": ("晚上", "夜"),
}
"""Where or when a habit holds ("at work", "at home", "in the morning", "le soir"): "Windows
at work" and "a Mac at home" are two habits, not one changed."""
_PLAN_CJK = ("打算", "准备", "计划", "想要", "予定", "つもり", "探して", "準備")
_NEGATION_WORDS = frozenset("not never no nunca ne n pas jamais nicht kein keine keinen nie non não".split())
_NEGATION_CJK = linear_re.compile(
    r"[\p{Han}\p{Katakana}ー]{0,4}(?:不是|没有|不|ない|ません)[\p{Han}\p{Katakana}ー]{0,4}"
)
"""A CJK negation and the content characters right before (Japanese: 持っていません) and
after it (Chinese: 不吃辣): what the negation is about."""
NEGATION_WINDOW = 4
"""Content words (stop words skipped, within twice as many words) after a negation word that
it is about ("no soy alérgico a la penicilina")."""
_ADDITIVE_WORDS = frozenset(
    "also another additionally besides también además aussi également auch außerdem zusätzlich "
    "anche inoltre além".split()
)
_ADDITIVE_PHRASES = frozenset({("as", "well"), ("in", "addition"), ("de", "plus"), ("en", "plus")})
_ADDITIVE_CJK = ("也", "还", "另外", "此外")
ANOTHER_STRETCH = frozenset("year years month week day go round time shot try chance parent".split())
"""Words after "another" that make it no addition: "renewed the lease for another year", "give
it another go", "handed the team over to another parent" (one thing goes on or changes hands)."""
_ZH_STILL = frozenset("是在没不")
"""Characters after 还 that make it "still" or "rather" (还是, 还在, 还没, 还不), not "also"."""


def additive_cjk(text: str) -> bool:
    """An additive character (``_ADDITIVE_CJK``), 还 only where it means "also" (not 还是
    "rather", 还在 "still", 还没, 还不)."""
    for c in _ADDITIVE_CJK:
        if c != "还" and c in text:
            return True
    return any(text[i + 1 : i + 2] not in _ZH_STILL for i, ch in enumerate(text) if ch == "还")


def _another_thing(words: list[str]) -> bool:
    """An additive word other than "another", or "another" before a word that is no stretch
    of time or handing over (``ANOTHER_STRETCH``)."""
    for i, w in enumerate(words):
        stretch = w == "another" and i + 1 < len(words) and words[i + 1] in ANOTHER_STRETCH
        if w in _ADDITIVE_WORDS and not stretch:
            return True
    return False


_JA_NOT_ADDITIVE_NEXT = frozenset("うしのらっちとり")
"""Kana after も that make another word (もう "already / any more", もし "if", もの, もらう,
もっと, もちろん, もと, もり): not the particle "too"."""
_JA_NOT_ADDITIVE_PREV = frozenset("でとど何誰つ")
"""Characters before も that make another word (でも "but", とも, 子ども, 何も "nothing",
誰も "nobody", いつも "always"): not the particle "too"."""


def _ja_too(text: str) -> bool:
    """Whether ``text`` holds the Japanese particle も ("too, also"), not も inside another
    word (``_JA_NOT_ADDITIVE_NEXT``, ``_JA_NOT_ADDITIVE_PREV``). One pass."""
    for i, c in enumerate(text):
        if c != "も":
            continue
        nxt = text[i + 1] if i + 1 < len(text) else ""
        prev = text[i - 1] if i else ""
        if nxt not in _JA_NOT_ADDITIVE_NEXT and prev not in _JA_NOT_ADDITIVE_PREV:
            return True
    return False


PEOPLE_WORDS = frozenset(
    # en
    "sister brother mother mom mum father dad wife husband partner girlfriend boyfriend friend son daughter "
    "kid kids child children boss manager colleague coworker neighbor neighbour cousin aunt uncle grandma "
    "grandpa roommate parents he she they "
    # es
    "hermana hermano madre padre mamá papá esposa esposo mujer marido hijo hija hijos padres amigo amiga novio novia "
    "jefe jefa compañero compañera vecino vecina primo prima abuela abuelo él ella ellos "
    # fr
    "sœur soeur frère mère père maman papa femme mari fils fille enfants parents ami amie copain copine chef collègue "
    "voisin voisine cousin cousine il elle ils "
    # de
    "schwester bruder mutter vater mama frau mann sohn tochter kinder eltern freund freundin partnerin kollege kollegin nachbar "
    "nachbarin chef chefin er sie "
    # it, pt
    "sorella fratello madre padre moglie marito figlio figlia irmã irmão mãe pai esposa marido filho filha".split()
)
RELATIONSHIP_NOUNS = frozenset(
    "friend amigo amiga ami amie amica 朋友 "
    "girlfriend boyfriend partner husband wife fiancé fiancée fiance fiancee novio novia pareja esposo esposa marido "
    "mujer prometido prometida copain copine mari femme fiancé freund freundin partnerin verlobter verlobte mann frau "
    "ragazzo ragazza namorado namorada 男朋友 女朋友 老公 老婆 丈夫 妻子 彼氏 彼女 夫 妻".split()
)
"""A partner named in a statement about one's relationship is its value, not someone else
(the judge does not read "my boyfriend is Sam" / "Sam is my husband now" as two people)."""
_POSSESSIVES = frozenset(
    "my our his her their your mi mis su sus tu tus nuestro nuestra nuestros nuestras ma mon mes notre nos sa son ses "
    "mein meine meinen meinem meiner unser unsere unseren sein seine ihr ihre mio mia miei mie nostro nostra "
    "meu minha meus minhas nosso nossa".split()
)
"""A person noun is someone the statement is about after a possessive (``_after_possessive``)."""
_PERSON_ADJECTIVES = frozenset(
    "new old former current ex little older younger big best eldest youngest grande petite petit "
    "nueva nuevo antiguo antigua ältere älterer jüngere jüngerer kleine kleiner große großer beste bester besten "
    "meilleur meilleure mejor migliore melhor".split()
)


def _after_possessive(words: list[str], i: int) -> bool:
    """Whether ``words[i]`` follows a possessive, directly or after one adjective of
    ``_PERSON_ADJECTIVES`` ("my older sister"; "my password manager" is not a person)."""
    if i and words[i - 1] in _POSSESSIVES:
        return True
    return i > 1 and words[i - 1] in _PERSON_ADJECTIVES and words[i - 2] in _POSSESSIVES


def _of_someone(words: list[str], i: int) -> bool:
    """Whether the person noun ``words[i]`` is someone's by name and what its clause is
    about: after an English possessive "'s" ("Tom's brother", "Jamie's older sister": the
    word list holds the "s" apart; not "it's", "that's"), or after an article and before
    "de"/"di"/"von" ("la hermana de Tom", "le frère de Julie", "der Bruder von Tom"), the
    phrase opening the statement or a clause joined by "and", "but"… (``_CLAUSE_JOINERS``).
    Not the object of the speaker's own doing ("I moved in with Tom's sister", "a casa de
    la hermana de Luis"), nor a possessor itself ("Dave's brother's startup")."""
    if i + 1 < len(words) and words[i + 1] == "s":
        return False
    j = i - 1 if i and words[i - 1] not in _PERSON_ADJECTIVES else i - 2
    if j >= 1 and words[j] == "s" and words[j - 1] not in _NOT_A_POSSESSOR:
        return j == 1 or words[j - 2] in _CLAUSE_JOINERS
    if 0 < i < len(words) - 1 and words[i - 1] in _ARTICLES and words[i + 1] in _OF_WORDS:
        return i == 1 or words[i - 2] in _CLAUSE_JOINERS
    return False


_CLAUSE_JOINERS = frozenset("and but so then y pero et mais und aber e ma mas".split())
_NOT_A_POSSESSOR = frozenset("it that he she what there here who let where how".split())
"""Words whose "'s" is "is" or "us", not a possessive ("it's my brother")."""
_ARTICLES = frozenset("el la los las le les l der die den dem des il lo gli".split())
_OF_WORDS = frozenset("de del di della dello da do du des von vom".split())


def _person_word(words: list[str], i: int) -> str:
    """The person noun ``words[i]`` as a person: "ex-wife" after "ex"/"former" ("my
    ex-wife" is not "my wife"), "best-friend" after "best"/"beste"/"meilleure"/"mejor"…
    (a best friend is a friend, not the partner a relationship's "Freund" or "amie" may
    be), else the word."""
    if i and words[i - 1] in _FORMER_PARTNER:
        return "ex-" + words[i]
    if i and words[i - 1] in _BEST:
        return "best-" + words[i]
    return words[i]


_FORMER_PARTNER = frozenset("ex former".split())
"""Before a person noun, another person than the noun alone: "my ex-wife" is not "my wife"."""
_BEST = frozenset("best beste bester besten meilleur meilleure mejor mejores migliore melhor".split())
PRONOUNS = frozenset("he she they él ella ellos ellas il elle ils elles er".split())
NAMING_WORDS = frozenset("called named llama llamo appelle heißt heisst chiama chama".split())
COPULAS = frozenset("is was es era est était ist war è é".split())
_NAMING_CJK = ("叫", "の名前")
_COPULAS_CJK = ("是", "は")


def _names_slot(person: str, following: list[str]) -> bool:
    """Whether ``person`` is a slot whose value follows rather than someone the statement is
    about: right before a naming verb ("my sister is called Ella": who she is), or a partner
    right before a copula ("my boyfriend is Sam"; "meine Schwester ist nach Bonn gezogen" is
    about the sister)."""
    after = set(following)
    return bool(after & NAMING_WORDS) or (person in RELATIONSHIP_NOUNS and bool(after & COPULAS))


def _naming_cjk(person: str) -> tuple[str, ...]:
    """What after a CJK ``person`` makes it a slot (``_names_slot``)."""
    return _NAMING_CJK + _COPULAS_CJK if person in RELATIONSHIP_NOUNS else _NAMING_CJK


_PEOPLE_CJK = (
    "姐姐", "妹妹", "哥哥", "弟弟", "妈妈", "爸爸", "父母", "妻子", "丈夫", "老公", "老婆", "朋友", "女儿",
    "儿子", "孩子", "老板", "同事", "他", "她",
    "両親", "父", "母", "妻", "夫", "姉", "妹", "兄", "弟", "息子", "娘", "友達", "同僚", "上司", "彼は", "彼女は",
)  # fmt: skip
_FRAMES = {
    "residence": "live lives living lived moved move relocated home flat apartment house address reside "
    "vivo vive vivimos vivir mudamos mudé mudado piso casa barrio "
    "habite habites habitons habiter vis vit vivons vivent déménagé déménagée installé installée appartement maison "
    "wohne wohnt wohnen gezogen umgezogen ausgezogen eingezogen wohnung haus "
    "abito abitiamo moro moramos",
    "work": "work works working worked job employer company office "
    "trabajo trabajas trabaja trabajamos empresa oficina "
    "travaille travailles travaillons travail boulot entreprise bureau "
    "arbeite arbeitet arbeit angestellt firma büro stelle "
    "lavoro lavora trabalho empresa",
    "relationship": "girlfriend boyfriend partner husband wife dating married single "
    "novio novia pareja casado casada soltero soltera "
    "copain copine mari femme mariée marié célibataire "
    "freund freundin partnerin verheiratet ledig "
    "engaged divorced prometido prometida casados divorciado divorciada fiancé fiancée divorcé divorcée "
    "verlobt geheiratet geschieden getrennt",
    "diet": "eat eating diet vegan vegetarian como comer mange manger esse essen mangio",
    "drink": "drink drinking bebo beber bois boire trinke trinken",
    "smoking": "smoke smoking fumo fumar fume fumer rauche rauchen",
}
_FRAME_WORDS = {name: frozenset(words.split()) for name, words in _FRAMES.items()}
_FRAMES_CJK = {
    "residence": ("住", "搬", "家在", "引っ越"),
    "work": ("工作", "上班", "公司", "职", "働", "仕事", "勤め", "会社"),
    "relationship": (
        "男朋友",
        "女朋友",
        "分手",
        "单身",
        "彼氏",
        "彼女",
        "別れ",
        "订婚",
        "结婚",
        "离婚",
        "婚約",
        "結婚",
        "離婚",
    ),
    "smoking": ("烟", "タバコ", "煙草"),
}
_CJK_FUNCTION = frozenset("我你他她它们的了在是有不也还很就要一个这那没都和把被给对从吗呢吧啊已经现今最近改换搬")
"""Characters that say nothing of the subject (pronouns, particles, the cue characters)."""
_CUE_WORDS = (
    _END_WORDS
    | _SHIFT_WORDS
    | _ADDITIVE_WORDS
    | _PLAN_WORDS
    | _NEGATION_WORDS
    | {w for p in _END_PHRASES | _SHIFT_PHRASES for w in p}
)


@lru_cache(maxsize=1)
def _italian_and_french_only() -> tuple[frozenset[str], frozenset[str]]:
    """The stop words (``stopwordsiso``) Italian has and French has not, and the other way."""
    it, fr = set(stopwordsiso.stopwords("it")), set(stopwordsiso.stopwords("fr"))
    return frozenset(it - fr), frozenset(fr - it)


def _italian(words: list[str]) -> bool:
    """Whether ``words`` read as Italian rather than French: more of Italian's own stop words
    than of French's ("ho lasciato la banca e ora faccio il consulente"). There "il" is the
    article, not the French "he"."""
    italian, french = _italian_and_french_only()
    return sum(w in italian for w in words) > sum(w in french for w in words)


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    """The stop words of ``_LANGS`` (``stopwordsiso``), lower case."""
    out: set[str] = set()
    for lang in _LANGS:
        out |= {w.lower() for w in stopwordsiso.stopwords(lang)}
    return frozenset(out)


@dataclass(frozen=True)
class Cues:
    """What ``read_cues`` reads of one statement (see the module docstring)."""

    ends: bool
    shifts: bool
    plans: bool
    transient: bool
    """A time that bounds what is said to now ("today", "this week"): a passing state."""
    period: bool
    """A transient cue that names a stretch of time (``_STRETCH_PHRASES``: "this week", "for
    now", "tonight"), not only the day."""
    settings: frozenset[str]
    """Where what is said holds (``_SETTINGS``: work, home)."""
    negated: frozenset[str]
    """The content terms a negation is about (``not … anymore`` keeps the terms after it)."""
    additive: bool
    people: frozenset[str]
    terms: frozenset[str]
    words: frozenset[str]
    """The content words unstemmed (Latin scripts): what compounds are split against."""
    frames: frozenset[str]


def _has_gapped(words: list[str]) -> bool:
    """Whether a negation word of ``_GAPPED_ENDS`` is followed within ``_GAP`` words by its
    "longer" word (``ne mange plus``, ``keinen Alkohol mehr``): one pass with the last place
    of each negation."""
    last_seen: dict[int, int] = {}
    for i, w in enumerate(words):
        for k, (negations, longer) in enumerate(_GAPPED_ENDS):
            if w == longer and k in last_seen and i - last_seen[k] <= _GAP:
                return True
            if w in negations:
                last_seen[k] = i
    return False


CUES_CACHE = 4096
"""Statements whose ``Cues`` are kept (least recently used dropped first). Curation judges each
memory written against up to ``curation.candidates`` stored ones, and each stored memory
against every later one near it: a statement is read once while it stays in the cache."""
CUES_CACHE_MAX_CHARS = 512
"""Longest statement (characters) whose ``Cues`` are kept: a reading holds ~25-50 bytes per
character (its words and terms), so the cache holds at most ~100 MB whatever is written
(memories of 16 KB would have made it ~2.4 GB); longer statements are read each time."""


def read_cues(text: str) -> Cues:
    """Read ``text`` (one statement) into ``Cues``. Linear in its length; pure, so the last
    ``CUES_CACHE`` readings of texts up to ``CUES_CACHE_MAX_CHARS`` are reused (``Cues`` is
    frozen: shared safely across threads; ``clear_cues_cache`` empties it)."""
    return _read_cues_cached(text) if len(text) <= CUES_CACHE_MAX_CHARS else _read_cues(text)


def clear_cues_cache() -> None:
    """Forget the readings ``read_cues`` kept."""
    _read_cues_cached.cache_clear()


def _read_cues(text: str) -> Cues:
    norm = unicodedata.normalize("NFKC", text).lower()
    words = [m.group(0) for m in _WORDS.finditer(norm)]
    pairs = set(zip(words, words[1:], strict=False))
    word_set = set(words)
    ends = bool(word_set & _END_WORDS or pairs & _END_PHRASES or _has_gapped(words))
    ends = ends or any(w.startswith(_END_STEMS) for w in words)
    ends = ends or any(c in text for c in _END_CJK)
    ends = ends or bool(_ZH_NO_LONGER.search(text) or _JA_NO_LONGER.search(text))
    shifts = bool(word_set & _SHIFT_WORDS or pairs & _SHIFT_PHRASES) or any(c in text for c in _SHIFT_CJK)
    shifts = shifts or any(w.startswith(_SHIFT_STEMS) for w in words)
    plans = bool(word_set & _PLAN_WORDS) or any(c in text for c in _PLAN_CJK) or _going_to_verb(words)
    settings = {k for k, phrases in _SETTINGS.items() if pairs & set(phrases)}
    settings |= {k for k, vocab in _SETTING_WORDS.items() if word_set & vocab}
    settings |= {k for k, subs in _SETTINGS_CJK.items() if any(c in text for c in subs)}
    period = bool(word_set & _STRETCH_WORDS or pairs & _STRETCH_PHRASES) or any(c in text for c in _STRETCH_CJK)
    transient = period or bool(word_set & _DAY_WORDS or pairs & _DAY_PHRASES) or any(c in text for c in _DAY_CJK)
    negated = _negated_terms(text)
    additive = (
        bool((word_set & _ADDITIVE_WORDS and _another_thing(words)) or pairs & _ADDITIVE_PHRASES)
        or _ends_with_too(words, norm)
        or additive_cjk(text)
        or ("も" in text and _ja_too(text))
    )
    italian = "il" in word_set and _italian(words)
    people = frozenset(
        _person_word(words, i) if (w in PRONOUNS or _after_possessive(words, i)) else "of-" + w
        for i, w in enumerate(words)
        if w in PEOPLE_WORDS
        and ((w in PRONOUNS and not (w == "il" and italian)) or _after_possessive(words, i) or _of_someone(words, i))
        and not _names_slot(_person_word(words, i), words[i + 1 : i + 3])
    )
    people |= {p for p in _PEOPLE_CJK if p in text and not any(p + n in text for n in _naming_cjk(p))}
    content = [w for w in words if w not in _stopwords() and w not in _CUE_WORDS and not _has_cjk(w)]
    terms = set(tokenize(" ".join(content)))
    for run in _CJK.finditer(text):
        chars = [c for c in run.group(0) if c not in _CJK_FUNCTION]
        if run.group(0)[0] in "ー" or "\u30a0" <= run.group(0)[0] <= "\u30ff":
            terms.add(run.group(0))  # a katakana word: one term
        else:
            terms.update(chars)
    frames = {name for name, vocab in _FRAME_WORDS.items() if word_set & vocab}
    frames |= {name for name, subs in _FRAMES_CJK.items() if any(s in text for s in subs)}
    return Cues(
        ends=ends,
        shifts=shifts,
        plans=plans,
        transient=transient,
        period=period,
        settings=frozenset(settings),
        negated=negated,
        additive=additive,
        people=people,
        terms=frozenset(terms),
        words=frozenset(content),
        frames=frozenset(frames),
    )


_read_cues_cached = lru_cache(maxsize=CUES_CACHE)(_read_cues)

_TOO_AT_END = linear_re.compile(rf"{linear_re.START}too{linear_re.SPACE}*(?:[.,!?;:)]|$)")


def _ends_with_too(words: list[str], norm: str) -> bool:
    """An additive "too" ends a clause ("I like tea too."); "too often" is a degree."""
    return "too" in words and bool(_TOO_AT_END.search(norm))


_CLAUSE_END = linear_re.compile(r"[,.;:!?，。；：！？、]")


def _negated_terms(text: str) -> frozenset[str]:
    """The content terms within ``NEGATION_WINDOW`` words after a negation word (``n't``
    included) in its clause, and the content characters next to a CJK negation."""
    out: set[str] = set()
    for clause in _CLAUSE_END.split(unicodedata.normalize("NFKC", text).lower()):
        words = [m.group(0) for m in _WORDS.finditer(clause)]
        for i, w in enumerate(words):
            if w in _NEGATION_WORDS or (w == "t" and i and words[i - 1].endswith("n")):
                window = [x for x in words[i + 1 : i + 1 + 2 * NEGATION_WINDOW] if x not in _stopwords()]
                out.update(tokenize(" ".join(window[:NEGATION_WINDOW])))
    for m in _NEGATION_CJK.finditer(text):
        out.update(c for c in m.group(0) if c not in _CJK_FUNCTION)
    return frozenset(out)


def _has_cjk(word: str) -> bool:
    return any("\u3040" <= c <= "\u9fff" for c in word)
