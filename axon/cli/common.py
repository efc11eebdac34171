"""What the commands share: the working-directory, shape, preset and dtype options."""

from __future__ import annotations

import signal
from typing import Any

import click

from axon.ir import KERNEL_DTYPES
from axon.options import parse_shape_option
from axon.search.api import workload_graph
from axon.workdir import Workdir
from axon.workloads import get


def non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A path option given as "" (an unset variable: `--out "$OUT"`) was taken as not given: the
    command ran on the default path without a word."""
    if value is not None and not value.strip():
        raise click.BadParameter("is empty: give a path, or leave the option out for the default")
    return value


workdir_option = click.option(
    "--workdir",
    default=None,
    callback=non_empty,
    help="Working directory with records.db, mlflow.db (default $AXON_HOME or ./.axon).",
)


def joined_shapes(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> str | None:
    """--shape given several times is one list (`--shape M=1,2 --shape N=512` is M=1,2,N=512): the
    last one alone was kept, and the others' dimensions were silently dropped."""
    return ",".join(values) if values else None


def shape_option_with(help_text: str) -> Any:
    return click.option("--shape", multiple=True, callback=joined_shapes, help=help_text)


shape_option = shape_option_with("Bind dimensions, e.g. M=4096,K=1024 (over the preset).")
preset_option = click.option("--preset", default="default", show_default=True, help="Shape preset.")
dtype_option = click.option("--dtype", default="float32", show_default=True, type=click.Choice(KERNEL_DTYPES))


def resolve_workdir(workdir: str | None) -> Workdir:
    """--workdir, else $AXON_HOME, else ./.axon (created)."""
    return Workdir.resolve(workdir)


def spec_graph(workload: str, shape: str | None, preset: str, dtype: str) -> Any:
    """The graph of a built-in workload or a spec file `path.py:function` at a preset and --shape."""
    return workload_graph(get(workload), preset, dtype, parse_shape_option(shape))


_STOPPED_BY: list[int] = []  # the signal that stopped the command, when it was not a Ctrl-C


def stop_like_ctrl_c() -> None:
    """Ctrl-C and SIGTERM (`kill`, a job runner's stop) stop a long command the same way: the best
    kernel so far checked and written, the MLflow run ended KILLED at once, and the same command
    resuming later. SIGTERM ended the process where it stood (exit 143, no kernel written, the run
    marked KILLED only by the next command on this host). SIGINT is restored too: started in the
    background by a non-interactive shell, it arrives ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)


def _terminated(signum: int, frame: object) -> None:
    _STOPPED_BY.append(signum)
    raise KeyboardInterrupt


def interrupted_exit() -> int:
    """The exit status of an interrupted command, as a shell reports the signal: 130 after a Ctrl-C,
    143 after a SIGTERM."""
    return 128 + _STOPPED_BY[0] if _STOPPED_BY else 130
