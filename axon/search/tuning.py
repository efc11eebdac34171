"""`tune(request, callbacks)`: one `axon tune` end to end — checks, variants, space, search, the
chosen kernel's numerics, baselines, tracking.

It wires the packages together and owns no algorithm: search is `Tuner`, measuring is the backend,
recording and refitting are callbacks (`axon.search.callbacks`), tracking is `axon.track`. A
caller's callbacks (`axon.measure.events.Callback`) run after Axon's own on every trial.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import optuna

from axon import __version__
from axon.errors import AxonError
from axon.forked import Ahead, workers
from axon.gcpause import gc_frozen
from axon.ir import flops, min_bytes
from axon.measure.events import Callback, OnTrial, TrialLog
from axon.measure.neuron import get_backend
from axon.measure.stores import open_records, records_location
from axon.search.baselines import baseline_latency, baselines_ahead, expert_latency, keep_baselines
from axon.search.checks import adversarial_check, numerics_check
from axon.search.guards import kernel_out_path, preflight, trace_instructions, write_kernel_file
from axon.search.problem import LoweredProblem
from axon.search.provenance import delivered
from axon.search.report import TuneReport
from axon.search.request import TuneRequest
from axon.search.storage import journal_storage, load_cost_model
from axon.search.trials import interrupted
from axon.search.tuner import TuneConfig, Tuner
from axon.search.variants import verified_variants
from axon.track import Tracker
from axon.track.artifacts import TIMELINE_MAX_INSTRUCTIONS, log_tuning_artifacts, timeline_data, timeline_files
from axon.track.callbacks import MlflowMetrics


def best_timeline(cand: Any, r: TuneRequest, kernels: Path, graph: Any, n_workers: int) -> Ahead[tuple[Any, str]]:
    """The best kernel's timeline and summary (`timeline_data`: a trace and its simulation), made by a
    forked child with two workers while this process checks the kernel; drawn here (`timeline_files`)."""
    whole = trace_instructions(graph) * 16 / 3 < TIMELINE_MAX_INSTRUCTIONS
    return Ahead(lambda: timeline_data(cand.source, cand.kernel, cand.inputs, r.hw, kernels, whole), n_workers)


def cancel_all(children: dict[str, Ahead[Any]]) -> None:
    for child in children.values():
        child.cancel()


# the measured kernels checked against the reference before a run gives up on them, and how many of
# the fastest it chooses among
CHECKED_AT_MOST, CANDIDATES_AT_MOST = 8, 64


class CheckFailed(AxonError):
    """A kernel failed the numerics or the adversarial check; the message says which and by how much."""


class TuneInterrupted(KeyboardInterrupt):
    """Ctrl-C during tuning; `kernel_path` is the best kernel so far, checked and written (or ""),
    `best_latency_ns` its latency (None when none was written)."""

    def __init__(self, message: str, kernel_path: str = "", best_latency_ns: float | None = None) -> None:
        super().__init__(message)
        self.message, self.kernel_path, self.best_latency_ns = message, kernel_path, best_latency_ns


def failure_summary(logs: Sequence[TrialLog], failed: int) -> str:
    """`4 failed (3x "reason a", 1x "reason b"): first: <the first reason in full>`."""
    reasons = [l.reason.strip() for l in logs if l.status in ("infeasible", "error")]
    if not reasons:
        return f"{failed} failed"
    counts = Counter(r.splitlines()[0][:80] if r else "no reason recorded" for r in reasons)
    common = ", ".join(f'{n}x "{r}"' for r, n in counts.most_common(3))
    more = f", {len(counts) - 3} other reasons" if len(counts) > 3 else ""
    return f"{failed} failed ({common}{more}): first: {reasons[0].splitlines()[0] if reasons[0] else '?'}"


def _nothing_ran(storage: Any, study_name: str) -> str:
    """Why a run measured nothing: its study already had the run's trials and every one failed, or
    `--seconds` ended first. (Trials measured before an upgrade do not count: the run measures again.)"""
    trials = optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)
    earlier = [t for t in trials if not interrupted(t)]
    failed = [t for t in earlier if t.state == optuna.trial.TrialState.FAIL]
    if earlier and len(failed) == len(earlier):
        first = next((str(v) for t in failed for v in t.user_attrs.values()), "no reason recorded")
        return (
            f"the study {study_name} already has {len(earlier)} trials and every one failed (first: "
            f"{first.splitlines()[0][:200]}): --trials above {len(earlier)} tries more points, "
            "--study NAME starts afresh"
        )
    return (
        f"no trial ran (--seconds ended before the first, the study {study_name} has {len(earlier)}): raise --seconds"
    )


def warn(callbacks: Sequence[Callback], message: str) -> None:
    """Tell the callbacks that take warnings; a Python warning when none does."""
    takers = [c for c in callbacks if type(c).on_warning is not Callback.on_warning]
    for c in takers:
        c.on_warning(message)
    if not takers:
        warnings.warn(message, stacklevel=3)


@contextmanager
def quiet_optuna() -> Any:
    """Optuna's per-trial INFO lines off for the run, the caller's setting restored after."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def tune(request: TuneRequest, callbacks: Sequence[Callback] = ()) -> TuneReport:
    """Tune one workload and return the report; the best kernel is written to `request.out` (or
    WORKDIR/kernels/).

    Before any tracing, the problem is checked against the hardware file's HBM and this machine's
    memory and time (`axon.search.guards`; `force=True` skips that). Ctrl-C after a valid
    measurement checks and writes the best kernel so far and raises `TuneInterrupted` with its path.

    A run of one trial (the report's figures depend on the machine, so only its shape is shown):

    >>> import tempfile
    >>> r = tune(TuneRequest.make("rmsnorm", preset="small", trials=1, workdir=tempfile.mkdtemp(), track=False))
    >>> (r.workload, r.measured, r.numerics.ok)
    ('rmsnorm', 1, True)
    """
    if not isinstance(request, TuneRequest):
        raise TypeError(
            f"tune() takes a TuneRequest (TuneRequest.make({request!r}, ...)), not {type(request).__name__}"
        )
    listed = list(callbacks) if isinstance(callbacks, Iterable) and not isinstance(callbacks, Callback) else None
    if listed is None or not all(isinstance(c, Callback) for c in listed):
        # a function was an AttributeError ('on_start') after the run had begun, a lone Callback not iterable
        raise TypeError(
            "tune() takes a list of axon.search.api.Callback objects as callbacks "
            f"(a function of the trial: [OnTrial(fn)]), got {callbacks!r}"
        )
    # the collector walks the setup's heap and each trial's survivors once (`axon.gcpause`)
    with quiet_optuna(), gc_frozen() as settle, ExitStack() as cleanup:
        return _tune(request, listed, settle, cleanup)


def _tune(
    request: TuneRequest, callbacks: list[Callback], settle: Callable[[], None], cleanup: ExitStack
) -> TuneReport:
    r, workdir = request, request.workdir
    w, graph = preflight(r)
    kernels = workdir.kernel_cache
    n_workers = workers(r.workers)
    meter = get_backend(r.backend, kernels, workers=n_workers)
    storage = journal_storage(workdir, r.storage)
    fp_rejected: list[Any] = []
    stopped: list[str] = []
    variants = verified_variants(graph, r.depth, rejected=fp_rejected, stopped=stopped)
    for why in stopped:  # the user waited for it without a word; the search covers what was proved by then
        warn(callbacks, f"{why}; tuning its {len(variants)} variants (a spec of fewer ops proves faster)")
    problem = LoweredProblem(w.name, graph, r.hw, variants, r.dtype, workers=n_workers)
    # the baselines, measured by a forked child while the search runs (two workers); stopped if the run stops
    early = baselines_ahead(problem, meter, w.name, n_workers)
    if early is not None:
        cleanup.callback(early.cancel)
    model = load_cost_model(
        r.cost_model, r.seed, r.tracking_uri or workdir.tracking_uri, hw=r.hw.name, warn=lambda m: warn(callbacks, m)
    )
    db = open_records(records_location(r.records, r.storage, workdir.records))
    config = TuneConfig(
        trials=r.trials, seconds=r.seconds, sampler=r.sampler, seed=r.seed, patience=r.patience, study_name=r.study
    )
    start = time.perf_counter()

    def checked_kernel(point: dict[str, Any]) -> tuple[Any, Any, Any, Path]:
        numerics = numerics_check(problem, point, seed=r.seed, directory=kernels) if r.check else None
        if numerics is not None and not numerics.ok:
            raise CheckFailed(
                f"does not match the reference "
                f"(max rel err {numerics.max_rel_err:.2e}, allowed {numerics.tolerance:.2g}){numerics.why_not()}"
            )
        adversarial = adversarial_check(problem, point, kernels, seed=r.seed) if r.check else None
        if adversarial is not None and not adversarial.ok:
            raise CheckFailed(f"fails the adversarial numerics check: {adversarial.failure()}")
        cand = problem.build(point)
        kernel_path = kernel_out_path(r.out, workdir, w.kernel_name, r.hw.name, cand.kernel_hash)
        kernel_path.parent.mkdir(parents=True, exist_ok=True)
        write_kernel_file(kernel_path, delivered(cand, problem, point, r))
        return cand, numerics, adversarial, kernel_path

    def first_checked(ranked: Iterator[Any]) -> tuple[Any, tuple[Any, Any, Any, Path], tuple[str, ...]]:
        """The fastest measured kernel that passes the checks, checked and written; the faster ones
        the checks turned down, each with why. Accuracy is mostly a property of the variant (its
        algebra), so after a failure the fastest kernel of a variant that has failed less goes
        first; `CHECKED_AT_MOST` failures end the run with the first one's reason."""
        pool = list(islice(ranked, 1))  # the rest only when the fastest fails: asking lowers each again
        failures: Counter[int] = Counter()
        turned_down: list[str] = []
        first_failure = ""
        # a kernel that passed only as the spec as written does (inf or NaN where it is: a naive softmax
        # on x in [-100, 100]) is kept while the fastest kernel of another variant is checked: one finite
        # there (the max shift) is chosen instead, else this one
        fallback: tuple[Any, tuple[Any, Any, Any, Path], tuple[str, ...]] | None = None
        only_as_written: set[int] = set()  # variants whose kernel passed only that way: not checked again
        checks, widened = 0, False
        while pool and checks < CHECKED_AT_MOST:
            record = min(pool, key=lambda c: (failures[int(c.point.get("variant", 0))], c.latency_ns))
            pool.remove(record)
            point, checks = dict(record.point), checks + 1
            index = int(point.get("variant", 0))
            try:
                checked = checked_kernel(point)
            except CheckFailed as exc:
                first_failure, why = first_failure or str(exc), str(exc)
                failures[index] += 1
            else:
                if checked[2] is None or checked[2].verdict() == "OK":
                    return record, checked, tuple(turned_down)
                fallback, why = fallback or (record, checked, tuple(turned_down)), checked[2].verdict()
                only_as_written.add(index)
            moves = " + ".join(m.name for m in problem.variants[index].moves) or "as written"
            turned_down.append(f"{(record.latency_ns or 0) / 1e3:,.1f} us ({moves}): {why}")
            if not widened:
                pool, widened = pool + list(islice(ranked, CANDIDATES_AT_MOST - 1)), True
            pool = [c for c in pool if int(c.point.get("variant", 0)) not in only_as_written]
        if fallback is not None:  # a later check may have written over its --out: written again, not checked again
            record, (cand, numerics, adversarial, kernel_path), down = fallback
            write_kernel_file(kernel_path, delivered(cand, problem, dict(record.point), r))
            later = tuple(turned_down[len(down) + 1 :])  # the kernels checked after it, and why (its own line aside)
            return record, (cand, numerics, adversarial, kernel_path), down + later
        if not turned_down:
            raise AxonError(f"{w.name}: no measured kernel is emitted by the current code")
        others = f"; so do the next {len(turned_down) - 1} kernels checked" if len(turned_down) > 1 else ""
        raise AxonError(f"{w.name}: the best kernel {first_failure}{others}")

    def run_with(run: Any) -> TuneReport:
        own: list[Callback] = [MlflowMetrics(run)] if run is not None else []
        early_timeline: dict[str, Ahead[tuple[Any, str]]] = {}
        cleanup.callback(cancel_all, early_timeline)

        def before_last(best: Any) -> None:
            # the last ask has no next one to lower ahead for; its trial rarely changes the best, whose
            # timeline a forked child starts drawing now (dropped if the best changes)
            problem.prefetch.look_ahead = False
            if run is not None and best is not None and n_workers > 1:
                cand = problem.build(dict(best.point))
                early_timeline[cand.kernel_hash] = best_timeline(cand, r, kernels, graph, n_workers)

        tuner = Tuner(
            problem,
            meter,
            db,
            replace(config, run_id=run.run_id if run else ""),
            storage,
            model,
            [*own, *callbacks, OnTrial(lambda _: settle())],
            before_last,
        )
        try:
            result = tuner.run()
        except KeyboardInterrupt:
            best = tuner.best()
            if best is None:
                raise TuneInterrupted(
                    f"{w.name}: interrupted before any valid measurement; no kernel written"
                ) from None
            try:
                best, (_, _, _, kernel_path), _ = first_checked(tuner.ranked())
            except AxonError as exc:
                raise TuneInterrupted(f"interrupted; {exc}; no kernel written") from None
            except KeyboardInterrupt:  # a second Ctrl-C while it is checked: it was "axon: interrupted" alone
                raise TuneInterrupted(
                    f"{w.name}: interrupted again while the best kernel so far was checked, so none was written; "
                    "every trial is recorded: the same command resumes where it stopped"
                ) from None
            if run is not None:  # the run's summary is the kernel written, at a step after every trial's
                run.log_metrics({"best_latency_us": (best.latency_ns or 0) / 1e3}, step=tuner.next_number)
            raise TuneInterrupted(
                f"{w.name}: interrupted; best so far {(best.latency_ns or 0) / 1e3:,.1f} us, kernel: {kernel_path}",
                str(kernel_path),
                best.latency_ns,
            ) from None
        if result.best is None:
            if not result.trials:
                raise AxonError(f"{w.name}: {_nothing_ran(storage, result.study_name)}")
            raise AxonError(
                f"{w.name}: no trial produced a valid measurement: {failure_summary(result.trials, result.failed)}"
            )
        # the fastest kernel's timeline, drawn by a forked child (two workers) while the kernel is checked
        timeline = None
        if run is not None:
            fastest = problem.build(dict(result.best.point))
            timeline = early_timeline.pop(fastest.kernel_hash, None)
            timeline = timeline or best_timeline(fastest, r, kernels, graph, n_workers)
        cancel_all(early_timeline)
        written: Path | None = None
        try:
            chosen, (cand, numerics, adversarial, kernel_path), turned_down = first_checked(tuner.ranked())
            written = kernel_path
            if turned_down and timeline is not None:  # the checks turned the fastest down: the chosen one's
                timeline.cancel()
                timeline = best_timeline(cand, r, kernels, graph, n_workers)
            best_point = dict(chosen.point)
            keep_baselines(early, meter, r.hw)
            unfused = baseline_latency(problem, meter, db, problem.unfused_point(0), "unfused")
            expert = expert_latency(w.name, graph, r.hw, meter)
            variant = problem.variants[int(best_point.get("variant", 0))]
            report = TuneReport(
                w.name,
                dict(graph.bindings),
                r.dtype,
                r.hw.name,
                meter.name,
                r.sampler,
                r.seed,
                chosen.latency_ns,
                best_point,
                problem.describe(best_point),
                str(kernel_path),
                tuple(m.name for m in variant.moves),
                unfused,
                expert,
                problem.roofline_ns,
                numerics,
                result.measured,
                result.reused,
                result.failed,
                time.perf_counter() - start,
                result.study_name,
                run.run_id if run else "",
                tuple(l.best_ns for l in result.trials if l.best_ns is not None),
                adversarial,
                # with the id `axon variants` lists it by: two variants can have the same moves
                tuple(f"{x.describe()} [id {x.variant.hash[:8]}]" for x in fp_rejected),
                variant.hash,
                turned_down,
                result.resumed,
                (result.outdated, result.remeasured),
            )
            if run is not None and timeline is not None:
                booster = model.booster if model.is_trained else None
                log_tuning_artifacts(
                    run,
                    report,
                    source=Path(report.kernel_path).read_text(),  # the file written
                    logs=result.trials,
                    proofs=[{"move": m.name, "proof": str(p)} for m, p in zip(variant.moves, variant.proofs)],
                    importance=booster.get_score(importance_type="gain") if booster is not None else None,
                    plots=workdir.plots,
                    timeline=lambda: timeline_files(*timeline.result(), workdir.plots, f"timeline_{run.run_id}"),
                )
            return report
        except KeyboardInterrupt:  # after the search: its trials are all recorded, the check is what was cut
            if written is not None:  # checked and written: the baselines (or the run's artifacts) were cut
                raise TuneInterrupted(
                    f"{w.name}: interrupted; best {(chosen.latency_ns or 0) / 1e3:,.1f} us, kernel: {written}",
                    str(written),
                ) from None
            raise TuneInterrupted(
                f"{w.name}: interrupted while checking the best kernel ({(result.best.latency_ns or 0) / 1e3:,.1f} us) "
                "against the reference, so none was written; every trial is recorded: the same command resumes, "
                "measures nothing again and writes it"
            ) from None
        finally:
            if timeline is not None:
                timeline.cancel()

    if not r.track:
        return run_with(None)
    tracker = Tracker(r.tracking_uri or workdir.tracking_uri, None if r.tracking_uri else workdir.artifact_root)
    params = {
        "workload": w.name,
        "shapes": dict(graph.bindings),
        "dtype": r.dtype,
        "hw": r.hw.name,
        "hw_file_hash": r.hw.file_hash,
        "backend": meter.name,
        "sampler": r.sampler,
        "trials": r.trials,
        "seed": r.seed,
        "axon_version": __version__,
        "cost_model": r.cost_model or "",
        "variants": len(variants),
        "flops": flops(graph),
        "min_bytes": min_bytes(graph),
    }
    with tracker.run(
        f"tune {w.name}", params=params, tags={"axon.workload": w.name, "axon.hw": r.hw.name}, parent=r.parent_run
    ) as run:
        return run_with(run)
