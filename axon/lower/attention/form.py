"""Pattern matching of the attention subgraph: `match_attention(graph)` finds the nodes of
`(E @ V) / sum(E)` or `(E / sum(E)) @ V` with `E = exp(s - max(s))`, `s = (Q @ K.T) * c`, Q and K
each an input (K maybe repeated over query heads) or an rmsnorm of one. It decides nothing about
tiling (`axon.lower.attention.plan`) and emits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon.ir import Graph, Node
from axon.lower.passes import scratch_name
from axon.lower.roles import scalar_value


@dataclass(frozen=True)
class AttentionForm:
    """The nodes of a recognised attention graph and what the loop nest needs from them."""

    q: str
    k: str
    v: str
    k_group: int  # query heads per key/value head (repeat along the batch axis), 1 without
    scale: float  # s = scale * (Q @ K.T)
    batch: tuple[int, ...]
    sq: int
    skv: int
    d: int
    dv: int
    in_dtype: str
    out_dtype: str
    out: str
    q_norm: tuple[str, float] | None = None  # (gain input, eps): Q is rmsnorm(q) * gain
    k_norm: tuple[str, float] | None = None


def _input_of(g: Graph, nid: int) -> tuple[str, int] | None:
    """(input name, repeat factor along axis 0) of a graph input, possibly repeated over heads."""
    node = g.nodes[nid]
    if node.op == "input":
        return str(node.attr("name")), 1
    if node.op == "repeat" and node.attr("axis") == 0 and node.type.rank == 3:
        src = g.nodes[node.inputs[0]]
        if src.op == "input":
            return str(src.attr("name")), int(node.attr("repeats").evaluate(g.bindings))
    return None


def _rms_of(g: Graph, nid: int) -> tuple[int, str, float] | None:
    """(input node, gain input name, eps) of `x / sqrt(sum(x*x) / D + eps) * gain`, or None."""
    node = g.nodes[nid]
    if node.op != "mul":
        return None
    a, b = (g.nodes[i] for i in node.inputs)
    if b.op != "input" or b.type.rank != 1:
        return None
    if a.op != "div":
        return None
    x, root = (g.nodes[i] for i in a.inputs)
    if x.op != "input" or root.op != "sqrt":
        return None
    add = g.nodes[root.inputs[0]]
    if add.op != "add":
        return None
    mean, eps_node = (g.nodes[i] for i in add.inputs)
    eps = scalar_value(g, eps_node)
    if eps is None or mean.op != "div" or scalar_value(g, g.nodes[mean.inputs[1]]) != g.concrete_shape(x.id)[-1]:
        return None
    ss = g.nodes[mean.inputs[0]]
    if not _reduce(ss, "sum"):
        return None
    sq = g.nodes[ss.inputs[0]]
    if sq.op != "mul" or tuple(sq.inputs) != (x.id, x.id):
        return None
    return x.id, str(b.attr("name")), float(eps)


def _operand(g: Graph, nid: int) -> tuple[tuple[str, int] | None, tuple[str, float] | None]:
    """A matmul operand: an input (maybe repeated over heads), or an rmsnorm of an input."""
    plain = _input_of(g, nid)
    if plain is not None:
        return plain, None
    rms = _rms_of(g, nid)
    if rms is None:
        return None, None
    return _input_of(g, rms[0]), (rms[1], rms[2])


def _one_user(g: Graph, nid: int) -> bool:
    return sum(nid in n.inputs for n in g.nodes) + (nid in g.outputs) == 1


def _reduce(node: Node, kind: str) -> bool:
    return (
        node.op == "reduce"
        and node.attr("kind") == kind
        and node.attr("keepdims") is True
        and node.attr("axis") == node.type.rank - 1
    )


def match_attention(g: Graph) -> AttentionForm | None:
    """The attention form of a normalized graph with one output, or None."""
    if len(g.outputs) != 1:
        return None
    out = g.nodes[g.outputs[0]]
    if out.op == "div" and g.nodes[out.inputs[0]].op == "matmul":  # (E @ V) / sum(E)
        pv, den = (g.nodes[i] for i in out.inputs)
        e = g.nodes[pv.inputs[0]]
    elif out.op == "matmul" and g.nodes[out.inputs[0]].op == "div":  # (E / sum(E)) @ V
        # the division by a per-row scalar commutes with the matmul (the hoist-factor move proves
        # it): the nest divides once at the end of the row block, as an online softmax must
        pv = out
        p = g.nodes[out.inputs[0]]
        e, den = (g.nodes[i] for i in p.inputs)
        if not _one_user(g, p.id):
            return None
    else:
        return None
    if not _reduce(den, "sum") or den.inputs[0] != e.id or e.op != "exp":
        return None
    sub = g.nodes[e.inputs[0]]
    if sub.op != "sub":
        return None
    x, mx = (g.nodes[i] for i in sub.inputs)
    if not _reduce(mx, "max") or mx.inputs[0] != x.id:
        return None
    scale = 1.0
    a = x
    if x.op in ("div", "mul"):
        c = scalar_value(g, g.nodes[x.inputs[1]])
        if c is None or c <= 0:
            return None
        scale = 1.0 / c if x.op == "div" else c
        a = g.nodes[x.inputs[0]]
    if a.op != "matmul":
        return None
    for nid in (a.id, x.id, sub.id):
        if not _one_user(g, nid) and nid != x.id:
            return None
    kt = g.nodes[a.inputs[1]]
    if kt.op != "transpose" or tuple(kt.attr("axes")) != (0, 2, 1):
        return None
    (q, q_norm), (k, k_norm) = _operand(g, a.inputs[0]), _operand(g, kt.inputs[0])
    v = _input_of(g, pv.inputs[1])
    if q is None or k is None or v is None or q[1] != 1 or k[1] != v[1]:
        return None
    qs, ks, vs = (g.concrete_shape(i) for i in (a.inputs[0], kt.inputs[0], pv.inputs[1]))
    if len(qs) != 3 or ks[1:] != (vs[1], qs[2]):
        return None
    return AttentionForm(
        q[0],
        k[0],
        v[0],
        k[1],
        scale,
        (qs[0],),
        qs[1],
        ks[1],
        qs[2],
        vs[2],
        g.nodes[a.inputs[0]].type.dtype,
        out.type.dtype,
        scratch_name(g, out.id),
        q_norm,
        k_norm,
    )
