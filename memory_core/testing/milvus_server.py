"""Start a throw-away Milvus server (standalone, embedded etcd, local storage) for tests and
benchmarks.

The server comes from the ``milvus`` package on PyPI (``pip install milvus``: its 2.3.5
wheel, the newest published for Linux, ships the ``milvus`` standalone binary and its
libraries, unpacked into the data directory on the first start). It is a Milvus *server*: a
separate process speaking the gRPC protocol ``pymilvus.MilvusClient`` uses with an
``http://host:port`` URI, unlike Milvus Lite, which runs inside the client's process.

What this server version lacks that the store needs is handled by the store, not here
(Milvus 2.3 has no nullable fields: ``memory_core.stores.milvus`` stores its null sentinels
in collections whose fields are not nullable). Authorization can be switched on
(``authorization=True``): the server then has the one built-in user ``root`` with password
``Milvus``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .net import free_port

ROOT_USER = "root"
ROOT_PASSWORD = "Milvus"
"""The built-in superuser of a fresh Milvus server with authorization on."""

_PORT_KEYS = (
    "proxy_port",
    "proxy_internal_port",
    "etcd_port",
    "root_coord_port",
    "query_coord_port",
    "query_node_port",
    "index_coord_port",
    "index_node_port",
    "data_coord_port",
    "data_node_port",
)


def milvus_server_missing() -> str | None:
    """Why no Milvus server can be started here (the ``milvus`` package is not installed),
    or None when it can."""
    if importlib.util.find_spec("milvus") is None:
        return "the 'milvus' package (a standalone Milvus server) is not installed: pip install milvus==2.3.5"
    return None


@dataclass
class MilvusServerProcess:
    """A running Milvus server: ``uri`` (``http://127.0.0.1:<port>``), ``pid``, ``version``
    (as the server reports it, e.g. ``v2.3.5-lite``), its data directory ``workdir``."""

    server: Any  # milvus.MilvusServer
    port: int
    workdir: Path
    version: str
    authorization: bool

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        proc = self.server.server_proc
        return None if proc is None else int(proc.pid)

    def stop(self) -> None:
        """Terminate the server process (SIGTERM, then SIGKILL after 10 s) and remove its
        directory."""
        proc = self.server.server_proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)
        self.server.stop()  # closes its log files (the process has ended)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_milvus_server(
    *, workdir: Path | None = None, authorization: bool = False, timeout_s: float = 180.0
) -> MilvusServerProcess:
    """Start a standalone Milvus server on free loopback ports with its data in ``workdir``
    (or a new temporary directory); ``authorization`` turns on user authentication (user
    ``root``, password ``Milvus``). Returns once its health endpoint answers and a client
    can list collections (seconds: the test fixture waits for it once per session).

    Raises ``RuntimeError`` when the ``milvus`` package is missing or the server does not
    come up within ``timeout_s`` seconds (the tail of its log is in the message)."""
    missing = milvus_server_missing()
    if missing:
        raise RuntimeError(missing)
    from milvus import MilvusServer, MilvusServerConfig

    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="milvus-server-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ports = {key: free_port() for key in _PORT_KEYS}  # distinct: free_port never repeats one
    config = MilvusServerConfig(data_dir=str(workdir), **ports)
    # template values other than ports and paths are taken only through set() (the package's
    # own command line does the same); a keyword argument would be ignored
    config.set("authorization_enabled", bool(authorization))
    server = MilvusServer(config, wait_for_started=False)
    try:
        server.start()
        server.wait_started(timeout=int(timeout_s * 1000))
    except Exception as e:
        logs = workdir / "logs" / "milvus-stderr.log"
        tail = logs.read_text(errors="replace")[-2000:] if logs.is_file() else ""
        with contextlib.suppress(Exception):
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"milvus server did not start: {e}\n{tail}") from e
    handle = MilvusServerProcess(
        server=server, port=ports["proxy_port"], workdir=workdir, version="", authorization=authorization
    )
    from pymilvus import MilvusClient

    token = f"{ROOT_USER}:{ROOT_PASSWORD}" if authorization else ""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = MilvusClient(uri=handle.uri, token=token)
            try:
                client.list_collections()
                handle.version = str(client.get_server_version())
            finally:
                client.close()
            return handle
        except Exception as e:
            if time.monotonic() > deadline:
                handle.stop()
                raise RuntimeError(f"milvus server at {handle.uri} does not answer: {e}") from e
            time.sleep(0.5)


@contextlib.contextmanager
def running_milvus_server(*, authorization: bool = False) -> Iterator[MilvusServerProcess]:
    """Context manager form of :func:`start_milvus_server`; stops the server on exit."""
    server = start_milvus_server(authorization=authorization)
    try:
        yield server
    finally:
        server.stop()
