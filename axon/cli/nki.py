"""`axon nki`: run kernel files in the emulator from the command line.

`axon nki run FILE.py:FN --input a=float32[128,512] [--arg pool_size=2] [--grid 4]` runs on random
inputs (tensors and non-tensor parameters bound by name, see `bind`; an SPMD kernel on its launch grid,
see `axon.cli.spmd`), stopped after `RUN_SECONDS`, and prints each
output's shape and dtype (or the error, one line, exit 2). Other commands attach with
`nki.add_command(...)` (the simulator adds `profile`); `parse_input_spec` and `kernel_args` are shared
with them.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import re
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click
import numpy as np

import axon.nki
from axon.cli.spmd import GRID_HELP, launch, parse_grid, users_file
from axon.errors import NKIError
from axon.nki.dtypes import as_dtype
from axon.target import DEFAULT_HW
from axon.timelimit import MemoryUp, TimeUp, available_bytes, rss_bytes, time_limit
from axon.workloads import IMPORT_SECONDS

# a kernel's run from the command line stops after this long (an endless loop in its body hung `nki run`
# and `nki profile` for ever); the longest AWS tutorial and NKIBench kernel runs in under a minute here
# (NKIBench's matmul M4096 N12288 K5120, 40 s to run, 51 s to profile, on a loaded machine)
RUN_SECONDS = 900.0
MEMORY_SHARE = 0.8  # of the memory free when the kernel starts: more stops it (bounded)

T = TypeVar("T")

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


_ARG = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.+)$", re.S)


def parse_kernel_arg(text: str) -> tuple[str, Any]:
    """`"pool_size=2"` -> ("pool_size", 2): a kernel's non-tensor parameter, a Python literal (number,
    bool, None, string, tuple or list); NKIError on anything else.

    >>> parse_kernel_arg("eps=1e-6"), parse_kernel_arg("axes=(1, 2)"), parse_kernel_arg("act='gelu'")
    (('eps', 1e-06), ('axes', (1, 2)), ('act', 'gelu'))
    """

    m = _ARG.match(text)
    if not m:
        raise NKIError(f"malformed --arg {text!r}: expected NAME=VALUE, e.g. pool_size=2 or eps=1e-6")
    try:
        value = ast.literal_eval(m.group(2).strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise NKIError(
            f"malformed --arg {text!r}: {m.group(2).strip()!r} is not a Python literal "
            "(a number, True/False/None, a quoted string, a tuple or a list)"
        ) from None
    return m.group(1), value


def kernel_args(texts: tuple[str, ...]) -> dict[str, Any]:
    """The `--arg` options as keyword arguments; NKIError when one names a parameter twice."""

    out: dict[str, Any] = {}
    for text in texts:
        name, value = parse_kernel_arg(text)
        if name in out:
            raise NKIError(f"--arg {name} given twice")
        out[name] = value
    return out


def bind(fn: Any, inputs: list[tuple[str, Any]], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call of `fn` with the `--input` arrays (name, array) and the `--arg` values: by parameter
    name when every one names a parameter of `fn` (a non-tensor parameter between tensors, as in
    `layernorm(x, epsilon, gamma, beta)`, goes in its place), else the arrays in order and the values
    by keyword. NKIError when a parameter before one given has neither a value nor a default."""

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return [a for _, a in inputs], kwargs
    names = [n for n, _ in inputs] + list(kwargs)
    if len(set(names)) < len(names):
        raise NKIError(f"kernel parameter {next(n for n in names if names.count(n) > 1)!r} given twice")
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not inputs or not all(n in params for n in names):
        unknown = next((n for n in names if n not in params), "")
        if unknown:
            check_order(fn, [n for n, _ in inputs], unknown, [p.name for p in positional])
        check_call(fn, [a for _, a in inputs], kwargs, [n for n, _ in inputs], list(kwargs))
        return [a for _, a in inputs], kwargs
    given = {**dict(inputs), **kwargs}
    last = max((i for i, p in enumerate(positional) if p.name in given), default=-1)
    args = []
    for p in positional[: last + 1]:
        if p.name in given:
            args.append(given.pop(p.name))
        elif p.default is not p.empty:
            args.append(p.default)
        else:
            name = getattr(fn, "__name__", "kernel")
            raise NKIError(f"kernel {name} needs {p.name!r}: give --input {p.name}=DTYPE[...] or --arg {p.name}=VALUE")
    check_call(fn, args, given, [n for n, _ in inputs], list(kwargs))  # a parameter after the last one given
    return args, given


def check_order(fn: Any, inputs: list[str], unknown: str, order: list[str]) -> None:
    """NKIError when the `--input`s, going in order (`unknown` is no parameter), would put one named like
    a parameter in another's place: `sub(x, y)` with `--input y=... --input z=...` ran with y's array as
    x, and failed at a kernel line about shapes (or ran, where they agreed)."""
    for i, name in enumerate(inputs):
        if name in order and order.index(name) != i:
            place = f"would be bound to {order[i]}" if i < len(order) else "would be past the last parameter"
            raise NKIError(
                f"--input {name} names a parameter of {getattr(fn, '__name__', 'kernel')}({', '.join(order)}), but "
                f"{unknown} names none, so the tensors go in order and {name}'s array {place}: name every --input "
                "by its parameter, or none"
            )


def check_call(fn: Any, call: list[Any], kwargs: dict[str, Any], inputs: list[str], args: list[str]) -> None:
    """NKIError when the call `bind` made of the `--input`s (names `inputs`) and `--arg`s (`args`) does not
    fit `fn`'s parameters: its TypeError was reported as if the kernel had raised it ("kernel k raised
    TypeError: k() takes 1 positional argument but 2 were given")."""
    signature = inspect.signature(fn)
    try:
        signature.bind(*call, **kwargs)
    except TypeError as exc:
        name = getattr(fn, "__name__", "kernel")
        given = ", ".join([f"--input {n}" for n in inputs] + [f"--arg {n}" for n in args]) or "no --input or --arg"
        unknown = [n for n in inputs if n not in signature.parameters]
        why = f" (--input {unknown[0]} names none of its parameters, so the tensors went in order)" if unknown else ""
        missing = _missing(signature, call, kwargs)
        hint = f": give --input {missing[0]}=DTYPE[...] or --arg {missing[0]}=VALUE" if missing else ""
        raise NKIError(
            f"kernel {name}({', '.join(signature.parameters)}) cannot be called with {given}: {exc}{why}{hint}"
        ) from None


def _missing(signature: inspect.Signature, call: list[Any], kwargs: dict[str, Any]) -> list[str]:
    """The parameters without a default that the call leaves unbound ([] when it is wrong otherwise)."""
    try:
        bound = signature.bind_partial(*call, **kwargs).arguments
    except TypeError:
        return []
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = signature.parameters.values()
    return [p.name for p in params if p.name not in bound and p.default is p.empty and p.kind not in variadic]


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


ARG_HELP = "NAME=VALUE: a non-tensor parameter of the kernel (a Python literal), bound by its name."


@click.group()
def nki() -> None:
    """Run NKI kernels in Axon's emulator."""


@nki.command("run")
@click.argument("kernel")
@click.option(
    "--input", "inputs", multiple=True, help="NAME=DTYPE[D0,D1,...]: a tensor parameter, by name (else in order)."
)
@click.option("--arg", "args", multiple=True, help=ARG_HELP)
@click.option("--grid", "grid_text", metavar="N[,M...]", help=GRID_HELP)
@click.option("--hw", default=DEFAULT_HW, show_default=True, help="Hardware file name or path.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1))
def run_cmd(
    kernel: str, inputs: tuple[str, ...], args: tuple[str, ...], grid_text: str | None, hw: str, seed: int
) -> None:
    """Run KERNEL (FILE.py:FUNCTION) on random inputs; print output shapes and dtypes."""

    specs = [parse_input_spec(s) for s in inputs]
    kwargs = kernel_args(args)
    grid = parse_grid(grid_text)
    check_input_memory(specs)
    fn = load_user_kernel(kernel)
    launched = launch(fn, grid, grid_text)
    rng = np.random.default_rng(seed)
    call, kwargs = bind(fn, [(name, random_array(shape, dtype, rng)) for name, shape, dtype in specs], kwargs)
    with np.errstate(all="ignore"):  # overflow on random inputs is reported below, once, as non-finite values
        outs, unwritten = bounded(
            kernel,
            getattr(fn, "__name__", "kernel"),
            lambda: axon.nki.run_with_unwritten(launched, *call, hw=hw, **kwargs),
        )
    if not outs:  # printed nothing at all, exit 0: as if it had run and there were nothing to say
        click.echo(
            f"no output: kernel {getattr(fn, '__name__', kernel)} returned no tensor (it returns what it writes)"
        )
    for i, (out, missing) in enumerate(zip(outs, unwritten)):
        if missing:  # garbage on a device; here NaN, which is not an overflow
            note = f" ({missing:,} of {out.size:,} elements never written by the kernel)"
        else:
            note = "" if np.all(np.isfinite(out.astype(np.float32))) else " (non-finite values)"
        click.echo(f"output {i}: shape {list(out.shape)} dtype {out.dtype.name}{note}")


def load_user_kernel(ref: str) -> Any:
    """`axon.nki.load_kernel`, with a kernel file's top level bounded as a spec file's is: a loop there
    hung the command without a word, and `sys.exit(4)` ended it with exit 4 and nothing said."""
    path = ref.rpartition(":")[0] or ref
    if os.path.exists(path) and not os.path.isfile(path):  # the emulator's loader said "not found" of it
        kind = "a directory" if os.path.isdir(path) else "not a regular file"
        raise NKIError(f"kernel file {path} is {kind}: give FILE.py:FUNCTION (from {ref!r})")
    try:
        with time_limit(IMPORT_SECONDS):
            fn = axon.nki.load_kernel(ref)
    except TimeUp:
        raise NKIError(
            f"{path}: kernel file did not finish importing in {IMPORT_SECONDS:g} s (an endless loop at its top level?)"
        ) from None
    except SystemExit as exc:
        raise NKIError(f"{path}: kernel file called sys.exit({exc.code!r}) while imported") from None
    if hasattr(fn, "__axon_spec__"):  # its traced ops on the emulator's views: "'View' object has no attribute '_b'"
        raise NKIError(f"{ref} is an Axon spec (@ax.spec), not an NKI kernel: `axon tune {ref}` writes its kernel")
    return fn


def bounded(ref: str, name: str, run: Callable[[], T]) -> T:
    """`run()`, the user's kernel `name` (of FILE.py:FN `ref`) running, stopped after `RUN_SECONDS`:
    NKIError naming the kernel's line (or that of a file of the user's it calls) where it was stopped."""
    available = available_bytes()
    ceiling = None if available is None else (rss_bytes() or 0) + int(available * MEMORY_SHARE)
    try:
        with time_limit(RUN_SECONDS, ceiling):
            return run()
    except TimeUp as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if users_file(f.filename)]
        where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ref.rpartition(":")[0]
        if isinstance(exc, MemoryUp):
            raise NKIError(
                f"{where}: kernel {name} grew this process to {exc.args[0] / 2**30:.1f} GiB, past "
                f"{MEMORY_SHARE:.0%} of the {(available or 0) / 2**30:.1f} GiB free when it started: stopped at this "
                "line (an endless loop, or a kernel too large to emulate on this machine?)"
            ) from None
        raise NKIError(
            f"{where}: kernel {name} did not return in {RUN_SECONDS:g} s, stopped at this line (an endless loop?)"
        ) from None
