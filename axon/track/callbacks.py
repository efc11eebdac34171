"""The MLflow side of a tuning run, as a callback: each trial's latency, best so far, the cost
model's prediction and accuracy become step metrics of the run."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from axon.measure.events import Callback, TrialLog
from axon.track.tracker import Run


class MlflowMetrics(Callback):
    """Logs each trial as metrics at step = trial number."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.logged = -1  # the number of the last trial logged

    def on_trial(self, trial: TrialLog) -> None:
        metrics: dict[str, Any] = {
            "latency_us": None if trial.latency_ns is None else trial.latency_ns / 1e3,
            "best_latency_us": None if trial.best_ns is None else trial.best_ns / 1e3,
            "predicted_score": trial.predicted,
            **trial.metrics,
        }
        self.run.log_metrics({k: v for k, v in metrics.items() if v is not None}, step=trial.number)
        self.logged = trial.number

    def on_end(self, context: Any) -> None:
        """A trial that Ctrl-C or an error cut short after it was recorded, before this callback logged
        it (Ctrl-C during the cost model's refit), is logged now: the run's metrics miss no recorded trial."""
        cut = getattr(context, "cut_short", None)
        if cut is not None and cut.number != self.logged and not cut.new:
            with suppress(Exception):  # the exception that cut it short is on its way: it is the one to report
                self.on_trial(cut)
