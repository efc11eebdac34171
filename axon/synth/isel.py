"""Instruction synthesis: ISA instruction sequences (up to 3) proved equal to a fused group.

A `FusedGroup` is a small tree of elementwise ops (optionally ending in a free-axis reduction) over
leaves that are full row tiles, per-row [P, 1] vectors, partition-broadcast vectors or immediates.
The search cuts the tree into at most three pieces and, for each piece, enumerates single ISA
instructions (and a cheap per-row "prep" instruction followed by one) over the piece's inputs and
constants, with semantics taken from `axon.target.isa` (the same functions the emulator runs).
Candidates are filtered on random float64 values, then proved equal for all reals with Z3
(`axon.verify.Z3Math`), under the side condition that every divisor is nonzero. Nothing here is
specific to a workload: the per-row scale applied by `activation(copy, scale=r)` is found like
any other sequence. It does not choose among alternatives (the tuner does).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from axon.ir import Graph
from axon.ir.ops import BINARY, UNARY, NumpyMath

ALU_OPS = ("add", "subtract", "multiply", "divide")
_IR_TO_ALU = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "div": "divide",
    "maximum": "maximum",
    "minimum": "minimum",
}
_IR_TO_ACT = {
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "silu": "silu",
    "gelu": "gelu_apprx_tanh",
    "relu": "relu",
    "square": "square",
    "abs": "abs",
    "reciprocal": "reciprocal",
}
_PREP_ACTS = ("rsqrt", "reciprocal", "sqrt")
# The most IR ops one instruction computes: activation(op, data * scale + bias) is three, and a
# per-row prep may add one. Larger pieces are not searched (no form could match them).
MAX_PIECE_OPS = 4


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
    """One instruction: `args` values are ("in", leaf node id) | ("step", index) | ("imm", float) | str."""

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
    return str(v)


# ---- semantics of a step, from the ISA table ----------------------------------------------------


def _isa():
    from axon.target import isa

    return isa


def step_value(m: Any, step: Step, env: Mapping[Any, Any]) -> Any:
    """The per-element value of `step` (for reductions: of the elementwise part) over `m`."""
    isa = _isa()
    a = {
        k: (env[v] if isinstance(v, tuple) and v[0] in ("in", "step") else v[1] if isinstance(v, tuple) else v)
        for k, v in step.args
    }
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


# ---- the search ---------------------------------------------------------------------------------


class _Piece:
    """A connected part of the group tree computed by one instruction (or a prep + one)."""

    def __init__(self, group: FusedGroup, root: int, inputs: tuple[int, ...], members: frozenset[int]):
        self.group, self.root, self.inputs, self.members = group, root, inputs, members


def _tree_pieces(group: FusedGroup, cut: frozenset[int]) -> list[_Piece]:
    g = group.graph
    leaf_ids = {l.node for l in group.leaves}
    pieces = []
    for root in sorted(cut | {group.sink}):
        members, inputs, stack = set(), [], [root]
        while stack:
            i = stack.pop()
            if i in members:
                continue
            members.add(i)
            for j in g.nodes[i].inputs:
                if j in leaf_ids or j in cut:
                    if j not in inputs:
                        inputs.append(j)
                elif j not in members:
                    stack.append(j)
        pieces.append(_Piece(group, root, tuple(inputs), frozenset(members)))
    return pieces


def _kinds(group: FusedGroup) -> dict[int, str]:
    out = {l.node: l.kind for l in group.leaves}
    g = group.graph
    for nid in group.nodes:
        shape = g.concrete_shape(nid)
        out[nid] = "vec" if shape[-1] == 1 else "full"
    return out


def _constants(group: FusedGroup, piece: _Piece) -> list[float]:
    vals = {l.value for l in group.leaves if l.kind == "scalar" and l.node in piece.inputs}
    vals |= {float(-v) for v in list(vals)} | {float(1 / v) for v in list(vals) if v}
    return sorted((vals | {-1.0}) - {1.0})  # 1.0 is the identity: it only adds no-op variants


def _forms(
    piece: _Piece,
    kinds: Mapping[int, str],
    consts: list[float],
    acts: tuple[str, ...],
    reduce: str | None,
    extra: tuple[tuple[Any, str], ...] = (),
) -> Iterator[Step]:
    """Single instructions over the piece's inputs (and `extra` values from a prep step)."""
    ins = [(("in", i), kinds[i]) for i in piece.inputs if kinds[i] != "scalar"] + list(extra)
    tiles = [v for v, k in ins if k in ("full", "bcast")]
    vecs = [v for v, k in ins if k == "vec"]
    data = [v for v, _ in ins]
    slots = vecs + [("imm", c) for c in consts]
    if reduce is not None:
        red = "add" if reduce == "sum" else reduce
        for d in data:
            yield Step("tensor_reduce", "vector", (("op", red), ("data", d)))
        if reduce == "sum":
            for f, d in itertools.product(acts + ("copy",), data):
                yield Step("activation_reduce", "scalar", (("op", f), ("data", d)))
                for s in slots:
                    yield Step("activation_reduce", "scalar", (("op", f), ("data", d), ("scale", s)))
        for d, op0, s in itertools.product(data, ALU_OPS, slots):
            yield Step(
                "tensor_scalar_reduce", "vector", (("data", d), ("op0", op0), ("operand0", s), ("reduce_op", red))
            )
        return
    for f, d in itertools.product(acts + ("copy",), data):
        for sc in [None] + slots:
            for b in [None] + slots:
                args = [("op", f), ("data", d)] + ([("scale", sc)] if sc else []) + ([("bias", b)] if b else [])
                yield Step("activation", "scalar", tuple(args))
    for d, op0, s in itertools.product(data, ALU_OPS, slots):
        for rev in (False, True) if op0 in ("subtract", "divide") else (False,):
            base = (("data", d), ("op0", op0), ("operand0", s), ("reverse0", rev))
            for engine in ("vector", "scalar", "gpsimd") if kinds.get(d[1], "full") != "vec" else ("vector",):
                yield Step("tensor_scalar", engine, base)
            for op1, s1 in itertools.product(ALU_OPS, slots):
                yield Step("tensor_scalar", "vector", base + (("op1", op1), ("operand1", s1)))
        for t, op1 in itertools.product(tiles, ALU_OPS):  # t may be d itself: (p * c) + p is one instruction
            yield Step(
                "scalar_tensor_tensor",
                "vector",
                (("data", d), ("op0", op0), ("operand0", s), ("op1", op1), ("operand1", t)),
            )
    pairs = [(a, b) for a in tiles for b in tiles] + [(a, b) for a in vecs for b in vecs]
    for (a, b), op in itertools.product(pairs, ALU_OPS + ("maximum",)):
        yield Step("tensor_tensor", "vector", (("data1", a), ("data2", b), ("op", op)))
    for d in vecs:
        yield Step("reciprocal", "vector", (("data", d),))


def _preps(piece: _Piece, kinds: Mapping[int, str], consts: list[float]) -> Iterator[Step]:
    """Cheap per-row instructions whose result a piece's instruction may take as an operand."""
    for i in piece.inputs:
        if kinds[i] != "vec":
            continue
        for f in _PREP_ACTS:
            yield Step("activation", "scalar", (("op", f), ("data", ("in", i))))
        for c in consts:
            yield Step("tensor_scalar", "vector", (("data", ("in", i)), ("op0", "multiply"), ("operand0", ("imm", c))))


class _Checker:
    """Numeric filter on random values, then a Z3 proof of equality."""

    def __init__(self, group: FusedGroup, samples: int = 6, seed: int = 0):
        self.group = group
        rng = np.random.default_rng(seed)
        self.env = {
            l.node: (np.float64(l.value) if l.kind == "scalar" else rng.uniform(0.3, 1.7, samples))
            for l in group.leaves
        }
        self.np = NumpyMath()
        self.proved: list[str] = []
        self.checks = 0
        self.max_checks = 0  # 0: no limit

    def out_of_time(self) -> bool:
        """The search budget is counted in candidates checked, not seconds, so that the same group
        gets the same alternatives on a loaded machine: the schedule space (and a seed's trials)
        must not depend on how busy the CPU was."""
        return bool(self.max_checks) and self.checks >= self.max_checks

    def numeric(self, piece: _Piece, steps: list[Step], base: Mapping[int, Any]) -> bool:
        self.checks += 1
        env = dict(base)
        want = _node_value(self.np, self.group.graph, piece.root, {**env, **{k: v for k, v in env.items()}})
        with np.errstate(all="ignore"):
            vals = self._run(self.np, steps, env)
        return bool(np.all(np.isfinite(want)) and np.allclose(vals, want, rtol=1e-9, atol=1e-12))

    def _run(self, m: Any, steps: list[Step], env: dict[Any, Any]) -> Any:
        local = {("in", k): v for k, v in env.items()}
        out = None
        for i, s in enumerate(steps):
            out = step_value(m, s, local)
            local[("step", i)] = out
        return out

    def prove(self, piece: _Piece, steps: list[Step], rlimit: int = 5_000_000, timeout_ms: int = 30_000) -> bool:
        import z3

        # every attempt costs a solver call: a budget keeps groups Z3 cannot settle from stalling the
        # search (an unproved candidate is simply not offered)
        self.attempts = getattr(self, "attempts", 0) + 1
        if self.attempts > 60:
            return False

        from axon.verify import Z3Math

        m = Z3Math()
        env = {
            l.node: (z3.RealVal(l.value) if l.kind == "scalar" else z3.Real(f"v{l.node}")) for l in self.group.leaves
        }
        for i in piece.inputs:
            env.setdefault(i, z3.Real(f"v{i}"))
        want = _node_value(m, self.group.graph, piece.root, env)
        got = self._run(m, steps, env)
        side = [d != 0 for d in _divisors(want) + _divisors(got)]
        s = z3.Solver()
        s.set("rlimit", rlimit)  # Z3's deterministic resource limit (these proofs use ~10^3-10^4)
        s.set("timeout", timeout_ms)  # a safety net only; it does not bind on these proofs
        s.add(m.facts() + side + [want != got])
        return s.check() == z3.unsat


def _divisors(e: Any) -> list[Any]:
    import z3

    out, stack, seen = [], [e], set()
    while stack:
        t = stack.pop()
        if not z3.is_expr(t) or t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_div(t):
            out.append(t.arg(1))
        stack.extend(t.children())
    return out


def _piece_solutions(
    piece: _Piece,
    checker: _Checker,
    kinds: Mapping[int, str],
    acts: tuple[str, ...],
    reduce: str | None,
    base_env: Mapping[int, Any],
    limit: int,
) -> list[list[Step]]:
    consts = _constants(checker.group, piece)
    found: list[list[Step]] = []
    for step in _forms(piece, kinds, consts, acts, reduce):
        if checker.out_of_time():
            return found
        if checker.numeric(piece, [step], base_env) and checker.prove(piece, [step]):
            found.append([step])
            if len(found) >= limit:
                break
    found_one = len(found)
    reads_matmul = any(checker.group.graph.nodes[i].op == "matmul" for i in piece.inputs)
    # a prep instruction is tried only where one instruction does not do, or where the piece reads
    # a matmul result (its PSUM evacuation can take a per-row scale for free): it keeps the search short
    if reduce is None and (not found or reads_matmul):
        for prep in _preps(piece, kinds, consts):
            extra = ((("step", 0), "vec"),)
            for step in _forms(piece, kinds, consts, (), None, extra):
                if checker.out_of_time():
                    return found
                if ("step", 0) not in [v for _, v in step.args]:
                    continue
                if checker.numeric(piece, [prep, step], base_env) and checker.prove(piece, [prep, step]):
                    found.append([prep, step])
                    if len(found) - found_one >= limit:
                        return found
    return found


def synthesize_instructions(
    group: FusedGroup,
    hw: Any = None,
    max_instructions: int = 6,
    per_piece: int = 3,
    max_alternatives: int = 6,
    max_checks: int = 60_000,
) -> list[Alternative]:
    """Verified instruction sequences for `group`, fewest instructions first.

    >>> from axon.workloads import get
    >>> g = get("rmsnorm").graph("small")
    >>> norm = [grp for grp in fused_groups(g) if grp.sink == 11][0]   # x / sqrt(ms + eps) * gain
    >>> alts = synthesize_instructions(norm)
    >>> len(alts) >= 2 and alts[0].steps[0].opcode
    'scalar_tensor_tensor'
    """
    kinds = _kinds(group)
    g = group.graph
    acts = tuple(
        sorted(
            {_IR_TO_ACT[g.nodes[n].op] for n in group.nodes if g.nodes[n].op in _IR_TO_ACT}
            | {"exp", "square", "rsqrt", "reciprocal"}
        )
    )
    checker = _Checker(group)
    checker.max_checks = max_checks  # a bounded search: what is found within the budget is offered
    internal = [n for n in group.nodes if n != group.sink]
    results: list[tuple[int, tuple[Step, ...]]] = []
    memo: dict[tuple, list[list[Step]]] = {}  # a piece recurs in many cuts: search it once
    first = None  # the fewest cuts that gave a sequence
    for r in range(0, min(len(internal), max_instructions - 1) + 1):
        if first is not None and r > max(2, first + 1):
            break  # more cuts only give longer sequences
        for cut in itertools.combinations(internal, r):
            pieces = _tree_pieces(group, frozenset(cut))
            if any(p.root not in group.nodes or len(p.members) > MAX_PIECE_OPS for p in pieces):
                continue
            env = dict(checker.env)
            for p in pieces:  # pieces are in node order: a cut's value is known before its users
                env[p.root] = _node_value(checker.np, g, p.root, env)
            per = []
            for p in pieces:
                key = (p.root, p.inputs, p.members)
                if key not in memo:
                    red = group.reduce if p.root == group.sink else None
                    memo[key] = _piece_solutions(p, checker, kinds, acts, red, env, per_piece)
                if not memo[key]:
                    break
                per.append((p, memo[key]))
            else:
                for combo in itertools.islice(itertools.product(*(s for _, s in per)), 4 * max_alternatives):
                    seq = _link([p for p, _ in per], list(combo))
                    if len(seq) <= max_instructions:
                        results.append((len(seq), tuple(seq)))
                        first = r if first is None else first
    seen, out = set(), []
    for _, seq in sorted(results, key=lambda t: (t[0], _engine_cost(t[1]), sum(len(s.args) for s in t[1]))):
        if seq not in seen:
            seen.add(seq)
            out.append(Alternative(seq, "z3: unsat (equal for all reals, divisors nonzero)"))
    return out[:max_alternatives]


def _engine_cost(seq: tuple[Step, ...]) -> int:
    # a tie-break only (the tuner measures): VectorE reciprocal is 8x, ScalarE is the cheap activation engine
    return sum(8 if s.opcode == "reciprocal" else 1 for s in seq)


def _link(pieces: list[_Piece], sols: list[list[Step]]) -> list[Step]:
    """Concatenate piece programs; a piece's input that is another piece's root becomes a step ref."""
    seq: list[Step] = []
    where: dict[int, int] = {}
    for p, steps in zip(pieces, sols):
        offset = len(seq)
        for s in steps:
            args = []
            for k, v in s.args:
                if isinstance(v, tuple) and v[0] == "step":
                    v = ("step", v[1] + offset)
                elif isinstance(v, tuple) and v[0] == "in" and v[1] in where:
                    v = ("step", where[v[1]])
                args.append((k, v))
            seq.append(Step(s.opcode, s.engine, tuple(args)))
        where[p.root] = len(seq) - 1
    return seq


# ---- forming groups from a graph ----------------------------------------------------------------


def fused_groups(graph: Graph, row_kinds: Mapping[int, str] | None = None) -> list[FusedGroup]:
    """Maximal elementwise groups (a reduction ends its group; [P, 1] and full-tile chains apart).

    A pure function of the (immutable) graph: memoized, since lowering asks for every point."""
    if row_kinds is not None:
        return _fused_groups(graph, row_kinds)
    return list(_groups_of(graph))


@lru_cache(maxsize=512)
def _groups_of(graph: Graph) -> tuple[FusedGroup, ...]:
    return tuple(_fused_groups(graph, None))


def _fused_groups(graph: Graph, row_kinds: Mapping[int, str] | None) -> list[FusedGroup]:
    from axon.lower.passes import classify, scalar_value

    roles = classify(graph)
    users = graph.users()
    shape = graph.concrete_shape
    group_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    closed: set[int] = set()
    for n in graph.nodes:
        if roles.role.get(n.id) != "row" or not (n.op in UNARY or n.op in BINARY or n.op == "pow" or n.op == "reduce"):
            continue
        gid = n.id
        for i in n.inputs:
            if not shape(i):
                continue
            same_shape = (shape(i)[-1] == 1) == (shape(n.id)[-1] == 1) or n.op == "reduce"
            if (
                i in group_of
                and len(users[i]) == 1
                and group_of[i] not in closed
                and same_shape
                and i not in graph.outputs
            ):
                other = group_of[i]
                if other != gid:
                    members.setdefault(gid, [])
                    for m_ in members.pop(other):
                        group_of[m_] = gid
                        members[gid].append(m_)
        group_of[n.id] = gid
        members.setdefault(gid, []).append(n.id)
        if n.op == "reduce":
            closed.add(gid)
    out = []
    for gid, nodes in sorted(members.items()):
        nodes = sorted(nodes)
        sink = max(nodes)
        leaves = []
        for nid in nodes:
            for i in graph.nodes[nid].inputs:
                if i in nodes or any(l.node == i for l in leaves):
                    continue
                v = scalar_value(graph, graph.nodes[i])
                if v is not None:
                    leaves.append(Leaf(i, "scalar", v))
                elif roles.role.get(i) == "bcast":
                    leaves.append(Leaf(i, "bcast"))
                else:
                    leaves.append(Leaf(i, "vec" if shape(i)[-1] == 1 else "full"))
        out.append(FusedGroup(graph, tuple(nodes), tuple(leaves), sink))
    return out


__all__ = ["Alternative", "FusedGroup", "Leaf", "Step", "fused_groups", "step_value", "synthesize_instructions"]
