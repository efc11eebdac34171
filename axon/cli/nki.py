"""`axon nki`: run kernel files in the emulator from the command line.

`axon nki run FILE.py:FN --input a=float32[128,512]` runs on random inputs and prints each
output's shape and dtype (or the error, one line, exit 2). Other commands attach with
`nki.add_command(...)` (the simulator adds `profile`); `parse_input_spec` is shared with them.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import click
import numpy as np

import axon.nki
from axon.errors import NKIError
from axon.nki.dtypes import as_dtype
from axon.target import DEFAULT_HW

_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([A-Za-z0-9_]+)\s*\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]\s*$")


def parse_input_spec(text: str) -> tuple[str, tuple[int, ...], str]:
    """`"a=float32[128,512]"` -> ("a", (128, 512), "float32"); NKIError on anything else.

    >>> parse_input_spec("a=bfloat16[128, 512]")
    ('a', (128, 512), 'bfloat16')
    """

    m = _SPEC.match(text)
    if not m:
        raise NKIError(f"malformed --input {text!r}: expected NAME=DTYPE[D0,D1,...], e.g. a=float32[128,512]")
    name, dtype, dims = m.group(1), m.group(2), tuple(int(d) for d in m.group(3).split(","))
    as_dtype(dtype)
    if any(d <= 0 for d in dims):
        raise NKIError(f"malformed --input {text!r}: dimensions must be positive")
    return name, dims, dtype


def check_input_memory(specs: list[tuple[str, tuple[int, ...], str]], memory_bytes: int | None = None) -> None:
    """NKIError when the random inputs (and as much again for the emulator's copies) would take more
    than half of this machine's memory: refused before anything is allocated."""

    need = 2 * sum(math.prod(shape) * as_dtype(dtype).itemsize for _, shape, dtype in specs)
    total = memory_bytes or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > total / 2:
        gib = 2**30
        raise NKIError(
            f"--input arrays need about {need / gib:,.1f} GiB to emulate, more than half of this machine's "
            f"{total / gib:,.1f} GiB: use smaller inputs"
        )


def random_array(shape: tuple[int, ...], dtype: str, rng: Any) -> Any:
    """Standard-normal inputs rounded to `dtype` (the emulator's inputs for CLI runs)."""

    return rng.standard_normal(shape).astype(as_dtype(dtype))


@click.group()
def nki() -> None:
    """Run NKI kernels in Axon's emulator."""


@nki.command("run")
@click.argument("kernel")
@click.option("--input", "inputs", multiple=True, help="NAME=DTYPE[D0,D1,...], in the kernel's argument order.")
@click.option("--hw", default=DEFAULT_HW, show_default=True, help="Hardware file name or path.")
@click.option("--seed", default=0, show_default=True, type=int)
def run_cmd(kernel: str, inputs: tuple[str, ...], hw: str, seed: int) -> None:
    """Run KERNEL (FILE.py:FUNCTION) on random inputs; print output shapes and dtypes."""

    specs = [parse_input_spec(s) for s in inputs]
    check_input_memory(specs)
    fn = axon.nki.load_kernel(kernel)
    rng = np.random.default_rng(seed)
    arrays = [random_array(shape, dtype, rng) for _, shape, dtype in specs]
    outs = axon.nki.run(fn, *arrays, hw=hw)
    for i, out in enumerate(outs if isinstance(outs, tuple) else (outs,)):
        finite = bool(np.all(np.isfinite(out.astype(np.float32))))
        click.echo(
            f"output {i}: shape {list(out.shape)} dtype {out.dtype.name}" + ("" if finite else " (non-finite values)")
        )
