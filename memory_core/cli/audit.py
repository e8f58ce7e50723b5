"""``memory-router audit``: the audit log (``GET /v1/admin/audit``, admin only) as a table,
newest first, page after page until ``--limit`` entries are shown or the log ends.

Filters as the API's: ``--actor`` (the actor's user id), ``--target-user``, ``--action``
(e.g. ``admin.keys.create``), ``--since``/``--until`` (ISO 8601; without an offset, UTC).
Reading the log is itself recorded in it (``admin.audit.read``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from .common import CliError, ServiceOptions, new_table, service_options, stdout

AUDIT_PATH = "/v1/admin/audit"
AUDIT_PAGE = 500
"""Entries per ``GET /v1/admin/audit`` request (the service's largest page)."""
COLUMNS = ("seq", "time (UTC)", "actor", "role", "key", "action", "target user", "target", "status", "client")


def _entries(answer: Any) -> tuple[list[dict[str, Any]], int | None]:
    """``(entries, next_cursor)`` of an ``AuditPageOut`` answer; ``CliError`` when it is not one."""
    entries = answer.get("entries") if isinstance(answer, dict) else None
    cursor = answer.get("next_cursor") if isinstance(answer, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "sequence" in e for e in entries):
        raise CliError(f"unexpected answer of {AUDIT_PATH}: {str(answer)[:300]}")
    if cursor is not None and not isinstance(cursor, int):
        raise CliError(f"unexpected next_cursor of {AUDIT_PATH}: {cursor!r}")
    return entries, cursor


def _row(e: dict[str, Any]) -> list[str]:
    actor = e.get("actor") or {}
    status = str(e.get("status", ""))
    if e.get("error_code"):
        status += f" {e['error_code']}"
    values = (
        e.get("sequence"),
        str(e.get("time", "")).replace("T", " ").removesuffix("Z"),
        actor.get("user_id"),
        actor.get("role"),
        actor.get("key_id") or actor.get("credential"),
        e.get("action"),
        e.get("target_user_id"),
        e.get("target"),
        status,
        e.get("client_address"),
    )
    return [escape(str(v)) if v is not None else "" for v in values]


@service_options(timeout=60.0)
def audit_cmd(
    actor: Annotated[str | None, typer.Option("--actor", help="Only entries of this actor (user id).")] = None,
    target_user: Annotated[
        str | None, typer.Option("--target-user", help="Only entries acting on this user's memories or keys.")
    ] = None,
    action: Annotated[str | None, typer.Option("--action", help="Only this action, e.g. admin.keys.create.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO 8601 time, inclusive (no offset: UTC).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO 8601 time, exclusive (no offset: UTC).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many entries.")] = 50,
    *,
    options: ServiceOptions,
) -> None:
    """The audit log of admin actions and accesses to other users' memories, newest first (admin)."""
    filters = {"actor": actor, "target_user": target_user, "action": action, "since": since, "until": until}
    params: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
    shown: list[dict[str, Any]] = []
    svc = options.service()
    with svc.session() as client:
        cursor: int | None = None
        while len(shown) < limit:
            page_params = {**params, "limit": min(AUDIT_PAGE, limit - len(shown))}
            if cursor is not None:
                page_params["cursor"] = cursor
            entries, cursor = _entries(svc.call(client, "GET", AUDIT_PATH, params=page_params))
            shown += entries
            if cursor is None or not entries:
                break
    table = new_table(*COLUMNS, title=f"audit log ({len(shown)} entries{', more' if cursor is not None else ''})")
    for e in shown:
        table.add_row(*_row(e))
    stdout.print(table)
