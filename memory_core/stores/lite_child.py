"""The child process that serves one Milvus Lite data directory over loopback gRPC
(``python memory_core/stores/lite_child.py --data-dir DIR --parent-pid PID``, run as a script),
started and supervised by :class:`memory_core.stores.lite_process.LiteServer`.

It opens the directory with ``milvus_lite.adapter.grpc.server.start_server_in_thread``
(Milvus Lite's own server: ``milvus_lite.MilvusLite`` behind its ``MilvusServicer``, the same
code the ``milvus-lite server`` command runs) bound to ``127.0.0.1`` on a port the kernel
picks, and prints one line on stdout: ``READY <port>``, or ``LOCKED <message>`` (exit status
3) when another process holds the directory's ``LOCK`` (Milvus Lite's ``flock``), or
``FAILED <message>`` (exit status 1) for any other start failure.

It stops (gRPC server stopped with a 2 s grace, then ``MilvusLite.close()``, which releases the
``LOCK``) when its stdin reaches end of file (the parent closed it, or the parent died: the
kernel closes a dead process's pipe ends, SIGKILL included), on SIGTERM/SIGINT, or when its
parent process id is no longer ``--parent-pid`` (a watchdog polled every 0.5 s, for a parent
whose pipe end outlived it in a forked process). Writes acknowledged before a SIGKILL of this
process survive: Milvus Lite writes each insert/delete batch to its write-ahead log and flushes
it to the OS before it answers (``milvus_lite.storage.wal.WAL.write_insert``).

Run as a script, not with ``-m``: this file imports nothing of ``memory_core`` (``-m`` would
run the package ``__init__`` modules), so the child starts with Milvus Lite's imports only.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import threading

READY = "READY"
LOCKED = "LOCKED"
FAILED = "FAILED"
EXIT_LOCKED = 3
_POLL_S = 0.5


def _wait_for_stop(parent_pid: int, stop: threading.Event) -> None:
    """Return once stdin is at end of file, ``stop`` is set, or the parent is gone."""
    fd = sys.stdin.fileno()
    while not stop.is_set():
        if os.getppid() != parent_pid:
            return
        readable, _, _ = select.select([fd], [], [], _POLL_S)
        if readable and not os.read(fd, 4096):
            return


def main(argv: list[str] | None = None) -> int:
    """Serve ``--data-dir`` until told to stop (see the module). Returns the exit status:
    0 after a clean stop, 3 when the directory is locked, 1 when the start failed."""
    ap = argparse.ArgumentParser(description="serve one Milvus Lite data directory on loopback")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--parent-pid", type=int, required=True)
    ap.add_argument("--max-workers", type=int, default=10)
    args = ap.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        from milvus_lite import DataDirLockedError
        from milvus_lite.adapter.grpc.server import start_server_in_thread

        server, db, port = start_server_in_thread(
            data_dir=args.data_dir, host="127.0.0.1", port=0, max_workers=args.max_workers
        )
    except DataDirLockedError as e:
        print(f"{LOCKED} {e}", flush=True)
        return EXIT_LOCKED
    except Exception as e:
        print(f"{FAILED} {type(e).__name__}: {e}", flush=True)
        return 1
    print(f"{READY} {port}", flush=True)
    os.dup2(2, 1)  # the parent reads only that line: later prints go to stderr
    try:
        _wait_for_stop(args.parent_pid, stop)
    finally:
        server.stop(grace=2).wait(5)
        db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
