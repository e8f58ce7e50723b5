"""SSE framing (``deployments.sse``): events as OpenAI streams them, read back line by line."""

from __future__ import annotations

import json

from deployments.sse import DONE, Event, EventReader, event


def read(text: str) -> tuple[list[Event], bool]:
    reader = EventReader()
    events = [e for line in text.splitlines() if (e := reader.line(line)) is not None]
    return events, reader.pending


def test_an_event_is_one_data_line_and_a_blank_line():
    assert event({"a": "é", "b": [1, 2]}) == 'data: {"a":"é","b":[1,2]}\n\n'.encode()
    assert event(DONE) == b"data: [DONE]\n\n"


def test_events_read_back_as_they_were_framed():
    chunks = [{"n": i, "text": f"piece {i}"} for i in range(3)]
    text = b"".join(event(c) for c in chunks).decode() + event(DONE).decode()
    events, pending = read(text)
    assert [e.json() for e in events[:-1]] == chunks and events[-1].data == DONE and events[-1].json() is None
    assert b"".join(e.encode() for e in events) == text.encode()  # forwarded unchanged
    assert not pending


def test_comments_fields_and_multiline_data():
    text = ': keep-alive\n\nevent: delta\nid: 7\ndata: {"a":\ndata:1}\n\ndata\n\n'
    comment, multi, empty = read(text)[0]
    assert comment.data is None and comment.json() is None and comment.encode() == b": keep-alive\n\n"
    assert multi.data == '{"a":\n1}' and multi.json() == {"a": 1}
    assert empty.data == ""  # a bare "data" field is an empty data line


def test_an_unfinished_event_at_the_end_is_held_not_emitted():
    events, pending = read('data: {"a": 1}\n\ndata: {"b"')
    assert [e.json() for e in events] == [{"a": 1}] and pending


def test_data_that_is_not_json_reads_as_none():
    (e,) = read("data: not json\n\n")[0]
    assert e.data == "not json" and e.json() is None
    assert json.loads(event({"x": None}).decode()[6:]) == {"x": None}
