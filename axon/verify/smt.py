"""Normal forms to quantifier-free Z3 queries: atoms become reals, functions go through `Z3Math`.

Each atom is one real constant (alpha-equivalent reductions share it); exp/log/sqrt/tanh are the
uninterpreted functions of `Z3Math` with their ground facts. Added facts are only ones true over the
reals: sizes >= 1, atoms raised to negative powers are non-zero (they were made so only when known
non-zero), positive sums and exps > 0. Every check runs with a timeout; Z3's `unknown` is reported.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction

import z3

from axon.ir.dims import Dim, parse_dim
from axon.verify import expr as E
from axon.verify.solver import new_solver
from axon.verify.z3math import Z3Math


class Translator:
    """Translate `Poly` values to Z3 reals, collecting the facts they need."""

    def __init__(self) -> None:
        self.m = Z3Math()
        self._atoms: dict[str, z3.ArithRef] = {}
        self._facts: list[z3.BoolRef] = []

    def facts(self) -> list[z3.BoolRef]:
        return self._facts + self.m.facts()

    def _name(self, key: str) -> str:
        return "a_" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def index(self, i: E.Idx) -> z3.ArithRef:
        if isinstance(i, E.FloorDiv):
            return z3.Real(self._name("fd:" + str(i)))
        out = z3.RealVal(0)
        for mono, coef in i.terms:
            t = z3.RealVal(coef)
            for s, p in mono:
                for _ in range(p):
                    t = t * z3.Real("ix_" + s)
            out = out + t
        return out

    def atom(self, a: E.Atom) -> z3.ArithRef:
        if a.key in self._atoms:
            return self._atoms[a.key]
        if isinstance(a, E.Size):
            t = z3.Real("ix_" + a.sym)
            self._facts.append(t >= 1)  # a dimension is a positive integer
        elif isinstance(a, (E.Elem, E.Red)):
            t = z3.Real(self._name(a.key))
            if a.pos:
                self._facts.append(t > 0)  # a sum/max of positive terms over a non-empty range
        elif isinstance(a, E.Fn):
            t = self._fn(a)
        else:
            raise E.Unsupported(f"no Z3 meaning for atom {a.key}")
        self._atoms[a.key] = t
        return t

    def _fn(self, a: E.Fn) -> z3.ArithRef:
        args = [self.poly(p) for p in a.args]
        if a.name in ("exp", "log", "sqrt", "tanh", "abs"):
            return getattr(self.m, a.name)(args[0])
        if a.name in ("maximum", "minimum"):
            return getattr(self.m, a.name)(args[0], args[1])
        if a.name == "pow":
            return self.m.power(args[0], a.extra)
        if a.name == "inv":
            if a.extra:
                self._facts.append(args[0] != 0)  # only made for divisors known non-zero
            if a.pos:
                self._facts.append(args[0] > 0)
            return 1 / args[0]
        if a.name == "cases":
            where, bounds = a.extra
            i = self.index(where)
            out = args[-1]
            for val, bound in reversed(list(zip(args[:-1], bounds[:-1]))):
                out = z3.If(i < self.index(parse_dim(bound)), val, out)
            return out
        raise E.Unsupported(f"no Z3 meaning for {a.name}")

    def poly(self, p: E.Poly) -> z3.ArithRef:
        out = z3.RealVal(0)
        for m, c in p.terms:
            t: z3.ArithRef = z3.RealVal(c)
            for a, e in m:
                x = self.atom(a)
                if e < 0:
                    self._facts.append(x != 0)  # negative powers exist only of non-zero atoms
                for _ in range(abs(e)):
                    t = t * x if e > 0 else t / x
            out = out + t
        return out


def check_equal(lhs: Sequence[E.Poly], rhs: Sequence[E.Poly], timeout_s: float) -> str:
    """'unsat' (equal for all values of the atoms), 'sat' or 'unknown'."""
    tr = Translator()
    diffs = [tr.poly(a) != tr.poly(b) for a, b in zip(lhs, rhs)]
    query = z3.Solver()
    query.add(tr.facts())
    query.add(z3.Or(diffs))
    # Solved in a context of its own, read back from the query's SMT-LIB text: in the process's main
    # context Z3's search follows the ids of every term made before, so the same query took 0.08 s
    # in a fresh process and over 60 s after a few hundred others (a proved move then timed out)
    s = new_solver(z3.Context())
    s.set("timeout", max(1, int(timeout_s * 1000)))
    s.from_string(query.to_smt2())
    return str(s.check())


def induction(lhs: E.Poly, rhs: E.Poly, timeout_s: float, names: E.Names) -> tuple[str, str]:
    """Induction over a reduction length n = S (a size symbol) of the sums in lhs - rhs.

    When D(n) = c0 + c_n * n + Σ_j c_j Σ_{k<n} f_j(k) with every c free of n: base D(0) = c0 = 0 and
    step D(n+1) - D(n) = c_n + Σ_j c_j f_j(n) = 0, each one quantifier-free query. Returns
    (status, certificate); status "proved" only if Z3 answers unsat to both.
    """
    diff = E.add(lhs, rhs, Fraction(-1))
    extents = {
        str(a.extent): a.extent
        for m, _ in diff.terms
        for a, _ in m
        if isinstance(a, E.Red)
        and a.kind == "sum"
        and len(a.extent.terms) == 1
        and a.extent.terms[0][1] == 1
        and len(a.extent.terms[0][0]) == 1
        and a.extent.terms[0][0][0][1] == 1
    }
    for text, extent in extents.items():
        sym = next(iter(extent.symbols))
        size = E.Size(sym)
        base, step, ok = E.const(0), E.const(0), True
        n = Dim.sym(names.fresh("n"))
        for m, c in diff.terms:
            mine = [(a, e) for a, e in m if isinstance(a, E.Red) and a.kind == "sum" and a.extent == extent]
            sizes = [(a, e) for a, e in m if a.key == size.key]
            rest = tuple((a, e) for a, e in m if (a, e) not in mine and (a, e) not in sizes)
            if (
                sym in E.mono_poly(rest).free
                or len(mine) + len(sizes) > 1
                or any(e != 1 for _, e in mine + sizes)
                or any(sym in a.body.free for a, _ in mine)
            ):  # a body that depends on n breaks the step
                ok = False
                break
            coef = E.mono_poly(rest, c)
            if mine:
                red = mine[0][0]
                step = E.add(step, E.mul(coef, E.subst(red.body, red.var, n)))
            elif sizes:
                step = E.add(step, coef)
            else:
                base = E.add(base, coef)
        if not ok:
            continue
        if (
            check_equal([base], [E.const(0)], timeout_s) == "unsat"
            and check_equal([step], [E.const(0)], timeout_s) == "unsat"
        ):
            return "proved", (
                f"induction over the length {text}: base D(0) = 0; step D(n+1) - D(n) = "
                f"{step.key[:160]} = 0 (both unsat as negations)"
            )
    return "failed", "no reduction length over which the difference is linear and the induction closes"
