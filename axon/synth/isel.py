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
from typing import Any, cast

import numpy as np
import z3

from axon.ir.ops import NumpyMath
from axon.synth.balance import balance_cost, engine_cost, scalar_twin
from axon.synth.groups import Alternative, FusedGroup, Leaf, Step, _node_value, step_value
from axon.verify import Z3Math
from axon.verify.solver import new_solver

ALU_OPS = ("add", "subtract", "multiply", "divide")
_IR_TO_ALU = dict(add="add", sub="subtract", mul="multiply", div="divide", maximum="maximum", minimum="minimum")
# the activation functions the ISA names as the IR does, and gelu (its tanh approximation, as `ax.gelu`)
_SAME_ACTS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "relu", "square", "abs", "reciprocal")
_IR_TO_ACT = {op: op for op in _SAME_ACTS} | {"gelu": "gelu_apprx_tanh"}
_PREP_ACTS = ("rsqrt", "reciprocal", "sqrt")
# The most IR ops one instruction computes: activation(op, data * scale + bias) is three, and a
# per-row prep may add one. Larger pieces are not searched (no form could match them).
MAX_PIECE_OPS = 4


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
    vals = {cast(float, l.value) for l in group.leaves if l.kind == "scalar" and l.node in piece.inputs}
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
    roots = [("sqrt", c) for c in consts if c > 0]  # square(x * sqrt(c)) = c * x * x
    for f, d in itertools.product(acts + ("copy",), data):
        for sc in [None] + slots + (roots if f == "square" else []):
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
        self._wants: dict[tuple[int, int], tuple[Any, ...]] = {}  # (piece, base env) -> its value, tolerance
        # (base env, steps before the last) -> (base, operand values): a prep recurs before every candidate
        self._prefixes: dict[tuple[int, tuple[Step, ...]], tuple[Any, dict[Any, Any]]] = {}

    def out_of_time(self) -> bool:
        """The search budget is counted in candidates checked, not seconds, so that the same group
        gets the same alternatives on a loaded machine: the schedule space (and a seed's trials)
        must not depend on how busy the CPU was."""
        return bool(self.max_checks) and self.checks >= self.max_checks

    def numeric(self, piece: _Piece, steps: list[Step], base: Mapping[int, Any]) -> bool:
        """Whether `steps` compute the piece on the random values (called under `synthesize_instructions`'s
        np.errstate: NaN and overflow are values compared here)."""
        self.checks += 1
        # the piece's own value is the same for every candidate checked against it: computed once
        known = self._wants.get((id(piece), id(base)))
        if known is None or known[0] is not piece or known[1] is not base:
            want = _node_value(self.np, self.group.graph, piece.root, dict(base))
            finite = bool(np.isfinite(want).all())
            known = self._wants[(id(piece), id(base))] = (piece, base, want, finite, 1e-12 + 1e-9 * np.abs(want))
        vals = step_value(self.np, steps[-1], self._operands(steps[:-1], base))
        return known[3] and _close(vals, known[2], known[4])

    def _operands(self, prefix: list[Step], base: Mapping[int, Any]) -> dict[Any, Any]:
        """The inputs and the values of the steps before the last (as `_run` has them), kept per base
        env and prefix (the base is held, so that its id stays its own)."""
        key = (id(base), tuple(prefix))
        known = self._prefixes.get(key)
        if known is None or known[0] is not base:
            local = {("in", k): v for k, v in base.items()}
            for i, s in enumerate(prefix):
                local[("step", i)] = step_value(self.np, s, local)
            known = self._prefixes[key] = (base, local)
        return known[1]

    def _run(self, m: Any, steps: list[Step], env: dict[Any, Any]) -> Any:
        local = {("in", k): v for k, v in env.items()}
        out = None
        for i, s in enumerate(steps):
            out = step_value(m, s, local)
            local[("step", i)] = out
        return out

    def prove(self, piece: _Piece, steps: list[Step], rlimit: int = 5_000_000, timeout_ms: int = 30_000) -> bool:

        # every attempt costs a solver call: a budget keeps groups Z3 cannot settle from stalling the
        # search (an unproved candidate is simply not offered)
        self.attempts = getattr(self, "attempts", 0) + 1
        if self.attempts > 60:
            return False

        m = Z3Math()
        env = {
            l.node: (z3.RealVal(l.value) if l.kind == "scalar" else z3.Real(f"v{l.node}")) for l in self.group.leaves
        }
        for i in piece.inputs:
            env.setdefault(i, z3.Real(f"v{i}"))
        want = _node_value(m, self.group.graph, piece.root, env)
        got = self._run(m, steps, env)
        side = [d != 0 for d in _divisors(want) + _divisors(got)]
        s = new_solver()
        s.set("rlimit", rlimit)  # Z3's deterministic resource limit (these proofs use ~10^3-10^4)
        s.set("timeout", timeout_ms)  # a safety net only; it does not bind on these proofs
        s.add(m.facts() + side + [want != got])
        return s.check() == z3.unsat


def _close(vals: Any, want: Any, tol: Any) -> bool:
    """`np.allclose(vals, want, rtol=1e-9, atol=1e-12)` for a finite `want` (`tol` = 1e-12 + 1e-9 |want|,
    computed once per piece), written out: on the six values of a check, allclose's own overhead was
    half of what instruction synthesis costs a tune. A NaN in `vals` is simply not close."""
    return bool((np.abs(np.subtract(vals, want)) <= tol).all())


def _divisors(e: Any) -> list[Any]:

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
            # the piece's own activation functions too: exp(x - m) is activation(exp, x, bias=-m)
            # after a per-row negation of m, one full-tile instruction instead of two
            for step in _forms(piece, kinds, consts, acts, None, extra):
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
    extra_balanced: int = 2,
) -> list[Alternative]:
    """Verified instruction sequences for `group`, fewest instructions first, then up to
    `extra_balanced` longer ones that load the busiest engine less (`balance_cost`).

    >>> from axon.workloads import get
    >>> g = get("rmsnorm").graph("small")
    >>> [(n.op, n.inputs) for n in g.nodes[9:11]]   # %9 = div(x, rms), %10 = mul(%9, gain)
    [('div', (0, 8)), ('mul', (9, 1))]
    >>> x, rms, gain = Leaf(0, "full"), Leaf(8, "vec"), Leaf(1, "bcast")   # (x / rms) * gain
    >>> norm = FusedGroup(g, (9, 10), (x, rms, gain), sink=10)   # a group as `axon.lower.groups` forms it
    >>> alts = synthesize_instructions(norm)
    >>> len(alts) >= 2 and alts[0].steps[0].opcode
    'scalar_tensor_tensor'
    """
    # the numeric checks run candidates on random values: NaN and overflow are outcomes they compare, not news
    with np.errstate(all="ignore"):
        kinds = _kinds(group)
        g = group.graph
        acts = tuple(
            sorted(
                {_IR_TO_ACT[g.nodes[n].op] for n in group.nodes if g.nodes[n].op in _IR_TO_ACT}
                | {"exp", "square", "rsqrt", "reciprocal"}
                # a group with exp may be a logistic form, one ScalarE instruction (x / (1 + exp(-x)) = silu(x))
                | ({"sigmoid", "silu"} if any(g.nodes[n].op == "exp" for n in group.nodes) else set())
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
        for _, steps in sorted(results, key=lambda t: (t[0], engine_cost(t[1]), sum(len(s.args) for s in t[1]))):
            if steps not in seen:
                seen.add(steps)
                out.append(Alternative(steps, "z3: unsat (equal for all reals, divisors nonzero)"))
        # the fewest instructions first; then, beyond them, the sequences that best share the work between
        # VectorE and ScalarE (an elementwise kernel is bound by its busiest engine, not its instruction count)
        shortest = out[:max_alternatives]
        balanced = sorted(out[max_alternatives:], key=lambda a: (balance_cost(a.steps), len(a.steps)))
        best = balance_cost(shortest[0].steps) if shortest else 0.0
        offered = shortest + [a for a in balanced[:extra_balanced] if balance_cost(a.steps) < best]
        return offered + scalar_twin(out, offered, kinds, best)


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


__all__ = ["Alternative", "FusedGroup", "Leaf", "Step", "balance_cost", "step_value", "synthesize_instructions"]
