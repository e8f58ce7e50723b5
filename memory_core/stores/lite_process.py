"""Milvus Lite in its own process: :class:`LiteServer` starts Milvus Lite's gRPC server on one
data directory as a child process (``lite_child.py``), reached by ``pymilvus`` over loopback
(``http://127.0.0.1:<port>``), restarts it when it dies, and stops it when told to.

Why: Milvus Lite 3 is pure Python. Opened in-process (a ``uri`` that is a file path: pymilvus's
``milvus_lite.server_manager`` starts the same gRPC server on threads of the caller's
process), its own walks of every row take the GIL from the store shard's event loop (README
"Measured", ``benchmarks/flat_cost.py``). In a child they take the child's GIL instead.

Ownership: one ``LiteServer`` owns one directory. It holds an exclusive ``flock`` on
``<data_dir>.owner`` (its process id written inside) from ``start`` to ``stop``, across the
child's restarts, and the child holds Milvus Lite's own ``<data_dir>/LOCK``; a second owner (a
``LiteServer`` in this or another process) is refused with ``ConfigError`` naming the holder's
process id, and a directory Milvus Lite already has open elsewhere (an in-process Milvus Lite)
is refused with ``ConfigError`` too.

Faults: a monitor thread waits on the child; when it exits while not stopping, the server is
not ready (``current`` raises ``StoreUnavailable``: the HTTP 503 + ``Retry-After`` path) and a
new child is started after ``backoff_s``, doubled after each failed start up to
``backoff_max_s``. Each start has a new port and a new ``generation`` number, so a client knows
to reconnect. The child never outlives its parent: it stops when its stdin pipe (held by this
process) reaches end of file, which the kernel causes when this process dies, however it dies
(``lite_child``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from ..errors import ConfigError, StoreUnavailable

log = logging.getLogger(__name__)

CHILD_SCRIPT = Path(__file__).with_name("lite_child.py")
"""The child's script (run by path, so no ``memory_core`` package import in the child)."""


def owner_lock_path(data_dir: str | Path) -> Path:
    """The owner lock file of Milvus Lite data directory ``data_dir``: ``<data_dir>.owner``
    beside it (inside, Milvus Lite's own files would sit next to it)."""
    p = Path(data_dir)
    return p.with_name(p.name + ".owner")


class LiteServer:
    """Supervisor of one Milvus Lite child process serving ``data_dir`` (see the module).

    Args:
        data_dir: the Milvus Lite data directory (created when absent; the same path an
            in-process Milvus Lite ``uri`` names).
        start_timeout_s: seconds a child may take to answer ``READY`` (importing Milvus Lite
            and opening the directory; a large directory replays its write-ahead log).
        backoff_s, backoff_max_s: the pause before a restart, doubled after each failed start,
            capped at ``backoff_max_s`` (seconds).
        python: the interpreter that runs the child (default: this one).
        lock_wait_s: how long ``start`` retries while Milvus Lite's ``LOCK`` is held although
            this process owns the directory: the child of a shard that just died stops within
            ~2.5 s of its parent's death (``lite_child``), and a shard restarted in its place
            must not fail meanwhile. A holder still there after it is refused (``ConfigError``).

    ``restarts`` counts the children started after the first.
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        start_timeout_s: float = 120.0,
        backoff_s: float = 0.5,
        backoff_max_s: float = 10.0,
        python: str = sys.executable,
        lock_wait_s: float = 15.0,
    ):
        self.data_dir = str(Path(data_dir).expanduser().resolve())
        self.start_timeout_s = start_timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.python = python
        self.lock_wait_s = lock_wait_s
        self.restarts = 0
        self._lock = threading.Lock()  # spawn vs stop
        self._stop_event = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._state: tuple[str, int] | None = None  # (uri, generation) while a child is ready
        self._generation = 0
        self._owner_fd: int | None = None
        self._monitor: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """The current child's process id (``None`` before ``start`` and after ``stop``)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def start(self) -> str:
        """Take the owner lock, start the child, wait for ``READY`` and start the monitor;
        return the child's ``http://127.0.0.1:<port>``. Blocking (≤ ``start_timeout_s``).

        Raises ``ConfigError`` when another owner holds the directory (see the module) and
        ``StoreUnavailable`` when the child fails to start (its message in the error); the
        owner lock is released again on either."""
        if self._owner_fd is not None:
            raise RuntimeError("LiteServer.start called twice")
        self._take_owner_lock()
        deadline = time.monotonic() + self.lock_wait_s
        try:
            while True:
                try:
                    with self._lock:
                        uri = self._spawn()
                    break
                except _Locked as locked:
                    if time.monotonic() >= deadline:
                        raise ConfigError(str(locked)) from None
                    time.sleep(0.25)
        except BaseException:
            self._release_owner_lock()
            raise
        self._monitor = threading.Thread(target=self._watch, name="milvus-lite-monitor", daemon=True)
        self._monitor.start()
        return uri

    def current(self) -> tuple[str, int]:
        """``(uri, generation)`` of the running child; the generation grows by one with each
        start, so a client built for another generation must reconnect. Raises
        ``StoreUnavailable`` while no child is ready (restarting, or stopped)."""
        state, proc = self._state, self._proc
        if state is None or proc is None or proc.poll() is not None:
            raise StoreUnavailable(f"the Milvus Lite server of {self.data_dir} is restarting; retry shortly")
        return state

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the child (stdin closed: it stops its gRPC server and closes Milvus Lite;
        SIGKILL after ``timeout_s``), end the monitor and release the owner lock. Idempotent."""
        self._stop_event.set()
        with self._lock:  # waits for a start in progress
            proc, self._proc, self._state = self._proc, None, None
        if proc is not None:
            _end(proc, timeout_s)
        monitor = self._monitor
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(timeout_s)
        self._release_owner_lock()

    # ------------------------------------------------------------------ internals
    def _take_owner_lock(self) -> None:
        path = owner_lock_path(self.data_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                f"Milvus Lite data directory {self.data_dir} is owned by another store (process {holder}, "
                f"lock {path}); one store shard owns one directory (pool.shards: 1 with Milvus Lite)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._owner_fd = fd

    def _release_owner_lock(self) -> None:
        fd, self._owner_fd = self._owner_fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock

    def _spawn(self) -> str:
        """Start one child and wait for its first line (holding ``self._lock``); on
        ``READY`` publish ``(uri, generation)`` and return the uri."""
        if self._stop_event.is_set():
            raise StoreUnavailable(f"the Milvus Lite server of {self.data_dir} is stopping")
        proc = subprocess.Popen(
            [self.python, str(CHILD_SCRIPT), "--data-dir", self.data_dir, "--parent-pid", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C of the terminal reaches this process, which stops it
        )
        assert proc.stdout is not None
        try:
            line = _first_line(proc.stdout, self.start_timeout_s)
        except BaseException:
            _end(proc, 2.0)
            raise
        word, _, rest = line.partition(" ")
        if word != "READY":
            _end(proc, 2.0)
            if word == "LOCKED":
                raise _Locked(
                    f"Milvus Lite data directory {self.data_dir} is open in another process ({rest}); "
                    "stop it, or give this store another milvus.uri"
                )
            detail = rest if word == "FAILED" else (line or f"no answer within {self.start_timeout_s:g} s")
            raise StoreUnavailable(f"the Milvus Lite server of {self.data_dir} did not start: {detail}")
        proc.stdout.close()
        self._generation += 1
        self._proc = proc
        uri = f"http://127.0.0.1:{int(rest)}"
        self._state = (uri, self._generation)
        log.info("Milvus Lite server for %s: process %d at %s", self.data_dir, proc.pid, uri)
        return uri

    def _watch(self) -> None:
        """Monitor thread: wait on the child; after an exit not asked for, restart it with
        bounded backoff (see the module) until ``stop``."""
        while not self._stop_event.is_set():
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stop_event.is_set():
                return
            self._state = None
            log.warning(
                "Milvus Lite server of %s (process %d) exited with %s; restarting", self.data_dir, proc.pid, code
            )
            delay = self.backoff_s
            while not self._stop_event.wait(delay):
                try:
                    with self._lock:
                        self._spawn()
                    self.restarts += 1
                    break
                except Exception as e:  # a failed start is retried; stop() ends the loop
                    log.warning("Milvus Lite server of %s did not restart: %s", self.data_dir, e)
                    delay = min(delay * 2, self.backoff_max_s)


class _Locked(Exception):
    """The child found Milvus Lite's ``LOCK`` of the directory held by another process
    (internal: ``start`` retries it for ``lock_wait_s``, then raises ``ConfigError``)."""


def _first_line(stream: IO[bytes], timeout_s: float) -> str:
    """The first line the child writes (decoded, stripped), ``""`` at end of file; raises
    ``StoreUnavailable`` after ``timeout_s`` without one."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = stream.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise StoreUnavailable(f"the Milvus Lite server did not answer within {timeout_s:g} s")
        readable, _, _ = select.select([fd], [], [], left)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace").strip()


def _end(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Stop ``proc``: close its stdin (its signal to stop), wait ``timeout_s``, then SIGKILL."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
