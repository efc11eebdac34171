"""`trace(fn, **dims)`: run a spec function on proxies and return its Graph."""

from __future__ import annotations

import difflib
import inspect
import keyword
import os
import traceback
import types
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from axon.errors import SpecError
from axon.ir.builder import GraphBuilder
from axon.ir.frontend import OPS, Tensor, signature_of
from axon.ir.graph import Graph, TensorType
from axon.timelimit import TimeUp, time_limit

# the modules an emitted kernel imports: an output of that name would shadow them
_KERNEL_MODULES = frozenset({"nki", "nisa", "nl"})
# bounds on running a spec function once: its ops (each a node) and its seconds; an endless loop in it
# is refused in one line, not a hang (the nodes of a loop of ops also grow without bound)
MAX_TRACED_NODES = 100_000
TRACE_SECONDS = 60.0


def trace(
    fn: Callable[..., Any],
    dtype: str = "float32",
    dtypes: Mapping[str, str] | None = None,
    name: str | None = None,
    **dims: int,
) -> Graph:
    """Trace a spec into a graph; `dims` bind symbolic sizes (unbound ones stay symbolic).

    >>> import axon.spec as ax
    >>> from axon.ir import trace
    >>> @ax.spec(x="M K")
    ... def double(x):
    ...     return x * 2
    >>> trace(double, M=4, K=8).canonical_hash() == trace(double).canonical_hash()
    True
    """
    sig = signature_of(fn)
    _check_unshaped(fn, sig)
    builder = GraphBuilder(name or fn.__name__, {}, max_nodes=MAX_TRACED_NODES)
    args = []
    ranges = dict(sig.ranges)
    for arg, shape in sig.inputs:
        if arg in _KERNEL_MODULES:  # the kernel's parameter would hide the module: every kernel failed in the emulator
            raise SpecError(
                f"spec {fn.__name__}: input name {arg!r} must not be {', '.join(sorted(_KERNEL_MODULES))} "
                "(it names a parameter of the kernel, which imports those modules)"
            )
        ttype = TensorType(shape, (dtypes or {}).get(arg, dtype))
        args.append(Tensor(builder, builder.input(arg, ttype, value_range=ranges.get(arg))))
    try:
        with time_limit(TRACE_SECONDS):
            result = fn(*args)
    except SpecError:
        raise
    except TimeUp as exc:
        raise SpecError(
            f"spec {fn.__name__} did not return in {TRACE_SECONDS:g} s while traced{_where(fn, exc)} (an endless loop?)"
        ) from None
    except AttributeError as exc:
        _unknown_op(fn, exc)
        _raised(fn, exc)
    except Exception as exc:  # the spec's own code failed on the proxies: where, not a traceback
        _raised(fn, exc)
    if isinstance(result, dict):
        names, values = tuple(result), tuple(result.values())
        for out in names:  # each names a variable of the emitted kernel
            if not isinstance(out, str) or not out.isidentifier() or keyword.iskeyword(out) or out in _KERNEL_MODULES:
                raise SpecError(
                    f"spec {fn.__name__}: output name {out!r} must be a Python identifier, not a keyword or "
                    f"{', '.join(sorted(_KERNEL_MODULES))} (it names a variable of the kernel)"
                )
    elif isinstance(result, (tuple, list)):
        names, values = (), tuple(result)
    else:
        names, values = (), (result,)
    if not values or not all(isinstance(v, Tensor) for v in values):
        raise SpecError(f"spec {fn.__name__} must return a traced tensor (or a tuple/dict of them), got {result!r}")
    return bind_dims(builder.build([v._node for v in values], names), dims, fn.__name__)


def bind_dims(graph: Graph, dims: Mapping[str, int], spec_name: str) -> Graph:
    """`graph` with `dims` bound; a SpecError names a dimension the spec `spec_name` does not have."""
    if not dims:
        return graph
    unknown = sorted(set(dims) - graph.symbols)
    if unknown:
        known = f"its dimensions are {', '.join(sorted(graph.symbols))}" if graph.symbols else "it has no dimensions"
        raise SpecError(f"spec {spec_name} has no dimension {unknown[0]!r}; {known}")  # not "its dimensions are "
    return graph.bind(**dims)


def _check_unshaped(fn: Callable[..., Any], sig: Any) -> None:
    """Every parameter without a default must be a declared tensor input (else the call fails)."""
    declared = {arg for arg, _ in sig.inputs}
    for p in inspect.signature(fn).parameters.values():
        if p.name in declared or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        raise SpecError(
            f"spec {fn.__name__}: argument {p.name!r} has no shape: declare it in "
            f"@ax.spec({p.name}='M K', ...) or give it a default value"
        )


def _raised(fn: Callable[..., Any], exc: Exception) -> NoReturn:
    """A spec that raised while traced (a Python comparison or `float()` of a traced tensor, a name
    error): a SpecError naming the exception and the spec's last line it passed through."""
    raise SpecError(
        f"spec {getattr(fn, '__name__', fn)} failed while traced{_where(fn, exc)}: {type(exc).__name__}: {exc} "
        "(traced tensors take the ops of axon.spec, not Python comparisons, conversions or branches)"
    ) from None


def _where(fn: Callable[..., Any], exc: BaseException) -> str:
    """` (at file.py:LINE)`: the spec's last line `exc` passed through (else the last line it did)."""
    code = getattr(fn, "__code__", None)
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if code is not None and f.filename == code.co_filename] or frames[-1:]
    return f" (at {os.path.basename(mine[-1].filename)}:{mine[-1].lineno})" if mine else ""


def _unknown_op(fn: Callable[..., Any], exc: AttributeError) -> None:
    """`ax.erf(x)`: an op the spec language does not have; a SpecError naming it and the user's line."""
    # the spec module itself is above this layer: it is recognized by name (it exports exactly OPS)
    if not isinstance(exc.obj, types.ModuleType) or exc.obj.__name__ != "axon.spec" or not exc.name:
        return
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    ops = sorted(OPS)
    close = difflib.get_close_matches(exc.name, ops, n=1, cutoff=0.75)  # at 0.6: ax.where -> "ax.power?"
    hint = f"did you mean ax.{close[0]}? " if close else ""
    raise SpecError(
        f"spec {fn.__name__}: op ax.{exc.name} is not supported{where}; {hint}the supported ops are the "
        f"functions of axon/spec.py (README, 'Writing a spec'): {', '.join(ops)}"
    ) from None
