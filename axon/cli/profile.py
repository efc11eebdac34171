"""`axon nki profile FILE.py:FN --input a=bfloat16[128,512] --hw trn1`: trace, simulate, report.

A thin layer over `axon.nki.trace` and `axon.sim.simulate`; the `nki` group (axon/nki/cli.py)
attaches this command. Heavy imports happen inside the command.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import numpy as np

from axon.cli.common import non_empty
from axon.cli.nki import (
    ARG_HELP,
    bind,
    bounded,
    check_input_memory,
    kernel_args,
    load_user_kernel,
    parse_input_spec,
    random_array,
)
from axon.cli.spmd import GRID_HELP, launch, parse_grid
from axon.errors import NKIError
from axon.nki import run_with_trace
from axon.search.guards import no_directory
from axon.sim import simulate
from axon.target import DEFAULT_HW, load_hw


@click.command("profile")
@click.argument("kernel")
@click.option(
    "--input", "inputs", multiple=True, help="NAME=DTYPE[SHAPE], e.g. a=bfloat16[128,512]; once per argument."
)
@click.option("--arg", "args", multiple=True, help=ARG_HELP)
@click.option("--grid", "grid_text", metavar="N[,M...]", help=GRID_HELP)
@click.option("--hw", default=DEFAULT_HW, show_default=True, help="Hardware file: a built-in name or a YAML path.")
@click.option(
    "--out",
    "out_dir",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    callback=non_empty,
    help="Directory for the timeline files (<fn>.perfetto.json, <fn>.png).",
)
@click.option("--no-png", is_flag=True, help="Skip the PNG Gantt chart.")
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(0, 2**32 - 1),
    help="Seed of the random inputs it runs on.",
)
def profile(
    kernel: str,
    inputs: tuple[str, ...],
    args: tuple[str, ...],
    grid_text: str | None,
    hw: str,
    out_dir: str,
    no_png: bool,
    seed: int,
) -> None:
    """Time KERNEL (FILE.py:FN) on the simulated NeuronCore and write its timeline.

    The kernel is executed on random inputs of the given shapes, as `axon nki run` does, so an input
    it cannot take is refused the same way (one line, exit 2); the timeline is of that execution.
    """

    out = Path(out_dir)
    if out.exists() and not out.is_dir():  # a pipe or device got past click's check: a traceback at the end
        raise NKIError(f"--out {out_dir} is not a directory: give a directory for the timeline files")
    if not out.is_dir() and not out.parent.is_dir():
        raise NKIError(f"--out {out_dir}: {no_directory(out.parent)}")
    if not os.access(out if out.is_dir() else out.parent, os.W_OK | os.X_OK):  # was found after the profile ran
        raise NKIError(f"--out {out_dir} is not writable: give a directory you can write")
    name = kernel.rpartition(":")[2] or "kernel"
    targets = [out / f"{name}.perfetto.json"] + ([] if no_png else [out / f"{name}.png"])
    for target in targets:  # found only after the kernel ran, as a traceback, before
        # a pipe there: writing the timeline waited for a reader for ever
        if target.exists() and (not target.is_file() or not os.access(target, os.W_OK)):
            kind = "not writable" if target.is_file() else "a directory" if target.is_dir() else "not a regular file"
            raise NKIError(f"--out {out_dir}: {target} is {kind}: give another --out")
    spec = load_hw(hw)
    specs = [parse_input_spec(text) for text in inputs]
    kwargs = kernel_args(args)
    grid = parse_grid(grid_text)
    check_input_memory(specs)
    fn = load_user_kernel(kernel)
    launched = launch(fn, grid, grid_text)
    rng = np.random.default_rng(seed)
    call, kwargs = bind(fn, [(name, random_array(shape, dtype, rng)) for name, shape, dtype in specs], kwargs)
    with _made(out, out_dir), np.errstate(all="ignore"):  # the values do not matter, only the instructions
        _, executed = bounded(
            kernel, getattr(fn, "__name__", "kernel"), lambda: run_with_trace(launched, *call, hw=spec, **kwargs)
        )
    timing = simulate(executed, spec)
    click.echo(timing.summary())
    written = [timing.timeline.to_perfetto(targets[0])]
    if not no_png:
        written.append(timing.timeline.to_png(targets[1]))
    for path in written:
        click.echo(f"wrote {path}")


@contextmanager
def _made(out: Path, out_dir: str) -> Iterator[None]:
    """--out made before the kernel runs, and taken away again when it made it and the run fails: a
    directory the system refuses to make (/sys/x, EPERM) passed os.access and was an OSError
    traceback from mkdir after the whole run."""
    if out.is_dir():
        yield
        return
    try:
        out.mkdir()
    except OSError as exc:
        raise NKIError(f"--out {out_dir} cannot be made: {exc.strerror}: give a directory you can write") from None
    try:
        yield
    except BaseException:
        out.rmdir()
        raise
