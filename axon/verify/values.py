"""Signed normalized values and the `m` namespace that builds them from `axon.ir.ops` functions.

`Val` pairs a normal-form `Poly` with what is known of its sign (pos, nonneg, neg, nonzero); a
division makes a negative power only when the divisor is known non-zero (eps > 0, sums of exp,
sizes), otherwise it stays an opaque reciprocal that nothing cancels. Reductions are built by
`reduce_val`. This module deliberately knows nothing of graphs.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt
from typing import Any

from axon.ir.dims import Dim
from axon.verify import expr as E

POS, NONNEG, NEG, NONZERO = "pos", "nonneg", "neg", "nonzero"


def _const_sign(c: Fraction) -> str | None:
    return POS if c > 0 else NEG if c < 0 else NONNEG


def _poly_sign(p: E.Poly) -> str | None:
    if p.is_const:
        return _const_sign(p.const_value)
    if all(E.mono_nonneg(m, c) for m, c in p.terms):
        return POS if any(E.mono_pos(m, c) for m, c in p.terms) else NONNEG
    return None


def _best(poly: E.Poly, sign: str | None) -> str | None:
    structural = _poly_sign(poly)
    if structural in (POS, NEG) or sign is None:
        return structural or sign
    return sign


def _nonzero(s: str | None) -> bool:
    return s in (POS, NEG, NONZERO)


def _mul_sign(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return None
    if NONZERO in (a, b):
        return NONZERO if _nonzero(a) and _nonzero(b) else None
    if a == NONNEG or b == NONNEG:
        return NONNEG if (a in (POS, NONNEG) and b in (POS, NONNEG)) else None
    return POS if a == b else NEG


def _add_sign(a: str | None, b: str | None) -> str | None:
    if a in (POS, NONNEG) and b in (POS, NONNEG):
        return POS if POS in (a, b) else NONNEG
    if a == NEG and b == NEG:
        return NEG
    return None


def _neg_sign(a: str | None) -> str | None:
    return {POS: NEG, NEG: POS, NONZERO: NONZERO}.get(a or "", None)


class Val:
    """A normalized per-element value with a known sign (or None)."""

    __slots__ = ("poly", "sign")

    def __init__(self, poly: E.Poly, sign: str | None = None) -> None:
        self.poly = poly
        self.sign = _best(poly, sign)

    @staticmethod
    def lift(x: Any) -> Val:
        if isinstance(x, Val):
            return x
        return Val(E.const(Fraction(x)))

    def __add__(self, o: Any) -> Val:
        o = Val.lift(o)
        return Val(E.add(self.poly, o.poly), _add_sign(self.sign, o.sign))

    __radd__ = __add__

    def __neg__(self) -> Val:
        return Val(E.scale(self.poly, Fraction(-1)), _neg_sign(self.sign))

    def __sub__(self, o: Any) -> Val:
        return self + (-Val.lift(o))

    def __rsub__(self, o: Any) -> Val:
        return Val.lift(o) - self

    def __mul__(self, o: Any) -> Val:
        o = Val.lift(o)
        sign: str | None
        if o.poly == self.poly:  # a square is non-negative, positive if a is non-zero
            sign = POS if _nonzero(self.sign) else NONNEG
        else:
            sign = _mul_sign(self.sign, o.sign)
        return Val(E.mul(self.poly, o.poly), sign)

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Val:
        return self * reciprocal(Val.lift(o))

    def __rtruediv__(self, o: Any) -> Val:
        return Val.lift(o) * reciprocal(self)


def reciprocal(v: Val) -> Val:
    p = v.poly
    sign = {POS: POS, NEG: NEG, NONZERO: NONZERO}.get(v.sign or "", None)
    if p.is_const and p.const_value != 0:
        return Val(E.const(1 / p.const_value))
    if _nonzero(v.sign) and len(p.terms) == 1:
        # every factor of a non-zero monomial is non-zero, so its negative powers may cancel
        ((m, c),) = p.terms
        return Val(E.mono_poly(tuple((a, -e) for a, e in m), 1 / c), sign)
    return Val(E.atom(E.Fn("inv", (p,), _nonzero(v.sign), v.sign == POS)), sign)


class ExprMath:
    """The `m` namespace of `axon.ir.ops` over `Val`: builds normal forms instead of numbers."""

    def exp(self, x: Val) -> Val:
        x = Val.lift(x)
        out = E.const(1)
        for m, c in x.poly.terms:
            out = E.mul(out, _exp_term(m, c))
        return Val(out, POS)

    def log(self, x: Val) -> Val:
        x = Val.lift(x)
        return Val(E.atom(E.Fn("log", (x.poly,), x.sign == POS)))

    def sqrt(self, x: Val) -> Val:
        x = Val.lift(x)
        if x.poly.is_const and x.poly.const_value >= 0:
            root = _rational_sqrt(x.poly.const_value)
            if root is not None:
                return Val(E.const(root))
        pos = x.sign == POS
        return Val(E.atom(E.Fn("sqrt", (x.poly,), pos, pos)), POS if pos else NONNEG if x.sign == NONNEG else None)

    def rsqrt(self, x: Val) -> Val:
        return reciprocal(self.sqrt(x))

    def tanh(self, x: Val) -> Val:
        return Val(E.atom(E.Fn("tanh", (Val.lift(x).poly,))), Val.lift(x).sign)

    def abs(self, x: Val) -> Val:
        return Val(E.atom(E.Fn("abs", (Val.lift(x).poly,))), NONNEG)

    def _minmax(self, name: str, a: Any, b: Any) -> Val:
        a, b = Val.lift(a), Val.lift(b)
        if a.poly == b.poly:
            return a
        args = tuple(sorted((a.poly, b.poly), key=lambda p: p.key))
        sign = POS if name == "maximum" and POS in (a.sign, b.sign) else None
        if name == "maximum" and sign is None and {a.sign, b.sign} <= {POS, NONNEG}:
            sign = NONNEG
        return Val(E.atom(E.Fn(name, args, None, sign == POS)), sign)

    def maximum(self, a: Any, b: Any) -> Val:
        return self._minmax("maximum", a, b)

    def minimum(self, a: Any, b: Any) -> Val:
        return self._minmax("minimum", a, b)

    def power(self, x: Val, p: float) -> Val:
        x = Val.lift(x)
        frac = Fraction(p)
        if frac.denominator == 1 and 0 <= frac.numerator <= 8:
            out = Val.lift(1)
            for _ in range(frac.numerator):
                out = out * x
            return out
        if frac == Fraction(1, 2):
            return self.sqrt(x)
        if frac == Fraction(-1, 2):
            return self.rsqrt(x)
        if frac.denominator == 1 and frac.numerator < 0:
            return reciprocal(self.power(x, -p))
        return Val(E.atom(E.Fn("pow", (x.poly,), p)))


def _rational_sqrt(c: Fraction) -> Fraction | None:
    n, d = c.numerator, c.denominator
    rn, rd = isqrt(n), isqrt(d)
    return Fraction(rn, rd) if rn * rn == n and rd * rd == d else None


def _exp_term(m: E.Mono, c: Fraction) -> E.Poly:
    """exp(c * m): exp(0) = 1; exp(±log y) = y^±1 for y > 0; else an Exp atom, power ±1."""
    if not m:
        return E.const(1) if c == 0 else E.atom(E.Fn("exp", (E.const(c),), None, True))
    if len(m) == 1 and m[0][1] == 1 and abs(c) == 1:
        a = m[0][0]
        if isinstance(a, E.Fn) and a.name == "log" and a.extra:  # log of a positive argument
            y = Val(a.args[0], POS)
            return y.poly if c > 0 else reciprocal(y).poly
    sign = 1 if c > 0 else -1
    return E.atom(E.Fn("exp", (E.mono_poly(m, abs(c)),), None, True), sign)


# reductions ------------------------------------------------------------------------------------
def reduce_val(kind: str, var: str, extent: Dim, body: Val, names: E.Names) -> Val:
    """kind over var in [0, extent) of body, normalized."""
    pieces = _range_pieces(extent)
    if len(pieces) > 1:
        parts = [
            reduce_val(
                kind, (v := names.fresh()), piece, Val(E.subst(body.poly, var, Dim.sym(v) + off), body.sign), names
            )
            for piece, off in pieces
        ]
        out = parts[0]
        for p in parts[1:]:
            out = out + p if kind == "sum" else ExprMath()._minmax("maximum" if kind == "max" else "minimum", out, p)
        return out
    if kind == "sum":
        return _sum(var, extent, body, names)
    return _extremum(kind, var, extent, body, names)


def _range_pieces(extent: Dim) -> list[tuple[Dim, Dim]]:
    """[0, A + B) = [0, A) ∪ A + [0, B) when the extent is a sum of positive symbolic terms."""
    terms = extent.terms
    if len(terms) < 2 or any(c <= 0 or not m for m, c in terms):
        return [(extent, Dim.const(0))]
    out, off = [], Dim.const(0)
    for m, c in terms:
        piece = Dim._make({m: c})
        out.append((piece, off))
        off = off + piece
    return out


def _sum(var: str, extent: Dim, body: Val, names: E.Names, interchange: bool = True) -> Val:
    out = E.const(0)
    for m, c in body.poly.terms:
        indep, dep = E.split_dep(m, var)
        if not dep:
            out = E.add(out, E.mul(E.mono_poly(indep, c), E.dim_poly(extent)))
            continue
        term = _binder("sum", var, extent, E.mono_poly(dep), names)
        if interchange:
            swapped = _interchanged(var, extent, dep, names)
            if swapped is not None and swapped.key < term.key:
                term = swapped
        out = E.add(out, E.mul(E.mono_poly(indep, c), term))
    sign = body.sign if body.sign in (POS, NONNEG) else None
    return Val(out, sign)


def _interchanged(var: str, extent: Dim, dep: E.Mono, names: E.Names) -> E.Poly | None:
    """Σ_var F(var) Σ_u g(var, u) written as Σ_u Σ_var F g, normalized; None if not of that form.

    Both orders are built and the one with the smaller key kept, so the two association orders of
    a chain of contractions ((x@a)@b and x@(a@b)) reach the same normal form.
    """
    inner = [(a, e) for a, e in dep if isinstance(a, E.Red) and a.kind == "sum"]
    if len(inner) != 1 or inner[0][1] != 1 or var in inner[0][0].extent.symbols:
        return None
    red = inner[0][0]
    rest = tuple(f for f in dep if f[0] is not red)
    u = names.fresh()
    g = E.mul(E.mono_poly(rest), E.subst(red.body, red.var, Dim.sym(u)))
    over_var = _sum(var, extent, Val(g), names, interchange=False)
    return _sum(u, red.extent, over_var, names, interchange=False).poly


def _extremum(kind: str, var: str, extent: Dim, body: Val, names: E.Names) -> Val:
    indep_terms = [(m, c) for m, c in body.poly.terms if var not in E.mono_poly(m).free]
    dep_terms = [(m, c) for m, c in body.poly.terms if var in E.mono_poly(m).free]
    shift = E.Poly(tuple(indep_terms))
    if not dep_terms:
        return body
    factor = E.const(1)
    if len(dep_terms) == 1:
        # max_k(c * f * y_k) = c * f * max_k(y_k) for c > 0 and f > 0 not depending on k
        ((m, c),) = dep_terms
        indep, dep = E.split_dep(m, var)
        pos_indep = tuple((a, e) for a, e in indep if a.pos)
        rest = tuple((a, e) for a, e in indep if not a.pos)
        if c > 0:
            factor = E.mono_poly(pos_indep, c)
            dep_terms = [(E.mono_mul(rest, dep), Fraction(1))]
    inner = _binder(kind, var, extent, E.Poly(tuple(dep_terms)), names)
    sign = POS if body.sign == POS else None
    return Val(E.add(shift, E.mul(factor, inner)), sign)


def _binder(kind: str, var: str, extent: Dim, body: E.Poly, names: E.Names) -> E.Poly:
    merged = _merge_tiles(kind, var, extent, body, names)
    if merged is not None:
        return merged
    h = body.height + 1
    canon = E.canonical_var(h)
    body = E.subst(body, var, Dim.sym(canon))
    pos = (
        len(body.terms) == 1 and E.mono_pos(*body.terms[0])
        if kind == "sum"
        else all(E.mono_pos(m, c) for m, c in body.terms)
    )
    return E.atom(E.Red(kind, canon, extent, body, bool(pos)))


def _merge_tiles(kind: str, var: str, extent: Dim, body: E.Poly, names: E.Names) -> E.Poly | None:
    """Σ_{t<T} Σ_{u<B} f(t*B + u) = Σ_{k<T*B} f(k) (likewise max/min)."""
    if len(body.terms) != 1:
        return None
    ((m, c),) = body.terms
    if len(m) != 1 or m[0][1] != 1 or c != 1 or not isinstance(m[0][0], E.Red) or m[0][0].kind != kind:
        return None
    inner: E.Red = m[0][0]
    k = names.fresh()
    moved = E.subst(inner.body, inner.var, Dim.sym(k) - Dim.sym(var) * inner.extent)
    if var in moved.free:
        return None
    return reduce_val(kind, k, extent * inner.extent, Val(moved), names).poly
