"""`axon.timelimit.time_limit` stops a block that does not return, also when its first alarm is lost."""

from __future__ import annotations

import signal
import time

import pytest

from axon.timelimit import TimeUp, time_limit


class _SlowFinalizer:
    def __del__(self) -> None:
        time.sleep(0.3)  # the alarm lands here: Python drops an exception a finalizer raises


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped TimeUp
def test_a_timeup_a_finalizer_dropped_is_raised_again():
    # a kernel allocating tiles in an endless loop spends much of it in `Allocation.__del__`: the one
    # alarm landed there, "Exception ignored in ... TimeUp", and the loop ran on (8 GB of trace in 5 min)
    start = time.monotonic()
    with pytest.raises(TimeUp):
        with time_limit(0.05):
            _SlowFinalizer()  # dropped at once: its __del__ runs now
            while time.monotonic() - start < 5:
                pass
    assert time.monotonic() - start < 2


def test_the_timer_is_off_and_the_handler_back_after_the_block():
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(TimeUp):
        with time_limit(0.02):
            while True:
                pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is before
    with time_limit(5):  # a block that returns in time: no alarm later
        pass
    time.sleep(0.3)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
