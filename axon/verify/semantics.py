"""Graph semantics for proofs: each output element as a normalized expression of symbolic indices.

Every IR op becomes an index map or a per-element `axon.ir.ops` function over `ExprMath`, so the
proof and the NumPy reference share one definition of each op. Reshape is modelled when it only
adds/removes unit axes or splits an axis; merging axes raises `Unsupported` (the proof is Unknown).
"""

from __future__ import annotations

from axon.ir.dims import Dim
from axon.ir.graph import Graph, Node
from axon.ir.ops import BINARY, UNARY
from axon.verify import expr as E
from axon.verify.values import POS, ExprMath, Val, reduce_val

ONE = Dim.const(1)
ZERO = Dim.const(0)
MATH = ExprMath()


def output_index(rank: int) -> tuple[Dim, ...]:
    return tuple(Dim.sym(f"__i{j}") for j in range(rank))


class Semantics:
    """Memoized per-element values of one graph's nodes."""

    def __init__(self, graph: Graph, names: E.Names) -> None:
        self.graph = graph
        self.names = names
        self._memo: dict[tuple, Val] = {}

    def outputs(self) -> list[Val]:
        out = []
        for o in self.graph.outputs:
            out.append(self.value(o, output_index(self.graph.nodes[o].type.rank)))
        return out

    def value(self, node_id: int, index: tuple[E.Idx, ...]) -> Val:
        key = (node_id, tuple(str(i) for i in index))
        if key not in self._memo:
            self._memo[key] = self._compute(self.graph.nodes[node_id], index)
        return self._memo[key]

    def _operand(self, node: Node, which: int, index: tuple[E.Idx, ...]) -> Val:
        """The operand element that broadcasts onto `index` of `node`'s output."""
        src = self.graph.nodes[node.inputs[which]]
        shape = src.shape
        lead = len(index) - len(shape)
        sub = tuple(
            ZERO if shape[j] == ONE and node.shape[j + lead] != ONE else index[j + lead] for j in range(len(shape))
        )
        return self.value(src.id, sub)

    def _compute(self, node: Node, index: tuple[E.Idx, ...]) -> Val:
        op = node.op
        if op == "input":
            return Val(E.atom(E.Elem(node.attr("name"), index)))
        if op == "const":
            return Val.lift(node.attr("value"))
        if op == "dimsize":
            dim = node.attr("dim")
            # a size is a positive integer; an expression like K - 1 may be 0, so only all-positive terms count
            return Val(E.dim_poly(dim), POS if dim.terms and all(c > 0 for _, c in dim.terms) else None)
        if op in UNARY:
            return UNARY[op](MATH, self._operand(node, 0, index))
        if op in BINARY:
            return BINARY[op](MATH, self._operand(node, 0, index), self._operand(node, 1, index))
        if op == "pow":
            return MATH.power(self._operand(node, 0, index), node.attr("exponent"))
        if op == "cast":
            return self._operand(node, 0, index)  # proofs are over the reals; precision is the lowering's job
        if op == "reduce":
            return self._reduce(node, index)
        if op == "matmul":
            return self._matmul(node, index)
        if op == "transpose":
            axes = node.attr("axes")
            inner: list[E.Idx] = [ZERO] * len(axes)
            for j, ax in enumerate(axes):
                inner[ax] = index[j]
            return self.value(node.inputs[0], tuple(inner))
        if op == "reshape":
            return self.value(node.inputs[0], self._reshape_index(node, index))
        if op == "slice":
            axis = node.attr("axis")
            shifted = list(index)
            shifted[axis] = _shift(index[axis], node.attr("start"))
            return self.value(node.inputs[0], tuple(shifted))
        if op == "concat":
            return self._concat(node, index)
        if op == "repeat":
            axis = node.attr("axis")
            repeated = list(index)
            repeated[axis] = E.FloorDiv(index[axis], node.attr("repeats"))
            return self.value(node.inputs[0], tuple(repeated))
        raise E.Unsupported(f"op {op} has no proof semantics")

    def _reduce(self, node: Node, index: tuple[E.Idx, ...]) -> Val:
        src = self.graph.nodes[node.inputs[0]]
        axis = node.attr("axis")
        var = self.names.fresh()
        inner = list(index)
        if node.attr("keepdims"):
            inner[axis] = Dim.sym(var)
        else:
            inner.insert(axis, Dim.sym(var))
        body = self.value(src.id, tuple(inner))
        return reduce_val(node.attr("kind"), var, src.shape[axis], body, self.names)

    def _matmul(self, node: Node, index: tuple[E.Idx, ...]) -> Val:
        a, b = (self.graph.nodes[i] for i in node.inputs)
        var = Dim.sym(self.names.fresh())
        batch = index[:-2]

        def side(n: Node, last_two: tuple) -> tuple:
            nb = n.shape[:-2]
            lead = len(batch) - len(nb)
            sub = tuple(
                ZERO if nb[j] == ONE and node.shape[j + lead] != ONE else batch[j + lead] for j in range(len(nb))
            )
            return sub + last_two

        body = self.value(a.id, side(a, (index[-2], var))) * self.value(b.id, side(b, (var, index[-1])))
        return reduce_val("sum", str(var), a.shape[-1], body, self.names)

    def _reshape_index(self, node: Node, index: tuple[E.Idx, ...]) -> tuple[E.Idx, ...]:
        src = self.graph.nodes[node.inputs[0]].shape
        out = node.shape
        outer = [(d, index[j]) for j, d in enumerate(out) if d != ONE]
        inner: list[E.Idx] = []
        pos = 0
        for d in src:
            if d == ONE:
                inner.append(ZERO)
                continue
            # the out axes whose product is d form this source axis: index = Σ i_j * stride_j
            group: list[tuple[Dim, E.Idx]] = []
            prod = ONE
            while pos < len(outer) and prod != d:
                group.append(outer[pos])
                prod = prod * outer[pos][0]
                pos += 1
            if prod != d:
                raise E.Unsupported(f"reshape {[str(x) for x in src]} -> {[str(x) for x in out]} merges axes")
            if len(group) == 1 and isinstance(group[0][1], E.FloorDiv):
                inner.append(group[0][1])  # a repeated axis kept whole
                continue
            flat = ZERO
            for j, (_, ij) in enumerate(group):
                if isinstance(ij, E.FloorDiv):
                    raise E.Unsupported("reshape of a repeated axis")
                stride = ONE
                for dk, _ in group[j + 1 :]:
                    stride = stride * dk
                flat = flat + ij * stride
            inner.append(flat)
        if pos != len(outer):
            raise E.Unsupported("reshape with leftover axes")
        return tuple(inner)

    def _concat(self, node: Node, index: tuple[E.Idx, ...]) -> Val:
        axis = node.attr("axis")
        vals, bounds, off = [], [], Dim.const(0)
        for i in node.inputs:
            inner = list(index)
            inner[axis] = _shift(index[axis], off * -1)
            vals.append(self.value(i, tuple(inner)).poly)
            off = off + self.graph.nodes[i].shape[axis]
            bounds.append(str(off))
        return Val(E.atom(E.Fn("cases", tuple(vals), (index[axis], tuple(bounds)))))


def _shift(i: E.Idx, by: Dim) -> E.Idx:
    if isinstance(i, E.FloorDiv):
        raise E.Unsupported("slice of a repeated axis")
    return i + by
