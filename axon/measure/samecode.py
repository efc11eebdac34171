"""Kernels that are the same code: sources equal but for the text of their module docstring.

A generated kernel's docstring names every knob of its point, also the knobs its lowering ignored,
so points that differ only in those are different kernel files (different kernel hashes, records
and emitted sources) with the same code: one attention tune measured eight such kernels of the
online softmax nest, each traced and simulated again. What a kernel issues, and so its trace and
simulated timing, is a function of its code and the shapes it is called with: the docstring's text
is not code, and where it spans the same lines, every instruction, allocation site and loop keeps
its line number. `code_key` is that identity; `SimBackend` measures the second kernel of a key as
the first was measured (`tests/measure/test_samecode.py` checks it against measuring it). A source
that names `__doc__` (its code may read the docstring) has no key, nor has one that does not parse.
"""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=4)
def module_tree(source: str) -> ast.Module | None:
    """`source` parsed once for the backend's several questions (a generated kernel is long, and
    parsing it costs about as much as compiling it); None when it does not parse."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def code_key(source: str) -> str | None:
    """`source` with the text of its module docstring replaced by as many newlines as it spans (the
    rest verbatim), or the source itself when it has no docstring; None when the code may read its
    docstring or the source does not parse. Equal keys: the same code on the same lines."""
    tree = module_tree(source)
    if tree is None or "__doc__" in source:
        return None
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.end_lineno is not None
        and first.end_col_offset is not None
    ):
        return "\0" + source  # no docstring: a key no source with one can have
    lines = source.splitlines(keepends=True)
    start = _offset(lines, first.lineno, first.col_offset)
    end = _offset(lines, first.end_lineno, first.end_col_offset)
    return source[:start] + "\n" * source.count("\n", start, end) + source[end:]


def _offset(lines: list[str], lineno: int, col_bytes: int) -> int:
    """The character offset in the source of line `lineno` (1-based), UTF-8 byte column `col_bytes`."""
    before = sum(len(line) for line in lines[: lineno - 1])
    return before + len(lines[lineno - 1].encode()[:col_bytes].decode())
