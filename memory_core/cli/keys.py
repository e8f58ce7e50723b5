"""``keys create|list|revoke``: API keys, through the admin API or directly in the key database.

- Through the service (an admin identity): ``POST /v1/admin/keys``, ``GET /v1/admin/keys``
  (``?user_id=`` with ``--user-id``), ``DELETE /v1/admin/keys/{key_id}``.
- With ``--db PATH`` (the service's ``global.access.api_keys.path``): the same operations on
  the SQLite file itself (``memory_core.access.KeyRegistry``), no service and no identity
  involved — how an operator makes the first admin key. ``create`` makes the file when it is
  absent (and says so); ``list`` and ``revoke`` need it to exist.

``create`` prints the new key once, alone on stdout (``KEY=$(memory-router keys create ...)``),
its id and owner on stderr. Keys are stored as digests: no command can show a key again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.markup import escape

from ..access import KeyRegistry
from ..errors import MemoryError_
from .common import (
    CliError,
    Role,
    ServiceOptions,
    console,
    fail,
    new_table,
    service_options,
    stdout,
)

KEYS_PATH = "/v1/admin/keys"

keys_app = typer.Typer(
    name="keys",
    help="API keys (admin): create, list, revoke; through the service, or with --db in its key database.",
    no_args_is_help=True,
    add_completion=False,
)

KeyDb = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="The service's key database (global.access.api_keys.path): act on the file directly, "
        "without the service (--base-url and identity options are not used).",
    ),
]
AsRole = Annotated[
    Role | None, typer.Option("--as-role", help="Role sent as x-authz-role with --user (trusted_header mode).")
]
"""The caller's role option of ``keys create``, in the place of ``RoleOpt`` (its ``--role`` is the new key's)."""


@contextmanager
def _registry(path: Path, *, create: bool = False) -> Iterator[KeyRegistry]:
    """``KeyRegistry(path)``, closed afterwards; its errors as ``fail`` (exit 2). Without
    ``create`` an absent file is an error (a mistyped path must not make a new database)."""
    if not path.exists():
        if not create:
            raise fail(f"no key database at {path}")
        console.print(f"creating the key database {escape(str(path))}", highlight=False)
    try:
        registry = KeyRegistry(path)
    except (sqlite3.Error, OSError) as e:
        raise fail(f"cannot open the key database {path}: {e}") from e
    try:
        yield registry
    except MemoryError_ as e:
        raise fail(str(e)) from e
    except sqlite3.Error as e:
        raise fail(f"key database {path}: {e}") from e
    finally:
        registry.close()


def _keys_answer(answer: Any, field: str) -> Any:
    try:
        return answer[field]
    except (KeyError, TypeError) as e:
        raise CliError(f"unexpected answer of {KEYS_PATH}: {str(answer)[:300]}") from e


@keys_app.command("create")
@service_options(timeout=60.0, role_option=AsRole)
def keys_create(
    key_user: Annotated[str, typer.Option("--user-id", help="The user the key identifies.")],
    key_role: Annotated[Role, typer.Option("--role", help="The key's role.")] = Role.USER,
    name: Annotated[str | None, typer.Option("--name", help="A label for the key (who/what uses it).")] = None,
    db: KeyDb = None,
    *,
    options: ServiceOptions,
) -> None:
    """Create an API key; prints the key (shown once) alone on stdout and its id on stderr."""
    if db is not None:
        with _registry(db, create=True) as registry:
            key, record = registry.create(key_user, key_role, name)
            created = record.public()
    else:
        svc = options.service()
        with svc.session() as client:
            created = svc.call(
                client, "POST", KEYS_PATH, json={"user_id": key_user, "role": key_role.value, "name": name}
            )
            key = str(_keys_answer(created, "key"))
            _keys_answer(created, "key_id")
    typer.echo(key)
    console.print(
        f"key id {created['key_id']} for user {created.get('user_id', key_user)!r} "
        f"(role {created.get('role', key_role.value)}); the key is shown only now: keep it",
        highlight=False,
    )


@keys_app.command("list")
@service_options(timeout=60.0)
def keys_list(
    key_user: Annotated[str | None, typer.Option("--user-id", help="Only this user's keys.")] = None,
    db: KeyDb = None,
    *,
    options: ServiceOptions,
) -> None:
    """List the API keys (id, user, role, name, created, revoked), oldest first; never the keys themselves."""
    keys: list[dict[str, Any]]
    if db is not None:
        with _registry(db) as registry:
            keys = [k.public() for k in registry.keys(key_user)]
    else:
        svc = options.service()
        with svc.session() as client:
            answer = svc.call(client, "GET", KEYS_PATH, params={"user_id": key_user} if key_user else None)
            keys = list(_keys_answer(answer, "keys"))
    table = new_table("key id", "user", "role", "name", "created", "revoked", title=f"API keys ({len(keys)})")
    for k in keys:
        table.add_row(
            *(escape(str(k.get(f) or "")) for f in ("key_id", "user_id", "role", "name", "created_at", "revoked_at"))
        )
    stdout.print(table)


@keys_app.command("revoke")
@service_options(timeout=60.0)
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (keys list shows them).")],
    db: KeyDb = None,
    *,
    options: ServiceOptions,
) -> None:
    """Revoke an API key: requests with it are refused (401) from now on."""
    if db is not None:
        with _registry(db) as registry:
            registry.revoke(key_id)
    else:
        svc = options.service()
        with svc.session() as client:
            svc.call(client, "DELETE", f"{KEYS_PATH}/{quote(key_id, safe='')}")
    console.print(f"revoked {escape(key_id)}", highlight=False)
