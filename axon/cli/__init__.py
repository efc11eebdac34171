"""The `axon` command: a thin layer over the Python API, the top layer of the package.

Each command group lives in a module of this package (tune.py: tune and sweep; variants.py;
nki.py and profile.py: the emulator and the simulator; track.py: ui and runs); the heavy
libraries (MLflow, XGBoost, matplotlib) load on first use, not here. Any `AxonError` becomes
one line on stderr and exit code 2.
"""

from __future__ import annotations

import dataclasses
import logging
import sys

import click
import numpy as np

from axon import lazy
from axon.cli.common import dtype_option, interrupted_exit, preset_option, shape_option, spec_graph
from axon.cli.fleet import worker
from axon.cli.nki import nki
from axon.cli.profile import profile
from axon.cli.track import runs, ui
from axon.cli.tune import sweep, tune
from axon.cli.variants import variants, verify
from axon.errors import AxonError, path_too_long, storage_failure, symlink_loop
from axon.ir import DEFINED_RANGE, Graph, defined_case, flops, min_bytes
from axon.search.guards import check_evaluate, check_representable
from axon.target import DEFAULT_HW, load_hw
from axon.workloads import all_workloads


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="axon")
def cli() -> None:
    """Axon: a verified superoptimizer and autotuner for NKI kernels on AWS Trainium."""


@cli.command()
def workloads() -> None:
    """List the built-in workloads: kind, default shape, FLOPs, minimum HBM bytes."""

    rows = []
    for w in all_workloads():
        g = w.graph("default")
        shape = ",".join(f"{k}={v}" for k, v in w.presets["default"].items())
        rows.append((w.name, w.kind, shape, f"{flops(g) / 1e9:.2f}", f"{min_bytes(g) / 2**20:.1f}"))
    header = ("workload", "kind", "default shape", "GFLOP", "min MiB")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        click.echo("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


@cli.command()
@click.argument("workload")
@shape_option
@preset_option
@dtype_option
def show(workload: str, shape: str | None, preset: str, dtype: str) -> None:
    """Print the traced graph of WORKLOAD (a built-in name or path.py:function)."""

    g = spec_graph(workload, shape, preset, dtype)
    click.echo(g.format())
    click.echo(f"# hash {g.canonical_hash()}  flops {flops(g):,}  min_bytes {min_bytes(g):,}")


@cli.command()
@click.argument("workload")
@shape_option
@click.option("--preset", default="small", show_default=True, help="Shape preset.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1))
@click.option("--force", is_flag=True, help="Evaluate even when it needs more than half of this machine's memory.")
def check(workload: str, shape: str | None, preset: str, seed: int, force: bool) -> None:
    """Evaluate WORKLOAD's graph on random inputs (float64) and report output statistics."""

    g = spec_graph(workload, shape, preset, "float32")
    check_representable(g, workload)
    if not force:
        check_evaluate(g, workload)
    _, outputs, undefined = defined_case(g, seed)  # the tuner's checks' inputs (reference_case)
    if undefined:
        lo, hi = DEFINED_RANGE
        click.echo(
            f"{g.name}: NaN in {', '.join(undefined)} on inputs in [-1, 1] (an op outside its domain, such as the "
            f"log or sqrt of a negative, or an overflow such as inf - inf); evaluated on [{lo:g}, {hi:g}] instead, "
            f"as the tuner checks kernels ({_range_advice(g)})"
        )
    for name, value in outputs.items():
        click.echo(f"{g.name}.{name}: shape {list(value.shape)}  {output_stats(value)}")
        if not np.all(np.isfinite(value)):
            raise click.exceptions.Exit(1)


def _range_advice(g: Graph) -> str:
    """What to do about inputs the spec is undefined on: declare ranges, or, where they are declared
    (told to declare the range it had declared, a user had nothing to change), narrow them."""
    declared = {n.attr("name"): n.attr("range") for n in g.inputs if n.attr("range")}
    if not declared:
        return 'declare the range an input takes: ax.tensor("M N", range=(lo, hi))'
    ranges = ", ".join(f"{name} in [{lo:g}, {hi:g}]" for name, (lo, hi) in declared.items())
    others = "" if len(declared) == len(g.inputs) else ", or declare the range of the others"
    return f"declared: {ranges}; narrow the range of the input the op is undefined on{others}"


def output_stats(value: np.ndarray) -> str:
    """Mean, std and "finite yes"; where some elements are not finite, how many of each kind, and the
    statistics of the finite ones (a mean over an inf printed inf, and numpy warned on the std).

    >>> output_stats(np.array([1.0, 3.0, np.inf, np.nan]))
    'mean +2  std 1  finite NO: 1 +inf, 1 NaN of 4 elements (mean and std of the 2 finite)'
    """
    ok = np.isfinite(value)
    shown = value[ok]
    scale = float(np.abs(shown).max()) if shown.size else 0.0
    scale = scale if scale > 0 else 1.0  # values near the float64 limit: summed as multiples of their maximum
    stats = (
        f"mean {(shown / scale).mean() * scale:+.6g}  std {(shown / scale).std() * scale:.6g}"
        if shown.size
        else "mean -  std -"
    )
    if ok.all():
        return f"{stats}  finite yes"
    kinds = {"+inf": np.isposinf(value), "-inf": np.isneginf(value), "NaN": np.isnan(value)}
    counts = ", ".join(f"{int(np.count_nonzero(m)):,} {k}" for k, m in kinds.items() if m.any())
    return f"{stats}  finite NO: {counts} of {value.size:,} elements (mean and std of the {shown.size:,} finite)"


@cli.command("hw")
@click.argument("name_or_path", default=DEFAULT_HW)
def hw_command(name_or_path: str) -> None:
    """Load and validate a hardware file (a built-in name or a YAML path) and print its numbers."""

    hw = load_hw(name_or_path)
    click.echo(f"{hw.name} (NeuronCore-v{hw.generation})  file {hw.source}  sha256 {hw.file_hash}")
    for section in ("engines", "tensor_engine", "memory", "dma", "costs", "ports"):
        value = getattr(hw, section)
        items = dataclasses.asdict(value)
        flat = ", ".join(
            f"{k}={v}" if not isinstance(v, dict) else f"{k}=({', '.join(f'{a}={b}' for a, b in v.items())})"
            for k, v in items.items()
        )
        click.echo(f"  {section}: {flat}")


cli.add_command(tune)
cli.add_command(sweep)
cli.add_command(worker)
cli.add_command(variants)
cli.add_command(verify)
cli.add_command(nki)
nki.add_command(profile)
cli.add_command(ui)
cli.add_command(runs)


def main(argv: list[str] | None = None) -> None:

    lazy.COMMAND_PROCESS = True
    for noisy in ("mlflow", "alembic"):  # schema-migration chatter is not for the terminal
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        # without standalone_mode click hands a command's Exit(n) back as this value, not as the
        # exception below: `axon check`'s "finite NO" exited 0
        code = cli.main(args=argv, prog_name="axon", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except AxonError as exc:
        click.echo(f"axon: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:  # a bad option or argument: one line, with the command it was for
        command = exc.ctx.command_path if exc.ctx is not None else "axon"
        click.echo(f"axon: error: {command}: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except (click.Abort, KeyboardInterrupt):
        click.echo("axon: interrupted", err=True)
        sys.exit(interrupted_exit())
    except MemoryError as exc:  # past a guard with --force: "Unable to allocate 2.84 PiB ..." was a traceback
        click.echo(f"axon: error: out of memory: {exc or 'an allocation failed'}: use a smaller --shape", err=True)
        sys.exit(2)
    except Exception as exc:  # a full or read-only disk is the machine's, not a bug: one line, not a traceback
        first = (sys.argv[1:] if argv is None else argv)[:1]
        resumable = first in (["tune"], ["sweep"], ["worker"])
        line = storage_failure(exc, resumable=resumable) or path_too_long(exc) or symlink_loop(exc)
        if line is None:
            raise
        click.echo(f"axon: error: {line}", err=True)
        sys.exit(2)
