"""``LongLivedFreezer``: what lived through a full collection is frozen (later collections do
not walk it), a reference cycle frozen alive and dropped later is reclaimed by the next full
round, rounds repeat on the loop until closed."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from memory_core.gc_pauses import LongLivedFreezer, freeze_round


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()  # the test process's objects back in the collector's generations


def test_a_round_freezes_what_survived_it_and_a_collection_no_longer_walks_it():
    kept = [_Node() for _ in range(1000)]
    result = freeze_round(full=True)
    assert result.frozen >= 1000 and result.full
    tracked = {id(o) for o in gc.get_objects()}  # the generations a collection walks
    assert not any(id(n) in tracked for n in kept)  # frozen: in none of them
    fresh = _Node()
    assert id(fresh) in {id(o) for o in gc.get_objects()}  # made after the round: walked


def test_a_cycle_dropped_after_a_freeze_is_kept_until_the_next_full_round():
    ref = weakref.ref(_Node())  # garbage at once, but a cycle: waits for the collector
    node = _Node()
    alive = weakref.ref(node)
    freeze_round(full=True)
    assert ref() is None  # the round's collection found the earlier garbage
    del node
    gc.collect()
    assert alive() is not None  # frozen while it was alive: the collector does not see it
    freeze_round()  # an ordinary round does not unfreeze
    assert alive() is not None
    result = freeze_round(full=True)
    assert alive() is None and result.reclaimed >= 1  # found after the unfreeze


async def test_the_freezer_runs_rounds_on_the_loop_a_full_one_every_nth_until_closed():
    freezer = LongLivedFreezer(every_s=0.01, unfreeze_every=2)
    freezer.start()
    freezer.start()  # idempotent while running
    assert freezer.rounds == 1 and freezer.last is not None and freezer.last.full
    # Each round walks the whole test process's heap (a full one, with the suite's
    # imports, took over 100 ms on the CI machine): wait for rounds, not for a time.
    deadline = asyncio.get_running_loop().time() + 30
    while freezer.rounds < 3 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert freezer.rounds >= 3
    stats = freezer.stats()
    assert stats["rounds"] == freezer.rounds and stats["frozen"] > 0
    assert stats["longest_ms"] >= stats["last"]["ms"] >= 0
    await freezer.close()
    rounds = freezer.rounds
    await asyncio.sleep(0.05)
    assert freezer.rounds == rounds


def test_the_freezer_refuses_a_period_or_a_count_that_means_nothing():
    with pytest.raises(ValueError):
        LongLivedFreezer(every_s=0)
    with pytest.raises(ValueError):
        LongLivedFreezer(unfreeze_every=0)
    with pytest.raises(RuntimeError):  # no running loop to repeat on
        LongLivedFreezer().start()


def test_every_nth_round_is_full_and_counts_the_frozen_cycles_it_reclaims():
    freezer = LongLivedFreezer(every_s=1, unfreeze_every=2)
    assert freezer.round().full  # the first
    node = _Node()
    alive = weakref.ref(node)
    ordinary = freezer.round()
    del node  # died frozen
    assert not ordinary.full and ordinary.reclaimed == 0
    before = freezer.reclaimed_by_full
    full = freezer.round()
    assert full.full and full.reclaimed >= 1 and alive() is None
    assert freezer.reclaimed_by_full == before + full.reclaimed
    assert not freezer.round().full and freezer.round().full


async def test_a_later_start_runs_its_first_round_on_the_next_turn_and_none_after_close():
    freezer = LongLivedFreezer(every_s=60)
    freezer.start(now=False)  # a shard's first call after a restart: not inside the call
    assert freezer.rounds == 0 and freezer.running
    for _ in range(3):
        await asyncio.sleep(0)
    assert freezer.rounds == 1
    await freezer.close()
    freezer.start()  # a call that arrives after close
    assert not freezer.running and freezer.rounds == 1


def test_the_setting_is_off_or_at_least_a_second():
    from pydantic import ValidationError

    from memory_core.config import PoolSettings

    assert PoolSettings().gc_freeze_every_s == 60
    assert PoolSettings(gc_freeze_every_s=0).gc_freeze_every_s == 0
    assert PoolSettings(gc_freeze_every_s=1).gc_freeze_every_s == 1
    for bad in (0.01, 0.5, -1):
        with pytest.raises(ValidationError):
            PoolSettings(gc_freeze_every_s=bad)
