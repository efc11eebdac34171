"""Cutting a graph into passes (which intermediates go through HBM) and the roles of nodes in a pass.

A pass computes a few materialized values (graph outputs or HBM scratch tensors) from graph inputs and
earlier passes' values, one block of output rows at a time. Inside a pass each node plays one role:
`row` (a tile of the output's rows, computed on chip), `rowT` (an HBM input read transposed as a
matmul's stationary operand), `tload` (an HBM input transposed while loaded), `weight` (a matmul's
moving operand, read from HBM, possibly through repeat/transpose), `bcast` (a vector along the free
axis, broadcast over partitions) or `scalar` (a compile-time number). What does not fit these
roles is cut into an earlier pass; this module never emits instructions.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon.ir import Graph, GraphBuilder, TensorType
from axon.ir.graph import live_nodes
from axon.lower.roles import LoweringError, NeedCut, classify, scalar_value
from axon.lower.rowaxis import merge_rows


@dataclass(frozen=True)
class Pass:
    """One pass: its graph, and for each of its outputs the HBM tensor it writes."""

    graph: Graph
    writes: tuple[str, ...]  # HBM tensor names, in graph.outputs order
    origin: tuple[int, ...]  # original node id of each pass-graph node


def materializable(graph: Graph) -> list[int]:
    """Nodes that can be cut (everything computed that is not a compile-time scalar)."""
    return [n.id for n in graph.nodes if n.op != "input" and scalar_value(graph, n) is None]


def matmul_cuts(graph: Graph) -> frozenset[int]:
    """Materialize the computed operands and results of every matmul (no fusion across matmuls)."""
    cuts: set[int] = set()
    for n in graph.nodes:
        if n.op == "matmul":
            cuts.add(n.id)
            a = graph.nodes[n.inputs[0]]
            if a.op not in ("input", "transpose"):
                cuts.add(a.id)
    return frozenset(cuts - set(graph.outputs))


def split(graph: Graph, cuts: frozenset[int] | set[int], max_rounds: int = 64) -> tuple[list[Pass], frozenset[int]]:
    """Passes for `cuts` (node ids materialized in HBM), adding the cuts the roles require."""
    cuts = set(cuts) - set(graph.outputs)
    for _ in range(max_rounds):
        passes = _split_once(graph, cuts)
        try:
            for p in passes:
                classify(p.graph)
        except NeedCut:
            for p in passes:
                try:
                    classify(p.graph)
                except NeedCut as inner:
                    cuts.add(p.origin[inner.node])
                    break
            continue
        return passes, frozenset(cuts)
    raise LoweringError(f"{graph.name}: could not cut the graph into lowerable passes")


def scratch_name(graph: Graph, nid: int) -> str:
    """The HBM tensor a materialized node lives in (outputs named like an input get `_out`)."""
    if nid in graph.outputs:
        name = graph.output_names[graph.outputs.index(nid)]
        return f"{name}_out" if name in graph.input_names else name
    return f"t{nid}"


def _split_once(graph: Graph, cuts: set[int]) -> list[Pass]:
    # outputs share one pass unless something is cut: then every materialized value is its own
    # pass, in node order, so that a pass never reads a value computed after it
    groups = [[c] for c in sorted(cuts | set(graph.outputs))] if cuts else [list(graph.outputs)]
    materialized: set[int] = set(cuts) | set(graph.outputs)
    passes = []
    for group in groups:
        b = GraphBuilder(graph.name, graph.bindings)
        remap: dict[int, int] = {}
        origin: dict[int, int] = {}
        needed = _needed(graph, group, materialized)
        for n in graph.nodes:
            if n.id not in needed:
                continue
            if n.op == "input":
                new = b.input(n.attr("name"), n.type)
            elif n.id in materialized and n.id not in group:
                new = b.input(
                    scratch_name(graph, n.id), TensorType(n.type.shape, "float32" if n.id in cuts else n.type.dtype)
                )
            else:
                new = b.copy_node(n, [remap[i] for i in n.inputs])
            remap[n.id] = new
            origin[new] = n.id
        outs = [remap[o] for o in group]
        sub = b.build(outs, [scratch_name(graph, o) for o in group])

        kept = sorted(live_nodes(b.nodes, outs))  # build() keeps exactly these, in this order
        passes.append(Pass(sub, tuple(scratch_name(graph, o) for o in group), tuple(origin[k] for k in kept)))
    return passes


def _needed(graph: Graph, group: list[int], materialized: set[int]) -> set[int]:
    seen: set[int] = set()
    stack = list(group)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i in materialized and i not in group:
            continue
        stack.extend(graph.nodes[i].inputs)
    return seen


def normalize(graph: Graph, partitions: int) -> Graph:
    """The graph the lowering works on: split-tile reductions undone (`_undo_split_tiles`), then, for a
    graph whose rows are fewer than `partitions`, the axis before them merged in (`axon.lower.rowaxis`).
    Kept on `graph` (one per partition count): the space and every point's lowering get the same graph
    object, so its memos (passes, roles, remembered passes) hold across them."""
    return graph.memo(("normalized", partitions), lambda: _normalized(graph, partitions))


def _normalized(graph: Graph, partitions: int) -> Graph:
    undone = _undo_split_tiles(graph)
    return merge_rows(undone, partitions) or undone


def _undo_split_tiles(graph: Graph) -> Graph:
    """Undo split-tile reductions: reshape [.., R, A*B] -> [.., R, A, B], reduce B, reduce A, reshape
    [.., R, 1] becomes one free-axis reduction (same kind). The lowering tiles every reduction over the
    free axis inside one instruction anyway; anything else with a reshape stays unsupported."""
    subst: dict[int, tuple[int, str]] = {}
    nodes = graph.nodes
    for r2 in nodes:
        if r2.op != "reshape":
            continue
        red2 = nodes[r2.inputs[0]]
        if red2.op != "reduce" or red2.attr("axis") != red2.type.rank - 2 or not red2.attr("keepdims"):
            continue
        red1 = nodes[red2.inputs[0]]
        if red1.op != "reduce" or red1.attr("kind") != red2.attr("kind") or red1.attr("axis") != red1.type.rank - 1:
            continue
        r1 = nodes[red1.inputs[0]]
        if r1.op != "reshape":
            continue
        src = nodes[r1.inputs[0]]
        s_src, s_out = graph.concrete_shape(src.id), graph.concrete_shape(r2.id)
        if s_src[:-1] == s_out[:-1] and s_out[-1] == 1 and graph.concrete_shape(r1.id)[:-2] == s_src[:-1]:
            subst[r2.id] = (src.id, red1.attr("kind"))
    if not subst:
        return graph
    b = GraphBuilder(graph.name, graph.bindings)
    remap: dict[int, int] = {}
    for n in nodes:
        if n.id in subst:
            src_id, kind = subst[n.id]
            remap[n.id] = b.add("reduce", [remap[src_id]], n.where, kind=kind, axis=n.type.rank - 1, keepdims=True)
        else:
            remap[n.id] = b.copy_node(n, [remap[i] for i in n.inputs])
    return b.build([remap[o] for o in graph.outputs], graph.output_names)
