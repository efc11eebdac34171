"""What instruction synthesis works on and produces: a fused group of elementwise graph nodes
(`FusedGroup`, with its `Leaf` inputs), an ISA instruction of a sequence (`Step`), a proved
sequence (`Alternative`), and the per-element value of a step and of a group's node under any
arithmetic (floats, NumPy arrays, Z3 reals), with the ISA table's semantics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from axon.ir import Graph
from axon.ir.ops import BINARY, UNARY
from axon.target import isa
from axon.verify import Z3Math


@dataclass(frozen=True)
class Leaf:
    """An input of a group: node id and kind ("full" | "vec" | "bcast" | "scalar" with `value`)."""

    node: int
    kind: str
    value: float | None = None


@dataclass(frozen=True)
class FusedGroup:
    """Nodes of a graph computed together, the leaves they read, and the sink they produce."""

    graph: Graph
    nodes: tuple[int, ...]
    leaves: tuple[Leaf, ...]
    sink: int

    @property
    def reduce(self) -> str | None:
        n = self.graph.nodes[self.sink]
        return n.attr("kind") if n.op == "reduce" else None

    def name(self) -> str:
        return f"g{self.sink}"


@dataclass(frozen=True)
class Step:
    """One instruction: `args` values are ("in", leaf node id) | ("step", index) | ("imm", float) |
    ("sqrt", float): the positive square root of a constant (an activation's scale, proved with the
    root itself, emitted rounded like any other immediate) | str."""

    opcode: str
    engine: str
    args: tuple[tuple[str, Any], ...]

    def arg(self, name: str, default: Any = None) -> Any:
        return dict(self.args).get(name, default)


@dataclass(frozen=True)
class Alternative:
    steps: tuple[Step, ...]
    proof: str  # "z3: unsat (equal for all reals, divisors nonzero)"

    def describe(self) -> str:
        return "; ".join(
            f"{s.opcode}[{s.engine}]({', '.join(f'{k}={_show(v)}' for k, v in s.args)})" for s in self.steps
        )


def _show(v: Any) -> str:
    if isinstance(v, tuple) and v[0] == "in":
        return f"%{v[1]}"
    if isinstance(v, tuple) and v[0] == "step":
        return f"s{v[1]}"
    if isinstance(v, tuple) and v[0] == "imm":
        return f"{v[1]:g}"
    if isinstance(v, tuple) and v[0] == "sqrt":
        return f"sqrt({v[1]:g})"
    return str(v)


# ---- semantics of a step, from the ISA table ----------------------------------------------------


def step_value(m: Any, step: Step, env: Mapping[Any, Any]) -> Any:
    """The per-element value of `step` (for reductions: of the elementwise part) over `m`."""
    a = {k: _arg_value(m, v, env) for k, v in step.args}
    op = step.opcode
    if op in ("activation", "activation_reduce"):
        return isa.sem_activation(m, a["data"], a["op"], a.get("scale", 1.0), a.get("bias"))
    if op in ("tensor_scalar", "tensor_scalar_reduce"):
        return isa.sem_tensor_scalar(
            m,
            a["data"],
            a["op0"],
            a["operand0"],
            a.get("reverse0", False),
            a.get("op1"),
            a.get("operand1"),
            a.get("reverse1", False),
        )
    if op == "tensor_tensor":
        return isa.sem_tensor_tensor(m, a["data1"], a["data2"], a["op"])
    if op == "scalar_tensor_tensor":
        return isa.sem_scalar_tensor_tensor(m, a["data"], a["op0"], a["operand0"], a["op1"], a["operand1"])
    if op == "reciprocal":
        return isa.sem_reciprocal(m, a["data"])
    if op == "tensor_reduce":
        return a["data"]
    raise ValueError(op)


def _arg_value(m: Any, v: Any, env: Mapping[Any, Any]) -> Any:
    if isinstance(v, tuple) and v[0] in ("in", "step"):
        return env[v]
    if isinstance(v, tuple) and v[0] == "sqrt":
        # Z3 reads a float immediate by its decimal text (z3.RealVal(0.1) is 1/10): the root must be of
        # that same number, not of the float's exact binary value
        return m.sqrt(Fraction(repr(v[1]))) if isinstance(m, Z3Math) else m.sqrt(v[1])
    return v[1] if isinstance(v, tuple) else v


def _node_value(m: Any, g: Graph, nid: int, env: Mapping[int, Any]) -> Any:
    if nid in env:
        return env[nid]
    n = g.nodes[nid]
    args = [_node_value(m, g, i, env) for i in n.inputs]
    if n.op in UNARY:
        return UNARY[n.op](m, args[0])
    if n.op in BINARY:
        return BINARY[n.op](m, args[0], args[1])
    if n.op == "pow":
        return m.power(args[0], n.attr("exponent"))
    if n.op in ("reduce", "cast"):
        return args[0]  # reductions compare their elementwise part (same reduce kind on both sides)
    raise ValueError(n.op)
