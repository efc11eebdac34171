"""What a tuning loop tells its callbacks after each trial, and the callback interface.

A trial ends in a `TrialLog`; every callback's `on_trial` runs, in order, before the search is told
the result (so a recording callback commits the measurement before Optuna knows of it, and a crash
loses nothing recorded). `on_start` and `on_end` bracket a run. Axon's own steps are callbacks
(`axon.search.callbacks`: recording, cost-model refit; `axon.track.callbacks`: MLflow metrics), and
a user's callback sees exactly what they see, the way TVM MetaSchedule's measure callbacks do.

>>> class Count(Callback):
...     n = 0
...     def on_trial(self, trial):
...         self.n += 1
>>> c = Count()
>>> c.on_trial(TrialLog(number=0, latency_ns=1.0, best_ns=1.0, predicted=None, status="measured"))
>>> c.n
1
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from axon.measure.records import Record


@dataclass
class TrialLog:
    """One trial: `status` is measured | reused | infeasible | error | busy.

    `record` is the trial's record (unsaved until the recording callback stores it and puts the
    stored one back); `metrics` collects what callbacks computed (the refit's accuracy)."""

    number: int
    latency_ns: float | None
    best_ns: float | None
    predicted: float | None
    status: str
    reason: str = ""
    point: dict[str, Any] = field(default_factory=dict)
    record: Record | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def new(self) -> bool:
        """A record this trial produced that is not stored yet."""
        return self.record is not None and self.record.id is None


class Callback:
    """Override what you need; every method is a no-op here. `context` is the object running the
    search (a `Tuner`: its `problem`, `db`, `config`, `model`)."""

    def on_start(self, context: Any) -> None:
        """Before the first trial."""

    def on_trial(self, trial: TrialLog) -> None:
        """After each trial, before the search is told its result."""

    def on_resume(self, done: int, best_ns: float | None) -> None:
        """Before the first trial of a resumed study: `done` trials of it already finished (they
        count against the trial budget), the best of them `best_ns`."""

    def on_end(self, context: Any) -> None:
        """After the last trial (also when the run stops on Ctrl-C or an error)."""

    def on_warning(self, message: str) -> None:
        """A warning for the user (a cost model trained on other hardware); when no callback
        overrides this, the run issues a Python warning instead."""


class StopTuning(Exception):
    """Raised by a callback's `on_trial` to end the tune after this trial, as its budget would: the
    trial is recorded and counted, the later callbacks still see it, and the best kernel so far is
    checked, written and reported (any other exception ends the tune with no kernel written)."""


class OnTrial(Callback):
    """A plain function of the trial as a callback."""

    def __init__(self, fn: Callable[[TrialLog], None]) -> None:
        self.fn = fn

    def on_trial(self, trial: TrialLog) -> None:
        self.fn(trial)
