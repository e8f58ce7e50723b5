"""``memory-router audit`` against the real ingress application (``tests.deployments.http.
test_audit_hook.Rig``: no Ray) served by uvicorn in a thread: the entries as a table, newest
first, filtered, paged by cursor up to ``--limit``; a user key is refused (exit 2)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from typer.testing import CliRunner

from deployments.http.audit_hook import configure_recorder
from memory_core import cli
from memory_core.cli import audit as audit_cli
from memory_core.cli import common
from memory_core.testing.net import free_port
from tests.conftest import wait_until
from tests.deployments.http.test_audit_hook import Rig

runner = CliRunner(env={"COLUMNS": "250"})


@pytest.fixture
def served(tmp_path, monkeypatch) -> Iterator[tuple[Rig, str]]:
    monkeypatch.delenv(common.API_KEY_ENV, raising=False)
    rig = Rig(tmp_path, monkeypatch)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(rig.app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield rig, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    rig.audit.close()
    rig.instance.registry.close()
    configure_recorder(None)


def invoke(url: str, key: str, *args: str):
    return runner.invoke(cli.app, ["audit", *args, "--api-key", key, "--base-url", url])


def test_audit_lists_entries_newest_first_filtered_and_paged(served, monkeypatch):
    rig, url = served
    for _ in range(3):
        rig.call("admin", "GET", "/v1/admin/stats")
    rig.call("admin", "GET", "/v1/memory", params={"user_id": "alice"})
    result = invoke(url, rig.keys["admin"], "--target-user", "alice")
    assert result.exit_code == 0, result.output
    assert "memory.list" in result.output and "alice" in result.output and "admin.stats" not in result.output

    monkeypatch.setattr(audit_cli, "AUDIT_PAGE", 1)  # one entry a request: the cursor is followed
    result = invoke(url, rig.keys["admin"], "--action", "admin.stats", "--limit", "2")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "admin.stats" in line]
    assert [row.split()[1] for row in rows] == ["3", "2"]  # sequences, newest first
    assert "2 entries, more" in result.output

    # the command's own reads are recorded, each appended just after its answer went out
    def three_reads():
        reads = rig.entries(action="admin.audit.read")
        return reads if len(reads) == 3 else None

    reads = wait_until(three_reads, 10, "the command's three reads in the log")
    assert all(e.actor.user_id == "ops" for e in reads)


def test_audit_needs_an_admin_key(served):
    rig, url = served
    result = invoke(url, rig.keys["alice"])
    assert result.exit_code == 2
    assert "forbidden" in result.output or "admin role" in result.output
