"""Static figures of a bound graph: FLOPs and the minimum HBM traffic (inputs read, outputs written once)."""

from __future__ import annotations

from axon.ir.graph import Graph
from axon.ir.ops import flops_per_element


def flops(graph: Graph) -> int:
    """Arithmetic operations: 2*M*N*K per matmul, one per element for elementwise ops and reductions."""
    graph.check_bound()
    dims = graph.bindings
    total = 0
    for node in graph.nodes:
        if node.op == "matmul":
            a = graph.nodes[node.inputs[0]].type.concrete(dims)
            total += 2 * node.type.numel(dims) * a[-1]
        elif node.op == "reduce":
            total += graph.nodes[node.inputs[0]].type.numel(dims)
        else:
            total += flops_per_element(node.op) * node.type.numel(dims)
    return total


def min_bytes(graph: Graph) -> int:
    """Bytes every kernel must move at least: each input read once, each output written once."""
    graph.check_bound()
    dims = graph.bindings
    read = sum(n.type.nbytes(dims) for n in graph.inputs)
    written = sum(graph.nodes[o].type.nbytes(dims) for o in set(graph.outputs))
    return read + written


def matmul_flops(graph: Graph) -> int:
    """FLOPs of the matmuls alone (what TensorE must do)."""
    graph.check_bound()
    dims = graph.bindings
    return sum(
        2 * n.type.numel(dims) * graph.nodes[n.inputs[0]].type.concrete(dims)[-1]
        for n in graph.nodes
        if n.op == "matmul"
    )
