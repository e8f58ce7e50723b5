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
    assert result.frozen == gc.get_freeze_count() >= 1000 and result.full
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
    assert alive() is None and result.collected >= 1


async def test_the_freezer_runs_rounds_on_the_loop_a_full_one_every_nth_until_closed():
    freezer = LongLivedFreezer(every_s=0.01, unfreeze_every=2)
    freezer.start()
    freezer.start()  # idempotent while running
    assert freezer.rounds == 1 and freezer.last is not None and freezer.last.full
    await asyncio.sleep(0.2)
    assert freezer.rounds >= 3
    stats = freezer.stats()
    assert stats["rounds"] == freezer.rounds and stats["frozen"] == gc.get_freeze_count()
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
