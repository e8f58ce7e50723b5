"""The deterministic judge of an old/new statement pair (memory_core.curation.judge), on pairs
written for these tests (the shared contradiction set is measured by
``benchmarks/contradictions.py``, not tuned here)."""

from __future__ import annotations

import random

import pytest

from memory_core.curation.judge import Verdict, compatible_on_purpose, judge, read_statement

S, D, R, C = Verdict.SUPERSEDES, Verdict.DUPLICATE, Verdict.REFINES, Verdict.COMPATIBLE

SUPERSEDES = [
    ("My email is anna@example.com.", "My email changed to anna.k@example.org."),
    ("I work at Acme Corp.", "I joined Globex last week and work there now."),
    ("My wifi password is sunflower42.", "I changed the wifi password to maple77."),
    ("The dentist appointment is on Friday.", "The dentist appointment moved to Monday."),
    ("My rent is $1,800 a month.", "My rent went up to $1,950 a month."),
    ("My favourite coffee shop is Blue Bottle.", "Now my favourite coffee shop is Sightglass."),
    ("We run Postgres 14 in production.", "We upgraded production to Postgres 16."),
    ("School starts at 8:00 for my son.", "School now starts at 8:30 for my son."),
    ("I'm allergic to penicillin.", "Turns out I'm not allergic to penicillin after all."),
    ("I go to the gym at Planet Fitness.", "I cancelled Planet Fitness and go to Equinox now."),
    ("The team meeting is in room 4B.", "The team meeting was moved to room 2A."),
    ("我的电话号码是13800138000。", "我的电话号码换成了13900139000。"),
    ("我住在广州。", "我现在住在深圳。"),
    ("Our cat is called Mochi.", "We renamed the cat to Biscuit."),
    ("My car is a red Mazda 3.", "I now drive a white Volvo XC40."),
    ("The release is planned for June 10.", "The release was postponed to June 24."),
    ("I live in a two-bedroom apartment.", "We moved into a three-bedroom house."),
    ("My preferred airline is Delta.", "I fly United these days instead of Delta."),
    ("Our sprint length is two weeks.", "We changed sprint length to three weeks."),
    ("I'm a junior developer.", "I got promoted to senior developer."),
    ("My son is in third grade.", "My son started fourth grade this fall."),
    ("The API rate limit is 100 requests per minute.", "The API rate limit was raised to 500 requests per minute."),
    ("My address is 12 Oak Street.", "My new address is 48 Pine Avenue."),
    ("The deploy key is stored in Vault.", "The deploy key now lives in AWS Secrets Manager, not Vault."),
    ("My timezone is PST.", "I relocated and my timezone is now CET."),
    ("The backup runs at 2am.", "The backup schedule moved to 4am."),
    ("I'm reading Dune.", "I finished Dune and started Foundation."),
]
COMPATIBLE = [
    ("I live in Denver.", "Denver gets a lot of snow in winter."),
    ("My rent is $1,800 a month.", "I pay the rent on the first of each month."),
    ("I have a meeting with Priya on Monday.", "Priya is presenting the Q3 roadmap."),
    ("My daughter plays piano.", "My son plays guitar."),
    ("I use a MacBook Pro for work.", "I also have an iPad for reading."),
    ("I'm training for the Berlin marathon.", "My long run this week was 25 km."),
    ("My sister lives in Boston.", "I moved to Seattle."),
    ("Our standup is at 9:30.", "Our retro is at 14:00 on Fridays."),
    ("I'm vegetarian.", "I love vegetarian lasagna."),
    ("我在腾讯工作。", "腾讯的食堂很好吃。"),
    ("My flight to Tokyo is on May 2.", "I booked a hotel in Tokyo for the same trip."),
    ("My phone number is 555-0142.", "Call me on 555-0142 after 6pm."),
    ("I speak French.", "I also speak some German."),
    ("Mi perro se llama Max.", "Mi gato se llama Luna."),  # a language the rules do not read: never a supersession
    ("My dog is called Max.", "My cat is called Luna."),
    ("My husband's name is Tom.", "My husband Tom just got a promotion."),
    ("I wake up at 6:30 on weekdays.", "I wake up at 6:30 and meditate for ten minutes."),
    ("My doctor is Dr. Patel.", "Dr. Patel prescribed me new glasses."),
    ("I play tennis on Sundays.", "I also play squash on Wednesdays."),
    ("我的老板是王经理。", "王经理今天请大家吃饭。"),
]
DUPLICATES = [
    ("I'm allergic to cats.", "I am allergic to cats."),
    ("My birthday is June 12.", "My birthday is on the 12th of June."),
    ("My locker code is 4817.", "my locker code is 4817"),
    ("Remember that my locker code is 4817.", "My locker code is 4817."),
    ("I bank with Chase.", "I bank with Chase."),
    ("我每天早上七点起床。", "我每天早上七点起床。"),
]


@pytest.mark.parametrize(("old", "new"), SUPERSEDES)
def test_a_new_value_for_the_same_subject_supersedes(old, new):
    assert judge(old, new) == S


@pytest.mark.parametrize(("old", "new"), COMPATIBLE)
def test_statements_that_hold_together_are_compatible(old, new):
    assert judge(old, new) == C


@pytest.mark.parametrize(("old", "new"), DUPLICATES)
def test_the_same_fact_is_a_duplicate(old, new):
    assert judge(old, new) in (D, R)


def test_a_richer_version_of_the_same_fact_refines_it():
    assert judge("Our office is on floor 3.", "Our office is on floor 3, room 301.") == R
    assert judge("Our office is on floor 3, room 301.", "Our office is on floor 3.") == D


def test_values_are_read_by_kind():
    s = read_statement("I paid $1,200 on March 3 at 9:30 for 2 tickets to Lisbon, code AB12.")
    assert s.values["number:money"] == {"1200"}
    assert s.values["date"] == {"mar 3"}
    assert s.values["number:time"] == {"9:30"}
    assert s.values["number:count"] == {"2"}
    assert s.values["name"] == {"lisbon"}
    assert s.values["code"] == {"ab12"}
    assert "ticket" in s.terms and "lisbon" not in s.terms


# written after the rules, as a held-out check; the misses it found became the honorific,
# "n't", partial-name and favourite/preferred rules tested below
HELD_OUT_SUPERSEDES = [
    ("I live in Denver.", "I relocated to Austin in June."),
    ("My phone number is 555-0199.", "My new phone number is 555-0234."),
    ("My dentist is Dr. Patel.", "I switched dentists, now I see Dr. Kim."),
    ("I drive a Honda Civic.", "I sold the Civic and bought a Subaru Outback."),
    ("My rent is $1,800 a month.", "My rent went up to $2,050 a month."),
    ("My flight to Lisbon is on May 4.", "My Lisbon flight got moved to May 6."),
    ("I work at Acme Corp.", "I now work at Globex."),
    ("My son is 7 years old.", "My son just turned 8."),
    ("I prefer tea in the morning.", "I don't drink tea anymore, I prefer coffee in the morning."),
    ("我住在北京。", "我去年搬到了深圳。"),
    ("My wifi password is bluefish77.", "I changed the wifi password to redcat42."),
    ("I work remotely on Fridays.", "I no longer work remotely on Fridays."),
    ("My yoga class is on Tuesdays at 6 pm.", "My yoga class moved to Thursdays at 7 pm."),
    ("My daughter's school is Lincoln Elementary.", "My daughter transferred to Roosevelt Elementary."),
    ("I weigh 82 kg.", "I now weigh 78 kg."),
    ("我的手机号是13800000000。", "我的手机号改成了13911111111。"),
    ("My email is ana@old.com.", "My new email is ana@new.org."),
    ("I use Vim for coding.", "I switched from Vim to VS Code."),
]
HELD_OUT_COMPATIBLE = [
    ("I live in Denver.", "My sister lives in Chicago."),
    ("I like hiking.", "I also enjoy swimming."),
    ("My cat is called Miso.", "I have a dog called Rex too."),
    ("I am allergic to peanuts.", "I love Thai food."),
    ("My gym is open until 10 pm.", "My office is on the 4th floor."),
    ("I speak Spanish.", "I am learning Japanese as well."),
    ("My brother lives in Oslo.", "I live in Bergen."),
    ("I have a meeting with Sam on Monday.", "I have a dentist appointment on Wednesday."),
    ("I live in Toronto.", "I visited Montreal last weekend."),
    ("My favourite band is Radiohead.", "My favourite movie is Alien."),
    ("I run 5 km every morning.", "I swim 2 km on Sundays."),
    ("My mother lives in Lyon.", "My father lives in Nice."),
    ("I'm vegetarian.", "I love Italian food."),
    ("我喜欢喝茶。", "我也喜欢喝咖啡。"),
]
HELD_OUT_DUPLICATE = [
    ("I live in Denver.", "I live in Denver."),
    # ('My favourite food is sushi.', 'My favorite food is sushi.'): a spelling variant, one record by
    # the store's cosine rule (dedup_min_cosine + same values), not by the judge
    ("My locker code is 4817.", "Remember: my locker code is 4817."),
    ("I have two kids.", "I have 2 kids."),
    ("My car is a blue Toyota.", "My car is a blue Toyota."),
    ("I am allergic to cats.", "Please remember I'm allergic to cats."),
    ("My birthday is March 3.", "My birthday is on March 3rd."),
]


@pytest.mark.parametrize(("old", "new"), HELD_OUT_SUPERSEDES)
def test_held_out_supersessions(old, new):
    assert judge(old, new) == S


@pytest.mark.parametrize(("old", "new"), HELD_OUT_COMPATIBLE)
def test_held_out_compatible_pairs(old, new):
    assert judge(old, new) == C


@pytest.mark.parametrize(("old", "new"), HELD_OUT_DUPLICATE)
def test_held_out_duplicates(old, new):
    assert judge(old, new) in (D, R)


def test_a_title_is_not_a_sentence_end():
    assert read_statement("My dentist is Dr. Patel.").values["name"] == {"dr patel"}


def test_a_contracted_negation_with_a_change_marker_ends_the_old_statement():
    assert read_statement("I don't drink tea anymore.").negated == {"drink tea"}
    assert judge("I prefer tea in the morning.", "I don't drink tea anymore, I prefer coffee.") == S
    assert judge("I prefer tea in the morning.", "I don't drink coffee.") == C  # no change marker, other object


def test_selling_part_of_a_name_negates_the_whole_name():
    assert judge("I drive a Honda Civic.", "I sold the Civic and bought a Subaru Outback.") == S


def test_favourite_alone_names_no_subject():
    assert judge("My favourite band is Radiohead.", "My favourite movie is Alien.") == C
    assert judge("My favourite band is Radiohead.", "My favourite band is now Muse.") == S


def test_an_addressed_name_is_not_a_value():
    assert "name" not in read_statement("Thanks, Gina! I started my own clothing store.").values
    assert "name" not in read_statement("Hey Jon, my studio opens next week.").values
    assert read_statement("I met Gina at the store.").values["name"] == {"gina"}


def test_long_statements_are_never_replaced_wholesale():
    old = "I live in Boston. " + "I also like long walks by the river and reading books in the park. " * 2
    assert len(old.split()) > 30
    assert judge(old, "I moved to San Francisco last month.") == C
    assert judge("I live in Boston.", "I moved to San Francisco last month.") == S


def test_an_attribute_of_two_different_things_is_compatible():
    assert judge("My locker code is 4817.", "My bike lock code is 2290.") == C
    assert judge("My locker code is 4817.", "My gym locker code is 2290.") == S  # the same thing, qualified


# An old statement of what was already over when it was said: a later value is the present,
# not a correction (written for this test, in the languages of change_cues).
ALREADY_OVER = [
    ("My first job was at a bakery.", "I work in insurance now."),
    ("I used to live in Leeds.", "I live in York now."),
    ("I used to play the cello.", "I play the guitar now."),
    ("As a kid I had a rabbit called Bun.", "We have a dog called Pip now."),
    ("Growing up I spoke Polish at home.", "At home we speak English now."),
    ("When I was 20 I worked as a waiter.", "I'm a nurse now."),
    ("My old car was a Golf.", "I drive a Tesla now."),
    ("De niño vivía en Sevilla.", "Ahora vivo en Madrid."),
    ("Solía correr por las mañanas.", "Ahora nado por las tardes."),
    ("Quand j'étais étudiant, je travaillais dans un bar.", "Maintenant je suis comptable."),
    ("Früher wohnte ich in Köln.", "Jetzt wohne ich in Bonn."),
    ("Als Kind spielte ich Fußball.", "Jetzt spiele ich Tennis."),
    ("小时候我住在北京。", "我现在住在上海。"),
    ("子供の頃は大阪に住んでいました。", "今は東京に住んでいます。"),
]


@pytest.mark.parametrize(("old", "new"), ALREADY_OVER)
def test_what_was_already_over_stays_true(old, new):
    from memory_core.curation.judge import compatible_on_purpose

    assert judge(old, new) == C
    assert compatible_on_purpose(old, new) == "another occasion"  # the second opinion may not override it


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I live in Leeds.", "I live in York now."),
        ("My car is a Golf.", "I drive a Tesla now."),
        ("I play the cello.", "I play the guitar now."),
        ("Vivo en Sevilla.", "Ahora vivo en Madrid."),
        ("Ich wohne in Köln.", "Jetzt wohne ich in Bonn."),
        ("我住在北京。", "我现在住在上海。"),
        ("大阪に住んでいます。", "今は東京に住んでいます。"),
    ],
)
def test_the_same_changes_of_a_present_fact_supersede(old, new):
    """The control of ``test_what_was_already_over_stays_true``: without the past marker, the
    same new statements replace the old ones."""
    assert judge(old, new) == S


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # "used to" as accustomed, not as formerly
        ("I'm used to waking up at 6.", "I wake up at 8 now."),
        ("I got used to working from home.", "I work from the office now."),
        # 以前 as "before (a time)", früher as "earlier", a "first" that is a daily habit
        ("我每天十点以前睡觉。", "我现在每天十二点才睡。"),
        ("My first meeting was at 9 every day.", "My first meeting is at 10 now."),
        # a correction of the past itself
        ("I used to live in Leeds.", "Sorry, I never lived in Leeds, it was York."),
    ],
)
def test_phrases_that_only_look_like_a_past_are_not_read_as_one(old, new):
    """The negatives of ``test_what_was_already_over_stays_true`` (pairs a review wrote): the
    old statement is not of what was already over, or the new one corrects it."""
    from memory_core.curation.judge import compatible_on_purpose

    assert compatible_on_purpose(old, new) != "another occasion"
    assert judge(old, new) == S


def test_earlier_in_german_is_not_formerly():
    from memory_core.curation.judge import _FORMER

    assert _FORMER.search("Früher wohnte ich in Köln.")
    assert _FORMER.search("Ich wohne jetzt in Bonn, früher, als Student, in Köln.")
    assert not _FORMER.search("Ich stehe früher auf als mein Mann.")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # も inside another word (もう "any more", でも "but", 何も "nothing") is not "too"
        ("毎日タバコを吸っています。", "タバコはやめました。もう半年吸っていません。", S),
        ("犬を飼っています。", "猫も飼い始めました。", C),  # the particle: "a cat too"
    ],
)
def test_japanese_too_is_the_particle_not_a_syllable(old, new, expected):
    assert judge(old, new) == expected


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("J'habite à Paris.", "Ma copine habite à Lille."),
        ("Vivo en Madrid.", "Mi novia vive en Valencia."),
        ("Ich wohne in Berlin.", "Meine Freundin wohnt in Leipzig."),
    ],
)
def test_a_partner_named_in_another_language_is_someone_else(old, new):
    from memory_core.curation.judge import compatible_on_purpose

    assert judge(old, new) == C
    assert compatible_on_purpose(old, new) == "someone else"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("I usually go to bed around 11.", "Stayed up till 2am last night finishing a book.", C),
        ("I go running every morning.", "Skipped my run this morning, too tired.", C),
        ("Todos los días como a las dos.", "Ayer comí a las cuatro.", C),
        # a cue of change or of an end still replaces the habit
        ("I usually go to bed around 11.", "These days I go to bed at 1.", S),
        ("I run every morning.", "I quit running yesterday.", S),
    ],
)
def test_a_habit_then_one_day_is_another_occasion(old, new, expected):
    assert judge(old, new) == expected


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I'm single.", "I'm in a relationship with Noor now."),
        ("Ich bin verlobt.", "Wir haben im Mai geheiratet."),
        ("Je suis célibataire.", "Je suis en couple depuis cet été."),
        ("Estoy casado con Lucía.", "Lucía y yo nos divorciamos el año pasado."),
        ("Estoy soltera.", "Tengo novio desde marzo."),
        ("我和男朋友订婚了。", "我们上个月领证了，正式结婚啦！"),
        ("婚約しました。", "先月結婚しました。"),
    ],
)
def test_a_new_relationship_status_replaces_the_old_one(old, new):
    assert judge(old, new) == S


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("I'm married.", "My sister got divorced."),  # someone else's status
        ("I'm married.", "I got married in 2015."),  # the same status
        ("Ich bin verlobt.", "Wir sind noch nicht verheiratet."),  # a negation states no status
        ("I used to be married.", "I'm single."),  # what was already over
    ],
)
def test_a_status_of_someone_else_or_the_same_status_replaces_nothing(old, new):
    assert judge(old, new) != S


def test_relationship_status_reads_one_status_or_none():
    from memory_core.curation.judge import relationship_status

    assert relationship_status("We got engaged in Paris!") == "engaged"
    assert relationship_status("Wir haben uns getrennt.") == "apart"
    assert relationship_status("我现在单身。") == "single"
    assert relationship_status("I'm not married.") is None
    assert relationship_status("Divorced, now engaged again.") is None  # two statuses: none read
    assert relationship_status("I live in Leeds.") is None


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # the same place said more precisely is no new value
        ("我住在杭州。", "我住在杭州西湖区，离公司很近。", C),
        ("Ich wohne in Hamburg.", "Ich wohne in Hamburg-Altona, nah an der Elbe.", C),
        ("I live in San Diego.", "I live in San Diego County, near the coast.", C),
        # another place that only shares a word is one
        ("I live in York.", "I live in New York.", S),
        ("我住在杭州。", "我现在住在上海。", S),
    ],
)
def test_a_place_said_more_precisely_is_not_a_new_place(old, new, expected):
    assert judge(old, new) == expected


@pytest.mark.parametrize(
    "old, new",
    [
        ("My flatmate is Rosa.", "Rosa moved out last month."),  # the person named in both
        ("My boss is Tomasz.", "Tomasz retired, I report to Ines now."),
        ("My boyfriend Luca and I live together.", "Luca and I broke up."),
        ("My locker number is 311.", "They moved me to locker 482."),  # an impersonal "they"
        ("Je fais un stage chez Renault.", "Mon stage est fini, ils m'ont embauché en CDI."),
        ("I live with my parents.", "I moved out of my parents' place into my own flat."),  # where one lives
        ("Ich wohne bei meinen Eltern.", "Ich bin bei meinen Eltern ausgezogen."),
        ("Peso 90 kilos.", "Ya no peso 90 kilos, he bajado a 82 kilos."),  # Spanish "he": I have
    ],
)
def test_the_same_person_said_another_way_is_not_someone_else(old, new):
    """Each was held compatible "on purpose" as about someone else (never put to the second
    opinion) before the people of both statements were read as one reading."""
    assert judge(old, new) == Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new",
    [
        ("I live in Boston.", "She lives in Paris."),  # a pronoun with no one to stand for
        ("My sister lives in Madrid.", "I moved to Paris."),
        ("My wife's name is Ingrid.", "My ex-wife's name is Monica."),  # an ex is someone else
        ("I have lunch with my sister every Sunday.", "I moved to Berlin."),  # not where one lives
        ("Ich habe eine Tochter.", "Meine Tochter geht jetzt zur Schule."),  # a capitalised noun names no one
        # a shared name of a place, an employer or a brand is not a person (a review's cases)
        ("I work at Google.", "My brother quit Google."),
        ("I live in Madrid.", "My sister moved out of Madrid."),
        ("I drive a Tesla.", "My husband sold his Tesla."),
        ("I use Spotify.", "My son switched from Spotify to Apple Music."),
        ("J'habite à Lyon.", "Ma sœur a quitté Lyon pour Paris."),
        ("Ich arbeite bei Siemens.", "Mein Bruder hat bei Siemens gekündigt."),
        # a pronoun is never bound to the other statement's person
        ("My brother lives in Madrid.", "She moved to Paris."),
        ("I live in Madrid near my sister.", "She moved to Paris."),
        ("My sister and I live in Madrid.", "She moved to Paris."),
        ("I'm vegetarian, like my wife.", "She eats meat now."),
        ("I work with my brother at Google.", "He left Google."),
        ("Vivo en Madrid cerca de mi hermano.", "Él se mudó a Sevilla."),
        ("I live with my older sister in Madrid.", "She moved to Paris."),
        # "they" with the speaker only as a possessive or far from it is someone
        ("I live in Boston.", "They moved to Denver, near my office."),
        ("I'm vegetarian.", "They eat meat now, it drives me crazy."),
        ("J'habite à Lyon.", "Ils ont déménagé à Paris, près de mon bureau."),
        # a second review's cases: someone's home is theirs; "they" near the speaker is someone
        ("I live in Boston.", "My parents' house is in Ohio now."),
        ("My parents' house is in Ohio.", "I live in Denver now."),
        ("I live in Leeds.", "My sister's flat is in York now."),
        ("I live in Boston.", "They moved near us."),
        ("J'habite à Paris.", "Il fait ses études à Lyon maintenant."),
        # a real "il" beside an impersonal one
        ("J'habite à Lyon.", "Il a déménagé à Paris il y a un mois."),
        ("Je travaille chez Renault.", "Il a quitté Renault il y a deux semaines."),
    ],
)
def test_someone_else_stays_someone_else(old, new):
    assert judge(old, new) != Verdict.SUPERSEDES and compatible_on_purpose(old, new) == "someone else"


@pytest.mark.parametrize(
    "old, new",
    [
        ("I'm pregnant, due in June.", "Our son was born on June 3rd."),
        ("My wife is expecting our second.", "Our daughter arrived yesterday, 3.2 kg."),
        ("Estoy embarazada de seis meses.", "Nuestra hija nació el martes."),
        ("Je suis enceinte.", "Notre fille est née ce matin."),
        ("Meine Freundin ist schwanger.", "Unser Sohn ist letzte Woche zur Welt gekommen."),
        ("我老婆怀孕了。", "宝宝昨天出生了。"),
        ("妻が妊娠しています。", "昨日、娘が生まれました。"),
    ],
)
def test_a_birth_ends_a_pregnancy(old, new):
    assert judge(old, new) == Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new",
    [
        ("I'm pregnant.", "My sister's baby was born yesterday."),  # someone else's birth
        ("My wife is expecting.", "My niece was born last week."),
        ("I'm pregnant.", "I was born in Leeds."),  # the speaker's own birth: no baby, no arrival
        ("We're expecting a baby in May.", "The baby isn't born yet."),
        # a review's cases: "expecting" that is no pregnancy, a birth long ago, someone's baby
        ("I'm expecting guests this weekend.", "My son arrived from college yesterday."),
        ("My rent is due in March.", "Our son was born in 2019."),
        ("Estoy esperando un paquete.", "Mi hijo llegó ayer."),
        ("Wir erwarten ein Paket aus China.", "Unser Sohn kam gestern nach Hause."),
        ("Il attend un appel.", "Mon fils est né en 2010."),
        ("We're expecting our second child.", "Our first daughter was born in 2020."),
        ("I'm pregnant.", "My daughter's baby was born yesterday."),
        ("My daughter is pregnant.", "My son was born last week."),
        ("I'm pregnant.", "Our neighbours' baby was born."),
        ("I'm pregnant.", "The Smiths' baby was born today."),
        ("I'm pregnant.", "The baby next door was born yesterday."),
        ("I'm pregnant.", "A baby was born on our street yesterday."),
    ],
)
def test_a_birth_of_someone_else_or_a_negated_one_ends_nothing(old, new):
    assert judge(old, new) != Verdict.SUPERSEDES


def test_a_day_alone_is_not_held_passing_a_stretch_is():
    """ "today" may date a change for good (the second opinion is asked); "this week" bounds it."""
    assert compatible_on_purpose("I have braces.", "My braces came off today!") is None
    assert compatible_on_purpose("I live in Leeds.", "I'm in Rome this week for work.") == "passing"
    assert compatible_on_purpose("我住在上海。", "这周我在杭州出差。") == "passing"
    assert judge("The bakery opens at 7.", "The bakery closed early today.") == Verdict.COMPATIBLE


@pytest.mark.parametrize(
    "old, new",
    [
        # someone's by name: "Lena's cousin", "la hermana de Tom"
        ("I'm married to Lena.", "Lena's cousin just got divorced."),
        ("I'm engaged to Marco.", "Marco's sister got married last weekend."),
        ("I live in Denver.", "La hermana de Tom se mudó a Denver."),
        # a best friend is no partner, in a statement about a relationship or not
        ("I'm single.", "My best friend is dating someone new."),
        ("Estoy casada.", "Mi mejor amiga se acaba de divorciar."),
        ("Je suis mariée.", "Ma meilleure amie vient de se fiancer."),
        ("Ich bin single.", "Meine beste Freundin ist jetzt verlobt."),
    ],
)
def test_someone_named_by_another_or_a_best_friend_is_someone_else(old, new):
    assert judge(old, new) == Verdict.COMPATIBLE and compatible_on_purpose(old, new) == "someone else"


@pytest.mark.parametrize(
    "old, new",
    [
        ("I grew up in Porto.", "I live in Madrid now."),
        ("Crecí en Sevilla.", "Ahora vivo en Valencia."),
        ("J'ai grandi à Lille.", "J'habite à Nantes maintenant."),
        ("Ich bin in Graz aufgewachsen.", "Jetzt wohne ich in Wien."),
        ("我在成都长大。", "我现在住在上海。"),
        ("大阪で育ちました。", "今は東京に住んでいます。"),
        # the past told after the present, naming nothing of it
        ("I'm a nurse at St Mary's.", "I used to be a bartender back in college."),
    ],
)
def test_an_upbringing_or_a_past_told_later_stays_beside_the_present(old, new):
    assert judge(old, new) == Verdict.COMPATIBLE and compatible_on_purpose(old, new) == "another occasion"


def test_a_past_that_names_the_present_ends_it():
    assert judge("I live in Leeds.", "I used to live in Leeds, I'm in York now.") == Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new",
    [
        ("I live in Glasgow.", "If I ever won the lottery I'd move to Tuscany."),
        ("I drive a Golf.", "Should I get an electric car? The Golf is getting old."),
        ("Vivo en Bilbao.", "Si encontrara trabajo allí, me mudaría a Barcelona."),
        ("Je travaille chez Renault.", "Si on me proposait un poste chez Airbus, je partirais."),
        ("Ich arbeite bei Siemens.", "Wenn ich könnte, würde ich zu BMW wechseln."),
        ("我在杭州工作。", "如果有机会的话，我想去深圳工作。"),
        ("Abito a Torino.", "Se trovassi lavoro a Milano, mi trasferirei."),
    ],
)
def test_what_would_be_or_a_question_of_what_to_do_asserts_no_change(old, new):
    assert judge(old, new) == Verdict.COMPATIBLE and compatible_on_purpose(old, new) == "unasserted"


@pytest.mark.parametrize(
    "old, new",
    [
        ("I live in York.", "We moved to Leeds. Should we get a dog?"),  # the question is about something else
        ("We live in Leeds.", "If you're wondering, we moved to Bristol in May."),  # an "if" with nothing that would be
    ],
)
def test_a_change_said_beside_a_question_or_an_if_still_supersedes(old, new):
    assert judge(old, new) == Verdict.SUPERSEDES


def test_japanese_if_only_opens_a_clause():
    """もし inside 手伝いもしてます is the particle も and する, not "if"."""
    assert compatible_on_purpose("エンジニアとして働いています。", "週末は店の手伝いもしてます。") != "unasserted"


@pytest.mark.parametrize(
    "old, new",
    [
        ("I swim every Thursday at 7.", "This Thursday's swim is off, the pool is closed."),
        ("Tengo clase de inglés los lunes.", "Este lunes no hay clase, la profesora está enferma."),
        ("Je fais du vélo tous les dimanches.", "Ce dimanche je ne roule pas, il pleut."),
        ("Ich gehe dienstags zum Training.", "Diesen Dienstag fällt das Training aus."),
        ("I have piano on Wednesdays.", "Tomorrow's lesson moved to Friday, my teacher is away."),
    ],
)
def test_one_occasion_of_a_habit_changed_leaves_the_habit(old, new):
    assert judge(old, new) == Verdict.COMPATIBLE and compatible_on_purpose(old, new) == "another occasion"


@pytest.mark.parametrize(
    "old, new",
    [
        ("I have standup at 9:30 every day.", "Starting tomorrow, standup is at 10."),
        ("I drink coffee every morning.", "As of today I've quit coffee."),
    ],
)
def test_a_habit_changed_for_good_from_a_day_on_is_superseded(old, new):
    assert judge(old, new) == Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new",
    [
        ("I read on a Kindle.", "Replaced my Kindle with a Kobo."),
        ("I drive a Passat.", "The Passat finally died, I got a Skoda."),
        ("We chat on Discord.", "Discord is gone, we're on Matrix now."),
        ("The conference is in September.", "They moved the conference to October."),  # organisers, not someone
        ("Lavoro in banca.", "Ho lasciato la banca, ora faccio il fotografo."),  # Italian "il" is an article
        ("My girlfriend Mia and I live together.", "Mia and I split up, she moved out in May."),
    ],
)
def test_a_value_named_as_left_behind_is_not_kept(old, new):
    assert judge(old, new) == Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new, held",
    [
        ("My lease ends in March.", "Renewed the lease for another year, it runs until next March now.", None),
        ("I have a cat.", "We got another cat.", "additive"),
        ("我打算明年换工作。", "想了想还是不换了。", None),  # 还是: "rather"
        ("我有一只猫。", "我还养了一只狗。", "additive"),  # 还: "also"
        ("J'ai une tendinite au coude.", "Plus aucune douleur au coude, j'ai repris le tennis.", None),
        ("I have a car.", "Plus I bought a bike.", "additive"),
        ("I run in the mornings.", "I run in the evenings now, mornings are too cold.", None),
        ("I run in the mornings.", "I also do yoga in the evenings.", "additive"),
        ("I use a Mac at work.", "At home I switched to Linux.", "another setting"),
    ],
)
def test_additions_and_settings_are_held_only_when_they_are_some(old, new, held):
    """ "another year", 还是, French "plus aucune" add nothing; a time of day with a change said is
    the habit moved: none of them holds the pair from the second opinion."""
    assert compatible_on_purpose(old, new) == held


# A review of the rules above attacked each class; its pairs, as they should be now.
@pytest.mark.parametrize(
    "old, new",
    [
        # someone's by name is another person than "my …" of the same noun
        ("My sister lives in Boston.", "Tom's sister moved to Paris."),
        ("My brother works at Google.", "Jamie's brother quit Google."),
        ("Mi hermana vive en Madrid.", "La hermana de Tom se mudó a Londres."),
        ("Meine Schwester wohnt in Köln.", "Die Schwester von Tom ist nach Berlin gezogen."),
        ("Mia sorella vive a Roma.", "La sorella di Marco si è trasferita a Milano."),
        # a part of the thing, or a passing breakdown, is not the thing left behind
        ("I drive a Passat.", "My Passat broke down on the M1 today, waiting for the tow."),
        ("I use a Garmin watch.", "Swapped my Garmin strap for a nylon one."),
        ("I use Slack at work.", "Deleted the Slack app from my phone, I only check it on my laptop now."),
        # "another one", "another term of …" are another thing
        ("I have a dog named Rex.", "Got another one, a beagle called Milo."),
        ("I take Spanish classes.", "I signed up for another term of Italian classes."),
        # one occasion, with "desde" as "from" a place and 开始 as "starts"
        ("Trabajo en la oficina todos los lunes.", "Este lunes trabajo desde casa, hay huelga de metro."),
        ("我每周一上午十点开会。", "明天的会议改到下午三点开始。"),
    ],
)
def test_review_pairs_that_stay_compatible(old, new):
    assert judge(old, new) != Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new",
    [
        # a change said in a clause of its own beside a question or an "if"
        ("I work at Amazon.", "I quit my job at Amazon, should I take a break before job hunting?"),
        ("I live in Chicago.", "We just moved to Denver, so if you ever have gym recommendations I'd appreciate them."),
        ("I'm vegetarian.", "I went vegan last month, should I take B12?"),
        ("I live in Porto.", "I moved to Lisbon in May, might go back if the job doesn't work out."),
        ("Lavoro in banca.", "Non so se te l'ho detto, ma ora lavoro in una libreria."),  # a noun in -ria
        ("我住在北京。", "我搬到上海了，如果你来上海可以找我。"),
        ("大阪に住んでいます。", "東京に引っ越しました、もし来ることがあれば連絡してね。"),
        # the past beside a present that goes on, or a change said beside the past
        ("I live in the town I grew up in.", "We moved to Bristol in May."),
        ("I grew up in Leeds and still live there.", "I moved to London last month."),
        ("我在成都长大，现在还住在成都。", "我搬到上海了。"),
        ("大阪で育ち、今も大阪に住んでいます。", "東京に引っ越しました。"),
        ("I live in Leeds.", "I grew up in Cork and moved back there last month."),
        ("I live in Austin.", "We moved back to Ohio, where I grew up."),
        # "today" dating an ending, not one occasion
        ("I go to Pilates every Saturday.", "Cancelled my Pilates membership today, too expensive."),
        # someone's by name only as the object of the speaker's own change
        ("I live in Austin.", "I moved in with Tom's sister in Denver."),
        ("I work at Google.", "I left Google and joined Dave's brother's startup."),
        ("I'm dating Sam.", "Sam and I broke up, I'm with Jamie's cousin Leo now."),
    ],
)
def test_review_pairs_that_are_not_held_from_superseding(old, new):
    """Each was held compatible on purpose by a first version of the rules above."""
    assert compatible_on_purpose(old, new) is None
    assert judge(old, new) == Verdict.SUPERSEDES


@pytest.mark.parametrize(
    "old, new",
    [
        ("I smoke every day.", "I quit smoking today!"),
        ("Siempre voy al gimnasio por la tarde.", "Ahora voy al gimnasio por la mañana, antes de trabajar."),
        ("Fumo todos los días.", "Hoy dejé de fumar."),
        ("Vivo en Madrid.", "Volví a Sevilla, donde crecí."),
    ],
)
def test_review_pairs_the_rules_leave_to_the_second_opinion(old, new):
    """Changes the rules do not read; they must not hold them compatible on purpose either."""
    assert compatible_on_purpose(old, new) is None


# ---------------------------------------------------------------------- bounded reading
def _padded(text: str, chars: int) -> str:
    """``text`` followed by distinct filler sentences up to ``chars`` characters."""
    filler = " ".join(f"Item {i} of my notes is about the garden shed." for i in range(chars // 40 + 2))
    return f"{text} {filler}"[:chars]


LONG_PAIRS = [  # (old, new): one or both beyond MAX_JUDGED_CHARS, in several scripts and shapes
    ("I live in Boston.", "I moved to Paris now. "),  # a change the rules would read at any shorter length
    ("I'm engaged to Sam.", "We got married in May. "),
    ("My car is a Golf. ", "I drive a Tesla now."),
    ("我住在广州。", "我现在住在深圳。"),
    ("Ich wohne in Köln. ", "Jetzt wohne ich in Bonn. "),
]


@pytest.mark.parametrize(("old", "new"), LONG_PAIRS)
@pytest.mark.parametrize("which", ["old", "new", "both"])
def test_a_statement_beyond_the_reading_bound_is_kept_beside_the_other_unread(old, new, which, monkeypatch):
    """A statement longer than ``MAX_JUDGED_CHARS`` says many things at once: the pair is
    compatible on purpose ("long"), names no same values, and neither text is read by the
    rules (``read_statement`` and ``read_cues`` are never called): a maximal batch of long
    memories costs its shard's writer a bounded time per pair."""
    from memory_core.curation import judge as judge_module

    size = judge_module.MAX_JUDGED_CHARS + 50  # beyond the bound as the rules read it (spacing folded)
    if which in ("old", "both"):
        old = _padded(old, size) if len(old) < size else old
    if which in ("new", "both"):
        new = _padded(new, size) if len(new) < size else new

    def never(*_):
        raise AssertionError("a statement beyond the bound was read")

    monkeypatch.setattr(judge_module, "read_statement", never)
    monkeypatch.setattr(judge_module, "read_cues", never)
    pair = judge_module.read_pair(old, new)
    assert pair.long
    assert (pair.verdict(), pair.on_purpose(), pair.same_values()) == (C, "long", False)
    assert judge(old, new) == C and compatible_on_purpose(old, new) == "long"
    assert judge_module.judged(old, new, why=True) == (C, "long")


@pytest.mark.parametrize(
    "variant",
    [
        lambda t: t.upper(),
        lambda t: t.replace(". ", ".   "),
        lambda t: t.replace(".", "!"),
        lambda t: "\n".join(t.split(" ")),
        lambda t: "Remember: " + t,
    ],
    ids=["case", "spacing", "punctuation", "line breaks", "lead-in"],
)
def test_a_long_statement_is_a_duplicate_of_a_text_that_normalises_alike(variant):
    """Beyond the bound, rule 1 still holds on the normalised text the rules would read: the
    same text up to case, spacing, punctuation or a lead-in is a duplicate (a
    re-sent note is not stored twice); one word changed is not."""
    from memory_core.curation import judge as judge_module

    old = _padded("My notes from the trip to Lisbon.", judge_module.MAX_JUDGED_CHARS + 200)
    pair = judge_module.read_pair(old, variant(old))
    assert pair.long and pair.verdict() == D and pair.same_values() and pair.on_purpose() is None
    assert judge(old, old.replace("Lisbon", "Porto")) == C


@pytest.mark.parametrize("size", [3_900, 16_000])
def test_a_maximal_batch_of_long_notes_is_judged_within_itself_reading_each_note_once(size, monkeypatch):
    """A maximal ``POST /v1/memory`` batch (256 notes) of distinct long notes, each judged
    against up to 8 of the notes before it, anywhere in the batch (curation's candidates are
    the most similar, not the latest): every note is prepared for the
    rules once (``_long_form``'s cache holds the batch: ``LONG_FORM_CACHE_BYTES``), not once
    per pair, at 3.9 KB (the 1 MiB body bound's notes) and at the 16 KB content bound (several
    batches' worth of notes); the verdicts are unchanged. The test's own cache, so no other
    test sees its entries."""
    from memory_core.curation import judge as judge_module

    monkeypatch.setattr(
        judge_module,
        "_long_forms",
        judge_module._long_forms.__class__(judge_module.LONG_FORM_CACHE_BYTES, getsizeof=lambda held: held[2]),
    )
    prepared = {"n": 0}
    real = judge_module._prepared

    def counting(text):
        prepared["n"] += 1
        return real(text)

    monkeypatch.setattr(judge_module, "_prepared", counting)
    notes = [_padded(f"Note {i}: the shed plan, step {i}.", size) for i in range(256)]
    rng = random.Random(size)
    pairs = [(j, i) for i in range(1, 256) for j in rng.sample(range(i), min(8, i))]
    verdicts = [judge_module.read_pair(notes[j], notes[i]).verdict() for j, i in pairs]
    assert set(verdicts) == {C}
    assert prepared["n"] == 256


def test_the_bound_leaves_every_shorter_statement_to_the_rules():
    """At ``MAX_JUDGED_CHARS`` exactly the rules still read the pair (the bound is strict)."""
    from memory_core.curation import judge as judge_module

    new = "I moved to Paris now."
    old = "I live in Boston." + " " * (judge_module.MAX_JUDGED_CHARS - len("I live in Boston."))
    assert len(old) == judge_module.MAX_JUDGED_CHARS
    assert not judge_module.read_pair(old, new).long
    assert judge(old, new) == S


@pytest.mark.parametrize(
    ("old", "new"),
    [*SUPERSEDES[:6], ("I like tea.", "I also like coffee."), ("I live in Boston.", "I live in Boston.")],
)
def test_one_reading_answers_every_question_of_a_pair(old, new, monkeypatch):
    """``read_pair`` reads each statement once (two ``read_statement`` calls) and its three
    answers are those of ``judge``, ``compatible_on_purpose`` and ``same_values``."""
    from memory_core.curation import judge as judge_module

    expected = (judge(old, new), compatible_on_purpose(old, new), judge_module.same_values(old, new))
    reads = []
    real = judge_module.read_statement
    monkeypatch.setattr(judge_module, "read_statement", lambda *a: reads.append(a) or real(*a))
    pair = judge_module.read_pair(old, new)
    assert (pair.verdict(), pair.on_purpose(), pair.same_values(), pair.verdict()) == (*expected, expected[0])
    assert len(reads) == 2


def test_a_long_note_with_a_paragraph_added_refines_it_and_a_part_of_it_is_a_duplicate():
    """Rule 2 beyond the bound, on the normalised texts: the old note within the new one (a
    paragraph added, the old at least half of it) refines it (the record takes the richer
    text); the new within the old (a part re-sent) is a duplicate; a short old statement
    inside a long new one is not a refinement (the new says far more), nor is the old note
    with another note twice its size added."""
    from memory_core.curation import judge as judge_module

    note = _padded("My notes from the trip to Lisbon.", judge_module.MAX_JUDGED_CHARS + 200)
    added = note + " Then we took the train to Porto and ate francesinha."
    assert judge(note, added) == R
    assert judge(added, note) == D
    assert judge(note, note[: len(note) // 2 + 600]) == D
    assert judge("I live in Boston.", "I live in Boston. " + note) == C
    assert judge(note, note + " " + _padded("Another note entirely.", 2 * len(note))) == C


@pytest.mark.parametrize(
    ("old", "new", "verdict"),
    [
        ("I live in Boston.", "I moved to" + " " * 990 + " Paris now.", S),  # spacing the rules fold
        ("My car is a Golf.", "Remember: I drive a Tesla now. " + "b" * 970, S),  # a lead-in they drop
    ],
)
def test_the_bound_counts_the_text_as_the_rules_read_it(old, new, verdict):
    """A statement over ``MAX_JUDGED_CHARS`` only as written (whitespace runs, a lead-in) is
    read: the bound is on what the rules would read."""
    from memory_core.curation import judge as judge_module

    assert len(new) > judge_module.MAX_JUDGED_CHARS
    assert not judge_module.read_pair(old, new).long
    assert judge(old, new) == verdict
