"""Axon's own per-trial steps, as callbacks (`axon.measure.events.Callback`): recording the
measurement, then refitting the cost model on the current records with recomputed features.

`training_records` is what the cost model trains on: every ok kernel record of this hardware and
backend. The current task's records count only when the current code still emits them, and carry
features recomputed from their point by the current code; another task's records count only when
this code version wrote them (their stored features are then the current code's). A feature a
record lacks is missing to the model, never zero.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from axon.measure.events import Callback, TrialLog
from axon.measure.records import Record, code_version
from axon.measure.stores import Records
from axon.search.costmodel import CostModel
from axon.search.current import CurrentCode


class Recorder(Callback):
    """Commits a trial's new record (its own transaction) and hands the stored one back."""

    def __init__(self, db: Records) -> None:
        self.db = db

    def on_trial(self, trial: TrialLog) -> None:
        if trial.record is not None and trial.new:
            trial.record = self.db.add(trial.record)


def training_records(db: Records, problem: Any, backend: str, current: CurrentCode) -> list[Record]:
    """Every ok kernel record of this hardware file (its bytes: a copy of trn1.yaml with another DMA
    rate keeps the name trn1) and backend the current code can vouch for: this task's when the
    current code still emits them (features recomputed from the point), another task's when this
    very code version wrote them (its stored features are this code's)."""
    mine, version = problem.task, code_version()
    out: list[Record] = []
    for r in db.records(hw=problem.hw.name):
        if r.hw_hash != problem.hw.file_hash or r.backend != backend or r.kind != "kernel":
            continue
        if r.status != "ok" or not r.latency_ns:
            continue
        if r.task == mine:
            if current(r):
                out.append(replace(r, features=problem.features(r.point)))
        elif r.code_version == version:
            out.append(r)
    return out


class Refit(Callback):
    """Retrains the cost model after each new measurement; the accuracy goes into `trial.metrics`."""

    def __init__(self, model: CostModel, db: Records, problem: Any, backend: str, current: CurrentCode) -> None:
        self.model, self.db, self.problem, self.backend, self.current = model, db, problem, backend, current

    def fit(self) -> Any:
        return self.model.fit(training_records(self.db, self.problem, self.backend, self.current))

    def on_start(self, context: Any) -> None:
        self.fit()  # on the records already there (no-op below two)

    def on_trial(self, trial: TrialLog) -> None:
        if trial.status == "measured":
            accuracy = self.fit()
            if accuracy is not None:
                trial.metrics.update(accuracy.as_metrics())
