"""The `m` namespace of `axon.ir.ops` over Z3 real terms: the primitives as uninterpreted functions.

Transcendentals (exp, log, sqrt, tanh, pow) are uninterpreted; each carries only the ground facts a
proof needs, stated once below with why they hold over the reals. Quantified axioms are deliberately
absent (Z3 does not terminate on them, see VERIFY.md): exp(a + b) is split in Python instead.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import z3


class Z3Math:
    """Z3 primitives for `axon.ir.ops` functions; collect `facts()` and assert them with the query.

    >>> import z3
    >>> from axon.ir.ops import UNARY
    >>> m = Z3Math()
    >>> x = z3.Real("x")
    >>> s = z3.Solver(); s.add(m.facts_for(UNARY["exp"](m, x)) + [m.exp(x) <= 0]); s.check()
    unsat
    """

    def __init__(self) -> None:
        R = z3.RealSort()
        self._exp = z3.Function("exp", R, R)
        self._log = z3.Function("log", R, R)
        self._sqrt = z3.Function("sqrt", R, R)
        self._tanh = z3.Function("tanh", R, R)
        self._pow: dict[float, z3.FuncDeclRef] = {}
        self._facts: list[z3.BoolRef] = []
        self._seen: set[int] = set()

    # facts -----------------------------------------------------------------------------------
    def _fact(self, key: Any, fact: z3.BoolRef) -> None:
        h = hash((key, fact.hash()))
        if h not in self._seen:
            self._seen.add(h)
            self._facts.append(fact)

    def facts(self) -> list[z3.BoolRef]:
        """Every ground fact recorded for the terms built so far."""
        return list(self._facts)

    def facts_for(self, _term: Any) -> list[z3.BoolRef]:
        """Convenience: the facts after building `_term` (all facts recorded so far)."""
        return self.facts()

    # primitives ------------------------------------------------------------------------------
    def exp(self, x: Any) -> Any:
        # the argument in Z3's normal form (x - m is x + -1*m, x * 1 is x), so that exp of equal sums
        # written differently splits into the same factors
        x = z3.simplify(_real(x))
        # exp(a + b) = exp(a) * exp(b) for all reals: applied here on the term, never as an axiom.
        if z3.is_add(x):
            out = None
            for child in x.children():
                part = self.exp(child)
                out = part if out is None else out * part
            return out
        if z3.is_rational_value(x) and x.as_fraction() == 0:
            return z3.RealVal(1)  # exp(0) = 1
        term = self._exp(x)
        self._fact(("exp", x.hash()), term > 0)  # exp is positive on all of R
        return term

    def log(self, x: Any) -> Any:
        x = _real(x)
        term = self._log(x)
        # exp(log(y)) = y holds for y > 0 (log is the inverse of exp on the positive reals).
        self._fact(("log", x.hash()), z3.Implies(x > 0, self._exp(term) == x))
        return term

    def sqrt(self, x: Any) -> Any:
        x = _real(x)
        term = self._sqrt(x)
        # sqrt(y) is the non-negative root of y for y >= 0, positive for y > 0; no claim for y < 0.
        self._fact(("sqrt", x.hash()), z3.Implies(x >= 0, z3.And(term >= 0, term * term == x)))
        self._fact(("sqrt>0", x.hash()), z3.Implies(x > 0, term > 0))
        return term

    def rsqrt(self, x: Any) -> Any:
        # rsqrt(y) = 1 / sqrt(y); with the sqrt facts this gives rsqrt(y)^2 * y = 1 for y > 0.
        return 1 / self.sqrt(x)

    def tanh(self, x: Any) -> Any:
        x = _real(x)
        term = self._tanh(x)
        self._fact(("tanh", x.hash()), z3.And(term > -1, term < 1))  # tanh maps R into (-1, 1)
        return term

    def abs(self, x: Any) -> Any:
        x = _real(x)
        return z3.If(x >= 0, x, -x)

    def maximum(self, a: Any, b: Any) -> Any:
        a, b = _real(a), _real(b)
        return z3.If(a >= b, a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        a, b = _real(a), _real(b)
        return z3.If(a <= b, a, b)

    def power(self, x: Any, p: float) -> Any:
        x = _real(x)
        frac = Fraction(p)
        if frac.denominator == 1 and 0 <= frac.numerator <= 8:
            out: Any = z3.RealVal(1)
            for _ in range(frac.numerator):
                out = out * x
            return out
        if frac == Fraction(1, 2):
            return self.sqrt(x)
        if frac == Fraction(-1, 2):
            return self.rsqrt(x)
        if frac.denominator == 1 and -8 <= frac.numerator < 0:
            return 1 / self.power(x, -p)
        if p not in self._pow:
            self._pow[p] = z3.Function(f"pow_{p}", z3.RealSort(), z3.RealSort())
        return self._pow[p](x)  # other exponents: uninterpreted, no facts claimed


def _real(x: Any) -> Any:
    if isinstance(x, (int, float, Fraction)):
        return z3.RealVal(Fraction(x))
    return x


__all__ = ["Z3Math"]
