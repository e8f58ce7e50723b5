"""Chat turns stored behind their answers are bounded per user (``global.limits.
pending_writes_per_user``): while a user's stores hang, their next chats are still answered
200 (a chat is never refused for it) but their turns are not stored, counted as
``memory_extraction{outcome="skipped_writes_pending"}``; other users' turns and chats that
store nothing are not held by it, and once the stores land the user's turns are stored again.
The chat route is called in process, without Ray (as in ``test_chat_headers_once``), on the
real pipeline and bound, with a store whose writes wait."""

from __future__ import annotations

import asyncio
import json

from deployments import sse
from deployments.http.ingress import MemoryIngress
from memory_core.chat.background import BackgroundWrites
from memory_core.chat.metrics import RecordingMetrics
from memory_core.config import load_config

from .inprocess_chat import ANSWER, CHUNKS, chat_request, hand_built_ingress

PER_USER = 3


class _SlowStore:
    """Retrieves nothing; each write waits for ``release`` and is then kept."""

    def __init__(self):
        self.release = asyncio.Event()
        self.written: list[str] = []

    async def retrieve(self, options):
        return []

    async def write(self, memories):
        await self.release.wait()
        self.written.extend(m.user_id for m in memories)
        return []


def _ingress(config, store):
    limits = config.global_.limits
    metrics = RecordingMetrics(("tenant", "read_only"))  # strict: declared labels only
    return hand_built_ingress(
        config, store, metrics, BackgroundWrites(limits.pending_writes_per_user, limits.pending_writes)
    )


def _request(user: str, tenant: str = "acme", stream: bool = False):
    return chat_request({"x-authz-user-id": user, "X-Tenant": tenant}, stream=stream)


async def _streamed(response) -> list[str]:
    """The data of each event a streamed chat sent (the body read as a client reads it)."""
    body = b"".join([chunk async for chunk in response.body_iterator])
    return [block.removeprefix("data: ") for block in body.decode().split("\n\n") if block]


CONFIG = {
    "global": {"limits": {"pending_writes_per_user": PER_USER, "pending_writes": 100}},
    "routing": {
        "decisions": [
            {
                "name": "tenant",
                "match": {"headers": {"X-Tenant": "acme"}},
                "plugins": [{"type": "memory", "configuration": {"enabled": True, "auto_store": True}}],
            },
            {
                "name": "read_only",
                "match": {"headers": {"X-Tenant": "reader"}},
                "plugins": [{"type": "memory", "configuration": {"enabled": True, "auto_store": False}}],
            },
        ]
    },
}


def _skipped(ingress) -> list[str]:
    return [
        tags["decision"]
        for name, tags, _ in ingress.metrics.counts
        if name == "memory_extraction" and tags.get("outcome") == "skipped_writes_pending"
    ]


def test_a_user_whose_turns_are_still_being_stored_is_answered_and_the_turn_not_stored():
    async def scenario():
        store = _SlowStore()
        ingress = _ingress(load_config(CONFIG), store)
        chat = MemoryIngress.func_or_class.chat_completions
        for _ in range(PER_USER):
            assert (await chat(ingress, _request("alice"))).status_code == 200
        await asyncio.sleep(0.05)  # the stores reach the store and wait there
        pending = ingress.background_writes.pending("alice")
        calls = len(ingress.upstreams.upstream.bodies)
        over = [await chat(ingress, _request("alice")) for _ in range(2)]  # at the bound
        asked = len(ingress.upstreams.upstream.bodies) - calls
        skipped = _skipped(ingress)
        other = await chat(ingress, _request("bob"))  # another user's lane is open
        reader = await chat(ingress, _request("alice", tenant="reader"))  # stores nothing: not counted
        store.release.set()
        assert await ingress.background_writes.drain(5.0) == 0
        again = await chat(ingress, _request("alice"))  # stored again once the stores landed
        await ingress.background_writes.drain(5.0)
        return pending, over, asked, skipped, other, reader, again, store.written, _skipped(ingress)

    pending, over, asked, skipped, other, reader, again, written, skipped_at_end = asyncio.run(scenario())
    assert pending == PER_USER
    assert [r.status_code for r in over] == [200, 200] and asked == 2  # answered by the model
    assert json.loads(over[0].body) == ANSWER
    assert skipped == ["tenant", "tenant"] and skipped_at_end == skipped
    assert other.status_code == 200 and reader.status_code == 200 and again.status_code == 200
    # the turns under the bound and after it were stored; the two at the bound were not
    assert written.count("alice") == PER_USER + 1 and written.count("bob") == 1


def test_a_streamed_chat_at_the_bound_is_relayed_whole_and_its_turn_not_stored():
    """The streaming path stores its turn after ``[DONE]`` through the same bound: at the
    user's bound every event still reaches the client, the turn is not stored and is counted;
    once the stores land, a streamed turn is stored again."""

    async def scenario():
        store = _SlowStore()
        ingress = _ingress(load_config(CONFIG), store)
        chat = MemoryIngress.func_or_class.chat_completions
        under = [await _streamed(await chat(ingress, _request("alice", stream=True))) for _ in range(PER_USER)]
        await asyncio.sleep(0.05)  # the stores reach the store and wait there
        pending = ingress.background_writes.pending("alice")
        over = await chat(ingress, _request("alice", stream=True))  # at the bound
        over_events = await _streamed(over)
        skipped = _skipped(ingress)
        store.release.set()
        assert await ingress.background_writes.drain(5.0) == 0
        again = await _streamed(await chat(ingress, _request("alice", stream=True)))
        await ingress.background_writes.drain(5.0)
        return under, pending, over, over_events, skipped, again, store.written

    under, pending, over, over_events, skipped, again, written = asyncio.run(scenario())
    events = [json.dumps(chunk, separators=(",", ":")) for chunk in CHUNKS] + [sse.DONE]
    assert all(stream == events for stream in under) and again == events
    assert pending == PER_USER
    assert over.status_code == 200 and over.media_type == "text/event-stream" and over_events == events
    assert skipped == ["tenant"]
    assert written == ["alice"] * (PER_USER + 1)  # the streamed turns under the bound and after it


def test_a_stopping_replica_stores_the_turns_of_answers_it_already_sent():
    async def scenario():
        store = _SlowStore()
        ingress = _ingress(load_config(CONFIG), store)
        assert (await MemoryIngress.func_or_class.chat_completions(ingress, _request("alice"))).status_code == 200
        await asyncio.sleep(0.05)
        asyncio.get_running_loop().call_later(0.2, store.release.set)
        await ingress.__del__()  # Serve's replica shutdown
        return store.written

    assert asyncio.run(scenario()) == ["alice"]


def test_the_replica_total_skips_every_user_once_it_is_full():
    config = load_config({**CONFIG, "global": {"limits": {"pending_writes_per_user": 10, "pending_writes": 2}}})

    async def scenario():
        store = _SlowStore()
        ingress = _ingress(config, store)
        chat = MemoryIngress.func_or_class.chat_completions
        statuses = [(await chat(ingress, _request(user))).status_code for user in ("alice", "bob", "carol")]
        await asyncio.sleep(0.05)
        pending = ingress.background_writes.pending()
        store.release.set()
        await ingress.background_writes.drain(5.0)
        return statuses, pending, store.written, _skipped(ingress)

    statuses, pending, written, skipped = asyncio.run(scenario())
    assert statuses == [200, 200, 200] and pending == 2
    assert sorted(written) == ["alice", "bob"] and skipped == ["tenant"]  # carol answered, turn not stored
