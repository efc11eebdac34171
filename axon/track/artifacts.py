"""The artifacts of a tuning run: the kernel, the report, the search trace, the proofs, the
convergence plot, the best kernel's engine timeline (from the simulator) and the cost model's
feature importance."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from axon import nki, sim
from axon.errors import AxonError
from axon.gcpause import gc_paused
from axon.lazy import matplotlib
from axon.measure.backend import write_kernel
from axon.measure.events import TrialLog
from axon.target import HardwareSpec
from axon.track.tracker import Run

# a large kernel's timeline shows its first TIMELINE_TRIPS iterations of each top-level loop:
# tracing it whole would take minutes to hours, and a Gantt chart of 10^6 instructions is unreadable
TIMELINE_MAX_INSTRUCTIONS = 2e5
TIMELINE_TRIPS = 16


def log_tuning_artifacts(
    run: Run,
    report: Any,
    *,
    source: str,
    logs: Sequence[TrialLog],
    proofs: list[dict[str, str]],
    importance: dict[str, float] | None,
    plots: Path,
    timeline: Callable[[], TimelineFiles],
) -> None:
    """Log a finished tuning run's artifacts; `report` is its `TuneReport`, `timeline()` gives the best
    kernel's timeline files (`timeline_files`, perhaps made by a forked child while the run was checked)."""
    run.log_text(source, f"kernel/{Path(report.kernel_path).name}")
    run.log_dict(report.as_dict(), "report.json")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["trial", "status", "latency_ns", "best_ns", "predicted", "reason"])
    for l in logs:
        writer.writerow([l.number, l.status, l.latency_ns, l.best_ns, l.predicted, l.reason[:200]])
    run.log_text(buf.getvalue(), "search_trace.csv")
    run.log_dict(proofs, "proofs.json")
    best = report.best_latency_ns
    metrics = {
        "best_latency_us": best / 1e3 if best else None,
        "roofline_fraction": report.roofline_ns / best if best else None,
        "speedup_vs_unfused": report.unfused_ns / best if report.unfused_ns and best else None,
        "speedup_vs_expert": report.expert_ns / best if report.expert_ns and best else None,
        "measured": report.measured,
        "tuning_s": report.elapsed_s,
    }
    # after every trial's step (a resumed study's trials go on from its earlier ones' numbers)
    run.log_metrics(
        {k: v for k, v in metrics.items() if v is not None}, step=max((l.number + 1 for l in logs), default=0)
    )
    plots.mkdir(parents=True, exist_ok=True)
    try:
        path = convergence_plot(report, logs, plots / f"convergence_{run.run_id}.png")
        run.log_artifact(path, "plots")
    except Exception as exc:  # a plot is not worth failing a run over; say so in the run
        run.set_tags({"axon.plot_error": str(exc)[:200]})
    try:
        png, perfetto, summary = timeline()
        run.log_artifact(png, "timeline")
        run.log_artifact(perfetto, "timeline")
        run.log_text(summary, "timeline/summary.txt")
    except AxonError as exc:
        run.set_tags({"axon.timeline_error": str(exc)[:200]})
    if importance:
        run.log_dict(dict(sorted(importance.items(), key=lambda kv: -kv[1])), "cost_model/feature_importance.json")


def convergence_plot(report: Any, logs: Sequence[TrialLog], path: Path) -> Path:
    """Measured latency per trial, the best so far and the roofline, as a PNG."""
    fig = matplotlib().figure.Figure(figsize=(6, 3.5))
    ax = fig.subplots()
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
    fig.savefig(path, dpi=100)
    return path


TimelineFiles = tuple[Path, Path, str]  # the PNG Gantt chart, the Perfetto JSON, the summary text


def timeline_data(
    source: str,
    kernel: str,
    inputs: Sequence[tuple[str, tuple[int, ...], str]],
    hw: HardwareSpec,
    kernels: Path,
    whole: bool,
) -> tuple[sim.Timeline, str]:
    """The kernel's engine timeline from the simulator and its summary; the first TIMELINE_TRIPS
    iterations of each top-level loop unless `whole`."""
    fn = nki.load_kernel(f"{write_kernel(source, kernels)}:{kernel}")
    limit = None if whole else (lambda trips: min(trips, TIMELINE_TRIPS))
    with gc_paused():  # a whole trace: hundreds of thousands of small objects (see `axon.gcpause`)
        timing = sim.simulate(
            nki.trace(fn, *[(shape, dtype) for _, shape, dtype in inputs], hw=hw, loop_limit=limit), hw
        )
    note = "" if whole else f"(first {TIMELINE_TRIPS} iterations of each top-level loop)\n"
    return timing.timeline, note + timing.summary()


def timeline_files(timeline: sim.Timeline, summary: str, folder: Path, stem: str) -> TimelineFiles:
    """FOLDER/STEM.png (Gantt chart) and FOLDER/STEM.json (Perfetto) of `timeline`, and its summary."""
    folder.mkdir(parents=True, exist_ok=True)
    return timeline.to_png(folder / f"{stem}.png"), timeline.to_perfetto(folder / f"{stem}.json"), summary
