"""A readable listing of a graph, one node a line, shapes with their bound sizes."""

from __future__ import annotations

from axon.ir.dims import Dim, shape_str
from axon.ir.graph import DTYPE_SHORT, Graph, Node


def _attrs(node: Node) -> str:
    parts = []
    for k, v in node.attrs:
        if node.op == "const" and k == "value":
            return f"{v:g}"
        if isinstance(v, tuple):
            v = "(" + ", ".join(str(x) for x in v) + ")"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def format_graph(graph: Graph) -> str:
    b = graph.bindings
    heads = [f"{n.attr('name')}: {DTYPE_SHORT[n.type.dtype]}{shape_str(n.shape, b)}" for n in graph.inputs]
    lines = [f"graph {graph.name}({', '.join(heads)})"]
    names = {n.id: n.attr("name") for n in graph.inputs}
    for n in graph.nodes:
        if n.op == "input":
            continue
        if n.op == "const":
            names[n.id] = f"{n.attr('value'):g}"
            continue
        if n.op == "dimsize":
            names[n.id] = f"size({n.attr('dim')})"
            continue
        names[n.id] = f"%{n.id}"
        args = [names[i] for i in n.inputs]
        extra = _attrs(n)
        call = f"{n.attr('kind') if n.op == 'reduce' else n.op}({', '.join(args)}"
        if n.op == "reduce":
            extra = f"axis={n.attr('axis')}" + (", keepdims" if n.attr("keepdims") else "")
        call += (", " + extra if extra else "") + ")"
        lines.append(f"  %{n.id} = {call} : {DTYPE_SHORT[n.type.dtype]}{shape_str(n.shape)}")
    outs = ", ".join(f"{name}={names[o]}" for name, o in zip(graph.output_names, graph.outputs))
    lines.append(f"  return {outs}")
    return "\n".join(lines)


__all__ = ["format_graph", "Dim"]
