"""``deployments.upstream`` against a real upstream server process (``tests.upstream_server``,
the echo over HTTP): forwarding, header rules, errors and timeouts, cancellation."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from deployments.echo import echo_chunks, echo_completion
from deployments.sse import DONE
from deployments.upstream import (
    EchoClient,
    HttpUpstream,
    UpstreamError,
    UpstreamReply,
    UpstreamRouter,
    forward_request_headers,
    forward_response_headers,
)
from memory_core.config import UpstreamSettings, load_config
from tests.conftest import free_port

BODY = {"model": "m", "messages": [{"role": "user", "content": "one two three four five"}]}


def tagged(**fault) -> tuple[str, list[tuple[str, str]]]:
    tag = uuid.uuid4().hex
    headers = [("x-test-tag", tag)]
    if fault:
        headers.append(("x-fault", ";".join(f"{k}={v}" if v != "" else k for k, v in fault.items())))
    return tag, headers


def test_request_headers_drop_hop_by_hop_framing_cookies_and_memory_headers():
    sent = [
        ("Host", "router:8000"),
        ("Authorization", "Bearer client-key"),
        ("Connection", "keep-alive, X-Private-Hop"),
        ("X-Private-Hop", "1"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("Proxy-Authorization", "Basic eA=="),
        ("Upgrade", "h2c"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "12"),
        ("Content-Type", "application/json"),
        ("Accept-Encoding", "br"),
        ("Cookie", "session=1"),
        ("x-authz-user-id", "alice"),
        ("x-project-id", "p"),
        ("x-conversation-id", "c"),
        ("x-disable-router-memory", "true"),
        ("OpenAI-Organization", "org-1"),
        ("x-custom", "a"),
        ("x-custom", "b"),
        ("User-Agent", "OpenAI/Python"),
    ]
    assert forward_request_headers(sent) == [
        ("authorization", "Bearer client-key"),
        ("openai-organization", "org-1"),
        ("x-custom", "a"),
        ("x-custom", "b"),
        ("user-agent", "OpenAI/Python"),
    ]


def test_response_headers_drop_hop_by_hop_framing_and_cookies():
    got = [
        ("Content-Type", "text/event-stream"),
        ("Content-Length", "10"),
        ("Content-Encoding", "gzip"),
        ("Connection", "x-secret"),
        ("x-secret", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Set-Cookie", "a=b"),
        ("Date", "today"),
        ("Server", "uvicorn"),
        ("Retry-After", "7"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-request-id", "req-1"),
    ]
    assert forward_response_headers(got) == [
        ("retry-after", "7"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-upstream-request-id", "req-1"),  # Serve sets x-request-id: the id of this request
    ]


def upstream(server, **settings) -> HttpUpstream:
    return HttpUpstream(UpstreamSettings(base_url=server.base_url, **settings))


async def test_chat_forwards_the_body_and_headers_and_returns_the_answer(upstream_server):
    client = upstream(upstream_server)
    tag, headers = tagged()
    reply = await client.chat(BODY, [*headers, ("authorization", "Bearer client-key")])
    await client.aclose()
    assert reply.status_code == 200 and reply.media_type == "application/json"
    assert reply.json()["choices"] == echo_completion(BODY)["choices"]
    (seen,) = upstream_server.received(tag)
    assert seen["body"] == BODY and ["authorization", "Bearer client-key"] in seen["headers"]


async def test_a_configured_key_replaces_the_clients_authorization(upstream_server, monkeypatch):
    monkeypatch.setenv("TEST_UPSTREAM_KEY", "server-key")
    client = upstream(upstream_server, api_key_env="TEST_UPSTREAM_KEY")
    tag, headers = tagged()
    await client.chat(BODY, [*headers, ("authorization", "Bearer client-key")])
    await client.aclose()
    (seen,) = upstream_server.received(tag)
    assert [v for k, v in seen["headers"] if k == "authorization"] == ["Bearer server-key"]


def test_a_configured_key_missing_from_the_environment_fails_at_start(monkeypatch):
    monkeypatch.delenv("TEST_UPSTREAM_MISSING", raising=False)
    with pytest.raises(ValueError, match="TEST_UPSTREAM_MISSING is not set"):
        HttpUpstream(UpstreamSettings(base_url="http://127.0.0.1:1/v1", api_key_env="TEST_UPSTREAM_MISSING"))


async def test_stream_yields_the_upstreams_events_one_by_one(upstream_server):
    client = upstream(upstream_server)
    tag, headers = tagged(chunk_delay="0.2")
    body = {**BODY, "stream": True}
    stream = await client.stream(body, headers)
    assert not isinstance(stream, UpstreamReply)
    arrivals, events = [], []
    started = time.perf_counter()
    async for event in stream.events():
        arrivals.append(time.perf_counter() - started)
        events.append(event)
    await stream.aclose()
    await client.aclose()
    assert [e.json() for e in events[:-1]] == [
        {**c, "created": e.json()["created"]} for c, e in zip(echo_chunks(body), events, strict=False)
    ]
    assert events[-1].data == DONE
    # each event as it was sent, not the whole answer at the end
    assert arrivals[-1] - arrivals[0] >= 0.2 * (len(events) - 2) * 0.9
    assert upstream_server.received(tag)[0]["outcome"] == "completed"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
async def test_an_error_status_comes_back_whole_with_its_headers(upstream_server, stream, status):
    client = upstream(upstream_server)
    _, headers = tagged(status=status)
    body = {**BODY, "stream": stream}
    reply = await (client.stream(body, headers) if stream else client.chat(body, headers))
    await client.aclose()
    assert isinstance(reply, UpstreamReply) and reply.status_code == status
    assert reply.json()["error"]["code"] == f"fault_{status}"
    assert (("retry-after", "7") in reply.headers) == (status == 429)


async def test_a_server_that_does_not_stream_answers_a_stream_request_whole(upstream_server):
    client = upstream(upstream_server)
    _, headers = tagged(json_stream="")
    reply = await client.stream({**BODY, "stream": True}, headers)
    await client.aclose()
    assert isinstance(reply, UpstreamReply) and reply.status_code == 200
    assert reply.json()["choices"] == echo_completion(BODY)["choices"]


async def test_no_server_is_502_and_no_answer_in_time_is_504(upstream_server):
    dead = HttpUpstream(UpstreamSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", timeout_s=5))
    for call in (dead.chat(BODY, []), dead.stream({**BODY, "stream": True}, []), dead.models()):
        with pytest.raises(UpstreamError) as err:
            await call
        assert err.value.status == 502 and err.value.code == "upstream_error"
    await dead.aclose()

    slow = upstream(upstream_server, timeout_s=0.5)
    _, headers = tagged(delay="3")
    started = time.perf_counter()
    with pytest.raises(UpstreamError) as err:
        await slow.chat(BODY, headers)
    assert err.value.status == 504 and err.value.code == "upstream_timeout"
    assert time.perf_counter() - started < 2.5
    # a stream: the status comes at once, the first event does not
    stream = await slow.stream({**BODY, "stream": True}, headers)
    with pytest.raises(UpstreamError) as err:
        await anext(stream.events())
    assert err.value.status == 504
    await stream.aclose()
    await slow.aclose()


@pytest.mark.parametrize(("fault", "status"), [("drop_after", 502), ("stall_after", 504)])
async def test_a_stream_that_breaks_or_stalls_raises_after_its_events(upstream_server, fault, status):
    client = upstream(upstream_server, timeout_s=1)
    _, headers = tagged(**{fault: "3"})
    stream = await client.stream({**BODY, "stream": True}, headers)
    got = []
    with pytest.raises(UpstreamError) as err:
        async for event in stream.events():
            got.append(event)
    await stream.aclose()
    await client.aclose()
    assert len(got) == 3 and err.value.status == status


async def test_closing_a_stream_cancels_the_upstream_request(upstream_server):
    client = upstream(upstream_server)
    tag, headers = tagged(chunk_delay="0.1")
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": " ".join(["word"] * 100)}]}
    stream = await client.stream(body, headers)
    events = stream.events()
    for _ in range(3):
        await anext(events)
    await stream.aclose()
    await client.aclose()
    deadline = time.monotonic() + 5
    while upstream_server.received(tag)[0]["outcome"] is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    seen = upstream_server.received(tag)[0]
    assert seen["outcome"] == "client_gone" and seen["events_sent"] < seen["events_total"] - 50


async def test_models_of_the_server(upstream_server):
    client = upstream(upstream_server)
    reply = await client.models()
    await client.aclose()
    assert reply.status_code == 200 and [m["id"] for m in reply.json()["data"]] == ["echo"]


def test_the_router_gives_each_decision_its_upstream_and_model(upstream_server, monkeypatch):
    monkeypatch.setenv("TEST_ROUTED_KEY", "k")
    config = load_config(
        {
            "global": {"upstream": {"base_url": upstream_server.base_url}},
            "routing": {
                "decisions": [
                    {"name": "renamed", "upstream": {"model": "other-name"}},
                    {"name": "same", "match": {"models": ["same"]}},
                    {
                        "name": "keyed",
                        "upstream": {"base_url": upstream_server.base_url, "api_key_env": "TEST_ROUTED_KEY"},
                    },
                ]
            },
        }
    )
    router = UpstreamRouter(config)
    default = router.route(None)
    assert router.route("same").upstream is default.upstream and router.route("unknown") == default
    assert router.route("renamed").upstream is default.upstream and router.route("renamed").model == "other-name"
    assert router.route("renamed").body(BODY) == {**BODY, "model": "other-name"} and default.body(BODY) is BODY
    assert router.route("keyed").upstream is not default.upstream  # another key: another client
    assert len(router.servers()) == 1  # one server to ask for its models
    asyncio.run(router.aclose())


def test_the_router_needs_the_echo_for_a_route_without_url():
    config = load_config({"routing": {"decisions": [{"name": "d"}]}})
    with pytest.raises(ValueError, match="no upstream URL"):
        UpstreamRouter(config)
    router = UpstreamRouter(config, echo=object())
    assert isinstance(router.route("d").upstream, EchoClient) and router.servers() == [router.route(None).upstream]
