"""The echo upstream (``deployments.echo``): one implementation, the completion and the stream
agree, and the HTTP app answers as an OpenAI-compatible server."""

from __future__ import annotations

import time

import httpx
import pytest

from deployments.echo import create_echo_app, echo_chunks, echo_completion, echo_events, echo_models
from deployments.sse import DONE, EventReader

BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": [{"type": "text", "text": "Hello\n  world"}, {"type": "image_url"}]},
        {"role": "user", "content": "日本語 ✓ 🎉\tand tabs "},
    ],
}


def streamed_text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_the_streamed_pieces_concatenate_to_the_completion_text():
    text = echo_completion(BODY)["choices"][0]["message"]["content"]
    chunks = echo_chunks(BODY)
    assert streamed_text(chunks) == text
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert len(chunks) > 8  # split into word-sized pieces, not one chunk
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {echo_completion(BODY)["id"]}
    assert all("usage" not in c for c in chunks)


def test_include_usage_adds_the_usage_chunk_as_openai_streams_it():
    chunks = echo_chunks({**BODY, "stream": True, "stream_options": {"include_usage": True}})
    *content, last = chunks
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in content)
    assert last["choices"] == [] and last["usage"] == echo_completion(BODY)["usage"]
    assert last["usage"]["prompt_tokens"] > 0 and last["usage"]["completion_tokens"] > 0
    assert streamed_text(chunks) == echo_completion(BODY)["choices"][0]["message"]["content"]
    # anything but a literal true is no usage
    assert all("usage" not in c for c in echo_chunks({**BODY, "stream_options": {"include_usage": "yes"}}))


def test_events_are_framed_chunks_ending_with_done():
    events = echo_events(BODY)
    assert events[-1] == b"data: [DONE]\n\n"
    reader = EventReader()
    parsed = [e for line in b"".join(events).decode().split("\n") if (e := reader.line(line))]
    assert [e.json() for e in parsed[:-1]] == echo_chunks(BODY) and parsed[-1].data == DONE


@pytest.fixture
def echo_client():
    def make(**delays) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_echo_app(**delays)), base_url="http://echo")

    return make


async def test_the_http_echo_streams_and_answers_json(echo_client):
    async with echo_client() as client:
        r = await client.post("/v1/chat/completions", json={**BODY, "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        assert r.content == b"".join(echo_events(BODY))
        r = await client.post("/v1/chat/completions", json=BODY)
        assert r.status_code == 200 and r.json()["choices"] == echo_completion(BODY)["choices"]
        assert (await client.get("/v1/models")).json() == echo_models()


@pytest.mark.parametrize("body", [b"not json", b"[1]", b'{"messages": "x"}', b'{"messages": [1]}'])
async def test_the_http_echo_refuses_a_malformed_body_with_an_openai_error(echo_client, body):
    async with echo_client() as client:
        r = await client.post("/v1/chat/completions", content=body)
        assert r.status_code == 400
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_the_http_echo_waits_its_delays(echo_client):
    async with echo_client(first_chunk_delay_s=0.3, chunk_delay_s=0.01) as client:
        started = time.perf_counter()
        r = await client.post("/v1/chat/completions", json=BODY)
        assert r.status_code == 200 and time.perf_counter() - started >= 0.3
        started = time.perf_counter()
        r = await client.post("/v1/chat/completions", json={**BODY, "stream": True})
        n = len(echo_events(BODY))
        assert r.status_code == 200 and time.perf_counter() - started >= 0.3 + (n - 1) * 0.01
