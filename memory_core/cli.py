"""``memory-router`` command line (typer).

Commands (one section each below; add new commands the same way: a ``@app.command()``
function that parses options, calls a small helper, and exits with a non-zero code on
failure):

- ``export``  — ``GET {base}/v1/memory/export`` as the user (``x-authz-user-id``) → JSONL file.
- ``import``  — ``POST {base}/v1/memory/import`` with a JSONL file; prints the report; exits 1
  when any line failed.
- ``migrate`` — re-embed every memory of the listed users from the store of an old embedding
  identity into the store of the new one, directly (no service involved; with Milvus Lite stop
  the service first: one process may open the file).

Exit codes: 0 success, 1 partial failure (import lines failed), 2 error (HTTP, configuration,
migration check).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import MemoryError_
from .sanitize import USER_HEADER

EXPORT_PATH = "/v1/memory/export"
IMPORT_PATH = "/v1/memory/import"
NDJSON = "application/x-ndjson"

app = typer.Typer(
    name="memory-router",
    help="memory-router: conversation memory as a service. Export, import and migrate memories.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)

BaseUrl = Annotated[str, typer.Option("--base-url", envvar="MEMORY_ROUTER_URL", help="Service base URL.")]
UserId = Annotated[str, typer.Option("--user", "-u", help="User id sent as x-authz-user-id.")]
Timeout = Annotated[float, typer.Option("--timeout", help="HTTP timeout in seconds.")]


def _fail(message: str, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def _client(timeout: float) -> httpx.Client:
    """The HTTP client of the commands (one place to configure proxies/transport)."""
    return httpx.Client(timeout=timeout)


def _url(base: str, path: str) -> str:
    return base.rstrip("/") + path


# --------------------------------------------------------------------------- export
@app.command("export")
def export_cmd(
    user: UserId,
    output: Annotated[str, typer.Option("--output", "-o", help="JSONL file to write; '-' for stdout.")] = "-",
    base_url: BaseUrl = "http://127.0.0.1:8000",
    timeout: Timeout = 120.0,
) -> None:
    """Download every memory of USER as JSONL (content and metadata, no vectors)."""
    lines = 0
    try:
        with _client(timeout) as client:
            with client.stream("GET", _url(base_url, EXPORT_PATH), headers={USER_HEADER: user}) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise _fail(f"export failed: HTTP {resp.status_code}: {resp.text[:500]}")
                sink = sys.stdout if output == "-" else open(output, "w", encoding="utf-8")
                try:
                    for line in resp.iter_lines():
                        if line.strip():
                            sink.write(line + "\n")
                            lines += 1
                finally:
                    if sink is not sys.stdout:
                        sink.close()
    except httpx.HTTPError as e:
        raise _fail(f"cannot reach {base_url}: {e}") from e
    console.print(f"exported {lines} memories of {user!r}" + ("" if output == "-" else f" to {output}"))


# --------------------------------------------------------------------------- import
@app.command("import")
def import_cmd(
    user: UserId,
    file: Annotated[Path, typer.Argument(help="JSONL file (one memory per line); '-' for stdin.")],
    base_url: BaseUrl = "http://127.0.0.1:8000",
    timeout: Timeout = 600.0,
) -> None:
    """Upload a JSONL export for USER. Idempotent: memories already present are skipped."""
    try:
        body = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
    except OSError as e:
        raise _fail(f"cannot read {file}: {e}") from e
    try:
        with _client(timeout) as client:
            resp = client.post(
                _url(base_url, IMPORT_PATH), content=body, headers={USER_HEADER: user, "content-type": NDJSON}
            )
    except httpx.HTTPError as e:
        raise _fail(f"cannot reach {base_url}: {e}") from e
    if resp.status_code >= 400:
        raise _fail(f"import failed: HTTP {resp.status_code}: {resp.text[:500]}")
    try:
        report = resp.json()
        imported, skipped, failed = report["imported"], report["skipped_duplicates"], report["failed"]
    except (ValueError, KeyError, TypeError) as e:
        raise _fail(f"unexpected import response: {resp.text[:500]}") from e
    console.print(f"imported {imported}, skipped {skipped} duplicates, {len(failed)} failed")
    if failed:
        table = Table("line", "error", title="failed lines")
        for f in failed[:50]:
            table.add_row(str(f.get("line")), str(f.get("error")))
        console.print(table)
        if len(failed) > 50:
            console.print(f"... and {len(failed) - 50} more")
        raise typer.Exit(1)


# --------------------------------------------------------------------------- migrate
def _source_identity(from_model, from_max_seq_length, from_identity, from_dimension, from_unverifiable):
    from .config import EmbeddingSettings
    from .embedding import ModelIdentity, compute_identity

    if from_model:
        return compute_identity(EmbeddingSettings(model=from_model, max_seq_length=from_max_seq_length))
    if not from_identity or not from_dimension:
        raise _fail("give --from-model, or --from-identity with --from-dimension")
    digest = from_identity.lower()
    if len(digest) < 12 or any(c not in "0123456789abcdef" for c in digest):
        raise _fail("--from-identity must be a hex digest (at least the 12-character short form)")
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
    from .embedding import CoalescingEmbedFn, LocalEncoder, RemoteEncoder, compute_identity
    from .migration import migrate
    from .stores import make_store

    target_identity = compute_identity(target_settings)
    if expect and not target_identity.digest.startswith(expect.lower()):
        raise _fail(f"target identity is {target_identity.digest}, not {expect}")
    if target_identity.digest == source_identity.digest or (
        source_identity.verifiable == target_identity.verifiable and source_identity.short == target_identity.short
    ):
        raise _fail(f"source and target have the same identity {target_identity.short}: nothing to migrate")
    settings = memory_settings.model_copy(update={"cache": memory_settings.cache.model_copy(update={"enabled": False})})
    console.print(
        f"migrating {len(users)} users: {source_identity.short} (dim {source_identity.dimension}) → "
        f"{target_identity.short} (dim {target_identity.dimension}, {target_settings.remote.model if target_settings.remote else target_settings.model})"
    )
    encoder: RemoteEncoder | LocalEncoder
    if target_settings.remote is not None:
        encoder = RemoteEncoder(target_settings.remote, normalize=target_settings.normalize)
    else:
        encoder = LocalEncoder(target_settings)
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
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:

            def on_progress(p) -> None:
                if p.user_id not in tasks:
                    tasks[p.user_id] = progress.add_task(p.user_id, total=p.total)
                progress.update(tasks[p.user_id], completed=p.done, total=p.total)

            report = await migrate(source, target, users, on_progress=on_progress, concurrency=concurrency)
    finally:
        await source.close()
        await target.close()
        if isinstance(encoder, RemoteEncoder):
            await encoder.aclose()
    return report


@app.command("migrate")
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
    from .config import load_config
    from .migration import load_user_ids

    try:
        cfg = load_config(config)
        ids: list[str] = []
        if users_file is not None:
            ids += load_user_ids(users_file)
        if user:
            ids += load_user_ids(user)
        if not ids:
            raise _fail("give --users FILE or --user ID")
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
        raise _fail(str(e)) from e
    table = Table("user", "source", "migrated", "already there", "target", title="migration")
    for u in report.users:
        table.add_row(u.user_id, str(u.source), str(u.migrated), str(u.skipped_existing), str(u.target))
    console.print(table)
    console.print(f"migrated {report.migrated}, skipped {report.skipped_existing} (re-embedded: {report.reembedded})")


if __name__ == "__main__":  # pragma: no cover
    app()
