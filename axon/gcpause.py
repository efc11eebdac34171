"""`gc_paused()`: run a block without Python's cycle collector; `gc_frozen()`: a long run whose
heap the collector walks about once.

Tracing a kernel, simulating its trace and lowering a pool of candidate points each make hundreds
of thousands of small objects, nearly all freed by reference counting, while the tuner's caches
keep a large heap alive; each full collection those allocations trigger walks that whole heap
(a third of the CPU of an attention tune at its default shape). Nothing in Axon depends on when
the collector runs (the emulator's tiles are freed by reference counting, see `nki.allocation`),
so pausing it changes no result; cycles made in the block are collected after it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_FROZEN = [0]  # gc_frozen blocks open
_KEPT = [False]  # the program froze its heap for good (`keep_frozen`)


def _settle() -> None:
    """Collect the young generations (what is not frozen and not yet old), then freeze what survived."""
    gc.collect(1)
    gc.freeze()


@contextmanager
def gc_paused() -> Iterator[None]:
    """The block runs with the cycle collector off; it is on again after (if it was before). Inside
    `gc_frozen`, what the block made and kept is then collected once and frozen (`_settle`), not
    walked again by the young collections that follow.

    >>> import gc
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            if _FROZEN[0]:
                _settle()


@contextmanager
def gc_frozen() -> Iterator[Callable[[], None]]:
    """The block runs with the heap it starts with frozen (`gc.freeze`: never walked by a
    collection), and yields `settle`: collect the young generations, then freeze what survived; a
    `gc_paused` block inside settles when it ends. A tune settles after each trial, so that the
    caches it fills (lowered candidates, features, records: millions of objects) are walked about
    once, not by every full collection the next trials' allocations trigger. Everything is unfrozen
    after the block (and is collectable again); nothing is frozen when the collector is off or the
    caller froze objects of its own (unfreezing would release them too).

    Frozen objects are still freed by reference counting; only a cycle among them that became
    garbage waits for the end of the block (the young collections before each freeze collect the
    cycles that die young). As with `gc_paused`, results do not depend on when the collector runs.

    >>> with gc_frozen() as settle:
    ...     settle()
    ...     gc.get_freeze_count() > 0
    True
    >>> gc.get_freeze_count()
    0
    """
    if not gc.isenabled() or _KEPT[0] or gc.get_freeze_count():
        yield lambda: None
        return
    gc.freeze()
    _FROZEN[0] += 1
    try:
        yield _settle
    finally:
        _FROZEN[0] -= 1
        gc.unfreeze()


def keep_frozen(kept: bool = True, generation: int = 2) -> None:
    """For a long-lived program that freezes its heap for good after each unit of work (a test
    runner: `gc.collect(); gc.freeze()` after each test): collect (`generation`: the oldest generation
    collected, as `gc.collect` takes it), freeze, and let `gc_frozen` know without asking
    `gc.get_freeze_count`, which walks every frozen object (0.35 s for a test process that has run
    700 tests, asked once per tune). `keep_frozen(False)` unfreezes the heap again."""
    _KEPT[0] = kept
    if kept:
        gc.collect(generation)
        gc.freeze()
    else:
        gc.unfreeze()
