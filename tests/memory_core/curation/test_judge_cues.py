"""The judge's multilingual cue classes (memory_core.curation.change_cues, judge._moved_on):
each class with sentences of its own, in several languages (none from the labelled set)."""

import tracemalloc

import pytest

from memory_core.curation.change_cues import read_cues
from memory_core.curation.judge import Verdict, judge
from memory_core.retrieval import lexical

S, C = Verdict.SUPERSEDES, Verdict.COMPATIBLE

ENDING = [  # an ending cue about the same subject: the old state is over
    ("I play the cello.", "I gave up the cello last winter."),
    ("I go climbing on Thursdays.", "I stopped climbing after my shoulder injury."),
    ("Toco la guitarra en un grupo.", "Ya no toco la guitarra."),
    ("Je joue au tennis le samedi.", "Je ne joue plus au tennis."),
    ("Ich spiele Schach im Verein.", "Ich spiele kein Schach mehr."),
    ("Ich habe ein Motorrad.", "Das Motorrad habe ich verkauft."),
    ("我每天喝咖啡。", "我不再喝咖啡。"),
    ("毎朝ジョギングしています。", "ジョギングはやめました。"),
    ("I work at Shopify.", "I left Shopify last month."),
    ("Trabajo en Mercadona.", "Dejé Mercadona y ahora trabajo en Lidl."),  # a verb family: dej-
    ("Ich arbeite bei Aldi.", "Ich habe bei Aldi gekündigt."),
]
CHANGE = [  # a change cue, an old value gone and a new one said, same slot
    ("I bank with Barclays.", "I switched banks, I'm with Monzo now."),
    ("Trabajo en Zaragoza.", "Ahora trabajo en Bilbao."),
    ("Je vis à Rennes.", "J'ai déménagé à Bordeaux."),
    ("Ich wohne in Köln.", "Wir sind nach Bonn umgezogen."),
    ("Der Kurs ist am Montag.", "Der Kurs wurde auf Mittwoch verschoben."),
    ("My gym membership costs $40 a month.", "The gym raised the fee to $55."),
    ("J'habite à Toulouse.", "Je me suis installé à Montpellier."),
    ("大阪に住んでいます。", "先月、福岡に引っ越しました。"),
    ("会議は月曜日です。", "会議は水曜日に変更になりました。"),
]
PLAN_DONE = [  # a plan, then what came of it
    ("I'm planning to repaint the kitchen.", "We repainted the kitchen yellow."),
    ("Estoy buscando un piso en Valencia.", "Firmé el contrato del piso en Valencia."),
]
NEGATED = [  # the new statement negates all the old one says
    ("Tengo miedo a volar.", "Después del curso no tengo miedo a volar."),
    ("I'm lactose intolerant.", "The new test says I'm not lactose intolerant."),
]
HOLD_TOGETHER = [  # cues that end nothing of the old statement
    ("I play the cello.", "My son stopped playing the violin."),  # someone else
    ("Ich wohne in Köln.", "Meine Schwester ist nach Bonn gezogen."),  # someone else
    ("Je joue au tennis le samedi.", "Je joue aussi au golf maintenant."),  # additive
    ("I ride my bike to work.", "I've switched my phone plan to a cheaper one."),  # another subject
    ("I visited Rome last spring.", "This spring I'm visiting Lisbon."),  # a past event
    ("I'm flying to Oslo in May.", "I'm flying to Madrid in October."),  # another dated occasion
    ("I prefer tea.", "I don't like tea with milk, though."),  # the negation covers part of it
    ("我喜欢看书。", "我姐姐不再看书了。"),  # someone else
    ("Trabajo en Correos.", "Mi hermano ahora trabaja en Renfe."),  # someone else, with a change cue
    ("我在杭州工作。", "我老公现在在南京工作。"),  # someone else, Chinese
    ("The library opens at 9.", "The library closed early today."),  # a passing state
    ("Je cours le week-end.", "Je ne cours pas cette semaine."),  # a passing state
    ("I read the news on my tablet at work.", "I now read novels on a Kindle at home."),  # another place
    ("Je bois du café le matin.", "Le soir je bois maintenant du thé."),  # another time of day
    ("I swim on Mondays.", "I now swim on Fridays as well."),  # additive with a change cue
    ("I'm going to the pool on Saturdays.", "I went to the pool with my niece."),  # a place, not a plan
    ("My password manager is KeePass.", "My manager uses a different tool now."),  # no person: a tool
    ("我住在南京。", "我换了一辆新车。"),  # a change of something else (no shared subject)
    ("Vivo en Bogotá.", "Cambié de trabajo el año pasado."),  # a change of something else
]


@pytest.mark.parametrize(("old", "new"), ENDING + CHANGE + PLAN_DONE + NEGATED)
def test_a_cue_of_change_about_the_same_subject_supersedes(old, new):
    assert judge(old, new) == S


@pytest.mark.parametrize(("old", "new"), HOLD_TOGETHER)
def test_cues_about_something_else_stay_compatible(old, new):
    assert judge(old, new) == C


def test_a_partner_named_as_the_value_is_not_someone_else():
    assert judge("My girlfriend is called Ana.", "Ana and I split up.") == S
    assert judge("My partner is Lee.", "Lee is my husband as of June.") == S


@pytest.mark.parametrize(
    ("text", "ends", "shifts"),
    [
        ("Ich rauche keine Zigaretten mehr.", True, False),  # kein … mehr, with a gap
        ("Je ne bois plus de café.", True, False),  # ne … plus
        ("Jetzt arbeite ich in Kiel.", False, True),
        ("现在住在杭州。", False, True),
        ("I get up too early.", False, False),
    ],
)
def test_ending_and_change_cues_are_read_in_each_language(text, ends, shifts):
    cues = read_cues(text)
    assert (cues.ends, cues.shifts) == (ends, shifts)


def test_too_is_additive_only_at_a_clause_end():
    assert read_cues("I like jazz too.").additive
    assert not read_cues("I get up too often.").additive


def test_a_person_before_a_naming_verb_is_a_slot_not_someone_else():
    assert read_cues("Mi novia se llama Eva.").people == frozenset()
    assert read_cues("Mi hermana vive en Cádiz.").people == {"hermana"}


def test_german_compounds_share_their_parts():
    assert judge("Mein Code für das Tor ist 4411.", "Der Torcode wurde geändert, jetzt 7020.") == S


def test_going_to_before_a_verb_is_a_plan_not_before_a_place():
    assert read_cues("I'm going to sell my bike.").plans
    assert not read_cues("I'm going to the market.").plans


def test_a_person_is_read_after_a_possessive_only():
    assert read_cues("My older brother lives in Oslo.").people == {"brother"}
    assert read_cues("My password manager is KeePass.").people == frozenset()


def test_the_cache_of_readings_keeps_no_long_statement():
    """A reading holds ~40 bytes per character of its statement (its words and terms): a
    cache of the last 4,096 readings of memories up to 16 KB each held ~2.4 GB per process,
    filled by one user's writes. Long statements are read again instead of kept."""
    words = [f"w{n}x" for n in range(4000)]
    statements = [" ".join(words[k : k + 2000]) + " is my favourite" for k in range(0, 16, 2)]  # ~13 KB each
    read_cues("warm up: my sister lives in Oslo")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in statements:
            read_cues(text)
        lexical._clear_terms_cache()  # the tokenizer's own caches (bounded by texts and words) aside
        lexical._stem_cached.cache_clear()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 256 * 1024, f"{kept / len(statements):.0f} bytes kept per long statement read"
    assert read_cues(statements[0]) == read_cues(statements[0])  # read again: the same reading
