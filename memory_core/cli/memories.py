"""``export`` and ``import``: one user's memories as JSONL, over the service's API.

- ``export`` — ``GET /v1/memory/export`` → a JSONL file (or stdout), its end line included;
  the progress bar's total is ``GET /v1/memory``'s ``total``. The file appears only when the
  export completed (``migration.check_export_end``: exit 2 on an error line, a missing end
  line or a cut transfer); exit 1 when the end line lists unreadable memories (a partial
  export: the file has the rest).
- ``import`` — ``POST /v1/memory/import`` in chunks of ``--chunk-lines`` lines (default: the
  service's default bound ``global.limits.import_lines``, 100; the service
  imports lines independently and idempotently, so chunking changes nothing but the progress
  bar); the chunks' reports are merged with line numbers of the whole file. Exit 1 when a line
  failed.

``--for-user X`` acts on X's memories (``?user_id=X``: an admin, or X themselves).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..config import LimitsSettings
from ..migration import ImportReport, MigrationError, check_export_end, export_end
from .common import (
    EXIT_PARTIAL,
    CliError,
    ServiceOptions,
    api_error,
    console,
    for_user,
    new_table,
    progress,
    service_options,
)

EXPORT_PATH = "/v1/memory/export"
IMPORT_PATH = "/v1/memory/import"
NDJSON = "application/x-ndjson"
SHOWN_FAILURES = 50
IMPORT_CHUNK_LINES: int = LimitsSettings.model_fields["import_lines"].default
"""Lines per import request by default: the service's default ``global.limits.import_lines``
(a longer chunk is refused with 413)."""

ForUser = Annotated[
    str | None,
    typer.Option("--for-user", help="Owner of the memories when not the caller (?user_id=; admin)."),
]


@service_options(timeout=120.0)
def export_cmd(
    output: Annotated[str, typer.Option("--output", "-o", help="JSONL file to write; '-' for stdout.")] = "-",
    owner: ForUser = None,
    *,
    options: ServiceOptions,
) -> None:
    """Download every memory of the caller (or of --for-user) as JSONL: content and metadata, no vectors."""
    svc = options.service()
    params = for_user(owner)
    partial = None if output == "-" else Path(f"{output}.part")
    lines = 0
    try:
        with svc.session() as client:
            total = int(svc.call(client, "GET", "/v1/memory", params={**params, "limit": 1})["total"])
            with client.stream("GET", EXPORT_PATH, params=params) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise api_error(resp)
                try:
                    sink = sys.stdout if partial is None else partial.open("w", encoding="utf-8")
                except OSError as e:
                    raise CliError(f"cannot write {partial}: {e}") from e
                last: str | None = None  # the end line, when complete
                try:
                    with progress() as bar:
                        task = bar.add_task("export", total=total)
                        for line in resp.iter_lines():
                            if line.strip():
                                sink.write(line + "\n")
                                lines += 1
                                last = line
                                if export_end(line) is None:
                                    bar.advance(task)
                finally:
                    if sink is not sys.stdout:
                        sink.close()
                try:  # a failed or cut export (an error line, no end line) leaves no file
                    end = check_export_end(last, lines)
                except MigrationError as e:
                    raise CliError(str(e)) from e
                lines -= 1  # the end line
            if partial is not None:
                try:
                    os.replace(partial, output)
                except OSError as e:
                    raise CliError(f"cannot write {output}: {e}") from e
    finally:
        if partial is not None and partial.exists():
            partial.unlink()
    who = repr(owner) if owner else svc.identity.describe()
    console.print(escape(f"exported {lines} memories of {who}" + ("" if output == "-" else f" to {output}")))
    if end["unreadable"]:
        ids = end["unreadable"]
        console.print(
            escape(
                f"partial export: {len(ids)} stored memories could not be read and are missing: "
                + ", ".join(ids[:SHOWN_FAILURES])
                + (" ..." if len(ids) > SHOWN_FAILURES else "")
                + " (DELETE /v1/memory/{id} removes one)"
            )
        )
        raise typer.Exit(EXIT_PARTIAL)


def _read_lines(file: Path) -> list[str]:
    try:
        body = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {file}: {e}") from e
    try:
        # split on "\n" only, as the service does (str.splitlines() also splits at U+2028)
        return body.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise CliError(f"{file} is not UTF-8 text: {e}") from e


def _merge(total: ImportReport, part: ImportReport, offset: int) -> None:
    """Add ``part`` (the report of lines ``offset + 1 ...``) to ``total``, renumbering its lines."""
    total.imported += part.imported
    total.skipped_duplicates += part.skipped_duplicates
    total.failed += [f.model_copy(update={"line": f.line + offset}) for f in part.failed]
    total.renamed += [r.model_copy(update={"line": r.line + offset}) for r in part.renamed]


@service_options(timeout=600.0)
def import_cmd(
    file: Annotated[Path, typer.Argument(help="JSONL file (one memory per line, as export writes); '-' for stdin.")],
    owner: ForUser = None,
    chunk_lines: Annotated[
        int,
        typer.Option(
            "--chunk-lines", min=1, help="Lines per request (at most the service's global.limits.import_lines)."
        ),
    ] = IMPORT_CHUNK_LINES,
    *,
    options: ServiceOptions,
) -> None:
    """Upload a JSONL export into the caller's (or --for-user's) memories.

    Idempotent: memories already present are skipped, so an interrupted import can be rerun.
    Exit 1 when some lines failed (they are listed).
    """
    svc = options.service()
    params = for_user(owner)
    report = ImportReport()
    done = 0
    with svc.reported():
        lines = _read_lines(file)
        try:
            with svc.client() as client, progress() as bar:
                task = bar.add_task("import", total=sum(1 for line in lines if line.strip()))
                for start in range(0, len(lines), chunk_lines):
                    chunk = lines[start : start + chunk_lines]
                    count = sum(1 for line in chunk if line.strip())
                    if count:
                        answer = svc.call(
                            client,
                            "POST",
                            IMPORT_PATH,
                            params=params,
                            content="\n".join(chunk).encode("utf-8"),
                            headers={"content-type": NDJSON},
                        )
                        try:
                            _merge(report, ImportReport.model_validate(answer), start)
                        except ValueError as e:
                            raise CliError(f"unexpected import answer: {str(answer)[:300]}") from e
                        bar.advance(task, count)
                    done = start + len(chunk)
        except Exception:
            if done:
                console.print(
                    f"lines 1–{done} were sent ({report.imported} imported, {report.skipped_duplicates} already "
                    "there); rerunning the import is safe"
                )
            raise
    console.print(
        f"imported {report.imported}, skipped {report.skipped_duplicates} duplicates, {len(report.failed)} failed"
        + (f", {len(report.renamed)} got new ids" if report.renamed else "")
    )
    if report.failed:
        table = new_table("line", "error", title="failed lines")
        for f in report.failed[:SHOWN_FAILURES]:
            table.add_row(str(f.line), escape(f.error))
        console.print(table)
        if len(report.failed) > SHOWN_FAILURES:
            console.print(f"... and {len(report.failed) - SHOWN_FAILURES} more")
        raise typer.Exit(EXIT_PARTIAL)
