"""The collector policy of a tune (`axon.gcpause`): what it freezes, what it still collects, and
that it leaves the caller's collector as it was."""

from __future__ import annotations

import gc
import weakref

from axon.gcpause import gc_frozen, gc_paused


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_cycle_made_and_dropped_in_a_paused_block_is_collected_when_it_ends() -> None:
    with gc_frozen():
        with gc_paused():
            ref = _cycle()
            assert ref() is not None  # reference counting cannot free a cycle
        assert ref() is None


def test_the_heap_is_frozen_in_the_block_and_unfrozen_after() -> None:
    kept = _Node()
    with gc_frozen() as settle:
        kept.other = _Node()
        settle()
        assert gc.get_freeze_count() > 0
        assert not any(o is kept.other for o in gc.get_objects())  # frozen: no generation holds it
    assert gc.get_freeze_count() == 0
    assert any(o is kept.other for o in gc.get_objects())


def test_a_caller_s_frozen_objects_stay_frozen_and_a_disabled_collector_stays_off() -> None:
    theirs = [[]]  # frozen by the caller below
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with gc_frozen() as settle:
            ours = [[]]  # made in the block: a settle would freeze it
            settle()
        # nothing frozen or unfrozen: the count may only fall by the frozen objects another thread of
        # this test worker frees meanwhile (it fell by 2 in one run); the caller's object is still frozen
        # (no generation holds it) and the block's is not
        assert gc.get_freeze_count() <= before
        assert not any(o is theirs for o in gc.get_objects())
        assert any(o is ours for o in gc.get_objects())
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with gc_frozen() as settle:
            settle()
            assert gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
