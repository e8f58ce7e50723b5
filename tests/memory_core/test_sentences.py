"""``split_sentences``: a period that belongs to a word (a title, an acronym, an initial) does
not end the sentence, one that ends it still does, and nothing of the text is lost; the
turns of such sentences store whole statements, never fragments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.chat.extract import extract_turn, is_request
from memory_core.curation.consolidate import lost_words, merged_content
from memory_core.sentences import ABBREVIATIONS, BEFORE_NUMBER, TITLES, TRAILING, split_sentences
from memory_core.types import Memory

KEPT_TOGETHER = [
    # titles and abbreviations before a name or a word, in several languages
    "Would Caroline likely have Dr. Seuss books on her bookshelf?",
    "I saw Mr. Brown and Mrs. Brown at the market yesterday.",
    "We visited St. Louis last spring with Prof. Adams.",
    "My neighbour Ms. Okafor teaches at the university.",
    "Martin Luther King Jr. gave that speech in 1963.",
    "La Sra. López y la Dra. Ruiz trabajan conmigo.",
    "J'ai rencontré Mme. Dubois et Mlle. Martin hier.",
    "Mein Arzt ist Hr. Becker aus München.",
    "Il Dott. Rossi e l'Ing. Bianchi sono miei colleghi.",
    "The hike up Mt. Rainier took approx. six hours.",
    "It was Arsenal vs. Chelsea on Sunday.",
    "I live at No. 5 Baker Street.",
    # dotted acronyms and abbreviations
    "What areas of the U.S. has John been to or is planning to go to?",
    "I like fruit, e.g. apples and pears, for breakfast.",
    "I start work at 9 a.m. every weekday.",
    "My sister finished her Ph.D. in chemistry last year.",
    "Wir essen gern Obst, z.B. Äpfel und Birnen.",
    # initials
    "Would Tim enjoy reading books by C. S. Lewis or John Greene?",
    "What J.K. Rowling quote does Tim resonate with?",
    "John F. Kennedy was the youngest elected president.",
    "I am reading George R. R. Martin again.",
    "T. S. Eliot wrote my favourite poem.",
]

SPLIT = [
    ("I got an A. Then I went home.", ["I got an A.", "Then I went home."]),
    ("No. I live in Paris now.", ["No.", "I live in Paris now."]),
    ("I said no. Then I left.", ["I said no.", "Then I left."]),
    ("Wait... what? OK!", ["Wait...", "what?", "OK!"]),
    ("我住在上海。我的猫叫咪咪。", ["我住在上海。", "我的猫叫咪咪。"]),
    ("I like tea.\nMy cat is called Tom.", ["I like tea.", "My cat is called Tom."]),
    ("Version 3.5 is out. I use it daily.", ["Version 3.5 is out.", "I use it daily."]),
    ("Dr. Seuss wrote it. Mr. Brown read it to us.", ["Dr. Seuss wrote it.", "Mr. Brown read it to us."]),
    ("My plan uses  two   spaces. Keep them.", ["My plan uses  two   spaces.", "Keep them."]),
    ("Ends with Dr.", ["Ends with Dr."]),
    # a word that keeps its period, then a word that opens sentences: the sentence ends
    ("My train gets in at 7 a.m. What should I eat?", ["My train gets in at 7 a.m.", "What should I eat?"]),
    ("She finished her Ph.D. Now she teaches.", ["She finished her Ph.D.", "Now she teaches."]),
    ("Compré pan, leche, etc. Ahora necesito una receta.", ["Compré pan, leche, etc.", "Ahora necesito una receta."]),
    ("Je vis aux U.S.A. Mais je rentre.", ["Je vis aux U.S.A.", "Mais je rentre."]),
    ("My blood type is O. Is that rare?", ["My blood type is O.", "Is that rare?"]),
    ("Llegamos a las 6 p.m. ¿Hay entradas?", ["Llegamos a las 6 p.m.", "¿Hay entradas?"]),
    # a sentence ending inside its quote, before a capital
    ('She said, "I\'ll be there." She never came.', ['She said, "I\'ll be there."', "She never came."]),
    ('"Hi!" she said to me.', ['"Hi!" she said to me.']),
    # the last of a run of initials, before a name's particle
    ("J. M. G. Le Clézio won the prize.", ["J. M. G. Le Clézio won the prize."]),
]


@pytest.mark.parametrize("text", KEPT_TOGETHER)
def test_a_period_that_belongs_to_a_word_does_not_end_the_sentence(text):
    assert split_sentences(text) == [text]
    # and after another sentence, the cut falls before it, not inside it
    assert split_sentences("I have a question. " + text) == ["I have a question.", text]


@pytest.mark.parametrize(("text", "sentences"), SPLIT)
def test_a_period_that_ends_a_sentence_still_cuts(text, sentences):
    assert split_sentences(text) == sentences


@pytest.mark.parametrize("text", [t for t in KEPT_TOGETHER if t.endswith("?")])
def test_a_question_naming_a_title_an_initial_or_an_acronym_stores_nothing(text):
    """Cut at its periods, a question left fragments that read as statements ("Would
    Caroline likely have Dr.", "What areas of the U.S.") and were stored as facts."""
    assert extract_turn([{"role": "user", "content": text}], "ok", window_every=0).memories == []


@pytest.mark.parametrize("text", [t for t in KEPT_TOGETHER if t.endswith(".")])
def test_a_statement_naming_one_is_stored_whole(text):
    (memory,) = extract_turn([{"role": "user", "content": text}], "ok", window_every=0).memories
    assert memory.content == text


def test_every_abbreviation_keeps_its_sentence_where_its_kind_goes_on():
    """A title before a name (one that is also a sentence-opening word too: "Le", "Will"),
    a trailing abbreviation before a lower-case word, a number's before a digit; each at the
    end of the text ends it."""
    for word in sorted(ABBREVIATIONS):
        abbreviation = word.capitalize() + "."
        followers = {
            **dict.fromkeys(TITLES, ("Smith", "Le", "Will")),
            **dict.fromkeys(TRAILING, ("and", "5")),
            **dict.fromkeys(BEFORE_NUMBER, ("5",)),
        }[word]
        for follower in followers:
            text = f"I wrote to {abbreviation} {follower} today."
            assert split_sentences(text) == [text], text
        assert split_sentences(f"I wrote to {abbreviation}") == [f"I wrote to {abbreviation}"]


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("My dentist is Dr. Le and she is great.", ["My dentist is Dr. Le and she is great."]),
        ("I met Mr. Will Smith. He was kind.", ["I met Mr. Will Smith.", "He was kind."]),
        ("I saw the Dr. Then I went home.", ["I saw the Dr.", "Then I went home."]),
        ("We visited D. C. I loved it.", ["We visited D. C.", "I loved it."]),
        ("Buy milk, eggs, etc. Sarah is allergic to nuts.", ["Buy milk, eggs, etc.", "Sarah is allergic to nuts."]),
        ("Martin Luther King Jr. gave a speech.", ["Martin Luther King Jr. gave a speech."]),
        ("I'm Michael Evans Jr. People mix us up.", ["I'm Michael Evans Jr.", "People mix us up."]),
    ],
)
def test_names_after_titles_and_sentences_after_trailing_abbreviations(text, sentences):
    assert split_sentences(text) == sentences


def test_a_list_end_before_a_new_sentence_keeps_that_sentences_fact():
    """ "…etc. Sarah is allergic…" kept together read as one request ("Remind me…") and the
    allergy was lost."""
    turn = extract_turn(
        [{"role": "user", "content": "Remind me to buy milk, eggs, etc. Sarah is allergic to nuts."}],
        "ok",
        window_every=0,
    )
    assert [m.content for m in turn.memories] == ["Sarah is allergic to nuts."]


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("Answer yes or no.", True),
        ("Reply in one word.", True),
        ("Respond only with a number.", True),
        ("Answer briefly, please.", True),
        ("Answer the question first.", True),
        ("Answer Yes or No.", True),
        ("Reply IN ONE WORD.", True),
        ("Answer is 42.", False),
        ("Reply all is a bad habit at my office.", False),
        ("Respond time at my job is two hours.", False),
    ],
)
def test_asking_how_to_answer_is_a_request(text, asks):
    """ "…? Answer yes or no." stored "Answer yes or no." as a fact."""
    assert is_request(text) is asks


@pytest.mark.parametrize(
    ("first", "second", "merged"),
    [
        ("我住在上海。", "我的猫叫咪咪。", "我住在上海。我的猫叫咪咪。"),  # no space after a CJK full stop
        ("我住在上海", "我的猫叫咪咪", "我住在上海 我的猫叫咪咪"),  # no stop: the boundary stays
        ("ฉันชอบกาแฟ", "แมวของฉันชื่อทอม", "ฉันชอบกาแฟ แมวของฉันชื่อทอม"),  # Thai separates sentences by a space
        ("I like tea.", "My cat is Tom.", "I like tea. My cat is Tom."),
    ],
)
def test_a_merged_memory_joins_its_sentences_as_their_script_does(first, second, merged):
    members = [Memory(user_id="u", content=first), Memory(user_id="u", content=second)]
    swapped = merged.replace(first, "\0").replace(second, first).replace("\0", second)
    assert merged_content(members) in (merged, swapped)  # the longer member first
    assert not lost_words(merged, members)


_CHUNKS = st.sampled_from(
    ["Dr.", "U.S.", "C.", "S.", "Lewis", "no.", "No.", "5", "a.m.", "word", "Then", "?", "!", "...", "。", "我",
     "e.g.", "A.", "an", "x", "\n", "  ", "\t", "(Mr.", "«Sra.", 'noon."', "She", "¿Qué", "l'Ing.",
     ".", "..", '"."', "(", "¿", "’", "İ.", "ß.", "𝐀.", "Le", "etc.", "Jr."]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_CHUNKS, max_size=30).map(" ".join))
def test_nothing_of_the_text_is_lost_or_reordered(text):
    sentences = split_sentences(text)
    assert all(s and s == s.strip() for s in sentences)
    assert "".join("".join(s.split()) for s in sentences) == "".join(text.split())


def test_the_blind_set_holds_its_measured_figures():
    """The blind segmentation set (``tests/segmentation_set``, written by a helper who had
    read none of this code, split before the rules were written): the figures of the final
    rules' one holdout measurement, less one message per kind at most (README "Curation")."""
    from benchmarks.segmentation import score

    holdout, dev = score("holdout"), score("dev")
    floors = {"abbreviation": 28, "acronym": 11, "initials": 13, "plain": 25, "trap": 19, "all": 100}
    assert {kind: holdout[kind][0] >= floor for kind, floor in floors.items()} == dict.fromkeys(floors, True), holdout
    assert dev["all"][0] >= 126, dev
