"""User-level checks against a running service (see conftest: MEMORY_ROUTER_URL).

Assumes the decisions of serve_config.yaml: model ``scratch`` has memory off, every other
model has memory on with auto-store.
"""

from __future__ import annotations

import time

import httpx

FACT = "Please remember this: my locker code is 4817."
QUESTION = "What is my locker code?"


def chat(base_url, user_id, messages, model="assistant"):
    headers = {"x-authz-user-id": user_id} if user_id else {}
    r = httpx.post(
        f"{base_url}/v1/chat/completions", json={"model": model, "messages": messages}, headers=headers, timeout=60
    )
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], r.headers


def memories(base_url, user_id, **params):
    r = httpx.get(f"{base_url}/v1/memory", params=params, headers={"x-authz-user-id": user_id}, timeout=30)
    r.raise_for_status()
    return r.json()


def wait_for(base_url, user_id, n, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        body = memories(base_url, user_id)
        if body["total"] >= n:
            return body["memories"]
        time.sleep(0.3)
    raise AssertionError(f"auto-store did not land for {user_id} within {timeout}s")


def test_fact_told_in_one_conversation_is_used_in_a_new_one(base_url, new_user):
    alice, bob = new_user(), new_user()
    chat(base_url, alice, [{"role": "user", "content": FACT}])
    stored = wait_for(base_url, alice, 1)
    fact = next(m for m in stored if "4817" in m["content"])

    fresh = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": QUESTION}]
    answer, headers = chat(base_url, alice, fresh)
    assert "4817" in answer and int(headers["x-memory-injected"]) >= 1

    other, _ = chat(base_url, bob, fresh)
    assert "4817" not in other

    r = httpx.delete(
        f"{base_url}/v1/memory/{fact['id']}", headers={"x-authz-user-id": alice} | {"content-type": "application/json"}
    )
    assert r.status_code == 200
    after, _ = chat(base_url, alice, fresh)
    assert "4817" not in after


def test_memory_api_round_trip_and_isolation(base_url, new_user):
    alice, bob = new_user(), new_user()
    h = {"x-authz-user-id": alice}
    r = httpx.post(
        f"{base_url}/v1/memory", json={"memories": [{"content": "My favourite tea is genmaicha"}]}, headers=h
    )
    assert r.status_code == 201
    mid = r.json()["memories"][0]["id"]
    hits = httpx.post(f"{base_url}/v1/memory/search", json={"query": "What tea do I like?"}, headers=h).json()
    assert [m["id"] for m in hits["memories"]][:1] == [mid]
    assert httpx.get(f"{base_url}/v1/memory/{mid}", headers={"x-authz-user-id": bob}).status_code == 404
    none = httpx.post(
        f"{base_url}/v1/memory/search", json={"query": "What tea do I like?"}, headers={"x-authz-user-id": bob}
    ).json()
    assert none["memories"] == []
    assert httpx.get(f"{base_url}/v1/memory").status_code == 401
    assert (
        httpx.delete(f"{base_url}/v1/memory/{mid}", headers=h | {"content-type": "application/json"}).status_code == 200
    )
    assert httpx.get(f"{base_url}/v1/memory/{mid}", headers=h).status_code == 404


def test_route_without_memory_and_anonymous_requests(base_url, new_user):
    alice = new_user()
    httpx.post(
        f"{base_url}/v1/memory",
        json={"memories": [{"content": "My locker code is 4817"}]},
        headers={"x-authz-user-id": alice},
    ).raise_for_status()
    answer, headers = chat(base_url, alice, [{"role": "user", "content": QUESTION}], model="scratch")
    assert "4817" not in answer and headers["x-memory-skipped"] == "plugin_disabled"
    answer, headers = chat(base_url, None, [{"role": "user", "content": QUESTION}])
    assert headers["x-memory-skipped"] == "no_user" and answer == f"user: {QUESTION}"


def _block(answer: str) -> str:
    return answer[answer.index("<memory_context>") :] if "<memory_context>" in answer else ""


def test_a_moved_user_is_remembered_where_they_live_now(base_url, new_user):
    """The characterization of issue 12 through chat: Boston, then "I moved to San Francisco",
    then in a new conversation "Where do I live?": only San Francisco is injected."""
    u = new_user()
    chat(base_url, u, [{"role": "user", "content": "I live in Boston."}])
    wait_for(base_url, u, 1)
    chat(base_url, u, [{"role": "user", "content": "I moved to San Francisco last month."}])
    deadline = time.time() + 30
    while time.time() < deadline and not memories(base_url, u, state="superseded")["total"]:
        time.sleep(0.3)
    (old,) = memories(base_url, u, state="superseded")["memories"]
    assert "Boston" in old["content"] and old["superseded_by"]
    answer, headers = chat(base_url, u, [{"role": "user", "content": "Where do I live?"}])
    block = _block(answer)
    assert "San Francisco" in block and "Boston" not in block, answer
    history = httpx.get(f"{base_url}/v1/memory/{old['id']}/history", headers={"x-authz-user-id": u}, timeout=30)
    assert [m["state"] for m in history.json()["memories"]] == ["superseded", "active"]


def test_one_fact_told_twice_is_one_record_injected_once(base_url, new_user):
    u = new_user()
    chat(base_url, u, [{"role": "user", "content": FACT}])
    wait_for(base_url, u, 1)
    r = httpx.post(
        f"{base_url}/v1/memory",
        json={"memories": [{"content": "My locker code is 4817."}]},
        headers={"x-authz-user-id": u},
        timeout=30,
    )
    assert r.status_code == 201 and r.json()["outcomes"][0]["outcome"] == "reinforced", r.text
    answer, _ = chat(base_url, u, [{"role": "user", "content": QUESTION}])
    assert _block(answer).count("4817") == 1, answer
    time.sleep(1)  # the question's own turn stores nothing: it states nothing
    assert memories(base_url, u)["total"] == 1
