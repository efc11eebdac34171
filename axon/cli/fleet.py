"""`axon worker` and `axon sweep --workers N`: a sweep's tasks shared by worker processes through
one records store (`axon.search.fleet`); thin wrappers, the coordination is in the library."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import click

from axon.cli.common import resolve_workdir, stop_like_ctrl_c, workdir_option
from axon.errors import SpecError, StoreError
from axon.measure.events import Callback
from axon.search.fleet import Fleet, pending_sweeps, publish, work
from axon.search.guards import preflight_sweep
from axon.search.storage import check_cost_model, journal_storage
from axon.search.sweep import SweepReport, SweepRow
from axon.search.sweepconfig import load_sweep
from axon.workdir import Workdir


def fleet_sweep(
    config: str,
    path: Workdir,
    workers: int,
    storage: str | None,
    records: str | None,
    tracking_uri: str | None,
    cost_model: str | None,
    trials: int | None,
    sampler: str | None,
    as_json: bool,
    fail_on_regression: bool,
    quiet: bool = False,
) -> None:
    """Publish the sweep, run `workers` local `axon worker` processes on it, print the report."""
    parsed = load_sweep(config)
    if trials is not None or sampler is not None:
        parsed = replace(parsed, trials=trials or parsed.trials, sampler=sampler or parsed.sampler)
    fleet = Fleet(path, storage, records, tracking_uri)
    preflight_sweep(parsed, fleet.workdir)
    if storage:  # opened once here: a storage that cannot be opened failed every task, one after another
        journal_storage(fleet.workdir, storage)
    check_cost_model(cost_model, parsed.seed, tracking_uri or fleet.workdir.tracking_uri)
    sweep = publish(parsed, fleet)
    command = [sys.executable, "-m", "axon.cli", "worker", "--sweep", sweep, "--workdir", str(path), "--json"]
    for flag, value in (("--storage", storage), ("--records", records), ("--tracking-uri", tracking_uri)):
        if value:
            command += [flag, value]
    if cost_model:
        command += ["--cost-model", cost_model]
    if quiet or as_json:
        command += ["--quiet"]
    # several workers on this machine: each tune in one process (no forked helper, `axon.forked`)
    env = {**os.environ, "AXON_CPUS": os.environ.get("AXON_CPUS", "1")} if workers > 1 else None
    # in their own session: a terminal's Ctrl-C reaches them once, from `wait_workers`, not twice
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        for _ in range(workers)
    ]
    outputs = wait_workers(procs)
    reports = [out for out in outputs if any(line.startswith("{") for line in out.splitlines())]
    if not reports:
        codes = ", ".join(str(p.returncode) for p in procs)
        raise SpecError(f"sweep {sweep}: no worker wrote the summary (exit codes {codes}); run it again to resume")
    show_report(_from_json(reports[0]), path, as_json, fail_on_regression)


def wait_workers(procs: list[subprocess.Popen], grace_s: float = 60.0) -> list[str]:
    """The workers' outputs once they exit. Interrupted (SIGINT, SIGTERM, SIGHUP: kill -INT, a job
    runner's stop, the terminal closing), each gets the SIGINT of a Ctrl-C and `grace_s` to stop
    (SIGKILL after), then KeyboardInterrupt: the sweep exited 130 while its workers tuned on to its end."""

    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return [p.communicate()[0] for p in procs]
    except KeyboardInterrupt:
        for sig in previous:  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.communicate(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@click.command()
@workdir_option
@click.option("--sweep", "sweep_id", default=None, help="The sweep to join (default: every unfinished one).")
@click.option("--storage", default=None, help="Optuna storage (postgresql://...), shared by the fleet.")
@click.option("--records", default=None, help="Records store (default: --storage's URL, else WORKDIR/records.db).")
@click.option("--tracking-uri", default=None, help="MLflow tracking server (default WORKDIR/mlflow.db).")
@click.option("--cost-model", default=None, help="Start every task from this model.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary (if this worker writes it) as JSON.")
@click.option("--quiet", is_flag=True, help="No line for each task taken.")
def worker(workdir, sweep_id, storage, records, tracking_uri, cost_model, as_json, quiet) -> None:
    """Join the sweeps in the shared store and tune their tasks until every one is done.

    Started on any machine with the same --storage (and --tracking-uri), it takes the next task
    no worker holds; the last to finish writes the summary and retrains the cost model.
    """
    stop_like_ctrl_c()  # as `tune` and `sweep`, also in the background; SIGTERM as Ctrl-C
    shared = bool(records or storage)
    where = "the shared store" if shared else Workdir(Workdir.locate(workdir)).records  # a URL may hold a password
    fleet = Fleet(resolve_workdir(workdir), storage, records, tracking_uri) if shared or Path(where).exists() else None
    if fleet is not None and storage:  # as `sweep`: refused before any task, not once per task
        journal_storage(fleet.workdir, storage)
    if fleet is None and sweep_id:  # a mistyped --workdir was left behind with empty stores
        raise StoreError(f"no sweep {sweep_id} in {where}: start it with axon sweep CONFIG --workers N")
    sweeps = [] if fleet is None else [sweep_id] if sweep_id else pending_sweeps(fleet)
    if fleet is None or not sweeps:  # it exited 0 without a word: a worker at the wrong store looked finished
        click.echo(
            f"axon worker: no unfinished sweep in {where}: nothing to do (axon sweep CONFIG starts one)", err=True
        )
        return
    for sweep in sweeps:
        report = work(fleet, sweep, cost_model=cost_model, on_task=None if quiet else _taken, callbacks=[Warnings()])
        if report is not None:
            click.echo(_to_json(report) if as_json else report.table())


def _taken(key: str, position: int, tasks: int) -> None:
    # `axon sweep --workers 2` printed nothing from its first task to its summary (minutes)
    click.echo(f"axon worker {os.getpid()}: task {position + 1}/{tasks} {key}", err=True)


class Warnings(Callback):
    """A task's tune warnings as `axon tune` shows them (they were Python warnings with a source line)."""

    def on_warning(self, message: str) -> None:
        click.echo(f"axon: warning: {message}", err=True)


def _to_json(report: SweepReport) -> str:
    data = {**report.__dict__, "rows": [r.__dict__ for r in report.rows]}
    return json.dumps(data, default=str)


def _from_json(text: str) -> SweepReport:
    data = json.loads([line for line in text.splitlines() if line.startswith("{")][-1])
    rows = tuple(SweepRow(**r) for r in data.pop("rows"))
    return SweepReport(**{**data, "rows": rows, "regressions": tuple(data["regressions"])})


def show_report(report: SweepReport, path: object, as_json: bool, fail_on_regression: bool) -> None:
    """Print a sweep's report; exit 1 when a task failed, 3 on a regression with --fail-on-regression."""
    if as_json:
        click.echo(
            json.dumps(
                {
                    "name": report.name,
                    "parent_run_id": report.parent_run_id,
                    "regressions": list(report.regressions),
                    "rows": [r.__dict__ for r in report.rows],
                    "model_versions": report.model_versions,
                },
                default=str,
            )
        )
    else:
        click.echo(report.table())
        click.echo(
            f"\nsweep {report.name}: {len(report.rows)} tasks in {report.elapsed_s:.0f} s; "
            f"parent run {report.parent_run_id}"
        )
        for hw, v in report.model_versions.items():
            acc = report.model_accuracy.get(hw)  # None printed as "None" where too few records were held out
            held = "n/a: too few records to hold some out" if acc is None else f"{acc:.3f}"
            click.echo(f"cost model for {hw}: registered version {v} (held-out pairwise accuracy {held})")
        if report.regressions:
            click.echo(f"REGRESSIONS (> threshold slower than the previous sweep): {', '.join(report.regressions)}")
        click.echo(f"look: axon ui --workdir {path}   |   axon runs --workdir {path}")
    for row in report.failures:
        click.echo(
            f"axon: error: sweep {report.name}: entry {row.key} failed: "
            f"{row.error.splitlines()[0] if row.error else '?'}",
            err=True,
        )
    if report.failures:
        sys.exit(1)
    if fail_on_regression and report.regressions:
        sys.exit(3)
