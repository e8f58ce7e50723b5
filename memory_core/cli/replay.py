"""``replay-locomo``: replay LoCoMo conversations into a running service, then (``--evaluate``)
measure evidence recall of its search.

One user per conversation, ``<--user-prefix><sample_id>``. The requests are
``memory_core.locomo``'s (the same the benchmarks send):

- ``--mode rest``: every turn one memory, ``POST /v1/memory`` in batches (``ingest_rest``);
- ``--mode chat``: one ``POST /v1/chat/completions`` per turn of the first speaker with the
  session so far (``feed_chat``); memories come from the service's auto-store, so the
  command waits for each user's memory count to settle before evaluating.

Identity: without ``--api-key``/``--user`` each conversation is sent as its own user in
``x-authz-user-id`` (trusted_header mode). With ``--api-key`` (or ``--user``/``--role``) the
CLI is that caller and writes the conversations' users through ``?user_id=`` (an admin, rest
mode only: chat requests have no ``user_id`` parameter).

``--evaluate`` asks every category 1–4 question with evidence through ``POST /v1/memory/search``
(10 hits) and prints recall@5/@10 overall and per category: a memory's turns are its metadata's
``dia_id`` (rest) or the turns whose text it contains (chat). ``--cleanup`` deletes the
replayed users' memories at the end.
"""

from __future__ import annotations

import asyncio
import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .. import locomo
from ..sanitize import USER_HEADER
from .common import (
    CliError,
    Identity,
    Service,
    ServiceOptions,
    console,
    fail,
    new_table,
    progress,
    service_options,
    stdout,
)


class Mode(str, Enum):
    """How the turns reach the service."""

    rest = "rest"
    chat = "chat"


def _as_owner(identity: Identity | None, owner: str) -> tuple[dict[str, str], dict[str, str]]:
    """(headers, query parameters) of a request on ``owner``'s memories: as ``owner`` itself
    without an identity, else as the identity with ``?user_id=owner``."""
    if identity is None:
        return {USER_HEADER: owner}, {}
    return {}, {"user_id": owner}


async def _replay(
    svc: Service,
    identity: Identity | None,
    samples: list[dict],
    *,
    prefix: str,
    mode: Mode,
    batch: int,
    model: str,
    evaluate: bool,
    threshold: float | None,
    cleanup: bool,
) -> tuple[list[tuple[str, int, int]], list[tuple[int, float, float]]]:
    """Replay ``samples``; returns ``[(user, turns sent, memories after)]`` and the evaluation's
    ``(category, recall@5, recall@10)`` rows (empty without ``evaluate``)."""
    owners = [f"{prefix}{s['sample_id']}" for s in samples]
    users: list[tuple[str, int, int]] = []
    rows: list[tuple[int, float, float]] = []
    async with svc.async_client() as client:
        with progress() as bar:
            if mode is Mode.rest:
                total = sum(len(locomo.turns(s)) for s in samples)
            else:
                total = sum(r.turns for s in samples for r in locomo.chat_requests(s))
            task = bar.add_task(f"replay turns ({mode.value})", total=total)
            sent: list[int] = []
            for sample, owner in zip(samples, owners, strict=True):
                headers, params = _as_owner(identity, owner)
                before = bar.tasks[task].completed
                if mode is Mode.rest:
                    await locomo.ingest_rest(
                        client,
                        sample,
                        headers=headers,
                        params=params,
                        batch=batch,
                        on_progress=lambda n: bar.advance(task, n),
                    )
                else:
                    await locomo.feed_chat(
                        client, sample, headers=headers, model=model, on_progress=lambda n: bar.advance(task, n)
                    )
                sent.append(int(bar.tasks[task].completed - before))
            if mode is Mode.chat:
                wait = bar.add_task("waiting for auto-store to settle", total=len(owners))
                for owner in owners:
                    headers, params = _as_owner(identity, owner)
                    await locomo.settle(client, headers=headers, params=params)
                    bar.advance(wait)
            for owner, n in zip(owners, sent, strict=True):
                headers, params = _as_owner(identity, owner)
                users.append((owner, n, await locomo.memory_total(client, headers=headers, params=params)))
            if evaluate:
                ask = bar.add_task("questions", total=sum(len(locomo.questions(s)) for s in samples))
                for sample, owner in zip(samples, owners, strict=True):
                    headers, params = _as_owner(identity, owner)
                    rows += await locomo.evaluate(
                        client,
                        sample,
                        headers=headers,
                        params=params,
                        match="metadata" if mode is Mode.rest else "content",
                        threshold=threshold,
                        on_progress=lambda n: bar.advance(ask, n),
                    )
        if cleanup:
            for owner in owners:
                headers, params = _as_owner(identity, owner)
                r = await client.delete("/v1/memory", params={**params, "all": "true"}, headers=headers)
                r.raise_for_status()
    return users, rows


@service_options(timeout=120.0)
def replay_cmd(
    path: Annotated[
        Path | None,
        typer.Argument(help="LoCoMo JSON (default: $LOCOMO_PATH or ../shared/data/locomo/locomo_dev.json)."),
    ] = None,
    conversations: Annotated[
        int, typer.Option("--conversations", "-n", min=0, help="Only the first N conversations (0: all).")
    ] = 0,
    mode: Annotated[Mode, typer.Option("--mode", help="rest: one memory per turn; chat: turns as chat requests.")] = (
        Mode.rest
    ),
    user_prefix: Annotated[
        str, typer.Option("--user-prefix", help="A conversation's user is this prefix + its sample_id.")
    ] = "locomo-",
    evaluate: Annotated[
        bool, typer.Option("--evaluate", help="Then ask every question and print evidence recall@5/@10.")
    ] = False,
    threshold: Annotated[
        float | None, typer.Option("--threshold", help="Similarity floor sent with the searches (default: none).")
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="rest: memories per POST /v1/memory.")] = 32,
    model: Annotated[str, typer.Option("--model", help="chat: the requests' model (a routing decision).")] = (
        "assistant"
    ),
    cleanup: Annotated[bool, typer.Option("--cleanup", help="Delete the replayed users' memories at the end.")] = False,
    *,
    options: ServiceOptions,
) -> None:
    """Replay LoCoMo conversations into the running service, one user per conversation.

    Without --api-key/--user each conversation is sent as its own user (x-authz-user-id,
    trusted_header mode); with them the caller writes the users' memories via ?user_id=
    (admin; rest mode only).
    """
    identity: Identity | None = None
    try:
        if options.api_key or options.user or options.role:
            identity = Identity.from_options(options.api_key, options.user, options.role)
            if mode is Mode.chat:
                raise CliError(
                    "--mode chat sends each conversation as its own user (x-authz-user-id, trusted_header mode): "
                    "leave out --api-key/--user (and unset $MEMORY_ROUTER_API_KEY), or use --mode rest"
                )
    except CliError as e:
        raise fail(e.message, e.code) from e
    svc = Service(options.base_url, identity or Identity(), options.timeout)
    with svc.reported():
        try:
            samples = locomo.load_samples(path, conversations or None)
        except (OSError, ValueError, TypeError) as e:
            raise CliError(f"cannot read LoCoMo data {path or locomo.default_path()}: {e}") from e
        try:
            users, rows = asyncio.run(
                _replay(
                    svc,
                    identity,
                    samples,
                    prefix=user_prefix,
                    mode=mode,
                    batch=batch,
                    model=model,
                    evaluate=evaluate,
                    threshold=threshold,
                    cleanup=cleanup,
                )
            )
        except (KeyError, json.JSONDecodeError) as e:
            raise CliError(f"unexpected data or answer: {e!r}") from e
    table = new_table(
        "user", "turns sent", "memories", title=f"LoCoMo replay ({mode.value}, {len(users)} conversations)"
    )
    for owner, n, memories in users:
        table.add_row(escape(owner), str(n), str(memories))
    stdout.print(table)
    if rows:
        stdout.print(locomo.recall_table(rows, f"evidence recall ({len(rows)} questions, {mode.value} replay)"))
    if cleanup:
        console.print(f"deleted the memories of {len(users)} users")
