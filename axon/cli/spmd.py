"""SPMD kernels on the command line: `--grid N[,M...]` launches `kernel[N, M](...)`, and a kernel that
needs a grid and was not given one is refused before it runs.

Without a grid `nl.program_id(i)` is 0 and the kernel runs once, as program 0: `axon nki run` printed
the output with most of it never written and exited 0, and `nki profile` timed one program as if it
were the kernel. Whether a kernel is SPMD is read from its source (and that of the functions of the
user's files it calls): a call of `program_id` or `num_programs` makes it one.
"""

from __future__ import annotations

import ast
import inspect
import os
import sysconfig
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import axon.nki
from axon.errors import NKIError

SPMD_CALLS = frozenset({"program_id", "num_programs"})
GRID_HELP = "N or N,M,...: the SPMD launch grid, as kernel[N, M](...); needed by a kernel that calls nl.program_id."

# code in these directories is not the user's (Axon, the standard library, installed packages)
_LIBRARIES = tuple(
    str(p) + os.sep
    for p in {
        Path(axon.nki.__file__).resolve().parents[1],
        *(Path(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")),
    }
)


def users_file(path: str) -> bool:
    """`path` is a file of the user's (a kernel file or one it imports), not Axon's or a library's,
    nor code made from a string (`<string>`: a dataclass's generated `__init__`)."""
    return os.path.isfile(path) and not os.path.abspath(path).startswith(_LIBRARIES)


@dataclass(frozen=True)
class SpmdCall:
    """One call of `program_id`/`num_programs` in a kernel's source: where, its text, the grid axis it reads."""

    file: str
    line: int
    text: str
    axis: int


def parse_grid(text: str | None) -> tuple[int, ...]:
    """`"4"` -> (4,), `"2,2"` -> (2, 2); () when not given; NKIError on anything else.

    >>> parse_grid("2, 3"), parse_grid(None)
    ((2, 3), ())
    """
    if text is None:
        return ()
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise NKIError(f"malformed --grid {text!r}: expected positive integers, N or N,M (e.g. --grid 4 or --grid 2,2)")
    return tuple(int(p) for p in parts)


def launch(fn: Any, grid: tuple[int, ...], grid_text: str | None) -> Any:
    """`fn` as the command runs it: `fn[grid]` with a grid; NKIError when the kernel calls
    `program_id`/`num_programs` and no grid was given, or a grid with fewer axes than it reads."""
    calls = spmd_calls(fn)
    name = getattr(fn, "__name__", "kernel")
    if calls and not grid:
        first, axes = calls[0], max(c.axis for c in calls) + 1
        example = ",".join("NMKL"[:axes]) if axes <= 4 else ",".join(["N"] * axes)
        raise NKIError(
            f"{first.file}:{first.line}: kernel {name} calls {first.text}, an SPMD kernel: "
            f"give its launch grid with --grid {example} (the number of programs along each axis)"
        )
    short = [c for c in calls if c.axis >= len(grid)]
    if grid and short:
        raise NKIError(
            f"{short[0].file}:{short[0].line}: kernel {name} calls {short[0].text}, but --grid {grid_text} has "
            f"{len(grid)} ax{'is' if len(grid) == 1 else 'es'}: give {short[0].axis + 1} or more"
        )
    if not grid:
        return fn
    return (fn if isinstance(fn, axon.nki.Kernel) else axon.nki.Kernel(fn))[grid]


def spmd_calls(fn: Any) -> list[SpmdCall]:
    """The calls of `program_id`/`num_programs` in `fn` and in the plain functions of the user's files
    it names (its helpers), in the order found."""
    found: list[SpmdCall] = []
    seen: set[types.CodeType] = set()
    todo = [inspect.unwrap(getattr(fn, "fn", fn))]
    while todo:
        f = todo.pop(0)
        code = getattr(f, "__code__", None)
        if code is None or code in seen or not users_file(code.co_filename):
            continue
        seen.add(code)
        found += _calls_in(f, code)
        for name in _names(code):
            value = f.__globals__.get(name)
            # a plain helper runs in the caller's program; another @nki.jit kernel (not a function) is
            # left out: a host function that launches it gives its grid (`kernel[2, 2](a, b)`)
            if inspect.isfunction(value):
                todo.append(inspect.unwrap(value))
    return found


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names `code` and the functions nested in it use."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _calls_in(f: Any, code: types.CodeType) -> list[SpmdCall]:
    if not SPMD_CALLS & _names(code):
        return []
    file = os.path.basename(code.co_filename)
    try:
        lines, start = inspect.getsourcelines(f)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):  # no source to read: the name is in its code all the same
        return [SpmdCall(file, code.co_firstlineno, "nl.program_id", 0)]
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if callee in SPMD_CALLS:
            given = node.args[0] if node.args else next((k.value for k in node.keywords), None)
            axis = given.value if isinstance(given, ast.Constant) and isinstance(given.value, int) else 0
            out.append(SpmdCall(file, start + node.lineno - 1, ast.unparse(node), axis))
    return sorted(out, key=lambda c: c.line)
