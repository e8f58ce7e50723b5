"""The running service through the official ``openai`` client, as users drive it: a fact told
in one conversation comes back in a new one, streamed or not; the streamed turn is stored
after the stream; models and embeddings. Assumes ``serve_config.yaml`` (the echo upstream:
answers show what was injected)."""

from __future__ import annotations

import time

import httpx
import openai

FACT = "Please remember this: my locker code is 4817."
QUESTION = "What is my locker code?"


def client(base_url: str, user: str | None) -> openai.OpenAI:
    headers = {"x-authz-user-id": user} if user else {}
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", default_headers=headers, max_retries=0)


def wait_for(base_url: str, user: str, predicate, timeout: float = 30) -> list[dict]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = httpx.get(f"{base_url}/v1/memory", headers={"x-authz-user-id": user}, timeout=30).json()["memories"]
        if predicate(found):
            return found
        time.sleep(0.3)
    raise AssertionError(f"memories of {user} not as expected within {timeout}s")


def test_a_streamed_fact_is_remembered_and_streamed_back_in_a_new_conversation(base_url, new_user):
    alice = new_user()
    told = client(base_url, alice).chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": FACT}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in told if c.choices) == f"user: {FACT}"
    # the statement is kept, its "please remember this:" lead-in dropped
    wait_for(base_url, alice, lambda ms: any(m["content"] == "my locker code is 4817." for m in ms))

    with client(base_url, alice).chat.completions.with_streaming_response.create(
        model="assistant",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        assert int(response.headers["x-memory-injected"]) >= 1
        chunks = list(response.parse())
    answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "4817" in answer and chunks[-1].usage.total_tokens > 0

    plain = client(base_url, new_user()).chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": QUESTION}]
    )
    assert "4817" not in plain.choices[0].message.content  # another user


def test_models_and_embeddings_through_the_client(base_url):
    c = client(base_url, None)
    assert "echo" in [m.id for m in c.models.list()]
    vectors = c.embeddings.create(model="any", input=["hello", "world"])
    assert [len(d.embedding) for d in vectors.data] == [384, 384]


def test_curl_style_raw_stream_is_server_sent_events(base_url, new_user):
    with httpx.stream(
        "POST",
        f"{base_url}/v1/chat/completions",
        json={"model": "scratch", "stream": True, "messages": [{"role": "user", "content": "hi there friend"}]},
        headers={"x-authz-user-id": new_user()},
        timeout=30,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-memory-skipped"] == "plugin_disabled"
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
