"""The tensor-program graph: immutable nodes in topological order, symbolic shapes, canonical hash.

A `Graph` never changes; transformations build new graphs (`GraphBuilder` or `Graph.replace`).
Sizes of symbolic dims live in `Graph.dims` (possibly partial: a graph with no bindings is the
all-sizes program the verifier reasons about).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from axon.errors import SpecError
from axon.ir.dims import Dim, shape_str
from axon.ir.ops import COMMUTATIVE

DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2")
# the dtypes a tuned kernel takes (`axon tune --dtype`, a sweep entry); float8 only as a spec's cast
KERNEL_DTYPES = DTYPES[:3]
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3": 1, "float8_e5m2": 1}
DTYPE_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float8_e4m3": "f8e4", "float8_e5m2": "f8e5"}


@dataclass(frozen=True)
class TensorType:
    """Shape (symbolic dims) and element type of a value."""

    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise SpecError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    def concrete(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d.evaluate(dims) for d in self.shape)

    def numel(self, dims: Mapping[str, int]) -> int:
        n = 1
        for s in self.concrete(dims):
            n *= s
        return n

    def nbytes(self, dims: Mapping[str, int]) -> int:
        return self.numel(dims) * DTYPE_BYTES[self.dtype]

    def __str__(self) -> str:
        return f"{DTYPE_SHORT[self.dtype]}{shape_str(self.shape)}"


@dataclass(frozen=True)
class Node:
    """One operation. `attrs` is a sorted tuple of (name, value) pairs; values are hashable."""

    id: int
    op: str
    inputs: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]
    type: TensorType
    where: str = field(default="", compare=False)  # spec source location, for errors

    def attr(self, name: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.type.shape


def _attr_repr(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(_attr_repr(v) for v in value) + ")"
    if isinstance(value, float):
        return repr(float(value))
    return str(value)


@dataclass(frozen=True)
class Graph:
    """A tensor program: `nodes` in topological order, named inputs, ordered outputs."""

    name: str
    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]
    dims: tuple[tuple[str, int], ...] = ()
    output_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for i, n in enumerate(self.nodes):
            if n.id != i:
                raise ValueError(f"node ids must be positions (node {n.id} at {i})")
            if any(j >= i for j in n.inputs):
                raise ValueError(f"node {i} ({n.op}) uses a later node: not topological")
        if not self.output_names:
            names = ("out",) if len(self.outputs) == 1 else tuple(f"out{i}" for i in range(len(self.outputs)))
            object.__setattr__(self, "output_names", names)

    # access --------------------------------------------------------------------------------------
    @property
    def bindings(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "input")

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(n.attr("name") for n in self.inputs)

    def input(self, name: str) -> Node:
        for n in self.inputs:
            if n.attr("name") == name:
                return n
        raise SpecError(f"graph {self.name} has no input {name!r}; inputs are {', '.join(self.input_names)}")

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for n in self.nodes for d in n.shape for s in d.symbols) | frozenset(
            s for n in self.nodes for _, v in n.attrs if isinstance(v, Dim) for s in v.symbols
        )

    def users(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i].append(n.id)
        return out

    def bind(self, **dims: int) -> Graph:
        """The same program with (more) dimension sizes bound."""
        merged = self.bindings
        for k, v in dims.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SpecError(f"dimension {k} must be a positive integer, got {v!r}")
            merged[k] = v
        return replace(self, dims=tuple(sorted(merged.items())))

    def check_bound(self) -> None:
        """SpecError naming the first dimension that has no size."""
        missing = sorted(self.symbols - set(self.bindings))
        if missing:
            raise SpecError(
                f"graph {self.name}: unbound dimension {missing[0]!r}"
                + (f" (also {', '.join(missing[1:])})" if len(missing) > 1 else "")
                + f"; bind with --shape {missing[0]}=..."
            )
        self.memo(("slices",), self._check_slices)
        self.memo(("extents",), self._check_extents)

    def _check_extents(self) -> None:
        """SpecError for a value with an axis of size 0 or less at these sizes (`x="M 0"`, `N-256` at
        N=256: an empty array was a NumPy ValueError's traceback in the reference)."""
        for n in self.nodes:
            what = f"input {n.attr('name')}" if n.op == "input" else f"%{n.id} ({n.op})"
            try:
                shape = self.concrete_shape(n.id)
            except SpecError as exc:  # K/2 at K=3 named neither the spec nor the value it sizes
                raise SpecError(f"graph {self.name}: {what} of shape [{', '.join(map(str, n.shape))}]: {exc}") from None
            if any(d < 1 for d in shape):
                raise SpecError(
                    f"graph {self.name}: {what} has shape {list(shape)} under {dict(self.bindings)}: "
                    "every dimension must be at least 1"
                )

    def _check_slices(self) -> None:
        """SpecError for a slice outside its axis at these sizes (x[:, :1000] with N=256 was traced as
        1000 columns, then every kernel failed; x[:, 300:] as -44)."""
        for n in self.nodes:
            if n.op != "slice":
                continue
            axis, dims = n.attr("axis"), self.bindings
            extent = self.nodes[n.inputs[0]].shape[axis]
            try:
                start, stop, size = (d.evaluate(dims) for d in (n.attr("start"), n.attr("stop"), extent))
            except SpecError as exc:  # a split of an odd K: named neither the spec nor the slice
                raise SpecError(
                    f"graph {self.name}: slice [{n.attr('start')}:{n.attr('stop')}] (node %{n.id}): {exc}"
                ) from None
            if not 0 <= start < stop <= size:
                raise SpecError(
                    f"graph {self.name}: slice [{n.attr('start')}:{n.attr('stop')}] of axis {axis} (node %{n.id}) "
                    f"is [{start}:{stop}], outside the axis's {size} ({extent}) under {dims}"
                )

    def concrete_shape(self, node_id: int) -> tuple[int, ...]:
        return self.memo(("shape", node_id), lambda: self.nodes[node_id].type.concrete(self.bindings))

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()` once per graph and key: for pure functions of this (immutable) graph that the
        search calls thousands of times (concrete shapes, instruction alternatives)."""
        cache = self.__dict__.get("_memo")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_memo", cache)
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    # identity ------------------------------------------------------------------------------------
    def node_digests(self) -> list[str]:
        """Structural digest of every node: equal for equal computations, whatever the node ids."""
        digests: list[str] = []
        for n in self.nodes:
            ins = [digests[i] for i in n.inputs]
            if n.op in COMMUTATIVE:
                ins.sort()
            text = "|".join([n.op, _attr_repr(n.attrs), str(n.type), *ins])
            digests.append(hashlib.sha256(text.encode()).hexdigest()[:32])
        return digests

    def canonical_hash(self) -> str:
        """Hash of what the graph computes (inputs by name, outputs in order, ids ignored)."""
        digests = self.node_digests()
        text = "|".join(digests[o] for o in self.outputs)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # printing ------------------------------------------------------------------------------------
    def format(self) -> str:
        return format_graph(self)

    def __str__(self) -> str:
        return self.format()


def live_nodes(nodes: Iterable[Node], outputs: Iterable[int]) -> set[int]:
    """Ids of the nodes that an output depends on (inputs always count as live)."""
    nodes = list(nodes)
    live = {n.id for n in nodes if n.op == "input"}
    stack = list(outputs)
    while stack:
        i = stack.pop()
        if i in live and nodes[i].op != "input":
            continue
        live.add(i)
        stack.extend(nodes[i].inputs)
    return live


def _format_attrs(node: Node) -> str:
    parts = []
    for k, v in node.attrs:
        if node.op == "const" and k == "value":
            return f"{v:g}"
        if isinstance(v, tuple):
            v = "(" + ", ".join(str(x) for x in v) + ")"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def format_graph(graph: Graph) -> str:
    """A readable listing of `graph`, one node a line, shapes with their bound sizes (`Graph.format`)."""
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
        extra = _format_attrs(n)
        call = f"{n.attr('kind') if n.op == 'reduce' else n.op}({', '.join(args)}"
        if n.op == "reduce":
            extra = f"axis={n.attr('axis')}" + (", keepdims" if n.attr("keepdims") else "")
        call += (", " + extra if extra else "") + ")"
        lines.append(f"  %{n.id} = {call} : {DTYPE_SHORT[n.type.dtype]}{shape_str(n.shape)}")
    outs = ", ".join(f"{name}={names[o]}" for name, o in zip(graph.output_names, graph.outputs))
    lines.append(f"  return {outs}")
    return "\n".join(lines)
