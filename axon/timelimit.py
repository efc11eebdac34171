"""`time_limit(seconds)`: stop a user's code that does not return (a spec file's endless loop).

A spec file is Python run on import and a spec function is run to be traced; either may loop
forever, and a command that hangs without a word is worse than one that says where it stopped.
The limit is a SIGALRM timer, so it applies in the main thread only (elsewhere the code runs
unbounded, as before) and not where a timer is already running; it raises `TimeUp`, a
BaseException, which a spec's own `except Exception` does not swallow.

>>> import time
>>> try:
...     with time_limit(0.05):
...         time.sleep(5)
... except TimeUp:
...     print("stopped")
stopped
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class TimeUp(BaseException):
    """The code under `time_limit` ran past its seconds."""


def _expired(signum: int, frame: FrameType | None) -> None:
    raise TimeUp


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `TimeUp` in the block when it runs longer than `seconds` (main thread only)."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
