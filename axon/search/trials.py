"""The Optuna side of a trial: telling its outcome, closing it when an exception ends it, and whether
a stored study can take this search space (`space_clash`: a spec edited since, a knob changed).

A trial asked and never told stays RUNNING in the journal for ever (Optuna cannot tell a dead
worker's trial from a live one's: two workers may share a study), so the tuner closes every trial
it asked, also on Ctrl-C or a callback's error (`close_trial`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from axon.measure.events import TrialLog

INTERRUPTED = "interrupted"  # the user attribute of a trial that ended before its result was recorded


def interrupted(trial: Any) -> bool:
    """A trial `close_trial` told FAIL because an exception ended it before its result was recorded."""
    return trial.state == TrialState.FAIL and INTERRUPTED in trial.user_attrs


def tell_outcome(study: Any, trial: Any, log: TrialLog) -> None:
    """Tell Optuna the trial's outcome: its latency, or FAIL with the reason."""
    if log.latency_ns is None:
        trial.set_user_attr("infeasible" if log.status == "infeasible" else "error", log.reason[:500])
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, log.latency_ns)


def close_trial(study: Any, trial: Any, log: TrialLog | None, exc: BaseException) -> None:
    """Close a trial that `exc` ended. Its outcome, once known and recorded (a callback failed after
    the recorder committed it, or Ctrl-C came during the refit), is told as usual: it counts when the
    study resumes, and its measurement is not lost. Otherwise (Ctrl-C while measuring, the recorder
    failed) it is told FAIL marked `interrupted`: a resumed run does not count it, and may ask its
    point again. Left RUNNING, it stayed so in the journal for ever, and a resumed study neither
    counted it nor knew its latency."""
    # when the journal cannot be written either (its disk is full), the trial stays RUNNING, as it did
    # before, and `exc` goes on: it is the error to report
    with suppress(Exception):
        if log is not None and not log.new:
            tell_outcome(study, trial, log)
        else:
            trial.set_user_attr(INTERRUPTED, f"{type(exc).__name__}: {exc}"[:500])
            study.tell(trial, state=TrialState.FAIL)


def space_clash(study: Any, dists: Mapping[str, CategoricalDistribution]) -> bool:
    """Whether a knob's choices in `study`'s trials are not `dists`' (Optuna would refuse to ask it)."""
    trials = study.get_trials(deepcopy=False)
    return any(k in dists and d != dists[k] for t in trials for k, d in t.distributions.items())


def space_digest(dists: Mapping[str, CategoricalDistribution]) -> str:
    """A short name of the search space `dists` (its knobs and their choices)."""
    text = repr(sorted((k, tuple(map(repr, d.choices))) for k, d in dists.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:8]
