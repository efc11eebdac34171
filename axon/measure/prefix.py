"""The shorter of `SimBackend`'s two partial traces, cut out of the longer one instead of traced again.

The backend traces a kernel twice with its top-level loops cut to a and to b > a iterations. When a
single loop is cut and the kernel ends right after it (`return` of tensors the loop does not
assign), the run with a iterations is, up to its end, the run with b iterations: the same Python
executes the same instructions, allocations and loops in the same order, then leaves the loop and
returns. So the a-trace is the b-trace's prefix up to where iteration a-1 of that loop ended (the
machine records where each top-level iteration ended, `Trace.meta["iteration_ends"]`), and it
passes every check the b-trace passes (its tiles live over sub-spans of the b-trace's). The
timing of both then comes from one simulation (`axon.sim.simulate_with_prefix`). Nothing here is
an approximation: `tests/measure/test_prefix.py` checks the cut trace and the measurement against
tracing both.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from axon.measure.samecode import module_tree
from axon.target.trace import Trace


def kernel_def(source: str, kernel: str) -> ast.FunctionDef | None:
    """The definition of `kernel` in `source` (parsed once, `module_tree`)."""
    tree = module_tree(source)
    if tree is None:
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel), None)


def returns_after_last_loop(source: str, kernel: str) -> bool:
    """Whether `kernel`'s last top-level statements are a `for` loop then `return` of names (or a
    tuple of names) the loop neither assigns nor uses as its target: what follows the loop then
    issues nothing and does not depend on how many iterations ran."""
    fn = kernel_def(source, kernel)
    if fn is None or len(fn.body) < 2:
        return False
    loop, ret = fn.body[-2], fn.body[-1]
    if not isinstance(loop, ast.For) or not isinstance(ret, ast.Return) or loop.orelse:
        return False
    value = ret.value
    names = [value] if isinstance(value, ast.Name) else list(value.elts) if isinstance(value, ast.Tuple) else None
    if names is None or not all(isinstance(n, ast.Name) for n in names):
        return False
    text = ast.get_source_segment(source, loop)
    assigned = _stores([loop])
    if text is None or ":=" in text or assigned is None:  # an assignment expression may hide anywhere: no
        return False
    return not any(n.id in assigned for n in names if isinstance(n, ast.Name))


def _stores(stmts: list[ast.stmt]) -> set[str] | None:
    """The names the statements bind (assignment targets, loop and `with` targets, imports,
    definitions), looking into nested blocks but not into expressions (the caller excludes `:=`);
    None for statements that bind names elsewhere (`global`, `nonlocal`, `match`)."""
    out: set[str] = set()
    for s in stmts:
        targets: list[ast.AST] = []
        if isinstance(s, (ast.Global, ast.Nonlocal, ast.Match)):
            return None
        if isinstance(s, ast.Assign):
            targets = list(s.targets)
        elif isinstance(s, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [s.target]
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in s.items if i.optional_vars is not None]
        elif isinstance(s, ast.Delete):
            targets = list(s.targets)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(s.name)
            continue
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in s.names)
        elif isinstance(s, ast.Try):
            out.update(h.name for h in s.handlers if h.name)
        for t in targets:
            out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(s, field, None)
            if inner:
                nested = _stores(
                    [h if isinstance(h, ast.stmt) else ast.If(ast.Constant(True), h.body, []) for h in inner]
                )
                if nested is None:
                    return None
                out |= nested
    return out


def prefix_trace(trace: Trace, loop: int, iterations: int) -> Trace | None:
    """The trace the same kernel gives with top-level loop `loop` cut to `iterations` iterations,
    from `trace` (the same loop cut to more): None unless the loop is the last thing `trace` records
    (no instruction, allocation or loop after its last iteration) and ran more iterations than that.
    The caller checks the source (`returns_after_last_loop`)."""
    ends = [e for e in trace.meta.get("iteration_ends", ()) if e[0] == loop]
    if len(ends) <= iterations or iterations < 1:
        return None
    last = ends[-1]
    if (last[2], last[3], last[4]) != (len(trace.instructions), len(trace.allocs), len(trace.loops)):
        return None
    end = ends[iterations - 1]
    _, _, n_instr, n_alloc, n_loop = end
    every = list(trace.meta["iteration_ends"])
    meta = {k: v for k, v in trace.meta.items() if not k.startswith("peak_")}  # the prefix's peaks are not known
    meta["iteration_ends"] = tuple(every[: every.index(end) + 1])
    meta["prefix_of"] = len(trace.instructions)
    return replace(
        trace,
        instructions=trace.instructions[:n_instr],
        allocs=trace.allocs[:n_alloc],
        loops=trace.loops[:n_loop],
        meta=meta,
    )
