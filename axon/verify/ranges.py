"""Range analysis: intervals and rounding-error bounds of every value, and the hazards they show.

For inputs in a box (each input in an interval), every node gets an interval over the reals and a
first-order bound on its absolute rounding error in float32 (the precision the lowering computes
intermediates in; outputs are rounded once more to the kernel's dtype). Hazards are overflows, a
log/sqrt/rsqrt/reciprocal/division meeting zero or negatives, and error growth (a rounding bound at
an output far above the spec's, from subtracting large nearly equal values). It decides nothing from
measurements; `axon.verify.adversarial` measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from axon.ir import Graph, Node
from axon.verify.adversarial import _PRECISION, Range, dtype_max

F32_MAX = 3.4028234663852886e38
EXP_LIMIT = math.log(F32_MAX)  # 88.72: exp of more overflows float32
INF = math.inf
# An output's error bound may exceed the spec's by this factor before it is a hazard: a worst-case
# bound counts every rounding at its largest, and moving a few operations changes that count by a
# small factor, while cancellation grows with the inputs' offset (about c/4 at offset c for a
# one-pass variance, 250x at 1000).
BOUND_FACTOR = 16.0


@dataclass(frozen=True)
class Hazard:
    kind: str  # "overflow", "domain" or "error-growth"
    op: str
    node: int
    text: str

    @property
    def key(self) -> tuple[str, str]:
        """What makes two hazards the same: an overflow anywhere in the spec as written means the box
        already leaves the dtype, so any overflow there is not new; a domain hazard is per op."""
        return (self.kind, "" if self.kind == "overflow" else self.op)


@dataclass
class _Value:
    lo: float
    hi: float
    err: float
    row_max_zero: int | None = None  # axis along which every row's max is exactly 0
    row_has_one: int | None = None  # axis along which every row holds an exact 1
    rel: float = INF  # bound on the relative error (finite only where the value cannot be 0)

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


# the operand an op does not have (`a` of an input, `b` of a unary op): never read, since every op
# reads only the operands it has; NaN everywhere, so a slip would show in the bounds instead of passing
_ABSENT = _Value(math.nan, math.nan, math.nan)


def _clean(v: float, default: float) -> float:
    return default if math.isnan(v) else v


def _mul_iv(a: _Value, b: _Value) -> tuple[float, float]:
    ps = [_clean(x * y, 0.0) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return min(ps), max(ps)


def _exp(x: float) -> float:
    return INF if x > 709 else math.exp(x)


def _min_abs(v: _Value) -> float:
    return 0.0 if v.lo <= 0.0 <= v.hi else min(abs(v.lo), abs(v.hi))


def _row_extreme(graph: Graph, a: int, b: int, vals: list[_Value]) -> Node | None:
    """The max/min reduction node when `b` is a row max or min of `a`: directly, or both scaled by the
    same positive factor (max(x) * c with x * c, c > 0, as a moved softmax scale leaves them)."""
    A, B = graph.nodes[a], graph.nodes[b]
    if B.op == "reduce" and B.inputs[0] == a and B.attr("kind") in ("max", "min"):
        return B
    if A.op == B.op and A.op in ("mul", "div") and A.inputs[1] == B.inputs[1] and vals[A.inputs[1]].lo > 0:
        R = graph.nodes[B.inputs[0]]
        if R.op == "reduce" and R.inputs[0] == A.inputs[0] and R.attr("kind") in ("max", "min"):
            return R
    return None


def analyze(graph: Graph, box: Mapping[str, Range]) -> tuple[list[_Value], list[Hazard]]:
    """Interval, error bound and hazards of every node of `graph` (bound) for inputs in `box`."""
    u = 2.0**-24
    dims = graph.bindings
    vals: list[_Value] = []
    hazards: list[Hazard] = []

    def flag(kind: str, node: int, op: str, text: str) -> None:
        hazards.append(Hazard(kind, op, node, text))

    for n in graph.nodes:
        a = vals[n.inputs[0]] if n.inputs else _ABSENT
        b = vals[n.inputs[1]] if len(n.inputs) > 1 else _ABSENT
        op = n.op
        if op == "input":
            lo, hi = box[n.attr("name")]
            v = _Value(lo, hi, 0.0)
        elif op in ("const", "dimsize"):
            c = float(n.attr("value")) if op == "const" else float(n.attr("dim").evaluate(dims))
            v = _Value(c, c, u * abs(c))
        elif op in ("add", "sub"):
            src = _row_extreme(graph, n.inputs[0], n.inputs[1], vals) if op == "sub" else None
            if src is not None:
                # x - max(x) along an axis (or x*c - max(x)*c, c > 0): at most 0, exactly 0 at each row's max
                if src.attr("kind") == "max":
                    v = _Value(min(a.lo - a.hi, 0.0), 0.0, 0.0, row_max_zero=src.attr("axis"))
                else:
                    v = _Value(0.0, max(a.hi - a.lo, 0.0), 0.0)
            elif op == "add":
                v = _Value(_clean(a.lo + b.lo, -INF), _clean(a.hi + b.hi, INF), 0.0)
            else:
                v = _Value(_clean(a.lo - b.hi, -INF), _clean(a.hi - b.lo, INF), 0.0)
            v.err = a.err + b.err + u * (a.mag + b.mag)  # |fl(a-b) - (a-b)| <= eps (|a| + |b|)
        elif op == "mul" or op == "square":
            b = a if op == "square" or n.inputs[0] == n.inputs[1] else b
            if b is a:
                lo = 0.0 if a.lo <= 0.0 <= a.hi else min(a.lo * a.lo, a.hi * a.hi)
                v = _Value(lo, a.mag * a.mag, 0.0)
            else:
                v = _Value(*_mul_iv(a, b), 0.0)
            v.err = _clean(a.mag * b.err + b.mag * a.err + u * a.mag * b.mag, INF)
            if b is not a and a.row_max_zero is not None and b.lo > 0 and graph.nodes[n.inputs[1]].type.rank == 0:
                v.row_max_zero = a.row_max_zero  # scaling by a positive scalar keeps each row's max at 0
        elif op in ("div", "reciprocal"):
            num = a if op == "div" else _Value(1.0, 1.0, 0.0)
            den = b if op == "div" else a
            m = _min_abs(den)
            if m == 0.0:
                flag(
                    "domain",
                    n.id,
                    op,
                    f"%{n.id} = {op}: the divisor can be 0 (it lies in [{den.lo:.3g}, {den.hi:.3g}])",
                )
                v = _Value(-INF, INF, INF)
            else:
                inv = _Value(min(1 / den.lo, 1 / den.hi), max(1 / den.lo, 1 / den.hi), 0.0)
                v = _Value(*_mul_iv(num, inv), 0.0)
                v.err = _clean((num.err + v.mag * den.err) / m + u * v.mag, INF)
                if (
                    op == "div"
                    and num.row_max_zero is not None
                    and den.lo > 0
                    and graph.nodes[n.inputs[1]].type.rank == 0
                ):
                    v.row_max_zero = num.row_max_zero
        elif op == "exp":
            v = _Value(_exp(a.lo), _exp(a.hi), 0.0)
            if a.row_max_zero is not None:
                v.row_has_one = a.row_max_zero
            if a.hi > EXP_LIMIT:
                flag(
                    "overflow",
                    n.id,
                    op,
                    f"exp overflows for arguments > {EXP_LIMIT:.1f} in float32 "
                    f"(%{n.id} = exp of values up to {a.hi:.3g})",
                )
            v.err = _clean(v.hi * (a.err + 2 * u), INF)
        elif op in ("log", "sqrt", "rsqrt"):
            bad = a.lo <= 0.0 if op != "sqrt" else a.lo < 0.0
            if bad:
                what = "0 or negative" if op != "sqrt" else "negative"
                flag(
                    "domain",
                    n.id,
                    op,
                    f"%{n.id} = {op} of a value that can be {what} (it lies in [{a.lo:.3g}, {a.hi:.3g}])",
                )
                v = _Value(-INF, INF, INF)
            elif op == "log":
                v = _Value(math.log(a.lo), math.log(a.hi), 0.0)
                v.err = min(a.err / a.lo, a.rel) + 2 * u * v.mag  # d log(x) = dx / x
            elif op == "sqrt":
                v = _Value(math.sqrt(a.lo), math.sqrt(a.hi), 0.0)
                v.err = INF if a.lo == 0 and a.err else (a.err / (2 * math.sqrt(a.lo)) if a.err else 0.0) + u * v.mag
            else:
                v = _Value(1 / math.sqrt(a.hi), 1 / math.sqrt(a.lo), 0.0)
                v.err = a.err / (2 * a.lo**1.5) + 2 * u * v.mag
        elif op == "pow":
            p = float(n.attr("exponent"))
            ends = [abs(x) ** p if x != 0 or p > 0 else INF for x in (a.lo, a.hi)]
            v = _Value(min(ends + ([0.0] if a.lo <= 0 <= a.hi else [])), max(ends), 0.0)
            v.err = abs(p) * max(ends) / max(_min_abs(a), 1e-300) * a.err + u * v.mag
        elif op in ("neg", "abs", "relu"):
            lo, hi = {
                "neg": (-a.hi, -a.lo),
                "abs": (0.0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi)), a.mag),
                "relu": (max(a.lo, 0.0), max(a.hi, 0.0)),
            }[op]
            v = _Value(lo, hi, a.err)
        elif op in ("maximum", "minimum"):
            f = max if op == "maximum" else min
            v = _Value(f(a.lo, b.lo), f(a.hi, b.hi), max(a.err, b.err))
        elif op in ("tanh", "sigmoid"):
            v = _Value(-1.0 if op == "tanh" else 0.0, 1.0, a.err + 2 * u)
        elif op in ("silu", "gelu"):
            v = _Value(min(-0.3, a.lo), max(a.hi, 0.0), 1.13 * a.err + 2 * u * a.mag)
        elif op == "reduce":
            kind = n.attr("kind")
            count = math.prod(graph.concrete_shape(n.inputs[0])) // max(1, math.prod(graph.concrete_shape(n.id)))
            if kind == "sum":
                lo = count * a.lo if a.lo > -INF else -INF
                if a.lo >= 0.0 and a.row_has_one == n.attr("axis"):
                    lo = max(lo, 1.0)  # a sum of non-negatives that holds an exact 1
                v = _Value(lo, count * a.hi if a.hi < INF else INF, 0.0)
                v.err = _clean(count * a.err + u * math.ceil(math.log2(max(count, 2))) * count * a.mag, INF)
            else:
                v = _Value(a.lo, a.hi, a.err)
        elif op == "matmul":
            k = graph.concrete_shape(n.inputs[0])[-1]
            lo, hi = _mul_iv(a, b)
            v = _Value(k * lo, k * hi, 0.0)
            v.err = _clean(
                k * (a.mag * b.err + b.mag * a.err) + u * math.ceil(math.log2(max(k, 2))) * k * a.mag * b.mag, INF
            )
        elif op == "concat":
            ins = [vals[i] for i in n.inputs]
            v = _Value(min(x.lo for x in ins), max(x.hi for x in ins), max(x.err for x in ins))
        else:  # transpose, reshape, slice, repeat, cast: the values move, they do not change
            v = _Value(a.lo, a.hi, a.err, a.row_max_zero, a.row_has_one)
        _tighten(n, v, vals, u, graph)
        if (
            op not in ("input", "const", "dimsize")
            and v.mag > F32_MAX
            and not any(h.node == n.id for h in hazards)
            and all(vals[i].mag <= F32_MAX for i in n.inputs)
        ):
            flag("overflow", n.id, op, f"%{n.id} = {op} overflows float32 (values up to {v.mag:.3g})")
        vals.append(v)
    return vals, hazards


def _relative(node: Node, vals: list[_Value], u: float, graph: Graph) -> float:
    """A relative error bound where products, quotients and sums of positives give a tighter one than
    the absolute bound over a loose interval (e / sum(e) is at most 1, which intervals do not see)."""
    op, ins = node.op, node.inputs
    a = vals[ins[0]] if ins else _ABSENT
    b = vals[ins[1]] if len(ins) > 1 else _ABSENT
    if op in ("input", "dimsize"):
        return 0.0
    if op == "const":
        return u
    if op in ("mul", "div"):
        return a.rel + (a.rel if ins[0] == ins[1] else b.rel) + u
    if op == "square":
        return 2 * a.rel + u
    if op == "reciprocal":
        return a.rel + u
    if op == "exp":
        return a.err + 2 * u  # d exp(x) = exp(x) dx: the argument's absolute error is the result's relative one
    if op == "sqrt":
        return a.rel / 2 + u
    if op == "rsqrt":
        return a.rel / 2 + 2 * u
    if op == "add" and a.lo >= 0 and b.lo >= 0:
        return max(a.rel, b.rel) + u
    if op == "reduce" and (node.attr("kind") != "sum" or a.lo >= 0):
        count = math.prod(graph.concrete_shape(ins[0])) // max(1, math.prod(graph.concrete_shape(node.id)))
        return a.rel + (u * math.ceil(math.log2(max(count, 2))) if node.attr("kind") == "sum" else 0.0)
    if op in ("neg", "abs", "transpose", "reshape", "slice", "repeat"):
        return a.rel
    if op in ("maximum", "minimum", "concat"):
        return max(vals[i].rel for i in ins)
    return INF


def _tighten(node: Node, v: _Value, vals: list[_Value], u: float, graph: Graph) -> None:
    """Each of the two bounds (absolute, relative) caps the other."""
    v.rel = _clean(_relative(node, vals, u, graph), INF)
    low = _min_abs(v)
    if math.isfinite(v.rel) and v.mag < INF:
        v.err = min(v.err, v.rel * v.mag)
    if low > 0 and math.isfinite(v.err):
        v.rel = min(v.rel, v.err / low)
    elif low == 0:
        v.rel = INF


def boxes(graph: Graph, ranges: Mapping[str, Range], dtype: str) -> dict[str, dict[str, Range]]:
    """The input boxes analyzed: the whole range, and every input near a large offset with an O(1) spread."""
    offset = {}
    for name, (lo, hi) in ranges.items():
        end = hi if abs(hi) >= abs(lo) else lo
        c = math.copysign(min(abs(end), 2.0 ** (_PRECISION.get(dtype, 24) - 2)), end)
        spread = min(2.0, hi - lo)
        offset[name] = (c - spread, c) if c > 0 else (c, c + spread)
    return {"range": dict(ranges), "offset": offset}


def output_bounds(graph: Graph, vals: list[_Value], dtype: str) -> list[tuple[float, float]]:
    """(absolute, relative) rounding-error bound of every output, with the final rounding to `dtype`."""
    out_u = 2.0 ** -_PRECISION.get(dtype, 24)
    return [(vals[o].err + out_u * min(vals[o].mag, dtype_max(dtype)), vals[o].rel + out_u) for o in graph.outputs]


# ops through which an interval stays exact (no division, root or transcendental widens it)
_EXACT_OPS = frozenset({"input", "const", "mul", "square", "neg", "abs", "transpose", "reshape", "slice", "cast"})


def _operand_overflows(graph: Graph, vals: list[_Value], dtype: str) -> list[Hazard]:
    """A matmul operand TensorE reads in `dtype` past the dtype's largest value, where its interval is
    exact (made of inputs by products alone: a weight scaled by a gain, g[:, None] * w). A float16
    kernel rounds it to inf; wider intervals (x / rms) are loose bounds and say nothing here."""
    limit = dtype_max(dtype)
    if limit >= F32_MAX / 2:  # past bfloat16's largest is past float32's: the overflow check has it
        return []

    def exact(i: int) -> bool:
        n = graph.nodes[i]
        return n.op in _EXACT_OPS and all(exact(j) for j in n.inputs)

    return [
        Hazard(
            "overflow",
            "matmul",
            n.id,
            f"%{n.id} = matmul reads an operand (%{i}) of values up to {vals[i].mag:.3g} in {dtype}, whose "
            f"largest is {limit:.6g}: it is inf there",
        )
        for n in graph.nodes
        if n.op == "matmul"
        for i in n.inputs
        if vals[i].mag > limit and exact(i)
    ]


def new_hazards(spec: Graph, variant: Graph, ranges: Mapping[str, Range], dtype: str) -> list[Hazard]:
    """Hazards of `variant` the spec as written does not have, on any analyzed box."""
    found: list[Hazard] = []
    for box in boxes(spec, ranges, dtype).values():
        svals, shaz = analyze(spec, box)
        vvals, vhaz = analyze(variant, box)
        shaz, vhaz = shaz + _operand_overflows(spec, svals, dtype), vhaz + _operand_overflows(variant, vvals, dtype)
        known = {h.key for h in shaz}
        found += [h for h in vhaz if h.key not in known and h not in found]
        sb, vb = output_bounds(spec, svals, dtype), output_bounds(variant, vvals, dtype)
        for o, (s_abs, s_rel), (v_abs, v_rel) in zip(spec.outputs, sb, vb):
            # relative bounds where both outputs stay away from 0 (an interval of e / sum(e) is loose,
            # its relative error is not), absolute ones otherwise
            relative = math.isfinite(s_rel) and math.isfinite(v_rel)
            s, v = (s_rel, v_rel) if relative else (s_abs, v_abs)
            # a spec bound that does not bound its output below the output's own size says nothing, nor
            # does one where the spec as written overflows (a naive softmax on x in [-100, 100]: its
            # 7.7e-07 held the shifted one, finite there, as 30x less accurate)
            meaningful = (s < 1.0 if relative else s < svals[o].mag) and "overflow" not in {h.kind for h in shaz}
            if meaningful and v > BOUND_FACTOR * s:
                culprit = max(
                    (m for m in variant.nodes if m.op in ("sub", "add")),
                    key=lambda m: vvals[m.inputs[0]].mag + vvals[m.inputs[1]].mag,
                    default=None,
                )
                where = ", ".join(f"{k} in [{lo:.3g}, {hi:.3g}]" for k, (lo, hi) in box.items())
                kind = "relative" if relative else "absolute"
                text = f"output {kind} error bound {v:.2g} against {s:.2g} for the spec as written ({where})"
                if culprit is not None:
                    mags = vvals[culprit.inputs[0]].mag, vvals[culprit.inputs[1]].mag
                    text = (
                        f"%{culprit.id} = {culprit.op} of values up to {max(mags):.3g} loses up to "
                        f"{2.0**-24 * sum(mags):.2g} in float32 (cancellation): " + text
                    )
                found.append(Hazard("error-growth", culprit.op if culprit is not None else "output", -1, text))
    return found
