"""The service as a transparent OpenAI-compatible proxy, under ``serve.run``, in front of real
upstream server processes (``tests.upstream_server``: the echo over HTTP, with faults on
request), driven by the official ``openai`` client as users would, and by raw httpx for the
wire details (SSE framing, headers, error statuses, disconnects).

Routes of the application (``config``):

- ``default`` (any model): memory on, auto-store, ``global.upstream`` = server A (timeout 2 s);
- ``routed``: its own upstream, server B, with a model name override and an API key from the
  ingress's environment, and its own memory policy (one memory, no auto-store);
- ``dead``: an upstream URL where nothing listens.
"""

from __future__ import annotations

import time
import uuid

import httpx
import openai
import pytest

from deployments.echo import echo_chunks, echo_completion
from deployments.sse import DONE, EventReader
from tests.conftest import free_port, wait_healthy
from tests.upstream_server import start_upstream_server

pytestmark = pytest.mark.integration

APP = "memory-proxy"
FACT = "My locker code is 4817"
QUESTION = "What is my locker code?"
STATEMENT = "My bike is a green Gazelle."
"""A turn that states a fact: auto-store keeps it (a question alone leaves no memory)."""
ROUTED_KEY = "secret-of-b"


@pytest.fixture(scope="module")
def server_b():
    server = start_upstream_server(free_port(), models=["served-by-b", "echo"])
    try:
        yield server
    finally:
        server.stop()


def config(a, b) -> dict:
    return {
        "global": {
            "stores": {"memory": {"backend": "inmemory"}},
            "upstream": {"base_url": a.base_url, "timeout_s": 2},
        },
        "routing": {
            "decisions": [
                {
                    "name": "routed",
                    "match": {"models": ["routed"]},
                    "upstream": {"base_url": b.base_url, "model": "served-by-b", "api_key_env": "TEST_ROUTED_KEY"},
                    "plugins": [{"type": "memory", "configuration": {"retrieval_limit": 1, "auto_store": False}}],
                },
                {
                    "name": "dead",
                    "match": {"models": ["dead"]},
                    "upstream": {"base_url": f"http://127.0.0.1:{free_port()}/v1"},
                },
                {"name": "default", "plugins": [{"type": "memory", "configuration": {"enabled": True}}]},
            ]
        },
    }


@pytest.fixture(scope="module")
def url(serve_http_port, upstream_server, server_b):
    from ray import serve

    from deployments.app import build_application

    ingress_options = {
        "ray_actor_options": {"num_cpus": 0, "runtime_env": {"env_vars": {"TEST_ROUTED_KEY": ROUTED_KEY}}}
    }
    app = build_application({"config": config(upstream_server, server_b)}, overrides={"MemoryIngress": ingress_options})
    serve.run(app, name=APP, route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{serve_http_port}"
    wait_healthy(base)
    yield base
    serve.delete(APP)


def new_user() -> str:
    return f"proxy-{uuid.uuid4().hex[:10]}"


def client(url: str, user: str | None, **kw) -> openai.OpenAI:
    headers = {"x-authz-user-id": user} if user else {}
    return openai.OpenAI(base_url=f"{url}/v1", api_key="client-key", default_headers=headers, max_retries=0, **kw)


def remember(url: str, user: str, *contents: str) -> None:
    r = httpx.post(
        f"{url}/v1/memory", json={"memories": [{"content": c} for c in contents]}, headers={"x-authz-user-id": user}
    )
    assert r.status_code == 201, r.text


def memories(url: str, user: str) -> list[dict]:
    r = httpx.get(f"{url}/v1/memory", headers={"x-authz-user-id": user}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["memories"]


def wait_for_memories(url: str, user: str, n: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = memories(url, user)
        if len(found) >= n:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{user} has fewer than {n} memories after {timeout}s")


def tag_headers(**fault) -> tuple[str, dict]:
    tag = uuid.uuid4().hex
    headers = {"x-test-tag": tag}
    if fault:
        headers["x-fault"] = ";".join(f"{k}={v}" if v != "" else k for k, v in fault.items())
    return tag, headers


def sse_events(text: str) -> list:
    reader = EventReader()
    return [e for line in text.split("\n") if (e := reader.line(line)) is not None]


def raw_chat(url: str, user: str | None, body: dict, headers: dict | None = None, timeout: float = 30):
    h = {"x-authz-user-id": user} if user else {}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={**h, **(headers or {})}, timeout=timeout)


def question(model: str = "assistant", stream: bool = False, text: str = QUESTION, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream, **extra}


# ---------------------------------------------------------------------------- the openai client
def test_openai_client_non_streaming_gets_memory_and_the_turn_is_stored(url, upstream_server):
    user = new_user()
    remember(url, user, FACT)
    tag, headers = tag_headers()
    raw = client(url, user).chat.completions.with_raw_response.create(
        model="assistant", messages=[{"role": "user", "content": QUESTION}], extra_headers=headers
    )
    completion = raw.parse()
    assert "4817" in completion.choices[0].message.content and completion.object == "chat.completion"
    assert int(raw.headers["x-memory-injected"]) >= 1 and raw.headers["x-memory-decision"] == "default"
    (seen,) = upstream_server.received(tag)
    assert "4817" in seen["body"]["messages"][-1]["content"]  # injected before the upstream call
    client(url, user).chat.completions.create(model="assistant", messages=[{"role": "user", "content": STATEMENT}])
    stored = wait_for_memories(url, user, 2)  # the fact, and the statement (the question left nothing)
    assert sorted(m["content"] for m in stored) == sorted([FACT, STATEMENT])
    assert next(m for m in stored if m["content"] == STATEMENT)["created_via"] == "auto_store"


def test_openai_client_streams_with_usage_memory_headers_and_stores_the_same_turn(url, upstream_server):
    """Streaming goes through the memory pipeline exactly like non-streaming: the same
    injection, and after the stream the same turn is stored as for a non-streamed answer."""
    streamed_user, plain_user = new_user(), new_user()
    for user in (streamed_user, plain_user):
        remember(url, user, FACT)
    tag, headers = tag_headers()
    with client(url, streamed_user).chat.completions.with_streaming_response.create(
        model="assistant",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert int(response.headers["x-memory-injected"]) >= 1 and response.headers["x-memory-decision"] == "default"
        chunks = list(response.parse())
    *content, usage = chunks
    text = "".join(c.choices[0].delta.content or "" for c in content if c.choices)
    (seen,) = upstream_server.received(tag)
    assert text == echo_completion(seen["body"])["choices"][0]["message"]["content"] and "4817" in text
    assert all(c.usage is None for c in content) and usage.choices == []
    assert usage.usage.prompt_tokens > 0 and usage.usage.completion_tokens > 0
    assert content[-1].choices[0].finish_reason == "stop"

    statement = [{"role": "user", "content": STATEMENT}]
    with client(url, streamed_user).chat.completions.create(model="assistant", messages=statement, stream=True) as s:
        list(s)
    client(url, plain_user).chat.completions.create(model="assistant", messages=statement)
    turns = {
        user: sorted((m["content"], m["type"], m["created_via"]) for m in wait_for_memories(url, user, 2))
        for user in (streamed_user, plain_user)
    }
    assert turns[streamed_user] == turns[plain_user]
    assert (STATEMENT, "semantic", "auto_store") in turns[streamed_user]


def test_a_client_that_closes_at_done_has_its_turn_stored(url):
    """The openai client closes the connection as soon as it reads [DONE]; here the upstream
    keeps its response open a second longer, so the close cancels the request while the
    proxy still reads the upstream: the turn, complete at [DONE], is stored all the same."""
    user = new_user()
    _, headers = tag_headers(linger="1")
    text = "Remember that my bike is a green Gazelle"
    stream = client(url, user).chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": text}], stream=True, extra_headers=headers
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == f"user: {text}"
    stream.close()
    (turn,) = wait_for_memories(url, user, 1)
    assert turn["content"] == "my bike is a green Gazelle"  # the statement, its lead-in dropped


def test_stream_without_include_usage_has_no_usage_chunk(url):
    stream = client(url, None).chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "tell me a thing"}], stream=True
    )
    chunks = list(stream)
    assert all(c.usage is None and len(c.choices) == 1 for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "user: tell me a thing"


def test_openai_client_embeddings_in_both_encodings(url):
    c = client(url, None)
    default = c.embeddings.create(model="any", input=["hello world", "a locker code"])  # base64 on the wire
    floats = c.embeddings.create(model="any", input=["hello world", "a locker code"], encoding_format="float")
    assert [len(d.embedding) for d in default.data] == [384, 384]
    for a, b in zip(default.data, floats.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
    raw = httpx.post(f"{url}/v1/embeddings", json={"input": "x", "encoding_format": "base64"}).json()
    assert isinstance(raw["data"][0]["embedding"], str)
    bad = httpx.post(f"{url}/v1/embeddings", json={"input": "x", "encoding_format": "int8"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_models_are_listed_from_every_configured_upstream(url):
    ids = [m.id for m in client(url, None).models.list()]
    assert ids == ["echo", "served-by-b"]  # A, then B (echo once); the dead upstream is left out


# ---------------------------------------------------------------------------- routing
def test_a_decision_sends_its_requests_to_its_own_upstream_model_and_key(url, upstream_server, server_b):
    user = new_user()
    remember(url, user, FACT, "My bike lock code is 2290")
    assert raw_chat(url, user, question()).headers["x-memory-injected"] == "2"  # the default route's policy
    user = new_user()
    remember(url, user, FACT, "My bike lock code is 2290")
    tag, headers = tag_headers()
    for stream in (False, True):
        r = raw_chat(url, user, question("routed", stream), headers={**headers, "authorization": "Bearer client-key"})
        assert r.status_code == 200 and r.headers["x-memory-decision"] == "routed", r.text
        assert r.headers["x-memory-injected"] == "1"  # the route's own policy: retrieval_limit 1
    assert upstream_server.received(tag) == []
    seen = server_b.received(tag)
    assert len(seen) == 2
    for request in seen:
        assert request["body"]["model"] == "served-by-b"
        assert [v for k, v in request["headers"] if k == "authorization"] == [f"Bearer {ROUTED_KEY}"]
    time.sleep(1)
    assert len(memories(url, user)) == 2  # auto_store: false on this route


# ---------------------------------------------------------------------------- the wire
def test_sse_framing_is_the_upstreams_events_unchanged(url, upstream_server):
    tag, headers = tag_headers()
    r = raw_chat(url, None, question(stream=True), headers=headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-memory-skipped"] == "no_user"
    assert r.text.endswith("data: [DONE]\n\n") and "\n\n\n" not in r.text
    events = sse_events(r.text)
    assert all(len(e.lines) == 1 and e.lines[0].startswith("data: ") for e in events)
    (seen,) = upstream_server.received(tag)
    expected = echo_chunks(seen["body"])
    assert [{**e.json(), "created": 0} for e in events[:-1]] == [{**c, "created": 0} for c in expected]
    assert events[-1].data == DONE


def test_events_reach_the_client_as_the_upstream_sends_them(url):
    _, headers = tag_headers(chunk_delay="0.25")
    arrivals = []
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=question(stream=True, text="one two three four"), headers=headers
    ) as r:
        assert r.status_code == 200
        started = time.perf_counter()
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.perf_counter() - started)
    assert len(arrivals) == 8  # role, 5 pieces ("user: " and four words), finish, [DONE]
    # not buffered: the last event comes ~6 chunk delays after the first one
    assert arrivals[-1] - arrivals[0] >= 0.25 * 6 * 0.8, arrivals


def test_headers_to_the_upstream_authorization_passes_hop_by_hop_and_memory_headers_do_not(url, upstream_server):
    tag, headers = tag_headers()
    sent = {
        **headers,
        "authorization": "Bearer client-key",
        "connection": "keep-alive, x-private-hop",
        "x-private-hop": "1",
        "keep-alive": "timeout=5",
        "te": "trailers",
        "proxy-authorization": "Basic eA==",
        "x-project-id": "proj",
        "openai-organization": "org-1",
        "x-custom": "passed",
        "x-utf8": "café ✓".encode(),  # bytes beyond ASCII go on unchanged
    }
    for stream in (False, True):
        assert raw_chat(url, new_user(), question(stream=stream), headers=sent).status_code == 200
    for request in upstream_server.received(tag):
        names = {k for k, _ in request["headers"]}
        got = dict(request["headers"])
        assert got["authorization"] == "Bearer client-key"
        assert got["openai-organization"] == "org-1" and got["x-custom"] == "passed"
        assert got["x-utf8"].encode("latin-1") == "café ✓".encode()
        assert not names & {"x-private-hop", "keep-alive", "te", "proxy-authorization"}
        assert not names & {"x-authz-user-id", "x-project-id"}
        assert got.get("connection", "keep-alive") == "keep-alive"  # the proxy's own connection


@pytest.mark.parametrize("stream", [False, True])
def test_headers_from_the_upstream_end_to_end_pass_hop_by_hop_do_not(url, stream):
    _, headers = tag_headers(hop_headers="")
    r = raw_chat(url, None, question(stream=stream), headers=headers)
    assert r.status_code == 200 and r.headers["x-upstream-note"] == "kept"
    assert "proxy-authenticate" not in r.headers and "x-secret-hop" not in r.headers
    assert r.headers.get("keep-alive") != "timeout=99"
    # one x-request-id (Ray Serve's, this request's); the upstream's under another name
    assert len(r.headers.get_list("x-request-id")) == 1 and r.headers["x-request-id"] != "upstream-request-1"
    assert r.headers["x-upstream-request-id"] == "upstream-request-1"
    assert r.headers.raw[[k.lower() for k, _ in r.headers.raw].index(b"x-upstream-utf8")][1] == "né ✓".encode()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_upstream_error_statuses_pass_through_before_the_first_chunk(url, status, stream):
    user = new_user()
    _, headers = tag_headers(status=status)
    r = raw_chat(url, user, question(stream=stream), headers=headers)
    assert r.status_code == status and r.headers["content-type"] == "application/json"
    assert r.json()["error"] == {  # the upstream's body, as it sent it
        "message": f"fault {status}",
        "type": "invalid_request_error" if status < 500 else "server_error",
        "param": None,
        "code": f"fault_{status}",
    }
    assert r.headers["x-memory-decision"] == "default"
    if status == 429:
        assert r.headers["retry-after"] == "7" and r.headers["x-ratelimit-remaining-requests"] == "0"
    time.sleep(0.5)
    assert memories(url, user) == []  # no answer, no turn


def test_the_openai_client_sees_the_upstreams_errors_as_its_own(url):
    c = client(url, None)
    for status, error in ((429, openai.RateLimitError), (401, openai.AuthenticationError)):
        _, headers = tag_headers(status=status)
        with pytest.raises(error) as err:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], extra_headers=headers)
        assert err.value.code == f"fault_{status}"
        with pytest.raises(error):
            c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True, extra_headers=headers
            )


@pytest.mark.parametrize("stream", [False, True])
def test_an_error_body_that_is_not_json_keeps_the_status_in_our_error_shape(url, stream):
    _, headers = tag_headers(status=503, text="")
    r = raw_chat(url, None, question(stream=stream), headers=headers)
    assert r.status_code == 503 and r.json()["error"]["code"] == "upstream_error"
    assert "upstream says 503" in r.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_no_upstream_listening_is_502_and_no_answer_in_time_is_504(url, stream):
    r = raw_chat(url, None, question("dead", stream))
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error", r.text
    assert r.headers["x-memory-decision"] == "dead"
    _, headers = tag_headers(delay="4")  # the route's timeout_s is 2
    started = time.monotonic()
    r = raw_chat(url, None, question(stream=stream), headers=headers)
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout", r.text
    assert time.monotonic() - started < 3.9


def test_a_server_that_does_not_stream_is_passed_through_and_remembered(url):
    user = new_user()
    _, headers = tag_headers(json_stream="")
    r = raw_chat(url, user, question(stream=True, text="Remember that my bike is a green Gazelle"), headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json()["object"] == "chat.completion"
    assert "Gazelle" in wait_for_memories(url, user, 1)[0]["content"]


# ---------------------------------------------------------------------------- mid-stream
@pytest.mark.parametrize(
    ("fault", "code"),
    [("error_after", None), ("drop_after", "upstream_error"), ("stall_after", "upstream_timeout")],
    ids=["upstream-error-event", "connection-dropped", "stalled-past-timeout"],
)
def test_an_upstream_failing_mid_stream_ends_it_with_an_error_event_and_nothing_is_stored(url, fault, code):
    user = new_user()
    _, headers = tag_headers(**{fault: "3"})
    text = "Remember that my bike is a green Gazelle"
    r = raw_chat(url, user, question(stream=True, text=text), headers=headers)
    assert r.status_code == 200  # the stream had started
    events = sse_events(r.text)
    assert len(events) == 4 and all(e.json()["object"] == "chat.completion.chunk" for e in events[:3])
    error = events[3].json()["error"]
    assert DONE not in r.text
    if code is None:  # the upstream's own error event, forwarded as it was
        assert error == {"message": "the model crashed", "type": "server_error", "code": 500}
    else:
        assert error["code"] == code and error["type"] == code and error["message"]
    with pytest.raises(openai.APIError):
        list(
            client(url, user).chat.completions.create(
                model="assistant", messages=[{"role": "user", "content": text}], stream=True, extra_headers=headers
            )
        )
    time.sleep(1)
    assert memories(url, user) == []


def test_a_client_disconnect_cancels_the_upstream_request_and_stores_no_partial_turn(url, upstream_server):
    user = new_user()
    tag, headers = tag_headers(chunk_delay="0.1")
    long_text = "Remember this list: " + " ".join(f"item{i}" for i in range(120))
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=question(stream=True, text=long_text),
        headers={"x-authz-user-id": user, **headers},
        timeout=30,
    ) as r:
        assert r.status_code == 200
        got: list[str] = []
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(line)
            if len(got) == 3:
                break
    # the connection is closed: the proxy must cancel its upstream request within moments
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        (seen,) = upstream_server.received(tag)
        if seen["outcome"] is not None:
            break
        time.sleep(0.1)
    assert seen["outcome"] == "client_gone", seen["outcome"]
    assert seen["events_sent"] < seen["events_total"] / 2, (seen["events_sent"], seen["events_total"])
    time.sleep(1.5)
    assert memories(url, user) == []  # the partial turn is not stored


# ---------------------------------------------------------------------------- input
def test_bad_streaming_input_is_400(url):
    for body in (
        {**question(), "stream": "true"},
        question(stream=False, stream_options={"include_usage": True}),
        question(stream=True, stream_options={"include_usage": "yes"}),
        question(stream=True, stream_options="x"),
    ):
        r = raw_chat(url, None, body)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (body, r.text)
    nan = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}'
    r = httpx.post(f"{url}/v1/chat/completions", content=nan, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
