"""``deployments.http.streaming.StreamedAnswer``: what a relayed stream said, from its events."""

from __future__ import annotations

from deployments.echo import echo_completion, echo_events
from deployments.http.streaming import StreamedAnswer, error_event
from deployments.sse import Event, EventReader


def events_of(*raw: bytes) -> list[Event]:
    reader = EventReader()
    return [e for line in b"".join(raw).decode().split("\n") if (e := reader.line(line)) is not None]


def answer_of(events: list[Event]) -> StreamedAnswer:
    answer = StreamedAnswer()
    for event in events:
        answer.add(event)
    return answer


BODY = {"model": "m", "messages": [{"role": "user", "content": "assemble me, please"}]}


def test_a_whole_stream_assembles_to_the_completion():
    answer = answer_of(events_of(*echo_events(BODY)))
    assert answer.complete and answer.done and answer.finished and not answer.error
    assert answer.text == echo_completion(BODY)["choices"][0]["message"]["content"]
    assert answer.completion()["choices"][0]["message"] == {"role": "assistant", "content": answer.text}


def test_a_stream_cut_before_its_end_is_not_complete():
    events = events_of(*echo_events(BODY))
    cut = answer_of(events[:3])
    assert not cut.complete and cut.text == "user: assemble "
    # finished (finish_reason) without [DONE] is complete: some servers close right after it
    assert answer_of(events[:-1]).complete


def test_an_error_event_makes_it_incomplete_even_after_done():
    events = events_of(*echo_events(BODY)[:3], error_event("upstream_error", "broke"), *echo_events(BODY)[-1:])
    answer = answer_of(events)
    assert answer.error and answer.done and not answer.complete


def test_other_choices_tool_calls_comments_and_junk_are_ignored():
    chunks = [
        b": keep-alive\n\n",
        b'data: {"choices": [{"index": 1, "delta": {"content": "other choice"}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}], "content": null}}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "mine"}}]}\n\n',
        b"data: not json\n\n",
        b'data: {"choices": "x"}\n\n',
        b'data: {"choices": [], "usage": {"total_tokens": 3}}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}\n\n',
    ]
    answer = answer_of(events_of(*chunks))
    assert answer.text == "mine" and answer.finished and answer.complete


def test_the_error_event_has_openais_shape_and_ours():
    (event,) = events_of(error_event("upstream_timeout", "no chunk within 2 s"))
    assert event.json() == {
        "error": {
            "message": "no chunk within 2 s",
            "type": "upstream_timeout",
            "param": None,
            "code": "upstream_timeout",
        }
    }
