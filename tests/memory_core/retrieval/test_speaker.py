"""``memory_core.retrieval.speaker``: the speaker of a memory from what a client sends."""

from __future__ import annotations

import pytest

from memory_core.retrieval.speaker import LABEL_WORDS, leading_speaker, speaker_and_body


@pytest.mark.parametrize(
    ("content", "speaker", "body"),
    [
        ("Caroline: I went hiking", "Caroline", "I went hiking"),
        ("  Mary-Ann: sure", "Mary-Ann", "sure"),
        ("Dr. Smith: take two", "Dr. Smith", "take two"),
        ("O'Neil: yes", "O'Neil", "yes"),
        ("Émile Zola Junior: bonjour", "Émile Zola Junior", "bonjour"),
        ("Ann：你好", None, None),  # full-width colon needs a space after it too
        ("Ann： 你好", "Ann", "你好"),
        ("Joanna: Thanks!\nNate: sure", "Joanna", "Thanks!\nNate: sure"),
    ],
)
def test_a_leading_name_is_the_speaker(content, speaker, body):
    found = leading_speaker(content)
    if speaker is None:
        assert found is None
    else:
        assert found == (speaker, body)


@pytest.mark.parametrize(
    "content",
    [
        "Note: buy milk",
        "NOTE: buy milk",
        "Re: the meeting",
        "Fwd: invoice",
        "P.S.: call me",
        "Update: moved to Berlin",
        "Monday: gym",
        "Step 2: add flour",  # a digit is no name letter
        "Q: why?",
        "Reminder Note: x",  # any label word in the name
        "10:30 dentist",
        "https://example.com is down",
        "note: lower case",
        "Caroline:no space",
        "Caroline:   ",  # no text after the name
        "Caroline said: hi",  # 'said' is lower case: not a name word
        "One Two Three Four: too many words",
        "A" + "b" * 30 + ": too long a word",
        "",
        "I love it: really",
    ],
)
def test_labels_times_links_and_other_shapes_are_not_speakers(content):
    assert leading_speaker(content) is None


def test_label_words_are_case_folded():
    assert all(w == w.casefold() for w in LABEL_WORDS)


def test_metadata_speaker_overrides_the_content_rule():
    assert speaker_and_body("Note: hi", {"speaker": "Note"}) == ("hi", "Note")
    assert speaker_and_body("Ann: hi", {"speaker": " Bo "}) == ("Ann: hi", "Bo")
    assert speaker_and_body("Ann: hi", {"speaker": ""}) == ("hi", "Ann")
    assert speaker_and_body("Ann: hi", {"speaker": 3}) == ("hi", "Ann")
    assert speaker_and_body("Ann: hi", None) == ("hi", "Ann")
    assert speaker_and_body("just text", {}) == ("just text", None)
