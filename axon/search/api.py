"""`tune()`: one `axon tune` end to end — variants, space, search, numerics check, baselines, tracking.

This is the Python API the CLI and sweeps call. It wires the packages together and owns no
algorithm: search is `Tuner`, measuring is the backend, recording is `RecordDB`, tracking is
`Tracker`.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from axon import __version__
from axon.errors import AxonError, SpecError, StoreError
from axon.ir import Graph, flops, min_bytes
from axon.measure.backend import get_backend, kernel_cache, kernel_hash, write_kernel
from axon.measure.records import RecordDB
from axon.search.checks import (  # noqa: F401 - re-exported
    AdversarialReport,
    NumericsCheck,
    _cast,
    _rebind,
    adversarial_check,
    numerics_check,
    tolerance,
)
from axon.search.costmodel import CostModel
from axon.search.guards import check_journal, corrupt_journal, kernel_out_path, prepare_workdir
from axon.search.problem import LoweredProblem
from axon.search.roofline import roofline
from axon.search.tuner import TrialLog, TuneConfig, Tuner
from axon.target import load_hw


@dataclass(frozen=True)
class TuneReport:
    workload: str
    shapes: dict[str, int]
    dtype: str
    hw: str
    backend: str
    sampler: str
    seed: int
    best_latency_ns: float | None
    best_point: dict[str, Any]
    best_description: str
    kernel_path: str
    moves: tuple[str, ...]
    unfused_ns: float | None
    expert_ns: float | None
    roofline_ns: float
    numerics: NumericsCheck | None
    measured: int
    reused: int
    failed: int
    elapsed_s: float
    study: str
    run_id: str = ""
    curve: tuple[float, ...] = field(default_factory=tuple)
    adversarial: AdversarialReport | None = None  # the chosen kernel on the adversarial input classes
    fp_rejected: tuple[str, ...] = ()  # proved variants not offered: floating-point hazard, and why
    variant_id: str = ""  # the chosen variant's hash, as `axon variants` lists it

    def summary(self) -> str:
        def us(ns: float | None) -> str:
            return "n/a" if ns is None else f"{ns / 1e3:,.1f} us"

        best = self.best_latency_ns
        lines = [
            f"{self.workload} {self.shapes} {self.dtype} on {self.hw} ({self.backend}): best {us(best)} "
            f"after {self.measured} measured / {self.reused} reused / {self.failed} failed trials in {self.elapsed_s:.1f} s",
            f"  kernel: {self.kernel_path}",
            f"  variant: {' + '.join(self.moves) or 'as written'}; {self.best_description}"
            + (f" [id {self.variant_id[:8]}]" if self.variant_id else ""),
        ]
        for name, ns in (("unfused", self.unfused_ns), ("expert", self.expert_ns)):
            if ns is not None and best:
                lines.append(f"  vs {name:8s} {us(ns):>14}  speedup {ns / best:5.2f}x")
        if best:
            lines.append(f"  roofline {us(self.roofline_ns):>14}  achieved {self.roofline_ns / best:6.1%} of the bound")
        if self.numerics is not None:
            lines.append(
                f"  numerics: emulator vs float64 reference at {self.numerics.dims}: max rel err "
                f"{self.numerics.max_rel_err:.2e} (tolerance {self.numerics.tolerance:g}) "
                f"{'OK' if self.numerics.ok else 'FAILED'}"
            )
        if self.adversarial is not None:
            lines.append(
                f"  adversarial: emulator in {self.adversarial.dtype} at {self.adversarial.dims}, worst rel err per input "
                f"class: {self.adversarial.summary()} {'OK' if self.adversarial.ok else 'FAILED'}"
            )
        for text in self.fp_rejected:
            lines.append(f"  not offered (floating point): {text}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["numerics_ok"] = None if self.numerics is None else self.numerics.ok
        return data


def workload_graph(workload: Any, preset: str, dtype: str, shape: dict[str, int] | None) -> Graph:
    shape = dict(shape or {})
    if workload.presets:
        return workload.graph(preset, dtype=dtype, **shape)
    return workload.graph(None, dtype=dtype, **shape)


# Splitting a reduction into tiles is what the lowering's tile loops already do; as a graph move it
# only adds reshapes the lowering does not take.
TUNING_EXCLUDED_MOVES = frozenset({"split-tiles"})


def verified_variants(
    graph: Graph, depth: int = 4, max_variants: int = 24, rejected: list[Any] | None = None
) -> list[Any]:
    """The graph's variants whose every move was proved and that pass the floating-point gate in the
    graph's dtype (`axon.verify.floating.screen`; the original first). Rejections are appended to
    `rejected` when given."""
    from axon.synth import discover_variants
    from axon.verify import Proof
    from axon.verify.floating import screen

    found = discover_variants(graph, max_depth=depth, max_variants=max_variants, exclude=TUNING_EXCLUDED_MOVES)
    kept, dropped = screen(graph, [v for v in found if all(isinstance(p, Proof) for p in v.proofs)])
    if rejected is not None:
        rejected.extend(dropped)
    if not kept:
        raise AxonError(f"{graph.name}: variant discovery returned nothing")
    return kept


def _baseline(problem: LoweredProblem, backend: Any, db: RecordDB, point: dict[str, Any], label: str) -> float | None:
    """Latency of a baseline kernel (measured once per kernel source, recorded under its own task)."""
    from axon.measure.records import Record

    if problem.validate(point) is not None:
        return None
    cand = problem.build(point)
    known = db.lookup(cand.kernel_hash, backend.name, problem.hw.file_hash)
    if known is None:
        m = backend.measure(cand.source, cand.kernel, cand.inputs, problem.hw)
        known = db.add(
            Record(
                f"{problem.workload}#{label}",
                problem.shapes,
                problem.dtype,
                problem.hw.name,
                problem.hw.file_hash,
                backend.name,
                cand.variant_hash,
                point,
                cand.kernel_hash,
                dict(cand.features),
                m.latency_ns,
                m.status,
                m.error,
                m.as_dict(),
                __version__,
            )
        )
    return known.latency_ns


def expert_latency(workload: str, graph: Graph, hw: Any, backend: Any) -> float | None:
    """The hand-written expert kernel of this workload, if there is one, on the same backend.

    Expert kernels are written in float32 for the workload's own input order (tests/lower checks
    their numbers); a workload without one, or a dtype they do not take, has no expert figure.
    """
    from axon.lower import expert

    if workload not in expert.KERNELS or graph.inputs[0].type.dtype != "float32":
        return None
    inputs = tuple((n.attr("name"), graph.concrete_shape(n.id), n.type.dtype) for n in graph.inputs)
    m = backend.measure(expert.source(workload), workload, inputs, hw)
    return m.latency_ns


def load_cost_model(
    ref: str | None,
    seed: int,
    tracking_uri: str | None = None,
    hw: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> CostModel:
    """A new model, a saved JSON file, or a registered one (`models:/name@alias`).

    When the model was trained on another hardware file than `hw` (by its recorded `hw`, or for a
    registered model by its name `axon-costmodel-<hw>`), `warn` is told once.
    """
    if not ref:
        return CostModel(seed=seed)
    model = _load_cost_model(ref, seed, tracking_uri)
    trained_on = getattr(model, "hw", None) or _hw_from_name(ref)
    if hw and warn and trained_on and hw not in trained_on.split(","):
        warn(f"cost model {ref} was trained on {trained_on}, tuning on {hw}: its ranking may not transfer")
    return model


def _hw_from_name(ref: str) -> str | None:
    import re

    m = re.search(r"costmodel-([A-Za-z0-9_]+)", ref)
    return m.group(1) if m else None


def _load_cost_model(ref: str, seed: int, tracking_uri: str | None) -> CostModel:
    if ref.startswith("models:/"):
        import tempfile

        import mlflow
        import mlflow.xgboost

        if tracking_uri:
            mlflow.set_tracking_uri(tracking_uri)
            mlflow.set_registry_uri(tracking_uri)
        try:
            booster = mlflow.xgboost.load_model(ref)
        except Exception as exc:  # MLflow raises several types for a missing model
            raise AxonError(f"cost model {ref} cannot be loaded: {str(exc).splitlines()[0]}") from None
        path = Path(tempfile.mkdtemp()) / "model.json"
        booster.save_model(str(path))
        return CostModel.load(path)
    return CostModel.load(ref)


def journal_storage(workdir: Path, storage: str | None) -> Any:
    """The Optuna storage: a URL as given, else a journal file (default WORKDIR/optuna.log), checked first."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if storage and "://" in storage:
        return storage
    path = Path(storage) if storage else workdir / "optuna.log"
    check_journal(path)
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except (AssertionError, KeyError, IndexError, TypeError, ValueError) as exc:  # lines that parse but do not replay
        raise StoreError(corrupt_journal(path, f"{type(exc).__name__} replaying it")) from None


def failure_summary(logs: Sequence[TrialLog], failed: int) -> str:
    """`4 failed (3x "reason a", 1x "reason b"): first: <the first reason in full>`."""
    from collections import Counter

    reasons = [l.reason.strip() for l in logs if l.status in ("infeasible", "error")]
    if not reasons:
        return f"{failed} failed"
    counts = Counter(r.splitlines()[0][:80] if r else "no reason recorded" for r in reasons)
    common = ", ".join(f'{n}x "{r}"' for r, n in counts.most_common(3))
    more = f", {len(counts) - 3} other reasons" if len(counts) > 3 else ""
    return f"{failed} failed ({common}{more}): first: {reasons[0].splitlines()[0] if reasons[0] else '?'}"


class TuneInterrupted(KeyboardInterrupt):
    """Ctrl-C during tuning; `kernel_path` is the best kernel so far, checked and written (or "")."""

    def __init__(self, message: str, kernel_path: str = "") -> None:
        super().__init__(message)
        self.message, self.kernel_path = message, kernel_path


def tune(
    workload: str,
    *,
    shape: dict[str, int] | None = None,
    preset: str = "default",
    dtype: str = "float32",
    hw: str = "trn1",
    backend: str = "sim",
    trials: int = 64,
    seconds: float | None = None,
    sampler: str = "costmodel",
    cost_model: str | None = None,
    seed: int = 0,
    workdir: str | Path = ".axon",
    storage: str | None = None,
    study: str | None = None,
    out: str | Path | None = None,
    track: bool = True,
    tracking_uri: str | None = None,
    parent_run: Any = None,
    patience: int | None = None,
    depth: int = 4,
    check: bool = True,
    force: bool = False,
    on_trial: Callable[[TrialLog], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> TuneReport:
    """Tune one workload and return the report; the best kernel is written to `out`.

    `workload` is a built-in name or a spec file `path.py:function` (a relative path from the
    working directory). Before any tracing, the problem is checked against the hardware file's HBM
    and this machine's memory and time (`axon.search.guards`; `force=True` skips that). Kernel files
    traced while tuning go to WORKDIR/cache/kernels. Ctrl-C after a valid measurement checks and
    writes the best kernel so far and raises `TuneInterrupted` with its path.

    >>> # tune("rmsnorm_matmul", preset="small", trials=8, workdir="/tmp/axon")  # doctest: +SKIP
    """
    from axon.search.guards import check_tune
    from axon.workloads import get

    if trials < 1:
        raise SpecError(f"trials must be at least 1, got {trials}")
    if seconds is not None and not seconds > 0:
        raise SpecError(f"seconds must be positive, got {seconds:g}: no trial could run")
    workdir = prepare_workdir(workdir)
    w = get(workload)
    graph = workload_graph(w, preset, dtype, shape)
    spec = load_hw(hw)
    kernel_out_path(out, workdir, w.kernel_name, spec.name, "0" * 8)  # refuse a bad --out before any work
    if not force:
        check_tune(graph, spec, w.name)
    kernels = kernel_cache(workdir)
    meter = get_backend(backend, kernels)
    optuna_storage = journal_storage(workdir, storage)
    fp_rejected: list[Any] = []
    variants = verified_variants(graph, depth, rejected=fp_rejected)
    problem = LoweredProblem(w.name, graph, spec, variants, dtype)
    model = load_cost_model(cost_model, seed, tracking_uri, hw=spec.name, warn=warn or _warn)
    db = RecordDB(workdir / "records.db")
    config = TuneConfig(trials=trials, seconds=seconds, sampler=sampler, seed=seed, patience=patience, study_name=study)
    bound = roofline(graph, spec)

    tracker = None
    if track:
        from axon.track import Tracker
        from axon.track.tracker import workdir_store

        uri, root = workdir_store(workdir)
        tracker = Tracker(tracking_uri or uri, None if tracking_uri else root)
    params = {
        "workload": w.name,
        "shapes": dict(graph.bindings),
        "dtype": dtype,
        "hw": spec.name,
        "hw_file_hash": spec.file_hash,
        "backend": meter.name,
        "sampler": sampler,
        "trials": trials,
        "seed": seed,
        "axon_version": __version__,
        "cost_model": cost_model or "",
        "variants": len(variants),
        "flops": flops(graph),
        "min_bytes": min_bytes(graph),
    }
    start = time.perf_counter()
    logs: list[TrialLog] = []

    checked: dict[str, Any] = {}

    def checked_kernel(point: dict[str, Any]) -> tuple[Any, NumericsCheck | None, Path]:
        numerics = numerics_check(problem, point, seed=seed, directory=kernels) if check else None
        if numerics is not None and not numerics.ok:
            raise AxonError(
                f"{w.name}: the best kernel does not match the reference (max rel err {numerics.max_rel_err:.2e})"
            )
        adversarial = adversarial_check(problem, point, kernels, seed=seed) if check else None
        if adversarial is not None and not adversarial.ok:
            raise AxonError(f"{w.name}: the best kernel fails the adversarial numerics check: {adversarial.failure()}")
        checked["adversarial"] = adversarial
        cand = problem.build(point)
        kernel_path = kernel_out_path(out, workdir, w.kernel_name, spec.name, cand.kernel_hash)
        kernel_path.parent.mkdir(parents=True, exist_ok=True)
        kernel_path.write_text(cand.source)
        return cand, numerics, kernel_path

    def run_with(run: Any) -> TuneReport:
        def trial_hook(log: TrialLog) -> None:
            logs.append(log)
            if run is not None:
                metrics = {
                    "latency_us": None if log.latency_ns is None else log.latency_ns / 1e3,
                    "best_latency_us": None if log.best_ns is None else log.best_ns / 1e3,
                    "predicted_score": log.predicted,
                }
                if log.accuracy is not None:
                    metrics.update(log.accuracy.as_metrics())
                run.log_metrics({k: v for k, v in metrics.items() if v is not None}, step=log.number)
            if on_trial:
                on_trial(log)

        tuner = Tuner(
            problem,
            meter,
            db,
            TuneConfig(**{**asdict(config), "run_id": run.run_id if run else ""}),
            optuna_storage,
            model,
            trial_hook,
        )
        try:
            result = tuner.run()
        except KeyboardInterrupt:
            best = tuner.best()
            if best is None:
                raise TuneInterrupted(
                    f"{w.name}: interrupted before any valid measurement; no kernel written"
                ) from None
            _, _, kernel_path = checked_kernel(dict(best.point))
            raise TuneInterrupted(
                f"{w.name}: interrupted; best so far {best.latency_ns / 1e3:,.1f} us, kernel: {kernel_path}",
                str(kernel_path),
            ) from None
        if result.best is None:
            if not result.trials:
                raise AxonError(
                    f"{w.name}: no trial ran (the study {result.study_name} already has --trials {trials} "
                    f"trials, or --seconds ended first): raise --trials or --seconds"
                )
            raise AxonError(
                f"{w.name}: no trial produced a valid measurement: {failure_summary(result.trials, result.failed)}"
            )
        best_point = dict(result.best.point)
        cand, numerics, kernel_path = checked_kernel(best_point)
        unfused = _baseline(problem, meter, db, problem.unfused_point(0), "unfused")
        expert = expert_latency(w.name, graph, spec, meter)
        index = int(best_point.get("variant", 0))
        moves = tuple(m.name for m in getattr(problem.variants[index], "moves", ()))
        curve = tuple(l.best_ns for l in logs if l.best_ns is not None)
        report = TuneReport(
            w.name,
            dict(graph.bindings),
            dtype,
            spec.name,
            meter.name,
            sampler,
            seed,
            result.best.latency_ns,
            best_point,
            problem.describe(best_point),
            str(kernel_path),
            moves,
            unfused,
            expert,
            bound.bound_ns,
            numerics,
            result.measured,
            result.reused,
            result.failed,
            time.perf_counter() - start,
            result.study_name,
            run.run_id if run else "",
            curve,
            checked.get("adversarial"),
            tuple(r.describe() for r in fp_rejected),
            getattr(problem.variants[index], "hash", ""),
        )
        if run is not None:
            _log_artifacts(run, report, problem, cand, logs, problem.variants[index], model, workdir, kernels)
        return report

    if tracker is None:
        return run_with(None)
    with tracker.run(
        f"tune {w.name}", params=params, tags={"axon.workload": w.name, "axon.hw": spec.name}, parent=parent_run
    ) as run:
        return run_with(run)


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=3)


def _log_artifacts(
    run: Any,
    report: TuneReport,
    problem: LoweredProblem,
    cand: Any,
    logs: list[TrialLog],
    variant: Any,
    model: CostModel,
    workdir: Path,
    kernels: Path,
) -> None:
    run.log_text(cand.source, f"kernel/{Path(report.kernel_path).name}")
    run.log_dict(report.as_dict(), "report.json")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["trial", "status", "latency_ns", "best_ns", "predicted", "reason"])
    for l in logs:
        writer.writerow([l.number, l.status, l.latency_ns, l.best_ns, l.predicted, l.reason[:200]])
    run.log_text(buf.getvalue(), "search_trace.csv")
    proofs = [
        {"move": m.name, "proof": str(p)} for m, p in zip(getattr(variant, "moves", ()), getattr(variant, "proofs", ()))
    ]
    run.log_dict(proofs, "proofs.json")
    metrics = {
        "best_latency_us": report.best_latency_ns / 1e3 if report.best_latency_ns else None,
        "roofline_fraction": report.roofline_ns / report.best_latency_ns if report.best_latency_ns else None,
        "speedup_vs_unfused": report.unfused_ns / report.best_latency_ns
        if report.unfused_ns and report.best_latency_ns
        else None,
        "speedup_vs_expert": report.expert_ns / report.best_latency_ns
        if report.expert_ns and report.best_latency_ns
        else None,
        "measured": report.measured,
        "tuning_s": report.elapsed_s,
    }
    run.log_metrics({k: v for k, v in metrics.items() if v is not None}, step=len(logs))
    plots = workdir / "plots"
    plots.mkdir(exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        lat = [(l.number, l.latency_ns / 1e3) for l in logs if l.latency_ns]
        if lat:
            ax.scatter(*zip(*lat), s=8, alpha=0.5, label="measured")
        best = [(l.number, l.best_ns / 1e3) for l in logs if l.best_ns]
        if best:
            ax.step(*zip(*best), where="post", label="best so far")
        ax.axhline(report.roofline_ns / 1e3, color="gray", ls="--", label="roofline")
        ax.set_xlabel("trial")
        ax.set_ylabel("latency (us)")
        ax.set_title(f"{report.workload} on {report.hw}")
        ax.legend()
        fig.tight_layout()
        path = plots / f"convergence_{run.run_id}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        run.log_artifact(path, "plots")
    except Exception as exc:  # a plot is not worth failing a run over; say so in the run
        run.set_tags({"axon.plot_error": str(exc)[:200]})
    try:
        _log_timeline(run, problem, cand, plots, kernels)
    except AxonError as exc:
        run.set_tags({"axon.timeline_error": str(exc)[:200]})
    if model.is_trained and model.booster is not None:
        importance = model.booster.get_score(importance_type="gain")
        run.log_dict(dict(sorted(importance.items(), key=lambda kv: -kv[1])), "cost_model/feature_importance.json")


def _log_timeline(run: Any, problem: LoweredProblem, cand: Any, folder: Path, kernels: Path) -> None:
    """The best kernel's engine timeline (PNG Gantt chart and Perfetto JSON) from the simulator."""
    from axon import nki, sim
    from axon.search.guards import trace_instructions

    fn = nki.load_kernel(f"{write_kernel(cand.source, kernels)}:{cand.kernel}")
    # a large kernel's timeline shows its first TIMELINE_TRIPS iterations of each top-level loop:
    # tracing it whole would take minutes to hours, and a Gantt chart of 10^6 instructions is unreadable
    whole = trace_instructions(problem.graph) * 16 / 3 < TIMELINE_MAX_INSTRUCTIONS
    limit = None if whole else (lambda trips: min(trips, TIMELINE_TRIPS))
    timing = sim.simulate(
        nki.trace(fn, *[(shape, dtype) for _, shape, dtype in cand.inputs], hw=problem.hw, loop_limit=limit), problem.hw
    )
    run.log_artifact(timing.timeline.to_png(folder / f"timeline_{run.run_id}.png"), "timeline")
    run.log_artifact(timing.timeline.to_perfetto(folder / f"timeline_{run.run_id}.json"), "timeline")
    note = "" if whole else f"(first {TIMELINE_TRIPS} iterations of each top-level loop)\n"
    run.log_text(note + timing.summary(), "timeline/summary.txt")


TIMELINE_MAX_INSTRUCTIONS = 2e5
TIMELINE_TRIPS = 16
