"""``deployments.http.streaming``: what a relayed stream said (``StreamedAnswer``), and the relay
against a real upstream process: when a turn is settled, how a stream ends, cancellation."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from deployments.echo import echo_chunks, echo_completion, echo_events
from deployments.http.streaming import StreamedAnswer, error_event, relay
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


# ---------------------------------------------------------------------------- relay
# against the test upstream process over HTTP (the ingress's own upstream client)
async def opened(server, **fault):
    """An ``HttpUpstream`` stream of the echo of ``STREAMED`` from ``server`` with ``fault``,
    its first event read (as the ingress does before relaying)."""
    from deployments.upstream import HttpUpstream
    from memory_core.config import UpstreamSettings

    client = HttpUpstream(UpstreamSettings(base_url=server.base_url, timeout_s=2))
    tag = uuid.uuid4().hex
    headers = [("x-test-tag", tag)]
    if fault:
        headers.append(("x-fault", ";".join(f"{k}={v}" for k, v in fault.items())))
    stream = await client.stream(STREAMED, headers)
    events = stream.events()
    return client, stream, events, await anext(events), tag


STREAMED = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "one two three four five six"}]}
DONE_BYTES = b"data: [DONE]\n\n"


class Calls:
    def __init__(self):
        self.completed: list[StreamedAnswer] = []
        self.ended: list[str] = []

    def relay(self, stream, first, events):
        return relay(stream, first, events, on_complete=self.completed.append, on_end=self.ended.append)


def echoed_text() -> str:
    return echo_completion(STREAMED)["choices"][0]["message"]["content"]


async def test_the_whole_stream_is_relayed_unchanged_and_the_turn_settled(upstream_server):
    client, stream, events, first, tag = await opened(upstream_server)
    calls = Calls()
    sent = [data async for data in calls.relay(stream, first, events)]
    await client.aclose()
    got = events_of(*sent)
    assert [{**e.json(), "created": 0} for e in got[:-1]] == [{**c, "created": 0} for c in echo_chunks(STREAMED)]
    assert sent[-1] == DONE_BYTES
    assert [a.text for a in calls.completed] == [echoed_text()] and calls.ended == ["completed"]
    assert upstream_server.received(tag)[0]["outcome"] == "completed"  # drained to its end


async def test_a_client_that_stops_reading_at_done_still_has_its_turn_stored(upstream_server):
    """The openai client closes the connection as soon as it reads [DONE]; the relay must not
    need another read of the upstream to settle the turn."""
    client, stream, events, first, _ = await opened(upstream_server, chunk_delay="0.02")
    calls = Calls()
    out = calls.relay(stream, first, events)
    async for data in out:
        if data == DONE_BYTES:
            break
    await out.aclose()  # the client is gone right after [DONE]
    await client.aclose()
    assert [a.text for a in calls.completed] == [echoed_text()] and calls.ended == ["completed"]


async def test_a_client_that_leaves_mid_stream_cancels_the_upstream_and_nothing_is_settled(upstream_server):
    client, stream, events, first, tag = await opened(upstream_server, chunk_delay="0.2")
    calls = Calls()
    out = calls.relay(stream, first, events)
    for _ in range(3):
        await anext(out)
    await out.aclose()
    await client.aclose()
    assert calls.completed == [] and calls.ended == ["client_disconnected"]
    deadline = time.monotonic() + 5
    while upstream_server.received(tag)[0]["outcome"] is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert upstream_server.received(tag)[0]["outcome"] == "client_gone"


@pytest.mark.parametrize(
    ("fault", "outcome", "error_code"),
    [
        ({"end_after": str(len(echo_chunks(STREAMED)))}, "completed", None),  # no [DONE], finished
        ({"end_after": "3"}, "incomplete", None),
        ({"error_after": "3"}, "upstream_error", None),  # the upstream's own error event
        ({"drop_after": "3"}, "upstream_error", "upstream_error"),
        ({"stall_after": "3"}, "upstream_error", "upstream_timeout"),
    ],
    ids=["ends-after-finish", "ends-early", "error-event", "dropped", "stalled"],
)
async def test_how_a_stream_ends_decides_whether_the_turn_is_settled(upstream_server, fault, outcome, error_code):
    client, stream, events, first, _ = await opened(upstream_server, **fault)
    calls = Calls()
    sent = [data async for data in calls.relay(stream, first, events)]
    await client.aclose()
    assert calls.ended == [outcome] and len(calls.completed) == (outcome == "completed")
    assert DONE_BYTES not in sent
    if error_code is not None:
        assert events_of(sent[-1])[0].json()["error"]["code"] == error_code and len(sent) == 4
