"""A consolidation pass over LoCoMo conversations fed through chat, in process: memories
before and after, the groups merged, and proof that no content was lost.

Each conversation is replayed through ``MemoryPipeline`` (``prepare`` then ``remember``, as the
ingress does) into a curated in-memory store with the bundled model: the first speaker's turns
are the user's messages (their session so far as history), the other speaker's next turn is
the assistant's answer. Then one ``CuratingStore.consolidate`` pass runs per user, and a
second one (which must change nothing). Printed per conversation: active memories before and
after, groups merged, originals consolidated, the words of the originals missing from their
merged memory (must be 0), and a sample group; ``--min-jaccard`` / ``--min-cosine`` override
``ConsolidationSettings``.

    python benchmarks/consolidation.py --conversations 1
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_core.chat.pipeline import MemoryPipeline  # noqa: E402
from memory_core.config import ConsolidationSettings, load_config  # noqa: E402
from memory_core.curation.consolidate import lost_words  # noqa: E402
from memory_core.embedding import CoalescingEmbedFn, LocalEncoder  # noqa: E402
from memory_core.locomo import load_samples, sessions  # noqa: E402
from memory_core.sanitize import RequestContext  # noqa: E402
from memory_core.stores import make_store  # noqa: E402
from memory_core.types import ListQuery, MemoryState  # noqa: E402

app = typer.Typer(add_completion=False)


def turns_as_chat(sample: dict) -> list[tuple[list[dict], str]]:
    """(messages, answer) per turn of the first speaker: the session so far, and the other
    speaker's next turn as the answer ("" when the session ends)."""
    conv = sample["conversation"]
    user_speaker = conv.get("speaker_a")
    out = []
    for n in sessions(sample):
        session = conv[f"session_{n}"]
        history: list[dict] = []
        for i, t in enumerate(session):
            role = "user" if t["speaker"] == user_speaker else "assistant"
            if role == "user":
                nxt = session[i + 1] if i + 1 < len(session) else None
                answer = nxt["text"] if nxt and nxt["speaker"] != user_speaker else ""
                out.append(([*history, {"role": "user", "content": t["text"]}], answer))
            history.append({"role": role, "content": t.get("text", "")})
    return out


async def run(conversations: int, settings: ConsolidationSettings) -> None:
    config = load_config(
        {
            "global": {
                "stores": {"memory": {"backend": "inmemory", "curation": {"consolidation": settings.model_dump()}}}
            },
            "routing": {"decisions": [{"name": "default", "plugins": [{"type": "memory", "configuration": {}}]}]},
        }
    )
    from memory_core.config import EmbeddingSettings

    encoder = LocalEncoder(EmbeddingSettings())
    embed = CoalescingEmbedFn(encoder, wait_s=0.0)
    for sample in load_samples(None, conversations):
        store = make_store(config.memory, embed=embed, dimension=384, identity="minilm")
        pipeline = MemoryPipeline(config, store=store)
        user = sample["sample_id"]
        chats = turns_as_chat(sample)
        for messages, answer in chats:
            prepared = await pipeline.prepare(
                {"model": "assistant", "messages": messages}, RequestContext(user_id=user)
            )
            await pipeline.remember(prepared, {"choices": [{"message": {"role": "assistant", "content": answer}}]})
        before = (await store.list(ListQuery(user_id=user, states=[MemoryState.ACTIVE], limit=1000))).memories
        report = await store.consolidate(user)
        after = (await store.list(ListQuery(user_id=user, states=[MemoryState.ACTIVE], limit=1000))).memories
        again = await store.consolidate(user)
        lost = 0
        sample_group = None
        for merged_id in report.merged:
            merged = await store.get(merged_id, user)
            members = await store.get_many(merged.merged_from, user)
            lost += len(lost_words(merged.content, members))
            if sample_group is None:
                sample_group = (merged, members)
        print(
            f"{user}: {len(chats)} chat turns → {len(before)} active memories; one pass: {report.groups} groups "
            f"merged ({report.consolidated} originals consolidated) in {report.seconds:.2f} s → {len(after)} active; "
            f"words of the originals missing from their merged memory: {lost}; second pass: {again.groups} groups"
        )
        if sample_group:
            merged, members = sample_group
            print("  e.g. merged:", merged.content[:300].replace("\n", " | "))
            for m in members:
                print("     from:", m.content[:200].replace("\n", " | "))
        await store.close()


@app.command()
def main(
    conversations: int = typer.Option(1, help="the first N LoCoMo conversations"),
    min_jaccard: float = typer.Option(None, help="override ConsolidationSettings.min_jaccard"),
    min_cosine: float = typer.Option(None, help="override ConsolidationSettings.min_cosine"),
) -> None:
    settings = ConsolidationSettings()
    if min_jaccard is not None:
        settings = settings.model_copy(update={"min_jaccard": min_jaccard})
    if min_cosine is not None:
        settings = settings.model_copy(update={"min_cosine": min_cosine})
    asyncio.run(run(conversations, settings))


if __name__ == "__main__":
    app()
