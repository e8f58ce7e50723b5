"""``lower_cpu_priority`` and the Embedder's ``user_config.cpu_priority``: every thread of the
process at the priority (nice 19; ``idle``: ``SCHED_IDLE`` too), threads made later too, never
raised back. Each case runs in a child process: a lowered priority cannot be undone, and the
test session must keep its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memory_core.cpu_pool import CPU_PRIORITIES, NICE_MAX

ROOT = Path(__file__).resolve().parents[2]
linux_threads = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread priorities: Linux only")

LEVELS = """
import os, threading

def state(tid):
    return [os.getpriority(os.PRIO_PROCESS, tid), "idle" if os.sched_getscheduler(tid) == os.SCHED_IDLE else "other"]

def levels():
    out = set()
    for t in os.listdir("/proc/self/task"):
        try:
            out.add(tuple(state(int(t))))
        except ProcessLookupError:  # a thread that ended after the listing
            pass
    return sorted(out)

def made_later():
    out = []
    t = threading.Thread(target=lambda: out.append(state(0)))
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
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _start_level() -> int:
    level = os.getpriority(os.PRIO_PROCESS, 0)
    if level >= NICE_MAX - 1:
        pytest.skip(f"this process already runs at nice {level}: nothing lower to show")
    return level


@linux_threads
def test_refuses_an_unknown_priority_and_normal_changes_nothing():
    """In a child as well: an implementation that took ``19`` (a nice level) or lowered on
    ``normal`` must not lower this test session."""
    start = _start_level()
    out = _child(
        """
        import json
        from memory_core.cpu_pool import lower_cpu_priority
        refused = []
        for bad in ["lowest", "", "IDLE", 19, None]:
            try:
                lower_cpu_priority(bad)
            except ValueError as e:
                refused.append(str(e))
        normal = lower_cpu_priority("normal")
        print(json.dumps(dict(refused=refused, normal=normal, levels=levels())))
        """
    )
    assert len(out["refused"]) == 5 and all("normal, low, idle" in e for e in out["refused"])
    assert out["normal"] == "normal" and out["levels"] == [[start, "other"]]


@linux_threads
def test_every_thread_and_every_later_thread_takes_the_priority_and_never_goes_back():
    start = _start_level()
    out = _child(
        """
        import json, threading
        from memory_core.cpu_pool import lower_cpu_priority
        stop = threading.Event()
        waiting = [threading.Thread(target=stop.wait) for _ in range(3)]
        for t in waiting: t.start()
        before = levels(); threads = len(os.listdir("/proc/self/task"))
        real = os.sched_setscheduler
        def refused(*args):
            raise PermissionError("a sandbox that allows nice only")
        os.sched_setscheduler = refused
        sandboxed = lower_cpu_priority("idle")  # falls back to nice 19 for every thread
        after_sandboxed = levels()
        os.sched_setscheduler = real
        low = lower_cpu_priority("low")
        after_low = levels(); later_low = made_later()
        idle = lower_cpu_priority("idle")
        after_idle = levels(); later_idle = made_later()
        again = [lower_cpu_priority("low"), lower_cpu_priority("normal")]  # higher: nothing changes
        still = levels()
        stop.set()
        print(json.dumps(dict(before=before, threads=threads, sandboxed=sandboxed, after_sandboxed=after_sandboxed,
                              low=low, after_low=after_low, later_low=later_low,
                              idle=idle, after_idle=after_idle, later_idle=later_idle, again=again, still=still)))
        """
    )
    assert out["before"] == [[start, "other"]] and out["threads"] >= 4  # the main thread and the three
    assert out["sandboxed"] == "low" and out["after_sandboxed"] == [[NICE_MAX, "other"]]
    assert out["low"] == "low"
    assert out["after_low"] == [[NICE_MAX, "other"]] and out["later_low"] == [NICE_MAX, "other"]
    assert out["idle"] == "idle"
    assert out["after_idle"] == [[NICE_MAX, "idle"]] and out["later_idle"] == [NICE_MAX, "idle"]
    assert out["again"] == ["low", "normal"] and out["still"] == [[NICE_MAX, "idle"]]


@linux_threads
def test_a_nice_pool_lowers_only_its_own_threads_and_never_raises_one():
    """``CpuPool(nice=...)`` (the store shard's write lane): its worker runs at that level,
    the rest of the process keeps its own; ``lower_this_thread`` never raises a thread back."""
    start = _start_level()
    out = _child(
        """
        import asyncio, json
        from memory_core.cpu_pool import CpuPool, lower_this_thread
        pool = CpuPool(1, name="lane", nice=19)
        async def main():
            return await pool.run(lambda: state(0))
        worker = asyncio.run(main())
        main_thread = state(0)
        def lower_then_ask_higher():
            first = lower_this_thread(18)
            return [first, lower_this_thread(5), state(0)[0]]
        steps = asyncio.run(CpuPool(1, name="other").run(lower_then_ask_higher))
        print(json.dumps(dict(worker=worker, main_thread=main_thread, steps=steps, levels=levels())))
        """
    )
    assert out["worker"] == [NICE_MAX, "other"]
    assert out["main_thread"] == [start, "other"]
    assert out["steps"] == [18, 18, 18]  # asked for 5 after 18: stays at 18
    assert [start, "other"] in out["levels"] and [NICE_MAX, "other"] in out["levels"]


@linux_threads
def test_the_embedder_applies_user_config_cpu_priority_to_its_replica_and_keeps_it():
    """``Embedder.reconfigure`` (what Serve calls with ``user_config``): the replica's threads
    at the priority, its encode threads too; a higher one later leaves them there (a warning)."""
    start = _start_level()
    out = _child(
        """
        import asyncio, json, logging
        from memory_core.config import EmbeddingSettings
        from memory_core.embedding import compute_identity
        from deployments.embedder import Embedder
        settings = EmbeddingSettings(model="bundled:all-MiniLM-L6-v2")
        embedder = Embedder.func_or_class(settings, compute_identity(settings))
        warnings = []
        logging.getLogger("ray.serve").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: warnings.append(r.getMessage())})())
        asyncio.run(embedder.encode_batch_async(["warm the model up at Ray's level"], [8]))
        at_start = levels()
        import deployments.embedder as module
        real = module.lower_cpu_priority
        def refused(priority):
            raise PermissionError("not allowed here")
        module.lower_cpu_priority = refused  # a sandbox: the replica keeps serving
        embedder.reconfigure({"max_batch_size": 8, "cpu_priority": "idle"})
        refused_levels = levels()
        module.lower_cpu_priority = real
        embedder.reconfigure({"max_batch_size": 8, "cpu_priority": "idle"})
        after = levels()
        async def encode():  # the batch function, on a worker thread of the replica's loop
            await embedder.encode_batch_async(["a stored text"], [4])
            return levels()
        while_encoding = asyncio.run(encode())
        calls = []
        module.lower_cpu_priority = lambda p: calls.append(p) or p
        embedder.reconfigure({"max_batch_size": 16, "cpu_priority": "idle"})  # the same priority: no call
        module.lower_cpu_priority = real
        embedder.reconfigure({"max_batch_size": 8, "cpu_priority": "low"})
        stats = embedder.stats()
        print(json.dumps(dict(at_start=at_start, refused=refused_levels, after=after, encoding=while_encoding,
                              later=levels(), stats=[stats["cpu_priority"], stats["nice"]], calls=calls, warnings=warnings)))
        """
    )
    assert out["at_start"] == [[start, "other"]]  # the default user_config changes nothing
    assert out["refused"] == [[start, "other"]]
    assert any("not applied: not allowed here" in w for w in out["warnings"])
    assert out["after"] == [[NICE_MAX, "idle"]]
    assert out["encoding"] == [[NICE_MAX, "idle"]]  # torch's and the loop's threads, made later
    assert out["later"] == [[NICE_MAX, "idle"]] and out["stats"] == ["idle", NICE_MAX]
    assert out["calls"] == []
    assert any("a priority only goes down" in w for w in out["warnings"])


def test_user_config_cpu_priority_is_validated():
    from deployments.embedder import DEFAULT_USER_CONFIG, validate_user_config
    from memory_core.errors import InvalidInput

    assert validate_user_config({}, 256)["cpu_priority"] == DEFAULT_USER_CONFIG["cpu_priority"] == "normal"
    for good in CPU_PRIORITIES:
        assert validate_user_config({"cpu_priority": good}, 256)["cpu_priority"] == good
    for bad in ("lowest", "", 19, True, None, ["idle"]):
        with pytest.raises(InvalidInput, match="cpu_priority"):
            validate_user_config({"cpu_priority": bad}, 256)
    with pytest.raises(InvalidInput, match="nice"):  # the key is cpu_priority
        validate_user_config({"nice": 19}, 256)


def test_the_root_serve_config_lowers_the_embedder_where_queries_do_not_reach_it():
    """The shipped default: queries embedded in the shard, the Embedder at ``idle``."""
    import yaml

    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    app = config["applications"][0]
    pool = app["args"]["config"]["global"]["stores"]["memory"]["pool"]
    embedder = next(d for d in app["deployments"] if d["name"] == "Embedder")
    assert pool["query_embedding"] == "in_shard" and embedder["user_config"]["cpu_priority"] == "idle"


def test_the_host_idle_meter_reads_the_idle_share_between_two_calls(monkeypatch):
    """``HostIdleMeter.fraction``: (idle + iowait ticks) ÷ all ticks since the last call; None
    where ``/proc/stat`` gives nothing or no tick passed."""
    from memory_core.cpu_pool import HostIdleMeter

    ticks = iter([(100, 1000), (150, 1100), (150, 1100), (350, 1300), None, (400, 1400)])
    monkeypatch.setattr(HostIdleMeter, "_ticks", staticmethod(lambda: next(ticks)))
    meter = HostIdleMeter()
    assert meter.fraction() == 0.5  # 50 idle of 100
    assert meter.fraction() is None  # no tick passed
    assert meter.fraction() == 1.0  # 200 of 200
    assert meter.fraction() is None  # unreadable
    assert meter.fraction() is None  # nothing to compare with


@linux_threads
def test_the_host_idle_meter_reads_proc_stat():
    import time

    from memory_core.cpu_pool import HostIdleMeter

    meter = HostIdleMeter()
    time.sleep(0.2)
    share = meter.fraction()
    assert share is not None and 0.0 <= share <= 1.0
