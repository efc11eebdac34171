"""A kernel family: one tuning for a range of shapes, a few schedules each serving a group of shapes.

The cost model decides where to measure. The run tunes a few anchor shapes (the range's ends and its
geometric middle), collects the best distinct schedules found there as candidates, and predicts
every candidate at every shape of the range with the cost model. Where the bootstrap replicas of
the model disagree most about the predicted best schedule (relative spread, plus a close runner-up),
it measures: every candidate and a short tuning at that shape, then refits and predicts again.
Finally each shape takes its best candidate (measured where measured, else predicted), and a
schedule is dropped while moving its shapes to the best remaining one costs at most
`merge_tolerance` (predicted) anywhere: shapes whose best schedules coincide are merged.

Absolute latencies at shapes never measured are predicted from the measured ones: the chosen
schedule's fraction of the roofline at the nearest measured shapes, interpolated in log size.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import optuna

from axon.measure.stores import Records
from axon.search.costmodel import CostModel
from axon.search.problem import LoweredProblem
from axon.search.sampler import point_key
from axon.search.tuner import TuneConfig, Tuner, measured_fields, new_record


@dataclass(frozen=True)
class FamilyConfig:
    anchor_trials: int = 24  # trials of a tuning at each anchor shape
    probe_trials: int = 6  # trials of the short tuning at a shape the model is unsure about
    anchors: int = 3
    probes: int = 3  # shapes measured because the model was unsure there
    candidates_per_shape: int = 4
    merge_tolerance: float = 0.03
    seed: int = 0
    sampler: str = "costmodel"
    seconds: float | None = None  # wall budget of the whole family's tunings (anchors first, then probes)
    patience: int | None = None  # each tuning stops after this many trials without improvement


@dataclass
class ShapeRow:
    """One shape of the range: its schedule and its latencies (ns)."""

    dims: dict[str, int]
    schedule: int
    latency_ns: float  # the family kernel's: measured where `measured`, else predicted
    measured: bool
    tuned_best_ns: float | None  # the best latency the family's own tuning found at this shape
    roofline_ns: float


@dataclass
class Family:
    workload: str
    ranges: dict[str, tuple[int, ...]]
    schedules: list[dict[str, Any]]
    rows: list[ShapeRow]
    measurements: int
    measured_shapes: list[dict[str, int]] = field(default_factory=list)
    probe_shapes: list[dict[str, int]] = field(default_factory=list)
    out_of_time: bool = False  # the time budget ended the tunings before every anchor and probe ran
    turned_down: list[str] = field(default_factory=list)  # schedules that failed a numerics check, and why
    resumed: int = 0  # trials an earlier run of the same command had made, resumed by this one

    def shapes_of(self, schedule: int) -> list[dict[str, int]]:
        return [r.dims for r in self.rows if r.schedule == schedule]

    def summary(self) -> str:
        lines = [
            f"{self.workload}: {len(self.rows)} shapes, {len(self.schedules)} schedules, "
            f"{self.measurements} measurements at {len(self.measured_shapes)} shapes"
            + (f" (and {self.resumed} trials of an earlier run, resumed)" if self.resumed else "")
            + (" (time budget reached: fewer shapes tuned than planned)" if self.out_of_time else "")
        ]
        for i, point in enumerate(self.schedules):
            shapes = self.shapes_of(i)
            lines.append(
                f"  schedule {i}: {len(shapes)} shapes, {span(shapes, [r.dims for r in self.rows])}: {point_key(point)}"
            )
        lines += [f"  turned down: {why}" for why in self.turned_down]
        return "\n".join(lines)


def span(shapes: Sequence[Mapping[str, int]], over: Sequence[Mapping[str, int]] = ()) -> str:
    """`M=256..2048` style text for the shapes of a group: each dimension that varies in it or in `over`
    (the whole family's shapes: two schedules serving M=128 and M=256 over N=128..384 were both
    "N=128..384"). Sizes are runs of the family's consecutive sizes: a schedule serving M=128 and 384
    of 128, 256, 384 is "M=128,384", not "M=128..384" over the other schedule's M=256.

    >>> fam = [{"M": m} for m in (128, 256, 384, 512)]
    >>> span(fam[:2], fam), span([fam[0], fam[2], fam[3]], fam)
    ('M=128..256', 'M=128,384..512')
    """
    if not shapes:
        return "-"
    parts = []
    for k in shapes[0]:
        values = sorted({s[k] for s in shapes})
        if len(values) > 1:
            parts.append(f"{k}={_runs(values, sorted({s[k] for s in over} | set(values)))}")
        elif len({s[k] for s in over}) > 1:
            parts.append(f"{k}={values[0]}")
    return ",".join(parts) or ",".join(f"{k}={v}" for k, v in shapes[0].items())


def _runs(values: list[int], sizes: list[int]) -> str:
    """`values` (sorted, all in `sizes`) as runs of consecutive `sizes`: lo..hi, or one size alone."""
    position = {size: i for i, size in enumerate(sizes)}
    runs: list[list[int]] = []
    for v in values:
        if runs and position[v] == position[runs[-1][-1]] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ",".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def grid(ranges: Mapping[str, Sequence[int]]) -> list[dict[str, int]]:
    names = sorted(ranges)
    return [dict(zip(names, values)) for values in itertools.product(*(ranges[n] for n in names))]


def size(dims: Mapping[str, int]) -> float:
    return float(np.prod(list(dims.values())))


class FamilyProblems:
    """The `LoweredProblem` of each shape of the range, made once: the variants of one shape rebound."""

    def __init__(self, workload: str, graph: Any, hw: Any, variants: Sequence[Any], dtype: str) -> None:
        self.workload, self.graph, self.hw, self.variants, self.dtype = workload, graph, hw, variants, dtype
        self._made: dict[str, LoweredProblem] = {}

    def __call__(self, dims: Mapping[str, int]) -> LoweredProblem:
        key = point_key(dict(dims))
        if key not in self._made:
            g = self.graph.bind(**dims)
            variants = [replace(v, graph=v.graph.bind(**dims)) for v in self.variants]
            self._made[key] = LoweredProblem(self.workload, g, self.hw, variants, self.dtype)
        return self._made[key]


def anchors(shapes: Sequence[dict[str, int]], n: int) -> list[dict[str, int]]:
    """`n` shapes spread evenly in log size: the smallest, the largest and between."""
    ordered = sorted(shapes, key=size)
    if n >= len(ordered):
        return list(ordered)
    logs = np.log([size(s) for s in ordered])
    picks: list[dict[str, int]] = []
    for t in np.linspace(logs[0], logs[-1], n):
        best = ordered[int(np.argmin(np.abs(logs - t)))]
        if best not in picks:
            picks.append(best)
    return picks


class FamilyBuilder:
    """Build the family of `workload` over `shapes`; every measurement goes through `db`."""

    def __init__(
        self,
        problems: FamilyProblems,
        shapes: Sequence[dict[str, int]],
        meter: Any,
        db: Records,
        config: FamilyConfig,
        holdout: Sequence[dict[str, int]] = (),
        model: CostModel | None = None,
        storage: Any = None,
    ) -> None:
        self.problems, self.shapes, self.meter, self.db, self.config = problems, list(shapes), meter, db, config
        self.holdout = list(holdout)  # shapes served but never measured (an experiment's held-out shapes)
        self.model = model or CostModel(seed=config.seed)  # `--cost-model`: warm-started, trained on as it measures
        # each shape's tuning is a study of its own there (None: in memory), so the same command resumes it:
        # without, a rerun of a finished family spent its whole budget again and answered another family
        self.storage = storage
        self._tuned_keys: dict[str, set[str]] = {}
        self.resumed = 0
        self.measurements = 0
        self.measured: list[dict[str, int]] = []
        self.probed: list[dict[str, int]] = []
        self.candidates: list[dict[str, Any]] = []
        self.deadline = None if config.seconds is None else time.perf_counter() + config.seconds
        self.out_of_time = False

    def _seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()

    # measuring ---------------------------------------------------------------------------------------
    def _tune(self, dims: dict[str, int], trials: int) -> None:
        problem = self.problems(dims)
        config = TuneConfig(
            trials=trials,
            seconds=self._seconds_left(),
            sampler=self.config.sampler,
            seed=self.config.seed,
            patience=self.config.patience,
            kind="family",
            study_name=f"family:{problem.task}:{self.config.sampler}:seed{self.config.seed}",
        )
        result = Tuner(problem, self.meter, self.db, config, self.storage, self.model).run()
        self.measurements += result.measured
        self.resumed += result.resumed
        if dims not in self.measured:
            self.measured.append(dims)
        tuned = self._tuned(problem.task, result.study_name)
        ok = sorted((r for r in self.db.records(task=problem.task) if r.latency_ns and tuned(r)), key=_latency)
        picked = 0
        for r in ok:
            if picked >= self.config.candidates_per_shape:
                break
            if all(point_key(r.point) != point_key(c) for c in self.candidates):
                self.candidates.append(dict(r.point))
            picked += 1

    def _tuned(self, task: str, study_name: str) -> Callable[[Any], bool]:
        """Which records of `task` its tuning made. A rerun finds there the other shapes' candidates
        measured at this one too (after the tunings): chosen from those, or fitted on them before the
        probes, a rerun of a finished family answered another family."""
        if self.storage is None:  # a study in memory: every record of the task, as it always was
            return lambda r: True
        study = optuna.load_study(study_name=study_name, storage=self.storage)
        keys = {point_key(t.params) for t in study.get_trials(deepcopy=False) if t.params}
        self._tuned_keys[task] = keys
        return lambda r: point_key(r.point) in keys

    def measure(self, dims: dict[str, int], point: dict[str, Any]) -> float | None:
        """The latency of `point` at `dims` (None where it does not lower or fails), measured once."""
        problem = self.problems(dims)
        if problem.validate(point) is not None:
            return None
        cand = problem.build(point)
        known = self.db.lookup(cand.kernel_hash, self.meter.name, problem.hw.file_hash, self.meter.version)
        if known is not None:
            return known.latency_ns if known.status == "ok" else None
        m = self.meter.measure(cand.source, cand.kernel, cand.inputs, problem.hw)
        self.measurements += 1
        self.db.add(new_record(problem, self.meter.name, kind="family", **measured_fields(cand, point, m)))
        return m.latency_ns if m.status == "ok" else None

    # predicting --------------------------------------------------------------------------------------
    def _fit(self, tuned_only: bool = False) -> None:
        tasks = {self.problems(d).task for d in self.measured}
        records = [r for r in self.db.records(workload=self.problems.workload) if r.task in tasks]
        if tuned_only and self._tuned_keys:  # before the probes: what the tunings measured, as in a first run
            records = [r for r in records if point_key(r.point) in self._tuned_keys.get(r.task, ())]
        self.model.fit(records, holdout=0.0)

    def predict(self, dims: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted normalized throughput of each candidate at `dims` (-inf where it does not lower)
        and the replicas' spread."""
        problem = self.problems(dims)
        valid = [problem.validate(c) is None for c in self.candidates]
        feats = [problem.features(c) if ok else {} for c, ok in zip(self.candidates, valid)]
        score = np.where(valid, self.model.predict(feats), -np.inf)
        spread = self.model.predict_spread(feats)
        return score, (np.zeros(len(feats)) if spread is None else spread)

    def _uncertainty(self, dims: dict[str, int]) -> float:
        score, spread = self.predict(dims)
        order = np.argsort(-score)
        best = order[0]
        if not np.isfinite(score[best]) or score[best] <= 0:
            return math.inf
        runner = score[order[1]] if len(order) > 1 and np.isfinite(score[order[1]]) else 0.0
        return float(spread[best] / score[best] + max(0.0, 1.0 - (score[best] - runner) / score[best]) * 0.1)

    def measured_latencies(self, dims: dict[str, int]) -> list[float | None]:
        return [self.measure(dims, c) for c in self.candidates]

    # the run -----------------------------------------------------------------------------------------
    def build(self) -> Family:
        cfg = self.config
        for dims in anchors([s for s in self.shapes if s not in self.holdout], cfg.anchors):
            if self.measured and self._out_of_time():  # at least one shape is always tuned
                break
            self._tune(dims, cfg.anchor_trials)
        for _ in range(cfg.probes):
            if self._out_of_time():
                break
            self._fit(tuned_only=True)
            open_shapes = [s for s in self.shapes if s not in self.measured and s not in self.holdout]
            if not open_shapes:
                break
            dims = max(open_shapes, key=self._uncertainty)
            self.probed.append(dims)
            self._tune(dims, cfg.probe_trials)
        for dims in self.measured:  # every candidate at every measured shape: measured choices there
            self.measured_latencies(dims)
        self._fit()
        family = self._assemble()
        family.out_of_time, family.resumed = self.out_of_time, self.resumed
        return family

    def without(self, points: Sequence[Mapping[str, Any]]) -> Family:
        """The family again with `points` no longer candidates (they failed a check): every shape
        served by the best of the rest, from the measurements already made."""
        gone = {point_key(dict(p)) for p in points}
        self.candidates = [c for c in self.candidates if point_key(c) not in gone]
        family = self._assemble()
        family.out_of_time, family.resumed = self.out_of_time, self.resumed
        return family

    def _out_of_time(self) -> bool:
        left = self._seconds_left()
        self.out_of_time = self.out_of_time or (left is not None and left <= 0)
        return self.out_of_time

    def _table(self) -> dict[str, np.ndarray]:
        """Per shape, the relative speed of every candidate (1 = that shape's best): measured at
        measured shapes, predicted elsewhere."""
        table = {}
        for dims in self.shapes:
            if dims in self.measured:
                lat = np.array([x if x else np.inf for x in self.measured_latencies(dims)])
                # where every candidate failed (a prime K) inf / inf warned "invalid value" above the error
                ratio = np.zeros_like(lat)
                table[point_key(dims)] = np.divide(lat.min(), lat, out=ratio, where=np.isfinite(lat))
            else:
                score, _ = self.predict(dims)
                score = np.where(np.isfinite(score), np.maximum(score, 1e-6), 0.0)
                table[point_key(dims)] = score / max(score.max(), 1e-12)
        return table

    def _assemble(self) -> Family:
        table = self._table()
        kept = sorted({int(np.argmax(v)) for v in table.values()})
        while len(kept) > 1:
            costs = []
            for drop in kept:
                rest = [k for k in kept if k != drop]
                worst = min(max(v[k] for k in rest) / max(v[kept].max(), 1e-12) for v in table.values())
                costs.append((1.0 - worst, drop))
            cost, drop = min(costs)
            if cost > self.config.merge_tolerance:
                break
            kept.remove(drop)
        schedules = [self.candidates[k] for k in kept]
        rows = []
        for dims in self.shapes:
            v = table[point_key(dims)]
            choice = max(range(len(kept)), key=lambda i: v[kept[i]])
            measured = dims in self.measured
            lat = self.measure(dims, schedules[choice]) if measured else None
            problem = self.problems(dims)
            tuned = [r.latency_ns for r in self.db.records(task=problem.task) if r.latency_ns and r.status == "ok"]
            rows.append(
                ShapeRow(
                    dims,
                    choice,
                    lat if lat is not None else math.nan,
                    measured,
                    min(tuned) if tuned and measured else None,
                    problem.roofline_ns,
                )
            )
        self._predict_latencies(rows, schedules)
        return Family(
            self.problems.workload, {}, schedules, rows, self.measurements, list(self.measured), list(self.probed)
        )

    def _predict_latencies(self, rows: list[ShapeRow], schedules: list[dict[str, Any]]) -> None:
        """Unmeasured shapes: the roofline over the fraction of it the same schedule reached at the
        nearest measured shapes (interpolated in log size; every candidate is measured there)."""
        for row in rows:
            if row.measured:
                continue
            fractions = []
            for dims in self.measured:
                lat = self.measure(dims, schedules[row.schedule])
                if lat:
                    fractions.append((math.log(size(dims)), self.problems(dims).roofline_ns / lat))
            if fractions:
                xs, ys = zip(*sorted(fractions))
                row.latency_ns = row.roofline_ns / float(np.interp(math.log(size(row.dims)), xs, ys))


def _latency(record: Any) -> float:
    return float(record.latency_ns or 0.0)
