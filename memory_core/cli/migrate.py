"""``migrate``: re-embed memories into the collection of a new embedding model, store to store.

No service involved: the command opens the stores of the ``--config`` directly (with Milvus
Lite stop the service first: one process may open the file). The source is the old model's
identity (``--from-model``, or ``--from-identity`` with ``--from-dimension`` when its files are
gone); the target is the config's ``embedding`` (or ``--to-model``). Exit 2 on a configuration
error or a failed check.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import TaskID

from ..errors import MemoryError_
from .common import console, fail, new_table, progress


def _source_identity(from_model, from_max_seq_length, from_identity, from_dimension, from_unverifiable):
    from ..config import EmbeddingSettings
    from ..embedding import ModelIdentity, compute_identity

    if from_model:
        return compute_identity(EmbeddingSettings(model=from_model, max_seq_length=from_max_seq_length))
    if not from_identity or not from_dimension:
        raise fail("give --from-model, or --from-identity with --from-dimension")
    digest = from_identity.lower()
    if len(digest) < 12 or any(c not in "0123456789abcdef" for c in digest):
        raise fail("--from-identity must be a hex digest (at least the 12-character short form)")
    return ModelIdentity(
        digest=digest,
        model="(old model)",
        dimension=from_dimension,
        max_seq_length=None,
        dtype=None,
        normalize=True,
        verifiable=not from_unverifiable,
    )


async def _run_migration(memory_settings, source_identity, target_settings, users, concurrency, expect):
    from ..embedding import CoalescingEmbedFn, Encoder, RemoteEncoder, compute_identity, local_encoder
    from ..migration import migrate
    from ..stores import make_store

    target_identity = compute_identity(target_settings)
    if expect and not target_identity.digest.startswith(expect.lower()):
        raise fail(f"target identity is {target_identity.digest}, not {expect}")
    if target_identity.digest == source_identity.digest or (
        source_identity.verifiable == target_identity.verifiable and source_identity.short == target_identity.short
    ):
        raise fail(f"source and target have the same identity {target_identity.short}: nothing to migrate")
    settings = memory_settings.model_copy(update={"cache": memory_settings.cache.model_copy(update={"enabled": False})})
    console.print(
        f"migrating {len(users)} users: {source_identity.short} (dim {source_identity.dimension}) → "
        f"{target_identity.short} (dim {target_identity.dimension}, {target_settings.remote.model if target_settings.remote else target_settings.model})"
    )
    encoder: Encoder
    if target_settings.remote is not None:
        encoder = RemoteEncoder(target_settings.remote, normalize=target_settings.normalize)
    else:
        encoder = local_encoder(target_settings)
    source = make_store(
        settings,
        embed=None,
        dimension=source_identity.dimension,
        identity=source_identity.digest,
        collection_suffix=source_identity.collection_suffix,
    )
    target = make_store(
        settings,
        embed=CoalescingEmbedFn(encoder, max_batch=64),
        dimension=target_identity.dimension,
        identity=target_identity.digest,
        collection_suffix=target_identity.collection_suffix,
    )
    tasks: dict[str, TaskID] = {}
    try:
        with progress() as bar:

            def on_progress(p) -> None:
                if p.user_id not in tasks:
                    tasks[p.user_id] = bar.add_task(p.user_id, total=p.total)
                bar.update(tasks[p.user_id], completed=p.done, total=p.total)

            report = await migrate(source, target, users, on_progress=on_progress, concurrency=concurrency)
    finally:
        await source.close()
        await target.close()
        if isinstance(encoder, RemoteEncoder):
            await encoder.aclose()
    return report


def migrate_cmd(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Service configuration YAML (store backend, new model).")
    ],
    users_file: Annotated[
        Path | None, typer.Option("--users", help="File of user ids, one per line ('-' = stdin).")
    ] = None,
    user: Annotated[list[str] | None, typer.Option("--user", "-u", help="A user id (repeatable).")] = None,
    from_model: Annotated[str | None, typer.Option(help="Old model (bundled:... or a directory).")] = None,
    from_max_seq_length: Annotated[int | None, typer.Option(help="Old max_seq_length override.")] = None,
    from_identity: Annotated[str | None, typer.Option(help="Old identity digest (when its files are gone).")] = None,
    from_dimension: Annotated[int | None, typer.Option(help="Old vector dimension (with --from-identity).")] = None,
    from_unverifiable: Annotated[
        bool, typer.Option(help="Old model was a remote endpoint (unsuffixed collection).")
    ] = False,
    to_model: Annotated[str | None, typer.Option(help="New model; default: embedding.model of --config.")] = None,
    to_identity: Annotated[
        str | None, typer.Option(help="Expected new identity (digest or prefix): a safety check.")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Memories stored concurrently.")] = 64,
) -> None:
    """Re-embed memories from the old model's collection into the new model's collection.

    Resumable and idempotent (memories already migrated are skipped); the old collection is
    only read. Each user's counts are checked at the end.
    """
    from ..config import load_config
    from ..migration import load_user_ids

    try:
        cfg = load_config(config)
        ids: list[str] = []
        if users_file is not None:
            ids += load_user_ids(users_file)
        if user:
            ids += load_user_ids(user)
        if not ids:
            raise fail("give --users FILE or --user ID")
        ids = list(dict.fromkeys(ids))
        memory = cfg.memory
        target_settings = memory.embedding
        if to_model:
            target_settings = target_settings.model_copy(update={"model": to_model, "remote": None})
        source_identity = _source_identity(
            from_model, from_max_seq_length, from_identity, from_dimension, from_unverifiable
        )
        report = asyncio.run(_run_migration(memory, source_identity, target_settings, ids, concurrency, to_identity))
    except MemoryError_ as e:
        raise fail(str(e)) from e
    table = new_table("user", "source", "migrated", "already there", "target", title="migration")
    for u in report.users:
        table.add_row(escape(u.user_id), str(u.source), str(u.migrated), str(u.skipped_existing), str(u.target))
    console.print(table)
    console.print(f"migrated {report.migrated}, skipped {report.skipped_existing} (re-embedded: {report.reembedded})")
