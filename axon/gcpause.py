"""`gc_paused()`: run a block without Python's cycle collector.

Tracing a kernel, simulating its trace and lowering a pool of candidate points each make hundreds
of thousands of small objects, nearly all freed by reference counting, while the tuner's caches
keep a large heap alive; each full collection those allocations trigger walks that whole heap
(a third of the CPU of an attention tune at its default shape). Nothing in Axon depends on when
the collector runs (the emulator's tiles are freed by reference counting, see `nki.allocation`),
so pausing it changes no result; cycles made in the block are collected after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The block runs with the cycle collector off; it is on again after (if it was before).

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
