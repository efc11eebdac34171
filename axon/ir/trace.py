"""`trace(fn, **dims)`: run a spec function on proxies and return its Graph."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from axon.errors import SpecError
from axon.ir.builder import GraphBuilder
from axon.ir.frontend import Tensor, signature_of
from axon.ir.graph import Graph, TensorType


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
    builder = GraphBuilder(name or fn.__name__, {})
    args = []
    for arg, shape in sig.inputs:
        ttype = TensorType(shape, (dtypes or {}).get(arg, dtype))
        args.append(Tensor(builder, builder.input(arg, ttype)))
    result = fn(*args)
    if isinstance(result, dict):
        names, values = tuple(result), tuple(result.values())
    elif isinstance(result, (tuple, list)):
        names, values = (), tuple(result)
    else:
        names, values = (), (result,)
    if not values or not all(isinstance(v, Tensor) for v in values):
        raise SpecError(f"spec {fn.__name__} must return a traced tensor (or a tuple/dict of them), got {result!r}")
    graph = builder.build([v._node for v in values], names)
    if dims:
        unknown = sorted(set(dims) - graph.symbols)
        if unknown:
            raise SpecError(
                f"spec {fn.__name__} has no dimension {unknown[0]!r}; its dimensions are {', '.join(sorted(graph.symbols))}"
            )
        graph = graph.bind(**dims)
    return graph
