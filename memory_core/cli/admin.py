"""Admin commands over the service's API: ``consolidate`` and ``stats`` (``keys`` has its own
module).

- ``consolidate`` — ``POST /v1/memory/consolidate`` for the caller, one user (``--user-id``,
  ``?user_id=``) or every user ``GET /v1/admin/users`` lists, page after page (``--all``,
  with a progress bar);
  prints one row per user (``ConsolidationReport``: examined, groups merged, originals
  consolidated, expired purged, seconds). With ``--all`` a user whose pass failed is listed
  with its error and the command exits 1; an identity or role error (401/403) stops it.
- ``stats`` — ``GET /v1/admin/stats`` and every page of ``GET /v1/admin/users`` as tables.

Tables go to stdout, progress and messages to stderr.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from .common import (
    EXIT_PARTIAL,
    CliError,
    Service,
    ServiceOptions,
    console,
    fail,
    for_user,
    new_table,
    progress,
    service_options,
    stdout,
)

if TYPE_CHECKING:
    from ..stores.curating import ConsolidationReport

CONSOLIDATE_PATH = "/v1/memory/consolidate"
USERS_PATH = "/v1/admin/users"
STATS_PATH = "/v1/admin/stats"
USERS_PAGE = 500
"""Users per ``GET /v1/admin/users`` request (the service's largest page)."""
SHOWN_MERGED = 3


# --------------------------------------------------------------------------- consolidate
def _report(answer: Any) -> ConsolidationReport:
    """``answer`` (a ``ConsolidationOut`` body) as the ``ConsolidationReport`` it reports;
    ``CliError`` when it is not one."""
    from ..stores.curating import ConsolidationReport

    # every field the API answers with (``expired_ids`` stays in the shard: the events use it)
    names = [f.name for f in dataclasses.fields(ConsolidationReport) if f.name != "expired_ids"]
    try:
        return ConsolidationReport(**{n: answer[n] for n in names})
    except (KeyError, TypeError) as e:
        raise CliError(f"unexpected consolidation answer: {str(answer)[:300]}") from e


def _admin_users(svc: Service, client: Any) -> list[dict[str, Any]]:
    """Every user of ``GET /v1/admin/users`` (``{"user_id", "memories", "keys"}`` each),
    page after page of ``USERS_PAGE`` until the answer's ``total`` is reached (or a page
    comes back empty: users removed meanwhile)."""
    users: list[dict[str, Any]] = []
    while True:
        answer = svc.call(client, "GET", USERS_PATH, params={"limit": USERS_PAGE, "offset": len(users)})
        page = answer.get("users") if isinstance(answer, dict) else None
        total = answer.get("total") if isinstance(answer, dict) else None
        if (
            not isinstance(page, list)
            or not isinstance(total, int)
            or not all(isinstance(u, dict) and "user_id" in u for u in page)
        ):
            raise CliError(f"unexpected answer of {USERS_PATH}: {str(answer)[:300]}")
        users += page
        if not page or len(users) >= total:
            return users


def _consolidation_table(rows: list[tuple[str, ConsolidationReport | str]]) -> Table:
    table = new_table(
        "user", "examined", "groups", "consolidated", "expired", "merged into", "seconds", title="consolidation"
    )
    for user_id, r in rows:
        if isinstance(r, str):
            table.add_row(escape(user_id), "[red]failed[/red]", "", "", "", "", "")
            continue
        merged = ", ".join(r.merged[:SHOWN_MERGED]) + (
            f" (+{len(r.merged) - SHOWN_MERGED})" if len(r.merged) > SHOWN_MERGED else ""
        )
        table.add_row(
            escape(user_id),
            str(r.examined),
            str(r.groups),
            str(r.consolidated),
            str(r.expired),
            merged,
            f"{r.seconds:.2f}",
        )
    return table


@service_options(timeout=300.0)
def consolidate_cmd(
    user_id: Annotated[
        str | None, typer.Option("--user-id", help="Consolidate this user's memories (?user_id=; admin).")
    ] = None,
    all_users: Annotated[bool, typer.Option("--all", help="Consolidate every user /v1/admin/users lists.")] = False,
    *,
    options: ServiceOptions,
) -> None:
    """Run a consolidation pass now (near-duplicates merged, expired memories purged) and print what it did.

    Without --user-id or --all: the caller's own memories.
    """
    if user_id and all_users:
        raise fail("give --user-id or --all, not both")
    svc = options.service()
    rows: list[tuple[str, ConsolidationReport | str]] = []
    with svc.session() as client:
        if not all_users:
            report = _report(svc.call(client, "POST", CONSOLIDATE_PATH, params=for_user(user_id)))
            rows.append((report.user_id, report))
        else:
            users = [u["user_id"] for u in _admin_users(svc, client)]
            with progress() as bar:
                task = bar.add_task("consolidate", total=len(users))
                for uid in users:
                    try:
                        report = _report(svc.call(client, "POST", CONSOLIDATE_PATH, params=for_user(uid)))
                        rows.append((uid, report))
                    except CliError as e:
                        if e.status in (401, 403):
                            raise
                        rows.append((uid, e.message.splitlines()[0]))
                    bar.advance(task)
    stdout.print(_consolidation_table(rows))
    for uid, r in rows:
        if isinstance(r, str):
            console.print(f"[red]failed[/red] {escape(uid)}: {escape(r)}", highlight=False)
    done = [r for _, r in rows if not isinstance(r, str)]
    failed = len(rows) - len(done)
    console.print(
        f"{len(done)} users consolidated: {sum(r.groups for r in done)} groups merged, "
        f"{sum(r.consolidated for r in done)} memories consolidated, {sum(r.expired for r in done)} expired purged"
        + (f"; {failed} failed" if failed else "")
    )
    if failed:
        raise typer.Exit(EXIT_PARTIAL)


# --------------------------------------------------------------------------- stats
def _counts_table(title: str, counts: dict[str, int]) -> Table:
    table = new_table(title.split()[-1], "memories", title=title)
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(escape(name), str(n))
    return table


@service_options(timeout=60.0)
def stats_cmd(
    top: Annotated[int, typer.Option("--top", min=0, help="Show the N users with most memories (0: all).")] = 0,
    *,
    options: ServiceOptions,
) -> None:
    """Service totals (users, memories by state and type, active keys) and the users with their counts (admin)."""
    svc = options.service()
    with svc.session() as client:
        stats = svc.call(client, "GET", STATS_PATH)
        users = _admin_users(svc, client)
        try:
            summary = new_table("users", "memories", "active keys", title="memory-router")
            summary.add_row(str(stats["users"]), str(stats["memories"]), str(stats["keys"]))
            by_state = _counts_table("memories by state", dict(stats["by_state"]))
            by_type = _counts_table("memories by type", dict(stats["by_type"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CliError(f"unexpected answer of {STATS_PATH}: {str(stats)[:300]}") from e
    ranked = sorted(users, key=lambda u: (-int(u.get("memories", 0)), u["user_id"]))
    shown = ranked[:top] if top else ranked
    table = new_table("user", "memories", "keys", title=f"users ({len(shown)} of {len(users)})")
    for u in shown:
        table.add_row(escape(str(u["user_id"])), str(u.get("memories", "")), str(u.get("keys", "")))
    for t in (summary, by_state, by_type, table):
        stdout.print(t)
