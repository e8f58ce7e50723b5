"""``yield_cpu_to_other_processes`` and the Embedder's ``user_config.nice``: every thread of
the process at the level, threads made later too, never raised back. Each case runs in a
child process: a lowered priority cannot be undone, and the test session must keep its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memory_core.cpu_pool import NICE_MAX, yield_cpu_to_other_processes

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread priorities: Linux only")

LEVELS = """
import os, threading

def levels():
    return sorted(os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task"))

def made_later():
    out = []
    t = threading.Thread(target=lambda: out.append(os.getpriority(os.PRIO_PROCESS, 0)))
    t.start(); t.join()
    return out[0]
"""


def _child(body: str) -> dict:
    """Run ``body`` (with ``LEVELS``' helpers) in a fresh interpreter; the JSON it prints."""
    code = LEVELS + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _start_level() -> int:
    level = os.getpriority(os.PRIO_PROCESS, 0)
    if level >= NICE_MAX - 1:
        pytest.skip(f"this process already runs at nice {level}: nothing lower to show")
    return level


@pytest.mark.parametrize("bad", [-1, NICE_MAX + 1])
def test_refuses_a_level_outside_the_nice_range(bad):
    with pytest.raises(ValueError, match="0..19"):
        yield_cpu_to_other_processes(bad)


def test_every_thread_and_every_later_thread_takes_the_level_and_never_goes_back():
    start = _start_level()
    out = _child(
        f"""
        import json, threading
        from memory_core.cpu_pool import yield_cpu_to_other_processes
        stop = threading.Event()
        waiting = [threading.Thread(target=stop.wait) for _ in range(3)]
        for t in waiting: t.start()
        before = levels()
        changed = yield_cpu_to_other_processes({NICE_MAX})
        after = levels()
        later = made_later()
        again = yield_cpu_to_other_processes({start})  # a higher priority: refused by doing nothing
        still = levels()
        stop.set()
        print(json.dumps(dict(before=before, changed=changed, after=after, later=later, again=again, still=still)))
        """
    )
    assert set(out["before"]) == {start} and len(out["before"]) >= 4  # the main thread and the three
    assert out["changed"] == len(out["before"])
    assert set(out["after"]) == {NICE_MAX} and out["later"] == NICE_MAX
    assert out["again"] == 0 and set(out["still"]) == {NICE_MAX}


def test_the_embedder_applies_user_config_nice_to_its_replica_and_keeps_it():
    """``Embedder.reconfigure`` (what Serve calls with ``user_config``): the replica's threads
    at the level, its encode threads too; a lower level later leaves them there (a warning)."""
    start = _start_level()
    out = _child(
        """
        import asyncio, json, logging
        from memory_core.config import EmbeddingSettings
        from memory_core.embedding import compute_identity
        from deployments.embedder import Embedder
        settings = EmbeddingSettings(model="bundled:all-MiniLM-L6-v2")
        embedder = Embedder.func_or_class(settings, compute_identity(settings))
        at_start = levels()
        embedder.reconfigure({"max_batch_size": 8, "nice": 12})
        after = levels()
        async def encode():  # the batch function, on a worker thread of the replica's loop
            await embedder.encode_batch_async(["a stored text"], [4])
            return levels()
        while_encoding = asyncio.run(encode())
        warnings = []
        logging.getLogger("ray.serve").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: warnings.append(r.getMessage())})())
        embedder.reconfigure({"max_batch_size": 8, "nice": 3})
        print(json.dumps(dict(at_start=at_start, after=after, encoding=while_encoding, later=levels(),
                              stats=embedder.stats()["nice"], warnings=warnings)))
        """
    )
    assert set(out["at_start"]) == {start}  # the default user_config changes nothing
    assert set(out["after"]) == {max(start, 12)}
    assert set(out["encoding"]) == {max(start, 12)}  # torch's and the loop's threads, made later
    assert set(out["later"]) == {max(start, 12)} and out["stats"] == max(start, 12)
    assert any("only be lowered" in w for w in out["warnings"])


def test_user_config_nice_is_validated():
    from deployments.embedder import DEFAULT_USER_CONFIG, validate_user_config
    from memory_core.errors import InvalidInput

    assert validate_user_config({}, 256)["nice"] == DEFAULT_USER_CONFIG["nice"] == 0
    assert validate_user_config({"nice": 19}, 256)["nice"] == 19
    for bad in (-5, 20):
        with pytest.raises(InvalidInput, match="nice"):
            validate_user_config({"nice": bad}, 256)


def test_the_root_serve_config_lowers_the_embedder_where_queries_do_not_reach_it():
    """The shipped default: queries embedded in the shard, the Embedder at the lowest level."""
    import yaml

    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    app = config["applications"][0]
    pool = app["args"]["config"]["global"]["stores"]["memory"]["pool"]
    embedder = next(d for d in app["deployments"] if d["name"] == "Embedder")
    assert pool["query_embedding"] == "in_shard" and embedder["user_config"]["nice"] == NICE_MAX
