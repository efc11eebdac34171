"""A trial an exception ends (a user's callback raising, Ctrl-C) is closed in the Optuna journal, and the
MLflow run of an interrupted tune misses no recorded trial."""

from __future__ import annotations

import os
import re
import signal
import sqlite3

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from axon.measure.backend import SimBackend
from axon.measure.events import Callback
from axon.measure.records import RecordDB
from axon.search.api import TuneRequest, tune, verified_variants
from axon.search.costmodel import CostModel
from axon.search.problem import LoweredProblem
from axon.search.sampler import point_key
from axon.search.trials import INTERRUPTED
from axon.search.tuner import TuneConfig, Tuner
from axon.target import DEFAULT_HW, load_hw
from axon.track import Tracker
from axon.workloads import get
from tests.conftest import axon_in_process


def _trials(path) -> list[optuna.trial.FrozenTrial]:
    storage = JournalStorage(JournalFileBackend(str(path)))
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


class RaiseAt(Callback):
    """A user's callback that fails on its `n`-th trial (counting from 1)."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def on_trial(self, trial):
        self.seen += 1
        if self.seen == self.n:
            raise RuntimeError("the user's callback failed")


def test_a_callback_that_raises_closes_its_trial_and_the_same_tune_resumes_with_it(tmp_path):
    # the trial stayed RUNNING in optuna.log for ever: the resumed study neither counted it nor knew
    # its latency, though its measurement was in records.db
    request = TuneRequest.make("rmsnorm", preset="small", trials=3, workdir=tmp_path, track=False, check=False)
    with pytest.raises(RuntimeError, match="the user's callback failed"):
        tune(request, [RaiseAt(2)])
    trials = _trials(tmp_path / "optuna.log")
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    records = RecordDB(tmp_path / "records.db").records()
    recorded = {point_key(r.point): r.latency_ns for r in records if r.kind == "kernel"}
    assert len(recorded) == 2 and trials[1].value == recorded[point_key(trials[1].params)]  # the measurement kept
    report = tune(request)
    assert report.resumed == 2 and report.measured == 1  # both count, none is measured again
    assert [t.state for t in _trials(tmp_path / "optuna.log")] == [TrialState.COMPLETE] * 3


class StopWhileMeasuring(LoweredProblem):
    """Ctrl-C arrives while the `n`-th point (counting from 1) is lowered, before anything is measured."""

    def __init__(self, *args, n: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.n, self.built = n, 0

    def build(self, point):
        self.built += 1
        if self.built == self.n:
            raise KeyboardInterrupt
        return super().build(point)


def test_a_ctrl_c_before_the_measurement_closes_the_trial_and_it_does_not_count(tmp_path):
    graph = get("rmsnorm").graph("small")
    args = ("rmsnorm", graph, load_hw(DEFAULT_HW), verified_variants(graph), "float32")
    db = RecordDB(tmp_path / "records.db")
    journal = tmp_path / "optuna.log"
    config = TuneConfig(trials=3, sampler="random", seed=0)
    storage = JournalStorage(JournalFileBackend(str(journal)))
    with pytest.raises(KeyboardInterrupt):
        Tuner(StopWhileMeasuring(*args, n=2, workers=1), SimBackend(), db, config, storage).run()
    states = [(t.state, INTERRUPTED in t.user_attrs) for t in _trials(journal)]
    assert states == [(TrialState.COMPLETE, False), (TrialState.FAIL, True)]
    result = Tuner(LoweredProblem(*args, workers=1), SimBackend(), db, config, storage).run()
    assert result.resumed == 1 and result.measured == 2 and result.failed == 0  # the interrupted one not counted
    assert [t.state for t in _trials(journal)].count(TrialState.COMPLETE) == 3
    assert not [t for t in _trials(journal) if t.state == TrialState.RUNNING]


def test_ctrl_c_during_the_refit_leaves_the_mlflow_run_agreeing_with_the_records(tmp_path, monkeypatch):
    # Ctrl-C lands in the cost model's refit about a third of the time (the refit is most of a small
    # trial): the trial was committed to records.db, but MLflow never logged it, so `axon runs` could
    # show a best latency other than the one `axon tune` printed. Here SIGINT arrives in the 4th fit
    # (the first is at the start, on no records): during trial 2's refit.
    fit, calls = CostModel.fit, []

    def fit_then_interrupted(self, records):
        calls.append(len(records))
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered in the refit
        return fit(self, records)

    monkeypatch.setattr(CostModel, "fit", fit_then_interrupted)
    handler = signal.getsignal(signal.SIGINT)  # `axon tune` sets Python's default one
    try:
        result = axon_in_process("tune", "rmsnorm", "--preset", "small", "--trials", "8", "--workdir", str(tmp_path))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert result.returncode == 130, result.stderr
    printed = float(re.search(r"best so far ([\d,.]+) us", result.stderr).group(1).replace(",", ""))
    records = sqlite3.connect(tmp_path / "records.db").execute(
        "SELECT COUNT(*), MIN(latency_ns) FROM records WHERE kind='kernel' AND status='ok'"
    )
    count, best_ns = records.fetchone()
    assert count == 3 and printed == pytest.approx(best_ns / 1e3, abs=0.05)
    tracker = Tracker.for_workdir(tmp_path)
    (run,) = tracker.recent_runs(1)
    steps = [m.step for m in tracker.client.get_metric_history(run.info.run_id, "latency_us")]
    assert sorted(steps) == [0, 1, 2]  # every recorded trial, the one Ctrl-C cut short too
    assert run.data.metrics["best_latency_us"] == pytest.approx(best_ns / 1e3)
