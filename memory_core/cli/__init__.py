"""``memory-router`` command line (typer + rich); the entry point is ``memory_core.cli:app``.

Commands, one module per group (each command: parse options, talk to the service through
``common.Service``, print; ``common`` explains identity options, errors and exit codes):

- ``memories``: ``export`` (``GET /v1/memory/export`` → JSONL), ``import`` (JSONL →
  ``POST /v1/memory/import`` in chunks);
- ``admin``: ``consolidate`` (``POST /v1/memory/consolidate``, one user or ``--all``),
  ``stats`` (``GET /v1/admin/stats`` and ``/v1/admin/users``);
- ``audit``: the audit log (``GET /v1/admin/audit``), newest first, filtered;
- ``keys``: ``keys create|list|revoke`` (``/v1/admin/keys``, or ``--db``: the key database
  itself, for the first admin key);
- ``replay``: ``replay-locomo`` (LoCoMo conversations into the service, ``--evaluate`` for
  evidence recall);
- ``migrate``: re-embed memories into a new model's collection, store to store (no service:
  it opens the stores of a config directly).

Every service command takes ``--base-url`` (``$MEMORY_ROUTER_URL``), ``--api-key``
(``$MEMORY_ROUTER_API_KEY``) or ``--user``/``--role``, ``--timeout``. Exit codes: 0 success,
1 partial failure (import lines, users of ``consolidate --all``), 2 error (options, the
service unreachable or answering an error, configuration, migration check).
"""

from __future__ import annotations

import typer

from . import admin, audit, keys, memories, migrate, replay

app = typer.Typer(
    name="memory-router",
    help="memory-router: conversation memory as a service. Export, import, consolidate, replay, "
    "inspect and administer memories over the service's API; migrate them between embedding models.",
    no_args_is_help=True,
    add_completion=False,
)

app.command("export")(memories.export_cmd)
app.command("import")(memories.import_cmd)
app.command("consolidate")(admin.consolidate_cmd)
app.command("stats")(admin.stats_cmd)
app.command("audit")(audit.audit_cmd)
app.add_typer(keys.keys_app, name="keys")
app.command("replay-locomo")(replay.replay_cmd)
app.command("migrate")(migrate.migrate_cmd)

__all__ = ["app"]
