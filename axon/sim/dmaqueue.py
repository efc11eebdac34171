"""Engine calendars: when an engine is busy, for work placed out of order (DMA transfers, and
compute instructions the compiler reorders inside pipelined loops, see `simulate.py`).

Every DMA engine has many hardware queues, so a transfer whose semaphore is still pending (a
store waiting for its compute) does not hold back a later load that is ready: each transfer takes
the first gap at or after its ready time on each engine it uses. It knows nothing of bytes.
"""

from __future__ import annotations

from bisect import bisect_right


class EngineCalendar:
    """Busy intervals of one DMA engine, sorted and merged when they touch.

    >>> c = EngineCalendar()
    >>> c.place(100.0, 10.0), c.place(0.0, 10.0), c.place(0.0, 95.0)
    (100.0, 0.0, 110.0)
    """

    __slots__ = ("starts", "ends", "last_index")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.last_index = -1  # the instruction whose transfer ends last on this engine

    def earliest(self, ready: float, dur: float) -> float:
        """The first start >= ready with `dur` free time after it."""
        starts, ends = self.starts, self.ends
        if not ends or ready >= ends[-1]:
            return ready
        k = bisect_right(ends, ready)  # intervals [k:] end after `ready`
        t = ready
        while k < len(starts):
            if starts[k] >= t + dur:
                return t
            if ends[k] > t:
                t = ends[k]
            k += 1
        return t

    def place(self, ready: float, dur: float) -> float:
        """Book `dur` at the earliest possible start; return the start."""
        t = self.earliest(ready, dur)
        self.book(t, t + dur)
        return t

    def book(self, s: float, e: float) -> None:
        starts, ends = self.starts, self.ends
        if not ends or s > ends[-1]:  # after everything booked (an in-order engine's case)
            starts.append(s)
            ends.append(e)
            return
        if s >= starts[-1]:  # touches or overlaps the last interval only
            if e > ends[-1]:
                ends[-1] = e
            return
        k = bisect_right(starts, s)
        # merge with the previous interval if it touches, and with following ones it reaches
        if k > 0 and ends[k - 1] >= s:
            k -= 1
            s = starts[k]
            e = max(e, ends[k])
            j = k + 1
        else:
            j = k
        while j < len(starts) and starts[j] <= e:
            e = max(e, ends[j])
            j += 1
        starts[k:j] = [s]
        ends[k:j] = [e]

    def free_at(self) -> float:
        return self.ends[-1] if self.ends else 0.0
