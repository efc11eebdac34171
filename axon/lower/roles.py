"""Row roles of a graph: which nodes are row values, per-row or per-partition broadcasts, weights of a
matmul, and the batch axes (); what a pass of lowering is built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from axon.errors import AxonError
from axon.ir import Graph, Node
from axon.ir.ops import BINARY, UNARY, NumpyMath
from axon.lower.program import Affine


class LoweringError(AxonError):
    """The graph uses a shape or op combination the lowering does not support."""


class NeedCut(Exception):
    """Internal: the pass must materialize `node` (an id of the pass graph) in an earlier pass."""

    def __init__(self, node: int) -> None:
        super().__init__(node)
        self.node = node


_MATH = NumpyMath()


@dataclass(frozen=True)
class Weight:
    """How a matmul's moving operand is read: `input` [.., K, N] or `transposed` from [.., N, K].

    `scale` names a [K] input multiplying row k of the weight (g[:, None] * W, the form a per-column
    gain of the row operand takes once moved across the matmul): applied on chip, per partition of
    each K tile, after the weight is loaded."""

    input: str
    transposed: bool
    bmap: tuple[Affine, ...]
    scale: str | None = None


@dataclass
class Roles:
    graph: Graph
    out_shape: tuple[int, ...]
    role: dict[int, str] = field(default_factory=dict)
    bmap: dict[int, tuple[Affine, ...]] = field(default_factory=dict)
    scalar: dict[int, float] = field(default_factory=dict)
    weight: dict[int, Weight] = field(default_factory=dict)  # matmul node id -> its moving operand

    @property
    def rows(self) -> int:
        return self.out_shape[-2]

    @property
    def batch(self) -> tuple[int, ...]:
        return self.out_shape[:-2]

    def shape(self, nid: int) -> tuple[int, ...]:
        return self.graph.concrete_shape(nid)


def batch_vars(n: int) -> tuple[Affine, ...]:
    return tuple(Affine.of(f"i_b{i}") for i in range(n))


def scalar_value(graph: Graph, node: Node) -> float | None:
    """The number a rank-0 node stands for, if it is a compile-time constant."""
    if node.type.rank != 0:
        return None
    if node.op == "const":
        return float(node.attr("value"))
    if node.op == "dimsize":
        return float(node.attr("dim").evaluate(graph.bindings))
    args = [scalar_value(graph, graph.nodes[i]) for i in node.inputs]
    if any(a is None for a in args):
        return None
    if node.op in UNARY:
        return float(UNARY[node.op](_MATH, args[0]))
    if node.op in BINARY:
        return float(BINARY[node.op](_MATH, args[0], args[1]))
    if node.op == "pow":
        return float(args[0] ** node.attr("exponent"))
    return None


def classify(graph: Graph) -> Roles:
    """Roles of the nodes of a pass graph; NeedCut names a node to materialize first.

    A pure function of the (immutable) graph, memoized: lowering asks again for every point. Kept
    on the graph object first, since the cache below hashes the whole graph on every lookup."""
    return graph.memo(("classify",), lambda: _classify(graph))


@lru_cache(maxsize=512)
def _classify(graph: Graph) -> Roles:
    shapes = [graph.concrete_shape(o) for o in graph.outputs]
    out = shapes[0]
    if len(out) < 2 or any(s[:-1] != out[:-1] for s in shapes):
        raise LoweringError(
            f"{graph.name}: the lowering computes each result as [rows, columns] (batch axes first) and all "
            f"of one pass with the same rows, got {[list(s) for s in shapes]}"
            + (
                "; a 1-D result (a reduction without keepdims, or a vector such as y**3 of an input y of shape "
                "[N] computed on its own) is not lowered: keep it 2-D (keepdims=True, or y as [1, N])"
                if any(len(s) < 2 for s in shapes)
                else ""
            )
        )
    roles = Roles(graph, out)
    for o in graph.outputs:
        _assign(roles, o, "row", batch_vars(len(out) - 2))
    for node in reversed(graph.nodes):
        if node.id in roles.role:
            _visit(roles, node)
    return roles


def _assign(roles: Roles, nid: int, role: str, bmap: tuple[Affine, ...]) -> None:
    old = roles.role.get(nid)
    if old is not None and (old != role or roles.bmap.get(nid) != bmap):
        raise (
            NeedCut(nid)
            if roles.graph.nodes[nid].op != "input"
            else LoweringError(
                f"{roles.graph.name}: input {roles.graph.nodes[nid].attr('name')} is used in two layouts "
                f"({old}, {role})"
            )
        )
    roles.role[nid] = role
    roles.bmap[nid] = bmap


def _operand_bmap(bmap: tuple[Affine, ...], node_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[Affine, ...]:
    nb = len(shape) - 2
    own = bmap[len(bmap) - nb :] if nb else ()
    lead = node_shape[len(node_shape) - 2 - nb : len(node_shape) - 2]
    return tuple(Affine.of(0) if (s == 1 and l != 1) else a for a, s, l in zip(own, shape[:nb], lead))


def _row_operand(roles: Roles, node: Node, i: int) -> None:
    g = roles.graph
    src = g.nodes[i]
    shape, nshape = g.concrete_shape(i), g.concrete_shape(node.id)
    value = scalar_value(g, src)
    if value is not None:
        roles.role[i] = "scalar"
        roles.scalar[i] = value
        return
    if (
        len(shape) >= 2
        and shape[-2] == nshape[-2]
        and shape[-2] != 1
        or len(shape) >= 2
        and nshape[-2] == 1 == shape[-2]
    ):
        _assign(roles, i, "row", _operand_bmap(roles.bmap[node.id], nshape, shape))
        return
    if shape and all(s == 1 for s in shape[:-1]):
        if src.op != "input":
            raise NeedCut(i)
        _assign(roles, i, "bcast", ())
        return
    # NumPy broadcasts it (a vector per batch, [B, 1, D] over [B, S, D]); the lowering broadcasts a row
    # vector only when it is the same for every batch: "does not broadcast" read as a wrong spec
    raise LoweringError(
        f"{g.name}: {node.op} operand of shape {list(shape)}, a row vector per batch broadcast over the rows "
        f"of {list(nshape)}, is not lowered: only a vector the same for every batch ([1, 1, D] or [D]) is"
    )


def _visit(roles: Roles, node: Node) -> None:
    g, role = roles.graph, roles.role[node.id]
    if role in ("scalar", "bcast", "rowT", "tload", "weight", "wscale"):
        return
    op, rank = node.op, node.type.rank
    bmap = roles.bmap[node.id]
    if op == "input":
        return
    if op in UNARY or op in ("pow", "cast") or op in BINARY:
        for i in node.inputs:
            _row_operand(roles, node, i)
    elif op == "reduce":
        if node.attr("axis") != rank - 1 or not node.attr("keepdims"):
            raise LoweringError(
                f"{g.name}: only reductions over the last axis with keepdims are lowered (node %{node.id})"
            )
        _assign(roles, node.inputs[0], "row", bmap)
    elif op == "matmul":
        left, right = node.inputs
        lnode = g.nodes[left]
        lshape = g.concrete_shape(left)
        lbmap = _operand_bmap(bmap, g.concrete_shape(node.id), lshape)
        if lnode.op == "transpose" and _swaps_last_two(lnode) and g.nodes[lnode.inputs[0]].op == "input":
            _assign(roles, left, "rowT", lbmap)
            _assign(roles, lnode.inputs[0], "rowT", lbmap)
        elif lnode.op == "transpose":
            raise NeedCut(lnode.inputs[0])
        else:
            _assign(roles, left, "row", lbmap)
        rbmap = _operand_bmap(bmap, g.concrete_shape(node.id), g.concrete_shape(right))
        roles.weight[node.id] = _weight(roles, right, rbmap, transposed=False)
    elif op == "slice" or op == "concat":
        if node.attr("axis") != rank - 1:
            raise LoweringError(f"{g.name}: {op} is lowered along the last axis only (node %{node.id})")
        for i in node.inputs:
            _assign(roles, i, "row", bmap)
    elif op == "repeat":
        axis = node.attr("axis")
        if axis >= rank - 2:
            raise LoweringError(f"{g.name}: repeat is lowered along batch axes only (node %{node.id})")
        reps = node.attr("repeats").evaluate(g.bindings)
        sub = list(bmap)
        sub[axis] = sub[axis].floordiv(reps)
        _assign(roles, node.inputs[0], "row", tuple(sub))
    elif op == "transpose":
        src = g.nodes[node.inputs[0]]
        if not _swaps_last_two(node) or src.op != "input":
            raise (
                NeedCut(node.inputs[0])
                if src.op != "input"
                else LoweringError(f"{g.name}: transpose {node.attr('axes')} is not lowered (only the last two axes)")
            )
        _assign(roles, node.inputs[0], "tload", bmap)
    elif op in ("reshape",):
        raise LoweringError(f"{g.name}: reshape inside a kernel is not lowered (node %{node.id})")
    else:
        raise LoweringError(f"{g.name}: op {op} is not lowered (node %{node.id})")


def _swaps_last_two(node: Node) -> bool:
    axes = node.attr("axes")
    n = len(axes)
    return tuple(axes) == tuple(range(n - 2)) + (n - 1, n - 2)


def _weight(roles: Roles, nid: int, bmap: tuple[Affine, ...], transposed: bool, scale: str | None = None) -> Weight:
    g = roles.graph
    node = g.nodes[nid]
    if node.op == "input":
        roles.role.setdefault(nid, "weight")
        return Weight(node.attr("name"), transposed, bmap, scale)
    if node.op == "repeat" and node.attr("axis") < node.type.rank - 2:
        reps = node.attr("repeats").evaluate(g.bindings)
        sub = list(bmap)
        sub[node.attr("axis")] = sub[node.attr("axis")].floordiv(reps)
        return _weight(roles, node.inputs[0], tuple(sub), transposed, scale)
    if node.op == "transpose" and _swaps_last_two(node):
        return _weight(roles, node.inputs[0], bmap, not transposed, scale)
    vec = _k_scale(g, node) if transposed and scale is None else None
    if vec is not None:  # read as W.T, this node's last axis is K: a per-row scale of W
        roles.role.setdefault(vec.id, "wscale")
        other = next(i for i in node.inputs if i != vec.id)
        return _weight(roles, other, bmap, transposed, vec.attr("name"))
    raise NeedCut(nid)


def _k_scale(g: Graph, node: Node) -> Node | None:
    """The [K] input of `mul(Y, v)` that scales Y's last axis, if v is read nowhere else."""
    if node.op != "mul" or len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
        return None
    for i in node.inputs:
        v = g.nodes[i]
        users = [u for u in g.nodes if i in u.inputs]
        if (
            v.op == "input"
            and len(g.concrete_shape(i)) == 1
            and g.concrete_shape(i)[0] == g.concrete_shape(node.id)[-1]
            and len(users) == 1
        ):
            return v
    return None


# cutting into passes -----------------------------------------------------------------------------
