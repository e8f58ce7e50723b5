"""The extraction slips of issue 24 as classes, measured on the labelled turn set.

``tests/turn_set/labelled.jsonl`` (hand-written, see ``tests/turn_set/build.py``) labels chat
turns with what memory should do with them; its dev/holdout split was fixed before the rules
for these classes were written, and the rules were written looking at ``dev`` only. The
holdout floors below are the figures measured on the first run of the finished rules (README
"Curation"), less a margin of one turn per class at most.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from memory_core.chat import routing
from memory_core.chat.extract import classify_sentence, extract_turn, is_request, join_sentences
from memory_core.curation.judge import strip_lead_in

DATA = Path(__file__).resolve().parents[2] / "turn_set" / "labelled.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
BLIND = Path(__file__).resolve().parents[2] / "turn_set" / "blind_2026_12_05.jsonl"
"""545 turns written by a helper who had read neither the rules nor ``labelled.jsonl`` (15
languages), split dev/holdout by the parity of each text's SHA-256 before any failure was
looked at; the rules of 2026-12-05 were then written looking at ``dev``'s failures only."""
BLIND_ROWS = [json.loads(line) for line in BLIND.read_text(encoding="utf-8").splitlines() if line.strip()]


def gate(text: str) -> str | None:
    """The gate's message-level skip reason (``routing.skip_reason``'s last two checks)."""
    if routing.is_punctuation_only(text):
        return "punctuation"
    return "greeting" if routing.is_greeting(text) else None


def correct(row: dict) -> bool:
    """Whether memory does with ``row["text"]`` what its label says."""
    text, label = row["text"], row["label"]
    skipped = gate(text)
    if label == "skip":
        return skipped == "greeting"
    if label == "punctuation":
        return skipped == "punctuation"
    stored = [m.content for m in extract_turn([{"role": "user", "content": text}], "", window_every=0).memories]
    if label == "request":
        return skipped is None and not stored
    if label == "statement":
        return skipped is None and bool(stored)
    return skipped is None and stored == [row["expected"]]  # lead_in, join


def scores(split: str, rows: list[dict] = ROWS) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        if row["split"] == split:
            out[row["label"]][0] += correct(row)
            out[row["label"]][1] += 1
    return {label: (ok, n) for label, (ok, n) in out.items()}


def test_the_set_is_split_and_balanced():
    by = defaultdict(int)
    for row in ROWS:
        by[(row["split"], row["label"])] += 1
    labels = {"skip", "punctuation", "request", "statement", "lead_in", "join"}
    assert {label for _, label in by} == labels
    assert all(by[("holdout", label)] >= 5 for label in labels)
    assert len(ROWS) >= 350


# floors on the holdout: every class of slip the issue names
HOLDOUT_FLOORS = {"skip": 91, "punctuation": 12, "request": 33, "statement": 24, "lead_in": 16, "join": 5}


@pytest.mark.parametrize("label", sorted(HOLDOUT_FLOORS))
def test_holdout_class_at_floor(label):
    ok, n = scores("holdout")[label]
    assert ok >= HOLDOUT_FLOORS[label], f"{label}: {ok}/{n} on the holdout"


def test_dev_all_correct():
    assert all(ok == n for ok, n in scores("dev").values()), scores("dev")


# --- the classes, by example of each member kind (beside the set)


@pytest.mark.parametrize("text", ["No", "Nope.", "nah", "No thanks!", "Never mind", "What's up?", "How are you?"])
def test_negatives_and_small_talk_skip_memory(text):
    assert gate(text) == "greeting"


@pytest.mark.parametrize("text", ["???", "...", "!?", "。。。", "¿?", "…", "?\u200b?"])
def test_punctuation_only_is_its_own_class(text):
    assert gate(text) == "punctuation"
    assert classify_sentence(text) == "punctuation"


@pytest.mark.parametrize("text", ["👍", "ok 👍", "🙏!!"])
def test_emoji_stays_an_acknowledgement(text):
    assert gate(text) == "greeting"


@pytest.mark.parametrize(
    "text",
    [
        "No, I moved to Berlin in March.",
        "Nope is my son's favourite word.",
        "Right now I live in Porto.",
        "Sí, vivo en Lima.",
    ],
)
def test_a_statement_opening_with_an_acknowledgement_is_kept(text):
    assert gate(text) is None
    assert extract_turn([{"role": "user", "content": text}], "", window_every=0).memories


@pytest.mark.parametrize(
    "text, asks",
    [
        ("Share a surprising fact about the geography of Chile", True),
        ("Share prices at my company fell.", False),
        ("Show me a picture of a heron.", True),
        ("Show jumping is my hobby.", False),
        ("Play a song for me.", True),
        ("Play is important for kids.", False),
        ("Explain recursion.", True),
        ("Imagine Dragons is my favourite band.", False),
        ("Write-ups are the worst part of my job.", False),
        ("I want you to write a limerick.", True),
        ("Dime un chiste.", True),
        ("给我讲个笑话。", True),
        ("我住在上海。", False),
        ("詩を書いてください。", True),
        ("私は大阪に住んでいます。", False),
        ("시를 써 줘.", True),
        ("저는 서울에 살아요.", False),
    ],
)
def test_requests_by_their_form(text, asks):
    assert is_request(text) is asks


@pytest.mark.parametrize(
    "text, fact",
    [
        ("请记住：我的生日是五月三日。", "我的生日是五月三日。"),
        ("请记住我对花生过敏。", "我对花生过敏。"),
        ("覚えておいて、猫の名前はモモです。", "猫の名前はモモです。"),
        ("참고로, 저는 채식주의자예요.", "저는 채식주의자예요."),
        ("Recuerda que vivo en Lima.", "vivo en Lima."),
        ("Запомни: я живу в Самаре.", "я живу в Самаре."),
        ("Remember: my code is 4817.", "my code is 4817."),
        ("Notebooks are cheap here.", "Notebooks are cheap here."),
    ],
)
def test_lead_ins_in_every_script(text, fact):
    assert strip_lead_in(text) == fact


@pytest.mark.parametrize(
    "parts, joined",
    [
        (["我住在上海。", "我的猫叫咪咪。"], "我住在上海。我的猫叫咪咪。"),
        (["私は教師です。", "猫がいます。"], "私は教師です。猫がいます。"),
        (["我住在上海。", "I work at a bank."], "我住在上海。I work at a bank."),
        (["I live in Oslo.", "My cat is Mimi."], "I live in Oslo. My cat is Mimi."),
        (["저는 서울에 살아요.", "고양이가 있어요."], "저는 서울에 살아요. 고양이가 있어요."),
        (["ผมชอบกาแฟ", "ผมอยู่กรุงเทพ"], "ผมชอบกาแฟผมอยู่กรุงเทพ"),
    ],
)
def test_sentences_joined_as_the_script_writes_them(parts, joined):
    assert join_sentences(parts) == joined


# --- the blind set: its holdout as measured once, after the rules written on its dev split
# (before those rules: skip 91/131, punctuation 15/15, request 42/49, statement 40/42,
# lead_in 19/25, join 8/8); floors at the measured figures less one turn
BLIND_HOLDOUT_FLOORS = {"skip": 116, "punctuation": 14, "request": 41, "statement": 40, "lead_in": 19, "join": 7}


@pytest.mark.parametrize("label", sorted(BLIND_HOLDOUT_FLOORS))
def test_blind_holdout_class_at_floor(label):
    ok, n = scores("holdout", BLIND_ROWS)[label]
    assert ok >= BLIND_HOLDOUT_FLOORS[label], f"{label}: {ok}/{n} on the blind holdout"


def test_blind_set_is_split_by_hash_and_its_dev_is_correct():
    import hashlib

    for row in BLIND_ROWS:
        parity = int(hashlib.sha256(row["text"].encode()).hexdigest(), 16) % 2
        assert row["split"] == ("dev" if parity == 0 else "holdout")
    assert all(ok == n for ok, n in scores("dev", BLIND_ROWS).values()), scores("dev", BLIND_ROWS)


@pytest.mark.parametrize(
    "text",
    [
        "haha",
        "Hahaha!",
        "jajaja",
        "ahahah",
        "hehe",
        "loool",
        "LMAOOO",
        "mdrrr",
        "xDDD",
        "kkkk",
        "ｗｗｗ",
        "哈哈哈",
        "ㅋㅋㅋ",
        "ахаха",
        "5555",
        "haha ok",
        "lol thanks",
    ],
)
def test_laughter_in_its_typed_forms_is_small_talk(text):
    assert gate(text) == "greeting"


@pytest.mark.parametrize(
    "text",
    [
        "Buenas noches",
        "bonne nuit",
        "Gute Nacht",
        "buonanotte",
        "boa noite",
        "спокойной ночи",
        "gm",
        "ttyl",
        "Have a nice day!",
        "nos vemos",
        "bis später",
        "مع السلامة",
        "知道了",
        "分かりました",
        "okey",
        "allright",
        "ahora no",
        "jetzt nicht",
        "いいえ、結構です",
        "How are you doing today?",
        "hru",
        "I'm fine, thanks",
        "Doing well, thanks for asking",
    ],
)
def test_greetings_farewells_acknowledgements_by_language(text):
    assert gate(text) == "greeting"


@pytest.mark.parametrize(
    "text", ["hash", "Haha is my cat's name.", "Hello Kitty is my favourite brand.", "bien joué à mon match"]
)
def test_words_near_laughter_or_greetings_are_not_small_talk(text):
    assert gate(text) is None


@pytest.mark.parametrize("text", ["~", "^^", "+++", "~?!"])
def test_typed_symbols_are_punctuation(text):
    assert gate(text) == "punctuation"


def stored(text: str) -> list[str]:
    return [m.content for m in extract_turn([{"role": "user", "content": text}], "", window_every=0).memories]


@pytest.mark.parametrize("text", ["I'm diabetic.", "Sou vegetariana.", "Sono celiaco.", "Я вегетарианец.", "im vegan"])
def test_a_two_word_statement_of_what_the_speaker_is_is_kept(text):
    assert stored(text) == [text]


@pytest.mark.parametrize(
    "text",
    [
        "I'm tired.",
        "Estoy cansado.",
        "I'm back!",
        "Sono pronta.",
        "I'm excited!",
    ],
)
def test_a_two_word_passing_state_is_not_kept(text):
    assert stored(text) == []


@pytest.mark.parametrize(
    "text, asks",
    [
        ("I need a limerick about a cat who hates Mondays.", True),
        ("I'd like a recipe for lasagna.", True),
        ("I want some ideas for a birthday party.", True),
        ("I need a new laptop for work.", False),
        ("I need a recipe.", False),
        ("Me conta uma curiosidade sobre o Brasil.", True),
        ("Me fala um poema.", True),
        ("Conta corrente é no Itaú.", False),
    ],
)
def test_requests_named_by_what_is_asked_for(text, asks):
    assert is_request(text) is asks


@pytest.mark.parametrize(
    "text, kept",
    [
        ("Bear in mind I'm on a tight budget this month.", "I'm on a tight budget this month."),
        ("Just FYI, I'm a night owl.", "I'm a night owl."),
        ("Let's just say I hate flying, so I take the train.", "I hate flying, so I take the train."),
        ("याद रखना: मैं शाकाहारी हूँ।", "मैं शाकाहारी हूँ।"),
        ("للعلم، أنا نباتي منذ سنوات.", "أنا نباتي منذ سنوات."),
        ("fyi i'm diabetic", "i'm diabetic"),
    ],
)
def test_lead_ins_of_more_forms_and_scripts_are_dropped(text, kept):
    assert stored(text) == [kept]


# --- a second blind set (2026-12-07), written by another helper who read neither the rules nor
# the earlier sets (420 turns, 16 languages), split by the same hash before any failure was
# looked at; rules widened on its dev split's misses, each as a class (below); its holdout
# measured on the first rules: 179/199 before → 183/199 (skip 62 → 66/71, punctuation 18/18,
# request 35/40, statement 39/40, lead_in 17/22, join 8/8), and once more after a review
# narrowed them: 184/199 (lead_in 18/22). Floors: the first measurement less one.
BLIND_2 = Path(__file__).resolve().parents[2] / "turn_set" / "blind_2026_12_07.jsonl"
BLIND_2_ROWS = [json.loads(line) for line in BLIND_2.read_text(encoding="utf-8").splitlines() if line.strip()]
BLIND_2_HOLDOUT_FLOORS = {"skip": 65, "punctuation": 17, "request": 34, "statement": 38, "lead_in": 16, "join": 7}


@pytest.mark.parametrize("label", sorted(BLIND_2_HOLDOUT_FLOORS))
def test_second_blind_holdout_class_at_floor(label):
    ok, n = scores("holdout", BLIND_2_ROWS)[label]
    assert ok >= BLIND_2_HOLDOUT_FLOORS[label], f"{label}: {ok}/{n} on the second blind holdout"


def test_second_blind_set_is_split_by_hash_and_its_dev_nearly_correct():
    import hashlib

    for row in BLIND_2_ROWS:
        assert row["split"] == ("dev" if hashlib.sha256(row["text"].encode()).digest()[0] % 2 == 0 else "holdout")
    dev = scores("dev", BLIND_2_ROWS)
    assert sum(ok for ok, _ in dev.values()) >= 218, (
        dev
    )  # 219/221: two-word Polish and Arabic statements stay too short


@pytest.mark.parametrize(
    "text",
    [
        "okkk", "okk", "nooo", "Yesss!", "coooool", "thanksss", "hellooo", "hmmm...", "um", "uhm", "erm",
        "roger that", "Copy that.", "that's all for now, thanks", "That's it!", "I'm all set",
        "nö", "hoi", "dobra", "spoko", "yok", "peki", "了解です", "了解しました", "halo", "gak", "nggak", "iya",
        "oke deh", "wkwkwk", "WKWK",
    ],
)  # fmt: skip
def test_acknowledgements_fillers_and_negatives_drawn_out_or_in_more_languages_skip(text):
    assert gate(text) == "greeting"


@pytest.mark.parametrize(
    "text", ["god", "Nooo, I moved to Berlin.", "Goood news: I got the job.", "ya ampun aku lupa", "Tak, mam psa."]
)
def test_words_near_drawn_out_acknowledgements_are_not_small_talk(text):
    assert gate(text) is None


@pytest.mark.parametrize(
    "text, asks",
    [
        ("मुझे एक चुटकुला सुनाओ।", True),
        ("कृपया एक कविता बनाइए।", True),
        ("मैं रोज़ योग करती हूँ।", False),
        ("Ceritakan lelucon dong.", True),
        ("Tolong jelaskan apa itu inflasi.", True),
        ("Buatkan daftar belanja.", True),
        ("Saya tinggal di Bandung.", False),
        ("Buat saya, kopi itu penting.", False),
    ],
)
def test_requests_in_hindi_and_indonesian(text, asks):
    assert is_request(text) is asks


@pytest.mark.parametrize(
    "text, kept",
    [
        ("For future reference, I take my coffee black.", "I take my coffee black."),
        ("Make a note: I'm a night owl.", "I'm a night owl."),
        ("Save this: my favorite author is Ursula K. Le Guin.", "my favorite author is Ursula K. Le Guin."),
        ("Bitte merken: mein Sohn heißt Jonas.", "mein Sohn heißt Jonas."),
        ("Só pra você saber, eu moro em Recife.", "eu moro em Recife."),
        ("Запомни, что я не ем глютен.", "я не ем глютен."),
        ("К твоему сведению: у меня двое детей.", "у меня двое детей."),
        ("Zapamiętaj, że mam dwa koty w domu.", "mam dwa koty w domu."),
        ("念のため言っておくと、私はベジタリアンです。", "私はベジタリアンです。"),
        ("تذكّر: أنا نباتي منذ سنوات.", "أنا نباتي منذ سنوات."),
    ],
)
def test_lead_ins_with_a_comma_before_their_connector_and_more_forms(text, kept):
    assert stored(text) == [kept]


@pytest.mark.parametrize(
    "text, kept",
    [
        ("Soy vegetariana, ¿me recomiendas una receta?", ["Soy vegetariana"]),
        ("Vivo en Madrid; ¿qué museos me recomiendas?", ["Vivo en Madrid"]),
        ("Hola, ¿qué tal?", []),
        ("¿Dónde vivo yo?", []),
    ],
)
def test_a_statement_before_a_spanish_question_is_kept(text, kept):
    assert stored(text) == kept


@pytest.mark.parametrize(
    "text, kept",
    [
        # a comma before English "this"/"that" belongs to the fact
        ("FYI, this is my work email: ana@example.com", ["this is my work email: ana@example.com"]),
        ("BTW, this Friday is my birthday.", ["this Friday is my birthday."]),
        # lead-ins that also open requests count only before a colon or a comma
        ("Write this down as a haiku.", []),
        ("Make a note of everything we discussed today.", []),
        ("Merken Sie sich: mein Sohn heißt Jonas.", ["mein Sohn heißt Jonas."]),
        ("Tolong ingat: aku alergi udang.", ["aku alergi udang."]),
        ("Coba tebak, aku baru diterima kerja di Google!", ["Coba tebak, aku baru diterima kerja di Google!"]),
        # pronouns are not copulas: these two-word replies state nothing
        ("Saya baik", []),
        ("أنا بخير", []),
        ("Aku juga", []),
        # the clause before "¿" only when it speaks of the speaker
        ("Si tuviera un perro, ¿qué raza me recomiendas?", []),
        ("Qué hora es en Tokio, ¿sabes?", []),
        ("Entre Python y Java, ¿cuál es mejor?", []),
        ("Cuando tengo tiempo, ¿qué puedo hacer?", []),
        ("Si me mudo a Madrid, ¿qué barrio me recomiendas?", []),
        # a request-like lead-in before "that", with a comma after "please"
        ("Make a note that I'm allergic to peanuts.", ["I'm allergic to peanuts."]),
        ("Take note that I'm vegan.", ["I'm vegan."]),
        ("Please, make a note: I work nights.", ["I work nights."]),
        # an initial, then a word that opens a question or a sentence
        ("I take Vitamin D. Will that help?", ["I take Vitamin D."]),
        ("Ich habe Blutgruppe A. Das ist selten, oder?", ["Ich habe Blutgruppe A."]),
        # a Hindi statement that ends by asking for a note is kept
        ("मैं शाकाहारी हूँ, इसे नोट करो।", ["मैं शाकाहारी हूँ, इसे नोट करो।"]),
        # an initial after a capitalised word, then a question: the fact is its own sentence
        ("I have Hepatitis B. Can you tell me which foods to avoid?", ["I have Hepatitis B."]),
        ("Ich habe Blutgruppe A. Was darf ich essen?", ["Ich habe Blutgruppe A."]),
    ],
)
def test_what_the_second_blind_sets_rules_must_not_take(text, kept):
    """Inputs a review of those rules built against them (each failed on their first form)."""
    assert stored(text) == kept
