"""The tuning loop: ask Optuna for a point, lower it, measure it once, record it, retrain, repeat.

The loop fits on one screen on purpose. What a point means is the `Problem`'s business (variants,
schedule space, lowering, features); how latency is measured is the `Backend`'s. Every measurement
is committed to `RecordDB` before Optuna is told, so an interrupted run resumes without losing or
repeating a measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from axon import __version__
from axon.errors import AxonError, StoreError
from axon.measure.backend import Backend, Measurement
from axon.measure.events import Callback, StopTuning, TrialLog
from axon.measure.records import Record, code_version
from axon.measure.stores import Records
from axon.search.callbacks import Recorder, Refit
from axon.search.costmodel import CostModel
from axon.search.current import CurrentCode
from axon.search.sampler import CostModelSampler, point_key
from axon.search.trials import close_trial, interrupted, space_clash, space_digest, tell_outcome


@dataclass(frozen=True)
class Candidate:
    """A point made concrete: the kernel to measure and what the record needs."""

    source: str
    kernel: str
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    features: Mapping[str, float]
    variant_hash: str
    kernel_hash: str


class Problem(Protocol):
    """One tuning task: a workload at a shape and dtype on a hardware file."""

    workload: str
    shapes: dict[str, int]
    dtype: str
    hw: Any
    label: str  # "" or the name of a restricted space (part of the task key)

    @property
    def task(self) -> str: ...

    def distributions(self) -> dict[str, CategoricalDistribution]: ...

    def sample(self, rng: np.random.Generator) -> dict[str, Any]: ...

    def mutate(self, point: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]: ...

    def validate(self, point: dict[str, Any]) -> str | None: ...

    def features(self, point: dict[str, Any]) -> Mapping[str, float]: ...

    def build(self, point: dict[str, Any]) -> Candidate: ...


@dataclass(frozen=True)
class TuneConfig:
    trials: int = 64
    seconds: float | None = None
    sampler: str = "costmodel"  # "costmodel" | "tpe" | "random"
    seed: int = 0
    patience: int | None = None  # stop after this many trials without improvement
    study_name: str | None = None
    run_id: str = ""
    kind: str = "kernel"  # what the records of this search are
    # the first trial of a new study measures the space's documented default point, so a tuned
    # kernel is never slower than the untuned default (the same for every sampler)
    start_at_default: bool = True


@dataclass(frozen=True)
class TuneResult:
    best: Record | None
    trials: tuple[TrialLog, ...]
    elapsed_s: float
    study_name: str
    measured: int
    reused: int
    failed: int
    sampler_settings: dict[str, Any] = field(default_factory=dict)
    resumed: int = 0  # trials the study had finished before this run (that count against the budget)
    outdated: int = 0  # points it had measured that the current code emits or times otherwise (an upgrade)
    remeasured: int = 0  # of those, the best ones measured again by this run


def new_record(problem: Problem, backend: str, **kw: Any) -> Record:
    """A new (unsaved) record of `problem`'s task measured on `backend`; `kw` sets the rest (the
    kernel, its measurement, and `kind`/`label` where they differ from a tuned kernel's)."""
    base: dict[str, Any] = dict(
        workload=problem.workload,
        label=problem.label,
        shapes=dict(problem.shapes),
        dtype=problem.dtype,
        hw=problem.hw.name,
        hw_hash=problem.hw.file_hash,
        backend=backend,
        variant_hash="",
        point={},
        kernel_hash="",
        features={},
        latency_ns=None,
        status="ok",
        axon_version=__version__,
        code_version=code_version(),
    )
    return Record(**{**base, **kw})


def measured_fields(cand: Candidate, point: dict[str, Any], m: Measurement) -> dict[str, Any]:
    """The fields of a record that come from one built candidate (`Problem.build`) and its measurement."""
    return dict(
        variant_hash=cand.variant_hash,
        point=point,
        kernel_hash=cand.kernel_hash,
        features=dict(cand.features),
        latency_ns=m.latency_ns,
        status=m.status,
        error=m.error,
        measurement=m.as_dict(),
    )


def make_sampler(
    name: str, problem: Problem, model: CostModel, seed: int, measured: Callable[[dict], bool]
) -> optuna.samplers.BaseSampler:
    if name == "costmodel":
        return CostModelSampler(problem, model, problem.features, seed=seed, measured=measured)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, n_startup_trials=8)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise AxonError(f"unknown sampler {name!r}; choose costmodel, tpe or random")


class Tuner:
    """Tune `problem` on `backend`, recording into `db`; `storage` is an Optuna storage (journal file).

    After each trial the callbacks run in order, before Optuna is told the result: first Axon's
    own (`Recorder` commits the record, `Refit` retrains the cost model when the sampler uses
    it), then `callbacks` (MLflow metrics, a progress bar, a user's own).

    >>> # see axon.search.tune() for the end-to-end entry point used by `axon tune`
    """

    def __init__(
        self,
        problem: Problem,
        backend: Backend,
        db: Records,
        config: TuneConfig,
        storage: Any = None,
        model: CostModel | None = None,
        callbacks: Sequence[Callback] = (),
        before_last: Callable[[Record | None], None] | None = None,
    ) -> None:
        """`before_last(best so far)` is called before the run's last trial (when the trial budget,
        not a time budget, ends the run)."""
        self.problem, self.backend, self.db, self.config, self.storage = problem, backend, db, config, storage
        self.model, self.before_last = model or CostModel(seed=config.seed), before_last
        self.current = CurrentCode(problem, backend.version)
        own: list[Callback] = [Recorder(db)]
        if config.sampler == "costmodel":
            own.append(Refit(self.model, db, problem, backend.name, self.current))
        self.callbacks = [*own, *callbacks]
        self._by_point: dict[str, Record] = {}
        self.next_number = 0  # one past the last trial this run asked (an MLflow step after every trial's)
        self.cut_short: TrialLog | None = None  # the trial an exception ended before its callbacks all ran
        self.stopped = False  # a callback raised StopTuning: the run ends after this trial

    @property
    def task(self) -> str:
        return self.problem.task

    def _record(self, **kw: Any) -> Record:
        """A new (unsaved) record of this task."""
        return new_record(self.problem, self.backend.name, kind=self.config.kind, run_id=self.config.run_id, **kw)

    def _measure(self, point: dict[str, Any]) -> tuple[Record, str]:
        """The record of `point`: reused when this kernel was measured before (a record of another
        task is copied, unsaved, into this one), else measured now (unsaved)."""
        cand = self.problem.build(point)
        known = self.db.lookup(cand.kernel_hash, self.backend.name, self.problem.hw.file_hash, self.backend.version)
        if known is not None:
            if known.task != self.task:
                known = self._record(
                    variant_hash=cand.variant_hash,
                    point=point,
                    kernel_hash=cand.kernel_hash,
                    features=dict(cand.features),
                    latency_ns=known.latency_ns,
                    status=known.status,
                    error=known.error,
                    measurement={**known.measurement, "copied_from": known.id},
                )
            return known, "reused"
        if not self.db.claim(cand.kernel_hash, self.backend.name, self.problem.hw.file_hash):
            error = "being measured by another worker"
            return self._record(point=point, kernel_hash=cand.kernel_hash, status="error", error=error), "busy"
        m: Measurement = self.backend.measure(cand.source, cand.kernel, cand.inputs, self.problem.hw)
        record = self._record(**measured_fields(cand, point, m))
        return record, "measured"

    def best(self) -> Record | None:
        """The fastest measured kernel of this task that the current code still emits."""
        return self.current.best(self.db.records(task=self.task))

    def ranked(self) -> Iterator[Record]:
        """This task's measured kernels that the current code still emits, fastest first."""
        return self.current.ranked(self.db.records(task=self.task))

    def _trial(self, study: Any, sampler: Any, dists: dict[str, Any], best: float | None, pinned: bool) -> TrialLog:
        """Ask, measure (or refuse) one point, run the callbacks, then tell Optuna.

        An exception on the way (Ctrl-C, a callback's own error) closes the trial before it goes on
        (`close_trial`): the study keeps no RUNNING trial that nobody will finish."""
        trial = study.ask()
        self.next_number = trial.number + 1
        log: TrialLog | None = None
        try:
            for name, dist in dists.items():  # sampled here, not in `ask`: a Ctrl-C while sampling closes it too
                trial.suggest_categorical(name, dist.choices)
            log = self._outcome(trial, sampler, best, pinned)
            for callback in self.callbacks:
                try:
                    callback.on_trial(log)
                except StopTuning:  # after this trial, as at the budget (the later callbacks see it too)
                    self.stopped = True
        except BaseException as exc:
            self.cut_short = log
            close_trial(study, trial, log, exc)
            raise
        if log.record is not None:
            self._by_point[point_key(log.point)] = log.record
        tell_outcome(study, trial, log)
        return log

    def _outcome(self, trial: Any, sampler: Any, best: float | None, pinned: bool) -> TrialLog:
        """The asked trial's point refused, or measured (or its measurement reused), as a `TrialLog`."""
        point = dict(trial.params)
        predicted = None if pinned else getattr(sampler, "last_prediction", None)
        reason = self.problem.validate(point)
        if reason is not None:
            return TrialLog(trial.number, None, best, predicted, "infeasible", reason, point)
        record, how = self._measure(point)
        ok = record.status == "ok" and record.latency_ns is not None
        latency = record.latency_ns
        new_best = latency if latency is not None and ok and (best is None or latency < best) else best
        return TrialLog(
            trial.number,
            record.latency_ns if ok else None,
            new_best,
            predicted,
            how if ok else "error",
            "" if ok else record.error,
            point,
            None if how == "busy" else record,
        )

    def run(self) -> TuneResult:
        cfg, start = self.config, time.perf_counter()
        self._load_records()
        for callback in self.callbacks:
            callback.on_start(self)
        try:
            return self._run(cfg, start)
        finally:
            cancel = getattr(self.problem, "cancel_pending", None)
            if cancel is not None:  # a child still lowering the next ask's points (`axon.search.prefetch`)
                cancel()
            for callback in self.callbacks:
                callback.on_end(self)

    def _load_records(self) -> None:
        for r in self.db.records(task=self.task):  # a point's record of the current backend first
            key = point_key(r.point)
            if key not in self._by_point or r.measured_by == self.backend.version != self._by_point[key].measured_by:
                self._by_point[key] = r

    def _study(self, name: str, sampler: Any) -> Any:
        try:
            study = optuna.create_study(
                study_name=name, storage=self.storage, sampler=sampler, direction="minimize", load_if_exists=True
            )
            study.get_trials(deepcopy=False)
        except (AssertionError, KeyError, IndexError, TypeError, ValueError) as exc:
            # a journal whose lines parse but do not replay (truncated between operations, edited,
            # another Optuna version's): say which file and how to recover, never a replay traceback
            raise StoreError(_corrupt_storage(self.storage, exc)) from None
        return study

    def _run(self, cfg: TuneConfig, start: float) -> TuneResult:
        sampler = make_sampler(
            cfg.sampler,
            self.problem,
            self.model,
            cfg.seed,
            lambda p: point_key(p) in self._by_point and self.current(self._by_point[point_key(p)]),
        )
        name = cfg.study_name or f"{self.task}:{cfg.sampler}:seed{cfg.seed}"
        dists = self.problem.distributions()
        study = self._study(name, sampler)
        # a spec edited since, or an upgrade that changed a knob's choices: Optuna refused the first ask
        # ("CategoricalDistribution does not support dynamic value space", a traceback); this space gets a
        # study of its own beside it (a sweep's task too), and the earlier one resumes if the spec goes back
        if space_clash(study, dists):
            study = self._study(f"{name}:space-{space_digest(dists)}", sampler)
        finished = study.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL))
        logs: list[TrialLog] = []
        counted, outdated = self._split_finished(finished)
        best = min(
            (float(t.value) for t in counted if t.state == TrialState.COMPLETE and t.value is not None), default=None
        )
        done = resumed = len(counted)
        if done:
            for callback in self.callbacks:
                callback.on_resume(done, best)
        # after an upgrade the best points measured before it are measured again first (up to half
        # the trials left), the sampler explores with the rest
        again = outdated[: max(1, (cfg.trials - done) // 2)] if done < cfg.trials else []
        for point in again:
            study.enqueue_trial(point)
        default = getattr(self.problem, "default_point", None)
        pinned = cfg.start_at_default and all(map(interrupted, study.get_trials())) and default is not None
        if pinned and default is not None:
            study.enqueue_trial(default())
        stale = 0
        # a time budget stops the run after the trial that reaches it, and never before the first trial
        while done < cfg.trials and (cfg.seconds is None or not logs or time.perf_counter() - start < cfg.seconds):
            if done == cfg.trials - 1 and self.before_last is not None:
                self.before_last(self.best())
            log = self._trial(study, sampler, dists, best, pinned)
            pinned = False
            if log.latency_ns is not None:
                stale = 0 if best is None or log.latency_ns < best else stale + 1
            best = log.best_ns
            logs.append(log)
            done += 1
            if self.stopped or cfg.patience is not None and stale >= cfg.patience:
                break
        counts = {s: sum(1 for l in logs if l.status == s) for s in ("measured", "reused", "infeasible", "error")}
        settings = sampler.settings() if hasattr(sampler, "settings") else {"sampler": cfg.sampler, "seed": cfg.seed}
        return TuneResult(
            self.best(),
            tuple(logs),
            time.perf_counter() - start,
            study.study_name,
            counts["measured"],
            counts["reused"],
            counts["infeasible"] + counts["error"],
            settings,
            resumed,
            len(outdated),
            len(again),
        )

    def _split_finished(self, finished: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
        """A resumed study's finished trials that count against the trial budget (failed ones, and
        measured ones whose kernel the current code emits and times the same way), and the points of
        the others (measured before an upgrade, or whose record is gone), best first, once each."""
        counted: list[Any] = []
        outdated: dict[str, tuple[float, dict[str, Any]]] = {}
        if any(point_key(dict(t.params)) not in self._by_point for t in finished):
            self._load_records()  # recorded since the run began, by another worker of this study
        for t in finished:
            if interrupted(t):  # ended before its result was recorded: it never ran, as far as the budget goes
                continue
            key = point_key(dict(t.params))
            record = self._by_point.get(key)
            if t.state != TrialState.COMPLETE or (record is not None and self.current(record)):
                counted.append(t)
            elif key not in outdated or float(t.value) < outdated[key][0]:
                outdated[key] = (float(t.value), dict(t.params))
        return counted, [p for _, p in sorted(outdated.values(), key=lambda v: v[0])]


def _corrupt_storage(storage: Any, exc: Exception) -> str:
    backend = getattr(storage, "_backend", None)
    path = getattr(backend, "_file_path", None)
    what = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'replay failed'}"
    if path is None:
        return f"the Optuna storage {storage!r} cannot be read ({what})"
    return (
        f"Optuna journal {path} is corrupt ({what}): move it aside (mv {path} {path}.bad) to start its studies "
        f"afresh; records.db keeps every measurement, so no kernel is measured again"
    )
