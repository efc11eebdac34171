"""`axon tune` and `axon sweep`: thin click wrappers over `axon.search.api` and `axon.search.sweep`."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from tqdm import tqdm

from axon.cli.common import (
    interrupted_exit,
    non_empty,
    resolve_workdir,
    shape_option_with,
    stop_like_ctrl_c,
    workdir_option,
)
from axon.cli.fleet import fleet_sweep, show_report
from axon.ir import KERNEL_DTYPES
from axon.measure.events import Callback, TrialLog
from axon.options import parse_shape_option, parse_shape_range
from axon.search.api import TuneInterrupted, TuneRequest
from axon.search.api import tune as run_tune
from axon.search.familytune import tune_family
from axon.search.sweep import run_sweep
from axon.search.sweepconfig import load_sweep
from axon.shipped import cost_model_ref
from axon.target import DEFAULT_HW


def _warn(message: str) -> None:
    click.echo(f"axon: warning: {message}", err=True)


class Progress(Callback):
    """A tqdm bar on stderr showing the best latency so far (silent with --quiet/--json); with
    --verbose each failed trial's reason; warnings as `axon: warning:` lines. The bar is drawn when
    the search starts, so a refused request prints only its error."""

    def __init__(self, total: int, label: str, enabled: bool, verbose: bool = False) -> None:
        self.bar: Any = None
        self.total, self.label, self.enabled, self.verbose = total, label, enabled, verbose

    def on_start(self, context: Any) -> None:
        if self.enabled and self.bar is None:
            self.bar = tqdm(
                total=self.total, desc=self.label, unit="trial", file=sys.stderr, dynamic_ncols=True, leave=True
            )

    def on_warning(self, message: str) -> None:
        _warn(message)

    def on_resume(self, done: int, best_ns: float | None) -> None:
        # a resumed study's finished trials count against --trials: the bar starts at them (it
        # started at 0/30 and ended at 4/30 when 26 were done before)
        if self.bar is not None:
            self.bar.n = self.bar.last_print_n = min(done, self.total)  # as tqdm(initial=done): not in the rate
            if best_ns is not None:
                self.bar.set_postfix_str(f"best {best_ns / 1e3:,.1f} us", refresh=False)

    def on_trial(self, log: TrialLog) -> None:
        if self.verbose and log.status in ("infeasible", "error"):
            line = (
                f"trial {log.number} {log.status}: {log.reason.strip().splitlines()[0] if log.reason.strip() else '?'}"
            )
            if self.bar is not None:
                self.bar.write(line, file=sys.stderr)
            else:
                click.echo(line, err=True)
        if self.bar is None:
            return
        self.bar.update(1)
        if log.best_ns is not None:
            self.bar.set_postfix_str(f"best {log.best_ns / 1e3:,.1f} us")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _stopped(stop: KeyboardInterrupt, message: str = "interrupted", **what: object) -> dict[str, object]:
    """What --json prints when a tune, family or sweep is interrupted: a script reading stdout learns
    that it stopped and where the kernel written is, not an empty stream."""
    tuning = stop if isinstance(stop, TuneInterrupted) else None
    return {
        "interrupted": True,
        **what,  # workload=..., or sweep=...
        "best_latency_ns": tuning.best_latency_ns if tuning else None,
        "kernel_path": (tuning.kernel_path or None) if tuning else None,
        "message": tuning.message if tuning else message,
    }


def _has_list(shape: str) -> bool:
    """`M=512,1024`: an item without `=` continues the previous dimension's list."""
    return any("=" not in item for item in shape.split(","))


@click.command()
@click.argument("workload")
@shape_option_with(
    "Bind dimensions over the preset, e.g. M=4096,K=1024; a range M=512..8192[:STEP] or a list "
    "M=512,1024 tunes a kernel family for those shapes."
)
@click.option("--preset", default="default", show_default=True)
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(KERNEL_DTYPES))
@click.option("--hw", default=DEFAULT_HW, show_default=True, help="Hardware file: trn1, trn2 or a YAML path.")
@click.option("--backend", default="sim", show_default=True, type=click.Choice(["sim", "neuron"]))
@click.option("--trials", default=64, show_default=True, type=click.IntRange(1))
@click.option(
    "--seconds",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Time budget in seconds, > 0 (stops at whichever budget ends first).",
)
@click.option("--sampler", default="costmodel", show_default=True, type=click.Choice(["costmodel", "tpe", "random"]))
@click.option(
    "--cost-model",
    default=None,
    callback=lambda ctx, param, value: cost_model_ref(value),
    help="A model file, a shipped model (trn1) or models:/axon-costmodel-trn1@champion to start from.",
)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1))
@workdir_option
@click.option(
    "--storage",
    default=None,
    help="Optuna storage: a journal file path or postgresql://... (default WORKDIR/optuna.log); "
    "a PostgreSQL URL also holds the records unless --records is given.",
)
@click.option(
    "--records", default=None, help="Records store: a SQLite file or postgresql://... (default WORKDIR/records.db)."
)
@click.option("--study", default=None, help="Study name (workers with the same name share one study).")
@click.option(
    "--out",
    default=None,
    callback=non_empty,
    help="Where to write the best kernel (default WORKDIR/kernels/...); for a kernel family, a directory.",
)
@click.option("--tracking-uri", default=None, help="MLflow tracking server (default WORKDIR/mlflow.db).")
@click.option("--no-track", is_flag=True, help="Do not log to MLflow.")
@click.option(
    "--patience", default=None, type=click.IntRange(min=1), help="Stop after this many trials without improvement."
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--verbose", "-v", is_flag=True, help="Print each failed trial's reason as it happens (stderr).")
@click.option("--force", is_flag=True, help="Skip the HBM, host-memory and time guards (for those who know better).")
@click.option(
    "--cpus",
    default=None,
    type=click.IntRange(min=1),
    help="Processes the tune uses (default $AXON_CPUS, else 2 where 2 CPUs are free to it): with 2, a forked "
    "child lowers candidates and traces while this process measures; the decisions are the same with 1.",
)
def tune(
    workload,
    shape,
    preset,
    dtype,
    hw,
    backend,
    trials,
    seconds,
    sampler,
    cost_model,
    seed,
    workdir,
    storage,
    records,
    study,
    out,
    tracking_uri,
    no_track,
    patience,
    quiet,
    as_json,
    verbose,
    force,
    cpus,
) -> None:
    """Tune WORKLOAD (a built-in name or path.py:function) and write the best verified kernel.

    A spec file's path is taken from the working directory. Ctrl-C writes the best kernel so far
    (checked against the reference) and exits 130.
    """

    # started in the background by a non-interactive shell, SIGINT arrives ignored: Ctrl-C (or
    # kill -INT) must still stop the run and write the best kernel so far
    stop_like_ctrl_c()
    parsed = parse_shape_range(shape) if shape and (".." in shape or _has_list(shape)) else {}
    fixed = {k: v[0] for k, v in parsed.items() if len(v) == 1}
    ranges = {k: v for k, v in parsed.items() if len(v) > 1}
    request = TuneRequest.make(
        workload,
        shape=fixed if parsed else parse_shape_option(shape),  # M=128..128 is M=128
        preset=preset,
        dtype=dtype,
        hw=hw,
        backend=backend,
        trials=trials,
        seconds=seconds,
        sampler=sampler,
        cost_model=cost_model,
        seed=seed,
        workdir=resolve_workdir(workdir),
        storage=storage,
        records=records,
        study=study,
        out=out,
        track=not no_track,
        tracking_uri=tracking_uri,
        patience=patience,
        force=force,
        workers=cpus,
    )
    if ranges:
        if out and (out.endswith(".py") or os.path.isfile(out)):  # a family is a directory of files
            raise click.UsageError(
                f"--out {out} names a file, and a kernel family (a --shape range or list) is written as a "
                "directory (its module, kernels and plot): give a directory path"
            )
        try:
            family = tune_family(request, ranges, warn=_warn)
        except KeyboardInterrupt as stop:
            message = (
                "interrupted, no family written; the measurements so far are in the records database "
                "(--records, default WORKDIR/records.db), and the same command resumes: measured kernels are "
                "reused, not measured again"
            )
            click.echo(f"axon: {message}", err=True)
            if as_json:
                click.echo(json.dumps(_stopped(stop, message, workload=workload, family=None)))
            sys.exit(interrupted_exit())
        click.echo(json.dumps(family.as_dict(), default=str) if as_json else family.summary())
        return
    label = workload.rpartition(":")[2] if ".py:" in workload else workload
    if out and out.endswith(("/", os.sep)):  # the path made of it drops the slash: `newdir/` became a file `newdir`
        raise click.UsageError(
            f"--out {out} names a directory (it ends in '/'), and tune writes one kernel file: give a file "
            f"path, e.g. {out}{label}.py"
        )
    progress = Progress(trials, label, enabled=not (quiet or as_json), verbose=verbose)
    try:
        report = run_tune(request, [progress])
    except TuneInterrupted as stop:
        progress.close()
        click.echo(f"axon: {stop.message}", err=True)
        if as_json:
            click.echo(json.dumps(_stopped(stop, workload=label)))
        sys.exit(interrupted_exit())
    finally:
        progress.close()
    if as_json:
        click.echo(json.dumps(report.as_dict(), default=str))
    else:
        click.echo(report.summary())


@click.command()
@click.argument("config", type=click.Path())
@workdir_option
@click.option(
    "--cost-model",
    default=None,
    callback=lambda ctx, param, value: cost_model_ref(value),
    help="Start every task from this model (a file, a shipped model's name, or models:/...).",
)
@click.option("--tracking-uri", default=None, help="MLflow tracking server (default WORKDIR/mlflow.db).")
@click.option("--trials", default=None, type=click.IntRange(1), help="Override the config's trials per task (>= 1).")
@click.option(
    "--sampler", default=None, type=click.Choice(["costmodel", "tpe", "random"]), help="Override the config's sampler."
)
@click.option(
    "--fail-on-regression", is_flag=True, help="Exit 3 when a task is more than the threshold slower than last time."
)
@click.option("--quiet", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--workers", default=1, type=click.IntRange(1), help="Tune the tasks in this many local worker processes."
)
@click.option("--storage", default=None, help="Optuna storage shared by the workers (postgresql://...).")
@click.option("--records", default=None, help="Records store shared by the workers (default: --storage's URL).")
def sweep(
    config,
    workdir,
    cost_model,
    tracking_uri,
    trials,
    sampler,
    fail_on_regression,
    quiet,
    as_json,
    workers,
    storage,
    records,
) -> None:
    """Run (or resume) the sweep CONFIG (e.g. configs/sweeps/nightly.yaml) as nested MLflow runs.

    An entry's spec file (`path.py:function`) is found from the config file's directory. Every entry
    is checked before the first is tuned (exit 2 naming the entry). Exit 1 when an entry failed
    while tuning (each named with its reason on stderr), else 3 with --fail-on-regression when a
    task got slower, else 0.
    """

    # as `tune`: started in the background by a non-interactive shell, SIGINT arrives ignored, and
    # Ctrl-C (or kill -INT) ran the whole sweep to its end; it must stop it (a resumed sweep goes on)
    stop_like_ctrl_c()
    path = resolve_workdir(workdir)
    if workers > 1 or storage or records:
        fleet_sweep(
            config,
            path,
            workers,
            storage,
            records,
            tracking_uri,
            cost_model,
            trials,
            sampler,
            as_json,
            fail_on_regression,
            quiet,
        )
        return
    parsed = load_sweep(config)
    bar: dict[str, Progress | None] = {"p": None}

    def on_task(key: str, i: int, n: int) -> None:
        if bar["p"] is not None:
            bar["p"].close()
        progress = Progress(trials or parsed.trials, f"[{i + 1}/{n}] {key}", enabled=not (quiet or as_json))
        progress.on_start(None)
        bar["p"] = progress

    class CurrentTask(Callback):
        """The task's tune as its bar sees it: each trial, the trials a resumed study had done (its bar
        ended at 2/10), the tune's warnings as `axon: warning:` lines (they were Python warnings,
        'storage.py:94: UserWarning:' and the source line)."""

        def on_trial(self, log: TrialLog) -> None:
            if bar["p"] is not None:
                bar["p"].on_trial(log)

        def on_resume(self, done: int, best_ns: float | None) -> None:
            if bar["p"] is not None:
                bar["p"].on_resume(done, best_ns)

        def on_warning(self, message: str) -> None:
            _warn(message)

    try:
        report = run_sweep(
            config,
            path,
            cost_model=cost_model,
            tracking_uri=tracking_uri,
            on_task=on_task,
            trials=trials,
            sampler=sampler,
            callbacks=[CurrentTask()],
        )
    except KeyboardInterrupt as stop:  # its line (the kernel written, or why none) was lost to "axon: interrupted"
        if bar["p"] is not None:
            bar["p"].close()
        what = stop.message if isinstance(stop, TuneInterrupted) else "interrupted"
        click.echo(f"axon: sweep {parsed.name}: {what}; the same command resumes the sweep", err=True)
        if as_json:
            click.echo(json.dumps(_stopped(stop, sweep=parsed.name)))
        sys.exit(interrupted_exit())
    finally:
        if bar["p"] is not None:
            bar["p"].close()
    show_report(report, path, as_json, fail_on_regression)
