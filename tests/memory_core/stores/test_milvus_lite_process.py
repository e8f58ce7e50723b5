"""Milvus Lite in its own process (``milvus.lite_process``, ``memory_core/stores/lite_process.py``):
start and stop, a SIGKILL of the child in the middle of writes (every acknowledged write is read
back once it healed; callers meanwhile get ``StoreUnavailable``), no child outliving its parent
(a parent killed with SIGKILL included), and one owner per data directory. The whole store
contract on this mode runs in ``test_conformance.py`` (rig ``milvus_lp``)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memory_core.config import MilvusSettings
from memory_core.errors import ConfigError, StoreUnavailable
from memory_core.stores.lite_process import LiteServer, owner_lock_path
from memory_core.stores.milvus import MilvusStore
from memory_core.testing.fake_embed import DIM, CountingEmbed
from memory_core.types import Memory

ROOT = Path(__file__).resolve().parents[3]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (``/proc/<pid>/stat``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def lp_store(path: Path, collection: str = "lp") -> MilvusStore:
    settings = MilvusSettings(uri=str(path), collection=collection, lite_process=True)
    return MilvusStore(settings, embed=CountingEmbed(), dimension=DIM, identity="fake-bow-32")


async def until_healed(store: MilvusStore, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await store.check_connection():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the Milvus Lite child did not come back")


async def test_start_and_stop(tmp_path):
    store = lp_store(tmp_path / "m.db")
    await store.open()
    server = store.server
    assert server is not None and server.pid is not None
    pid = server.pid
    assert pid != os.getpid() and alive(pid)
    m = await store.store(Memory(user_id="alice", content="otters hold hands"))
    assert (await store.get(m.id, "alice")).content == "otters hold hands"
    await store.close()
    assert wait_gone(pid, 10), "the child outlived the store"
    assert server.pid is None
    # the owner lock is released: the directory opens again, with the data
    again = lp_store(tmp_path / "m.db")
    try:
        assert (await again.get(m.id, "alice")).content == "otters hold hands"
    finally:
        await again.close()


async def test_sigkill_mid_writes_keeps_acknowledged_writes(tmp_path):
    store = lp_store(tmp_path / "m.db")
    await store.open()
    server = store.server
    assert server is not None
    server.backoff_s = 1.0  # a window in which callers must be refused
    first_pid = server.pid
    assert first_pid is not None
    acked: list[str] = []
    refused = 0
    killed = asyncio.Event()
    stop = asyncio.Event()

    async def writer() -> None:
        nonlocal refused
        i = 0
        while not stop.is_set():
            try:
                m = await store.store(Memory(user_id="alice", content=f"note number {i} about herons"))
                acked.append(m.id)
            except StoreUnavailable:
                refused += 1
                await asyncio.sleep(0.05)
            i += 1
            if len(acked) == 20 and not killed.is_set():
                os.kill(first_pid, signal.SIGKILL)
                killed.set()

    task = asyncio.create_task(writer())
    await asyncio.wait_for(killed.wait(), 60)
    at_kill = len(acked)
    # wait until writes are acknowledged again, by the restarted child
    deadline = time.monotonic() + 60
    while len(acked) < at_kill + 20 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    stop.set()
    await task
    try:
        assert len(acked) >= at_kill + 20, "writes did not resume after the restart"
        assert refused >= 1, "no caller was refused while the child restarted"
        assert server.restarts >= 1 and server.pid != first_pid
        assert not alive(first_pid)
        got = await store.get_many(acked, "alice")
        assert sorted(m.id for m in got) == sorted(acked)
    finally:
        second_pid = server.pid
        await store.close()
    assert second_pid is not None and wait_gone(second_pid, 10)


async def test_callers_get_store_unavailable_while_restarting(tmp_path):
    store = lp_store(tmp_path / "m.db")
    await store.open()
    server = store.server
    assert server is not None and server.pid is not None
    server.backoff_s = 3.0
    m = await store.store(Memory(user_id="alice", content="the kettle is blue"))
    os.kill(server.pid, signal.SIGKILL)
    try:
        with pytest.raises(StoreUnavailable):
            await store.get(m.id, "alice")
        assert not await store.check_connection()
        await until_healed(store)
        assert (await store.get(m.id, "alice")).content == "the kettle is blue"
    finally:
        await store.close()


def test_child_does_not_outlive_a_killed_parent(tmp_path):
    code = (
        "import sys, time\n"
        "from memory_core.stores.lite_process import LiteServer\n"
        f"s = LiteServer({str(tmp_path / 'm.db')!r})\n"
        "s.start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.kill()
        parent.wait()
        assert wait_gone(child, 10), "the Milvus Lite child outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
    # its owner lock went with it: the directory can be owned again
    s = LiteServer(tmp_path / "m.db")
    s.start()
    s.stop()


async def test_second_owner_is_refused(tmp_path):
    store = lp_store(tmp_path / "m.db")
    await store.open()
    other = lp_store(tmp_path / "m.db", collection="other")
    try:
        with pytest.raises(ConfigError, match=rf"owned by another store \(process {os.getpid()}"):
            await other.open()
        assert owner_lock_path(tmp_path / "m.db").exists()
        # the refused store started no child; the owner keeps working
        assert other.server is None
        assert await store.check_connection()
    finally:
        await other.close()
        await store.close()


async def test_directory_open_in_process_is_refused(tmp_path):
    """A directory that an in-process Milvus Lite holds (its ``LOCK``) is refused by the child
    with a clear ``ConfigError``, not a hang or a 500."""
    inproc = MilvusStore(
        MilvusSettings(uri=str(tmp_path / "m.db"), collection="inproc"),
        embed=CountingEmbed(),
        dimension=DIM,
        identity="fake-bow-32",
    )
    await inproc.open()
    server = LiteServer(tmp_path / "m.db", lock_wait_s=1.0)
    try:
        with pytest.raises(ConfigError, match="open in another process"):
            server.start()
        assert server.pid is None
        # the refusal released the owner lock
        probe = LiteServer(tmp_path / "m.db")
        probe._take_owner_lock()
        probe._release_owner_lock()
    finally:
        await inproc.close()


def test_start_waits_for_a_dying_holder_of_the_lock(tmp_path):
    """A ``LOCK`` held by a process that lets go within ``lock_wait_s`` (the child of a shard
    that just died) delays the start instead of failing it."""
    data = tmp_path / "m.db"
    data.mkdir()
    fd = os.open(data / "LOCK", os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    timer = threading.Timer(1.0, os.close, (fd,))
    timer.start()
    server = LiteServer(data, lock_wait_s=30.0)
    try:
        server.start()
        assert server.pid is not None and alive(server.pid)
    finally:
        timer.join()
        server.stop()


def test_lite_process_needs_a_lite_uri():
    with pytest.raises(ValueError, match="lite_process needs a Milvus Lite uri"):
        MilvusSettings(uri="http://127.0.0.1:19530", lite_process=True)
