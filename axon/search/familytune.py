"""`tune_family(request, ranges)`: `axon tune W --shape M=512..8192` end to end — checks at the
range's largest shape, the family (`axon.search.family`), the numerics at each schedule's boundary
shapes, the dispatching module and the MLflow run (`axon.search.familyout`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from axon import __version__
from axon.errors import AxonError, HardwareError
from axon.measure.neuron import get_backend
from axon.measure.stores import open_records, records_location
from axon.search.family import Family, FamilyBuilder, FamilyConfig, FamilyProblems, grid
from axon.search.familyout import BoundaryCheck, boundary_checks, family_record, latency_plot, log_family, write_module
from axon.search.guards import check_family_out, preflight
from axon.search.request import TuneRequest
from axon.search.sampler import point_key
from axon.search.storage import journal_storage, load_cost_model
from axon.search.tuning import quiet_optuna
from axon.search.variants import verified_variants
from axon.target import HardwareSpec, load_hw
from axon.track import Tracker


@dataclass(frozen=True)
class FamilyReport:
    family: Family
    checks: tuple[BoundaryCheck, ...]
    module: Path
    plot: Path
    run_id: str

    def as_dict(self) -> dict:
        return {
            **family_record(self.family, list(self.checks)),
            "module": str(self.module),
            "plot": str(self.plot),
            "run_id": self.run_id,
        }

    def summary(self) -> str:
        bad = [c for c in self.checks if not c.ok]
        lines = [
            self.family.summary(),
            f"numerics at the boundaries: {len(self.checks) - len(bad)}/{len(self.checks)} ok",
            f"module: {self.module}",
            f"plot: {self.plot}",
        ]
        if self.run_id:
            lines.append(f"MLflow run: {self.run_id}")
        return "\n".join(lines)


def tune_family(
    request: TuneRequest,
    ranges: Mapping[str, Sequence[int]],
    config: FamilyConfig | None = None,
    warn: Callable[[str], None] | None = None,
) -> FamilyReport:
    """Build, check and write the kernel family of `request.workload` over `ranges` (the request's
    `shape` binds the fixed dimensions; `trials` is each anchor shape's budget). `warn` is told of a
    cost model trained on another hardware file and of a variant discovery that took long."""
    if request.storage or request.study:
        raise AxonError(
            "--storage/--study name one Optuna study, and a shape range runs one tuning per shape it "
            "measures: drop them (the measurements go to the records database, --records, and a rerun reuses them)"
        )
    config = config or FamilyConfig(
        anchor_trials=request.trials,
        seed=request.seed,
        sampler=request.sampler,
        seconds=request.seconds,
        patience=request.patience,
    )
    largest = {**request.shape, **{k: max(v) for k, v in ranges.items()}}
    # unknown dimensions, HBM, memory, time; --out is the family's directory, not a kernel file's path
    # (a single kernel's checks refused an existing one: the same command run again)
    w, graph = preflight(replace(request, shape=largest, out=None))
    check_family_out(request.out)
    shapes = [{**{k: v for k, v in graph.bindings.items() if k not in ranges}, **s} for s in grid(ranges)]
    # `--cost-model` was dropped without a word (a missing file too): as a single-shape tune, it warm-starts
    tracking_uri = request.tracking_uri or request.workdir.tracking_uri
    model = load_cost_model(request.cost_model, request.seed, tracking_uri, hw=request.hw.name, warn=warn)
    with quiet_optuna():
        slow: list[str] = []
        variants = verified_variants(graph, request.depth, stopped=slow)
        for why in slow:  # as a single-shape tune: the wait before the first trial, said
            (warn or warnings.warn)(f"{why}; tuning its {len(variants)} variants (a spec of fewer ops proves faster)")
        problems = FamilyProblems(w.name, graph, request.hw, variants, request.dtype)
        meter = get_backend(request.backend, request.workdir.kernel_cache)
        builder = FamilyBuilder(
            problems,
            shapes,
            meter,
            open_records(records_location(request.records, None, request.workdir.records)),
            config,
            model=model,
            storage=journal_storage(request.workdir, None),
        )
        family = builder.build()
    checks = boundary_checks(family, problems, request.workdir.kernel_cache) if request.check else []
    failed = [c for c in checks if not c.ok]
    turned_down: list[str] = []
    while failed and len(builder.candidates) > len({c.schedule for c in failed}):
        # as a single-shape tune turns a kernel down and reports the next: the schedules that fail go,
        # and every shape is served by the best of the other candidates already measured
        bad = [family.schedules[i] for i in sorted({c.schedule for c in failed})]
        turned_down += [f"{point_key(p)}: {_why(c)}" for p, c in zip(bad, _first_per_schedule(failed))]
        family = builder.without(bad)
        checks = boundary_checks(family, problems, request.workdir.kernel_cache)
        failed = [c for c in checks if not c.ok]
    family.ranges = {k: tuple(v) for k, v in ranges.items()}
    family.turned_down = turned_down
    # the kernel name, not the workload's: a spec's workload is its path and function ("dir/f.py:fn")
    # and its dtype beside float32: a bfloat16 family of the same kernel replaced the float32 one's module
    suffix = "" if request.dtype == "float32" else f"_{request.dtype}"
    out = request.out or request.workdir.root / "families" / f"{w.kernel_name}_{request.hw.name}{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    plot = latency_plot(family, out / f"{w.kernel_name}_family.png")
    run_id = ""
    if request.track:
        tracker = Tracker(
            request.tracking_uri or request.workdir.tracking_uri,
            None if request.tracking_uri else request.workdir.artifact_root,
        )
        # `shapes` as a tuning run's, each ranged dimension as its list: `axon runs` showed nothing of
        # the shape, and a dimension the range does not vary (N=256) was recorded nowhere
        fixed = {k: v for k, v in graph.bindings.items() if k not in ranges}
        params = {
            "workload": w.name,
            "shapes": {**fixed, **{k: list(v) for k, v in family.ranges.items()}},
            "ranges": dict(family.ranges),
            "hw": request.hw.name,
            "dtype": request.dtype,
            "hw_file_hash": request.hw.file_hash,
            "backend": request.backend,
            "sampler": request.sampler,
            "trials": request.trials,
            "seed": request.seed,
            "axon_version": __version__,
            "cost_model": request.cost_model or "",
        }
        run_id = log_family(tracker, family, checks, plot, params)
    module = write_module(family, problems, out, checks, _hw_ref(request.hw), run_id, request)
    if failed:
        c = failed[0]
        raise AxonError(
            f"{w.name}: schedule {c.schedule} fails the numerics check at {_why(c)}"
            + (f" ({len(turned_down)} other schedules turned down before it)" if turned_down else "")
            + f"; module written to {module}"
        )
    return FamilyReport(family, tuple(checks), module, plot, run_id)


def _hw_ref(hw: HardwareSpec) -> str:
    """How the module's `emulate` loads the hardware: its built-in name, else its file's absolute path
    (a family tuned on mychip.yaml had emulate(hw='mychip'): 'hardware file .../mychip.yaml not found')."""
    try:
        if load_hw(hw.name).file_hash == hw.file_hash:
            return hw.name
    except HardwareError:
        pass
    return str(Path(hw.source).resolve())


def _why(c: BoundaryCheck) -> str:
    return f"{c.dims} (max rel err {c.max_rel_err:.2e}, adversarial: {c.adversarial})"


def _first_per_schedule(failed: list[BoundaryCheck]) -> list[BoundaryCheck]:
    return [next(c for c in failed if c.schedule == i) for i in sorted({c.schedule for c in failed})]
