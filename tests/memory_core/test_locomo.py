"""``memory_core.locomo``: turns, the REST and chat request bodies, evidence recall (no service)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core import locomo

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_2_date_time": "9:00 am on 3 June, 2023",
        "session_2": [
            {"speaker": "Bo", "dia_id": "D2:1", "text": "Morning!"},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "I adopted a cat", "blip_caption": "a grey cat"},
        ],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo"},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Hi Ann, how are you?"},
            {"speaker": "Bo", "dia_id": "D1:3", "text": "Long time."},
            {"speaker": "Ann", "dia_id": "D1:4", "text": "Busy   with WORK"},
            {"speaker": "Bo", "dia_id": "D1:5", "text": "See you"},
        ],
        "session_3": "not a session (a string)",
    },
    "qa": [
        {"question": "Q1", "answer": "a", "evidence": ["D1:4"], "category": 4},
        {"question": "Q2", "answer": "b", "evidence": ["D1:1; D2:2"], "category": 1},
        {"question": "no evidence", "answer": "c", "evidence": [], "category": 2},
        {"question": "adversarial", "adversarial_answer": "d", "evidence": ["D1:2"], "category": 5},
    ],
}


def test_turns_in_session_order_with_content_metadata_and_dates():
    ts = locomo.turns(SAMPLE)
    assert [t.dia_id for t in ts] == ["D1:1", "D1:2", "D1:3", "D1:4", "D1:5", "D2:1", "D2:2"]
    assert ts[-1].content == "Ann: I adopted a cat [shares a photo: a grey cat]"
    assert ts[3].metadata == {"dia_id": "D1:4"}  # what a client has: no speaker, session or session date
    assert ts[0].created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert ts[3].created_at == datetime(2023, 5, 8, 13, 56, 3, tzinfo=UTC)


def test_questions_keep_scored_categories_with_evidence_and_split_joined_ids():
    qs = locomo.questions(SAMPLE)
    assert [(q.question, q.category, q.evidence) for q in qs] == [("Q1", 4, ("D1:4",)), ("Q2", 1, ("D1:1", "D2:2"))]


def test_memory_batches_cover_every_turn_in_order():
    bodies = locomo.memory_batches(SAMPLE, 3)
    assert [len(b["memories"]) for b in bodies] == [3, 3, 1]
    first = bodies[0]["memories"][0]
    assert first == {
        "content": "Ann: Hi Bo",
        "type": "episodic",
        "metadata": {"dia_id": "D1:1"},
        "created_at": "2023-05-08T13:56:00+00:00",
        "source": "locomo",
        "conversation_id": "conv-x",
    }
    assert [m["metadata"]["dia_id"] for b in bodies for m in b["memories"]] == [t.dia_id for t in locomo.turns(SAMPLE)]
    with pytest.raises(ValueError):
        locomo.memory_batches(SAMPLE, 0)


def test_chat_requests_one_per_user_turn_with_the_session_so_far_and_turn_counts():
    reqs = locomo.chat_requests(SAMPLE)
    assert [(r.session, r.turns) for r in reqs] == [(1, 1), (1, 3), (2, 2)]
    assert reqs[1].messages == [
        {"role": "user", "content": "Hi Bo"},
        {"role": "assistant", "content": "Hi Ann, how are you?"},
        {"role": "assistant", "content": "Long time."},
        {"role": "user", "content": "Busy   with WORK"},
    ]
    assert reqs[2].messages[-1] == {"role": "user", "content": "I adopted a cat [shares a photo: a grey cat]"}
    # the other speaker's last turn of session 1 ("See you") is in no request
    assert sum(r.turns for r in reqs) == len(locomo.turns(SAMPLE)) - 1


def test_recall_at_k_counts_evidence_in_the_top_k_only():
    ranked = [["D1:2"], ["D1:1", "D2:2"], "D1:4"]
    assert locomo.recall_at_k(ranked, ("D1:1", "D2:2"), 1) == 0.0
    assert locomo.recall_at_k(ranked, ("D1:1", "D2:2"), 2) == 1.0
    assert locomo.recall_at_k(ranked, ("D1:4", "D9:9"), 3) == 0.5
    with pytest.raises(ValueError):
        locomo.recall_at_k(ranked, (), 5)
    with pytest.raises(ValueError):
        locomo.recall_at_k(ranked, ("D1:1",), 0)


def test_dia_ids_from_metadata_or_from_contained_turn_text():
    assert locomo.dia_ids_of({"dia_ids": ["a", 2]}) == ["a", "2"]
    assert locomo.dia_ids_of({"dia_id": "D1:1"}) == ["D1:1"]
    assert locomo.dia_ids_of({}) == []
    texts = locomo.turn_texts(SAMPLE)
    assert texts["D1:4"] == "busy with work"
    assert locomo.found_turns("Ann said: BUSY with work. Hi Bo!", texts) == ["D1:1", "D1:4"]


def test_summarize_macro_averages_overall_and_per_category():
    out = locomo.summarize([(4, 1.0, 1.0), (4, 0.0, 0.5), (1, 0.5, 1.0)])
    assert list(out) == ["overall", "cat1 multi-hop", "cat4 single-hop"]
    assert out["overall"] == {"n": 3, "r@5": 0.5, "r@10": pytest.approx(2.5 / 3)}
    assert out["cat4 single-hop"] == {"n": 2, "r@5": 0.5, "r@10": 0.75}


def test_search_body_sends_a_threshold_only_when_given():
    assert locomo.search_body("q") == {"query": "q", "limit": 10}
    assert locomo.search_body("q", 5, 0.4) == {"query": "q", "limit": 5, "threshold": 0.4}


def test_shared_data_file_shape():
    path = locomo.default_path()
    if not path.exists():
        pytest.skip(f"{path} is absent")
    samples = locomo.load_samples(path)
    assert len(samples) == 6 and len(locomo.load_samples(path, 2)) == 2
    all_turns = [t for s in samples for t in locomo.turns(s)]
    assert len(all_turns) == 3435  # shared/README.md
    assert all(r.messages[-1]["role"] == "user" for s in samples[:1] for r in locomo.chat_requests(s))
