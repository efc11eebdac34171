"""The tuning loop: ask Optuna for a point, lower it, measure it once, record it, retrain, repeat.

The loop fits on one screen on purpose. What a point means is the `Problem`'s business (variants,
schedule space, lowering, features); how latency is measured is the `Backend`'s. Every measurement
is committed to `RecordDB` before Optuna is told, so an interrupted run resumes without losing or
repeating a measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from axon import __version__
from axon.errors import AxonError, StoreError
from axon.measure.backend import Backend, Measurement
from axon.measure.records import Record, RecordDB
from axon.search.costmodel import Accuracy, CostModel
from axon.search.sampler import CostModelSampler, point_key

optuna.logging.set_verbosity(optuna.logging.WARNING)


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
    # the first trial of a new study measures the space's documented default point, so a tuned
    # kernel is never slower than the untuned default (the same for every sampler)
    start_at_default: bool = True


@dataclass(frozen=True)
class TrialLog:
    number: int
    latency_ns: float | None
    best_ns: float | None
    predicted: float | None
    status: str  # "measured" | "reused" | "infeasible" | "error"
    reason: str = ""
    accuracy: Accuracy | None = None


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

    >>> # see axon.search.tune() for the end-to-end entry point used by `axon tune`
    """

    def __init__(
        self,
        problem: Problem,
        backend: Backend,
        db: RecordDB,
        config: TuneConfig,
        storage: Any = None,
        model: CostModel | None = None,
        on_trial: Callable[[TrialLog], None] | None = None,
    ) -> None:
        self.problem, self.backend, self.db, self.config = problem, backend, db, config
        self.model = model or CostModel(seed=config.seed)
        self.on_trial = on_trial
        self.storage = storage
        self._by_point: dict[str, Record] = {}
        self._checked: dict[tuple[str, str], bool] = {}

    @property
    def task(self) -> str:
        return self._record_stub().task

    def _record_stub(self, **kw: Any) -> Record:
        p = self.problem
        base = dict(
            workload=p.workload,
            shapes=dict(p.shapes),
            dtype=p.dtype,
            hw=p.hw.name,
            hw_hash=p.hw.file_hash,
            backend=self.backend.name,
            variant_hash="",
            point={},
            kernel_hash="",
            features={},
            latency_ns=None,
            status="ok",
            axon_version=__version__,
            run_id=self.config.run_id,
        )
        return Record(**{**base, **kw})

    def _training_records(self) -> list[Record]:
        return [r for r in self.db.records(hw=self.problem.hw.name) if r.backend == self.backend.name]

    def _measure(self, point: dict[str, Any]) -> tuple[Record, str]:
        """The record of `point`: reused when this kernel was measured before, else measured now."""
        cand = self.problem.build(point)
        known = self.db.lookup(cand.kernel_hash, self.backend.name, self.problem.hw.file_hash)
        if known is not None:
            if known.task != self.task:  # the same kernel measured under another task: copy, do not re-measure
                known = self.db.add(
                    self._record_stub(
                        variant_hash=cand.variant_hash,
                        point=point,
                        kernel_hash=cand.kernel_hash,
                        features=dict(cand.features),
                        latency_ns=known.latency_ns,
                        status=known.status,
                        error=known.error,
                        measurement={**known.measurement, "copied_from": known.id},
                    )
                )
            return known, "reused"
        if not self.db.claim(cand.kernel_hash, self.backend.name, self.problem.hw.file_hash):
            busy = self._record_stub(
                point=point, kernel_hash=cand.kernel_hash, status="error", error="being measured by another worker"
            )
            return busy, "busy"
        m: Measurement = self.backend.measure(cand.source, cand.kernel, cand.inputs, self.problem.hw)
        record = self._record_stub(
            variant_hash=cand.variant_hash,
            point=point,
            kernel_hash=cand.kernel_hash,
            features=dict(cand.features),
            latency_ns=m.latency_ns,
            status=m.status,
            error=m.error,
            measurement=m.as_dict(),
        )
        return self.db.add(record), "measured"

    def _current(self, record: Record) -> bool:
        """Whether `record` is the kernel the current code emits for its point (not one measured with
        an earlier lowering: the same point may emit a different kernel after an upgrade)."""
        key = (record.kernel_hash, point_key(record.point))
        if key not in self._checked:
            try:
                self._checked[key] = self.problem.build(record.point).kernel_hash == record.kernel_hash
            except AxonError:
                self._checked[key] = False
        return self._checked[key]

    def best(self) -> Record | None:
        """The fastest measured kernel of this task that the current code still emits."""
        ok = sorted(
            (r for r in self.db.records(task=self.task) if r.status == "ok" and r.latency_ns is not None),
            key=lambda r: r.latency_ns,
        )
        return next((r for r in ok if self._current(r)), None)

    def run(self) -> TuneResult:
        cfg, start = self.config, time.perf_counter()
        for r in self.db.records(task=self.task):
            self._by_point.setdefault(point_key(r.point), r)
        if self.model is not None and self.config.sampler == "costmodel" and len(self._training_records()) >= 2:
            self.model.fit(self._training_records())
        sampler = make_sampler(
            cfg.sampler,
            self.problem,
            self.model,
            cfg.seed,
            lambda p: point_key(p) in self._by_point and self._current(self._by_point[point_key(p)]),
        )
        name = cfg.study_name or f"{self.task}:{cfg.sampler}:seed{cfg.seed}"
        try:
            study = optuna.create_study(
                study_name=name, storage=self.storage, sampler=sampler, direction="minimize", load_if_exists=True
            )
            finished = study.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL))
        except (AssertionError, KeyError, IndexError, TypeError, ValueError) as exc:
            # a journal whose lines parse but do not replay (truncated between operations, edited,
            # another Optuna version's): say which file and how to recover, never a replay traceback
            raise StoreError(_corrupt_storage(self.storage, exc)) from None
        dists = self.problem.distributions()
        logs: list[TrialLog] = []
        best = min((t.value for t in finished if t.state == TrialState.COMPLETE), default=None)
        done = len(finished)
        pinned = cfg.start_at_default and not study.get_trials() and hasattr(self.problem, "default_point")
        if pinned:
            study.enqueue_trial(self.problem.default_point())
        stale = 0
        while done < cfg.trials and (cfg.seconds is None or time.perf_counter() - start < cfg.seconds):
            trial = study.ask(dists)
            point = dict(trial.params)
            predicted = None if pinned else getattr(sampler, "last_prediction", None)
            pinned = False
            reason = self.problem.validate(point)
            if reason is not None:
                trial.set_user_attr("infeasible", reason)
                study.tell(trial, state=TrialState.FAIL)
                log = TrialLog(trial.number, None, best, predicted, "infeasible", reason)
            else:
                record, how = self._measure(point)
                if how != "busy":
                    self._by_point[point_key(point)] = record
                if record.status != "ok":
                    trial.set_user_attr("error", record.error[:500])
                    study.tell(trial, state=TrialState.FAIL)
                    log = TrialLog(trial.number, None, best, predicted, "error", record.error)
                else:
                    study.tell(trial, record.latency_ns)
                    improved = best is None or record.latency_ns < best
                    best = record.latency_ns if improved else best
                    stale = 0 if improved else stale + 1
                    accuracy = None
                    if cfg.sampler == "costmodel" and how == "measured":
                        accuracy = self.model.fit(self._training_records())
                    log = TrialLog(trial.number, record.latency_ns, best, predicted, how, accuracy=accuracy)
            logs.append(log)
            done += 1
            if self.on_trial:
                self.on_trial(log)
            if cfg.patience is not None and stale >= cfg.patience:
                break
        counts = {s: sum(1 for l in logs if l.status == s) for s in ("measured", "reused", "infeasible", "error")}
        settings = sampler.settings() if hasattr(sampler, "settings") else {"sampler": cfg.sampler, "seed": cfg.seed}
        return TuneResult(
            self.best(),
            tuple(logs),
            time.perf_counter() - start,
            name,
            counts["measured"],
            counts["reused"],
            counts["infeasible"] + counts["error"],
            settings,
        )


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
