"""Building graphs: shape inference for every op, and a builder that dedupes identical nodes.

Both the tracing frontend and every graph transformation (variant discovery, lowering prep) build
through `GraphBuilder`, so shape rules and their error messages live in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from axon.errors import SpecError
from axon.ir.dims import Dim, parse_shape, shape_str
from axon.ir.graph import DTYPES, Graph, Node, TensorType, live_nodes
from axon.ir.ops import ALL_OPS, BINARY, REDUCTIONS, UNARY

ONE = Dim.const(1)


def _fail(op: str, where: str, message: str) -> SpecError:
    loc = f" (at {where})" if where else ""
    return SpecError(f"{op}: {message}{loc}")


def broadcast_shapes(op: str, a: tuple[Dim, ...], b: tuple[Dim, ...], where: str = "") -> tuple[Dim, ...]:
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else ONE
        db = b[-i] if i <= len(b) else ONE
        if da == db or db == ONE:
            out.append(da)
        elif da == ONE:
            out.append(db)
        else:
            raise _fail(
                op, where, f"shapes {shape_str(a)} and {shape_str(b)} do not broadcast (axis -{i}: {da} vs {db})"
            )
    return tuple(reversed(out))


def _is_scalar_constant(node: Node) -> bool:
    return node.op in ("const", "dimsize") and node.type.rank == 0


def _binary_dtype(a: Node, b: Node) -> str:
    if _is_scalar_constant(a):
        return b.type.dtype
    if _is_scalar_constant(b) or a.type.dtype == b.type.dtype:
        return a.type.dtype
    return "float32"


def _axis(op: str, where: str, axis: int, rank: int) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise _fail(op, where, f"axis must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        raise _fail(op, where, f"axis {axis} out of range for a rank-{rank} tensor")
    return axis % rank


def _product(shape: Sequence[Dim]) -> Dim:
    p = ONE
    for d in shape:
        p = p * d
    return p


def infer_type(
    op: str, ins: Sequence[Node], attrs: dict[str, Any], where: str = ""
) -> tuple[TensorType, dict[str, Any]]:
    """Result type of `op` on `ins`, and the attrs normalized (axes made non-negative)."""
    if op not in ALL_OPS:
        raise _fail(op, where, "unknown op")
    shapes = [n.type.shape for n in ins]
    if op in UNARY or op == "pow":
        return TensorType(shapes[0], ins[0].type.dtype), attrs
    if op == "cast":  # TensorType's own refusal named neither the op nor the spec's line
        if attrs["dtype"] not in DTYPES:
            raise _fail(op, where, f"unknown dtype {attrs['dtype']!r}; expected one of {', '.join(DTYPES)}")
        return TensorType(shapes[0], attrs["dtype"]), attrs
    if op in BINARY:
        shape = broadcast_shapes(op, shapes[0], shapes[1], where)
        return TensorType(shape, _binary_dtype(ins[0], ins[1])), attrs
    if op in ("const", "dimsize"):
        return TensorType((), "float32"), attrs
    if op == "reduce":
        if attrs["kind"] not in REDUCTIONS:
            raise _fail(op, where, f"unknown reduction {attrs['kind']!r}")
        shape = shapes[0]
        axis = _axis(f"{attrs['kind']}", where, attrs["axis"], len(shape))
        attrs = {**attrs, "axis": axis}
        out = shape[:axis] + ((ONE,) if attrs["keepdims"] else ()) + shape[axis + 1 :]
        return TensorType(out, ins[0].type.dtype), attrs
    if op == "matmul":
        a, b = shapes
        if len(a) < 2 or len(b) < 2:
            raise _fail(op, where, f"operands must have rank >= 2, got {shape_str(a)} and {shape_str(b)}")
        if a[-1] != b[-2]:
            raise _fail(op, where, f"contraction mismatch: {shape_str(a)} @ {shape_str(b)} ({a[-1]} vs {b[-2]})")
        batch = broadcast_shapes(op, a[:-2], b[:-2], where)
        return TensorType(batch + (a[-2], b[-1]), _binary_dtype(ins[0], ins[1])), attrs
    if op == "transpose":
        axes = tuple(_axis(op, where, ax, len(shapes[0])) for ax in attrs["axes"])
        if sorted(axes) != list(range(len(shapes[0]))):
            raise _fail(op, where, f"axes {attrs['axes']} are not a permutation for shape {shape_str(shapes[0])}")
        return TensorType(tuple(shapes[0][ax] for ax in axes), ins[0].type.dtype), {**attrs, "axes": axes}
    if op == "reshape":
        try:  # "N M" as a spec declares a shape, or a sequence of dimensions
            given = attrs["shape"]
            new = parse_shape(given) if isinstance(given, str) else tuple(Dim.of(d) for d in given)
        except SpecError as exc:  # "cannot parse dimension ' '" without the op or the spec's line
            raise _fail(op, where, str(exc)) from None
        if _product(new) != _product(shapes[0]):
            raise _fail(op, where, f"cannot reshape {shape_str(shapes[0])} into {shape_str(new)}")
        return TensorType(new, ins[0].type.dtype), {**attrs, "shape": new}
    if op == "slice":
        shape = shapes[0]
        axis = _axis(op, where, attrs["axis"], len(shape))
        # a negative constant counts from the end, as in NumPy (x[:, :-1], x[:, -64:])
        start, stop = (Dim.of(attrs[k]) for k in ("start", "stop"))
        start, stop = (shape[axis] + d if d.is_const and d.const_value < 0 else d for d in (start, stop))
        extent = stop - start
        if extent.is_const and extent.const_value <= 0:
            raise _fail(op, where, f"empty slice [{start}:{stop}] of axis {axis} in {shape_str(shape)}")
        out = shape[:axis] + (extent,) + shape[axis + 1 :]
        return TensorType(out, ins[0].type.dtype), {**attrs, "axis": axis, "start": start, "stop": stop}
    if op == "concat":
        axis = _axis(op, where, attrs["axis"], len(shapes[0]))
        total = Dim.const(0)
        for s in shapes:
            if len(s) != len(shapes[0]) or any(s[i] != shapes[0][i] for i in range(len(s)) if i != axis):
                raise _fail(op, where, f"shapes {shape_str(shapes[0])} and {shape_str(s)} differ off axis {axis}")
            total = total + s[axis]
        out = shapes[0][:axis] + (total,) + shapes[0][axis + 1 :]
        dtype = ins[0].type.dtype if all(n.type.dtype == ins[0].type.dtype for n in ins) else "float32"
        return TensorType(out, dtype), {**attrs, "axis": axis}
    if op == "repeat":
        shape = shapes[0]
        axis = _axis(op, where, attrs["axis"], len(shape))
        reps = Dim.of(attrs["repeats"])
        out = shape[:axis] + (shape[axis] * reps,) + shape[axis + 1 :]
        return TensorType(out, ins[0].type.dtype), {**attrs, "axis": axis, "repeats": reps}
    raise _fail(op, where, "no shape rule")  # pragma: no cover - every op in ALL_OPS has a rule above


class GraphBuilder:
    """Appends nodes with shape inference; identical nodes (same op, attrs, inputs) are shared."""

    def __init__(self, name: str, dims: Mapping[str, int] | None = None, max_nodes: int | None = None) -> None:
        self.name = name
        self.dims = dict(dims or {})
        self.max_nodes = (
            max_nodes  # a bound for a traced spec: an endless loop of ops is refused, not run out of memory
        )
        self.nodes: list[Node] = []
        self._index: dict[tuple, int] = {}

    def add(self, op: str, inputs: Sequence[int] = (), where: str = "", **attrs: Any) -> int:
        ins = [self.nodes[i] for i in inputs]
        if op == "input":
            ttype = attrs.pop("type")
            if any(n.attr("name") == attrs["name"] for n in self.nodes if n.op == "input"):
                raise _fail(op, where, f"duplicate input name {attrs['name']!r}")
        else:
            ttype, attrs = infer_type(op, ins, attrs, where)
        key = (op, tuple(inputs), tuple(sorted(attrs.items())), ttype)
        if op != "input" and key in self._index:
            return self._index[key]
        if self.max_nodes is not None and len(self.nodes) >= self.max_nodes:
            raise _fail(op, where, f"more than {self.max_nodes:,} ops traced in spec {self.name} (an endless loop?)")
        node = Node(len(self.nodes), op, tuple(inputs), tuple(sorted(attrs.items())), ttype, where)
        self.nodes.append(node)
        self._index[key] = node.id
        return node.id

    def input(
        self, name: str, ttype: TensorType, where: str = "", value_range: tuple[float, float] | None = None
    ) -> int:
        """An input; `value_range` is the declared range of its values (kept as the `range` attribute)."""
        if value_range is None:
            return self.add("input", (), where, name=name, type=ttype)
        return self.add("input", (), where, name=name, type=ttype, range=tuple(value_range))

    def const(self, value: float) -> int:
        return self.add("const", (), value=float(value))

    def copy_node(self, node: Node, inputs: Sequence[int]) -> int:
        """Re-add `node` from another graph on new inputs (types re-inferred)."""
        if node.op == "input":
            return self.input(node.attr("name"), node.type, node.where, node.attr("range"))
        return self.add(node.op, inputs, node.where, **dict(node.attrs))

    def build(self, outputs: Sequence[int], output_names: Sequence[str] = ()) -> Graph:
        """The graph of everything `outputs` need (plus all inputs), renumbered in order."""
        live = live_nodes(self.nodes, outputs)
        remap: dict[int, int] = {}
        kept: list[Node] = []
        for n in self.nodes:
            if n.id in live:
                remap[n.id] = len(kept)
                kept.append(Node(len(kept), n.op, tuple(remap[i] for i in n.inputs), n.attrs, n.type, n.where))
        return Graph(
            self.name,
            tuple(kept),
            tuple(remap[o] for o in outputs),
            tuple(sorted(self.dims.items())),
            tuple(output_names),
        )
