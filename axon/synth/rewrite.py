"""Graph surgery for moves: replace one node by a freshly built subgraph; index-dependence queries.

A move never edits a graph: `replace_node` copies every node into a `GraphBuilder` and lets a
callback build the replacement of one node from the (already copied) nodes before it. Dependence is
read off shapes: an operand varies along an axis of the value it broadcasts into iff its extent there
is not 1. Nothing here decides whether a rewrite is correct; `axon.verify.prove` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from axon.errors import SpecError
from axon.ir import Graph, GraphBuilder, Node
from axon.ir.dims import Dim

ONE = Dim.const(1)


@dataclass(frozen=True)
class Move:
    """One step of a variant's derivation: what was done, in words, and to which node(s)."""

    name: str
    description: str
    nodes: tuple[int, ...]


Build = Callable[[GraphBuilder, Callable[[int], int]], int]


def replace_node(graph: Graph, target: int, build: Build, same_shape: bool = True) -> Graph | None:
    """The graph with node `target` replaced by what `build(b, old_to_new)` returns; None if ill-typed.

    With `same_shape=False` the replacement may change shape as long as every later node and the
    outputs still type-check (used by deliberately wrong rewrites such as a reduction over another axis).
    """
    b = GraphBuilder(graph.name, graph.bindings)
    remap: dict[int, int] = {}
    try:
        for n in graph.nodes:
            if n.id == target:
                new = build(b, lambda i: remap[i])
                if same_shape and b.nodes[new].shape != n.shape:
                    return None
                remap[n.id] = new
            else:
                remap[n.id] = b.copy_node(n, [remap[i] for i in n.inputs])
        out = b.build([remap[o] for o in graph.outputs], graph.output_names)
        if any(out.nodes[a].shape != graph.nodes[o].shape for a, o in zip(out.outputs, graph.outputs)):
            return None
        return out
    except (SpecError, KeyError, TypeError):
        return None


def varies(operand: Node, axis_from_end: int) -> bool:
    """Does `operand`, broadcast into a value, vary along that value's axis (-1, -2, ...)?"""
    shape = operand.shape
    return len(shape) >= -axis_from_end and shape[axis_from_end] != ONE


def varies_along(operand: Node, result_rank: int, axis: int) -> bool:
    """Same as `varies` for a non-negative axis of a result of rank `result_rank`."""
    return varies(operand, axis - result_rank)


def bound_ok(graph: Graph, dim: Dim) -> bool:
    """A new dimension expression is a whole positive size under the graph's bindings (if bound)."""
    missing = dim.symbols - set(graph.bindings)
    if missing:
        return True
    try:
        return dim.evaluate(graph.bindings) >= 1
    except SpecError:
        return False
