"""`time_limit(seconds, max_rss)`: stop a user's code that does not return (a spec file's endless loop)
or that takes the machine's memory (a kernel's endless loop recording its trace).

A spec file is Python run on import and a spec function is run to be traced; either may loop
forever, and a command that hangs without a word is worse than one that says where it stopped.
The limit is a SIGALRM timer, so it applies in the main thread only (elsewhere the code runs
unbounded, as before) and not where a timer is already running; it raises `TimeUp`, a
BaseException, which a spec's own `except Exception` does not swallow. Python drops an exception
raised inside a finalizer (`__del__`: "Exception ignored in"), and a kernel that allocates tiles in
its loop spends much of it in one, so the timer goes on firing every `REPEAT_S` past the deadline, a
few times at most, until a `TimeUp` gets out of the block (one alarm lost there had the loop run on,
its trace growing by gigabytes). With `max_rss` the timer fires every `REPEAT_S` from the start and
raises `MemoryUp` (a `TimeUp`) once this process holds more than `max_rss` bytes: an endless loop
of loads grows the emulator's trace by about 2 GB a minute, so a time limit alone would let it take
every byte of the machine first.

>>> import time
>>> try:
...     with time_limit(0.05):
...         time.sleep(5)
... except TimeUp:
...     print("stopped")
stopped
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class TimeUp(BaseException):
    """The code under `time_limit` ran past its seconds."""


class MemoryUp(TimeUp):
    """The process held more than `time_limit`'s `max_rss` bytes."""


def rss_bytes() -> int | None:
    """This process's resident memory (Linux), None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def available_bytes() -> int | None:
    """The memory the machine can still give (MemAvailable, Linux), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, ValueError, KeyError):
        return None


REPEAT_S = 0.25  # past the deadline, the timer fires again this often while the block still runs
REPEATS = 8  # at most this many TimeUps: then the timer stops whatever happened to them


@contextmanager
def time_limit(seconds: float, max_rss: int | None = None) -> Iterator[None]:
    """Raise `TimeUp` in the block when it runs longer than `seconds`, `MemoryUp` when this process
    holds more than `max_rss` bytes (main thread only)."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return
    deadline = time.monotonic() + seconds
    raised = [0]  # TimeUps raised so far; -1 once the block has ended

    def expired(signum: int, frame: FrameType | None) -> None:
        if raised[0] < 0:  # the block ended just as the timer fired
            return
        rss = rss_bytes() if max_rss is not None else None
        if rss is not None and max_rss is not None and rss > max_rss:
            error: TimeUp = MemoryUp(rss)
        elif time.monotonic() >= deadline:
            error = TimeUp()
        else:
            return
        raised[0] += 1
        if raised[0] >= REPEATS:
            signal.setitimer(signal.ITIMER_REAL, 0)
        raise error

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds if max_rss is None else min(seconds, REPEAT_S), REPEAT_S)
    try:
        yield
    finally:
        raised[0] = -1
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
