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


def scores(split: str) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in ROWS:
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
