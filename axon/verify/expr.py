"""Per-element expressions in normal form: polynomials over atoms, reductions as binders.

A value is a `Poly` (sum of rational multiples of monomials over atoms) with a known `sign`. Atoms are
input elements at symbolic indices, dimension sizes, uninterpreted functions and reduction binders.
Normalization happens as values are built: products distribute, exp(a + b) becomes exp(a) exp(b),
factors of a sum body that do not depend on the bound index are pulled out, sums split over + and
over ranges A + B, nested tiles Σ_t Σ_u f(t*E + u) merge into one range. It deliberately does not
decide equality itself: two normal forms that differ go to Z3 (`axon.verify.smt`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

from axon.ir.dims import Dim


class Unsupported(Exception):
    """An op or shape change the semantics does not model (the proof becomes Unknown)."""


# A key holds each value it uses in full, so a value used three times (x, mean(x), var(x)) triples per
# layer: four chained residual layernorms made a 2-GB key and took minutes, five exhaust the memory.
KEY_LIMIT = 2**22  # characters; the 20 workloads' keys are under 1,000


def _joined(sep: str, parts: Iterable[str]) -> str:
    """`sep.join(parts)`, refused (Unsupported) before it grows past `KEY_LIMIT`."""
    kept, total = [], 0
    for part in parts:
        total += len(part) + len(sep)
        if total > KEY_LIMIT:
            raise Unsupported(f"a normal form over {KEY_LIMIT:,} characters (values reused through a deep chain)")
        kept.append(part)
    return sep.join(kept)


# indices ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FloorDiv:
    """floor(inner / by): the index of `repeat`; opaque to normalization."""

    inner: Idx
    by: Dim

    def __str__(self) -> str:
        return f"({idx_str(self.inner)})//{self.by}"


Idx = Dim | FloorDiv


def idx_str(i: Idx) -> str:
    return str(i)


def idx_vars(i: Idx) -> frozenset[str]:
    if isinstance(i, FloorDiv):
        return idx_vars(i.inner) | i.by.symbols
    return i.symbols


def dim_subst(d: Dim, var: str, repl: Dim) -> Dim:
    if var not in d.symbols:
        return d
    out = Dim.const(0)
    for mono, coef in d.terms:
        term = Dim.const(coef)
        for sym, p in mono:
            base = repl if sym == var else Dim.sym(sym)
            for _ in range(p):
                term = term * base
        out = out + term
    return out


def idx_subst(i: Idx, var: str, repl: Dim) -> Idx:
    if isinstance(i, FloorDiv):
        return FloorDiv(idx_subst(i.inner, var, repl), i.by)
    return dim_subst(i, var, repl)


# atoms -----------------------------------------------------------------------------------------
class Atom(ABC):
    """A leaf of a normal form. Each kind supplies `key` (its identity), `free` (the index variables
    it depends on), `height` (reduction nesting) and `pos` (known positive)."""

    @property
    @abstractmethod
    def key(self) -> str: ...

    @property
    @abstractmethod
    def free(self) -> frozenset[str]: ...

    @property
    @abstractmethod
    def height(self) -> int: ...

    @property
    @abstractmethod
    def pos(self) -> bool: ...


@dataclass(frozen=True, eq=False)
class Elem(Atom):
    """Element of an input tensor at symbolic indices."""

    name: str
    index: tuple[Idx, ...]

    @cached_property
    def key(self) -> str:
        return f"{self.name}[{', '.join(map(idx_str, self.index))}]"

    @cached_property
    def free(self) -> frozenset[str]:
        return frozenset().union(*(idx_vars(i) for i in self.index)) if self.index else frozenset()

    height = 0
    pos = False


@dataclass(frozen=True, eq=False)
class Size(Atom):
    """A symbolic dimension: a positive integer."""

    sym: str

    @cached_property
    def key(self) -> str:
        return f"#{self.sym}"

    @cached_property
    def free(self) -> frozenset[str]:
        return frozenset({self.sym})

    height = 0
    pos = True


@dataclass(frozen=True, eq=False)
class Fn(Atom):
    """An uninterpreted or piecewise function of normalized arguments (exp, log, sqrt, max, ...)."""

    name: str
    args: tuple[Poly, ...]
    extra: Any = None  # exponent of pow, positivity of a sqrt/log argument, cases index/bounds
    pos: bool = False

    @cached_property
    def key(self) -> str:
        extra = "" if self.extra is None else "@" + str(self.extra)
        return f"{self.name}{extra}({_joined('; ', (a.key for a in self.args))})"

    @cached_property
    def free(self) -> frozenset[str]:
        out = frozenset().union(*(a.free for a in self.args))
        if self.name == "cases":
            out |= idx_vars(self.extra[0])
        return out

    @cached_property
    def height(self) -> int:
        return max((a.height for a in self.args), default=0)


@dataclass(frozen=True, eq=False)
class Red(Atom):
    """A reduction binder: kind (sum|max|min) of `body` over `var` in [0, extent)."""

    kind: str
    var: str
    extent: Dim
    body: Poly
    pos: bool = False

    @cached_property
    def key(self) -> str:
        return f"{self.kind}[{self.var}<{self.extent}]({self.body.key})"

    @cached_property
    def free(self) -> frozenset[str]:
        return (self.body.free - {self.var}) | self.extent.symbols

    @cached_property
    def height(self) -> int:
        return 1 + self.body.height


def atom_eq(a: Atom, b: Atom) -> bool:
    return a.key == b.key


# polynomials -----------------------------------------------------------------------------------
Mono = tuple[tuple[Atom, int], ...]


def _mono_key(m: Mono) -> str:
    return _joined("*", (f"{a.key}^{e}" for a, e in m))


@dataclass(frozen=True, eq=False)
class Poly:
    """Σ coef * Π atom^exp, terms sorted by monomial key; negative exponents only on nonzero atoms."""

    terms: tuple[tuple[Mono, Fraction], ...]

    @cached_property
    def key(self) -> str:
        if not self.terms:
            return "0"
        return _joined(" + ", (f"{c}*{_mono_key(m)}" if m else str(c) for m, c in self.terms))

    @cached_property
    def digest(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()[:12]

    @cached_property
    def free(self) -> frozenset[str]:
        return frozenset().union(*(a.free for m, _ in self.terms for a, _ in m)) if self.terms else frozenset()

    @cached_property
    def height(self) -> int:
        return max((a.height for m, _ in self.terms for a, _ in m), default=0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def is_const(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def const_value(self) -> Fraction:
        return sum((c for m, c in self.terms if not m), Fraction(0))

    def atoms(self) -> Iterable[tuple[Atom, int]]:
        for m, _ in self.terms:
            yield from m


def _make(acc: dict[str, tuple[Mono, Fraction]]) -> Poly:
    return Poly(tuple(sorted(((m, c) for m, c in acc.values() if c != 0), key=lambda t: _mono_key(t[0]))))


def const(c: Fraction | int | float) -> Poly:
    c = Fraction(c)
    return Poly(((((), c),)) if c != 0 else ())


def atom(a: Atom, e: int = 1) -> Poly:
    return Poly(((((a, e),), Fraction(1)),))


def mono_poly(m: Mono, c: Fraction = Fraction(1)) -> Poly:
    return Poly(((m, c),)) if c != 0 else Poly(())


def add(a: Poly, b: Poly, scale: Fraction = Fraction(1)) -> Poly:
    acc = {_mono_key(m): (m, c) for m, c in a.terms}
    for m, c in b.terms:
        k = _mono_key(m)
        old = acc.get(k, (m, Fraction(0)))[1]
        acc[k] = (m, old + scale * c)
    return _make(acc)


def mono_mul(a: Mono, b: Mono) -> Mono:
    powers: dict[str, list] = {x.key: [x, e] for x, e in a}
    for x, e in b:
        if x.key in powers:
            powers[x.key][1] += e
        else:
            powers[x.key] = [x, e]
    return tuple((x, e) for k, (x, e) in sorted(powers.items()) if e != 0)


def mul(a: Poly, b: Poly) -> Poly:
    acc: dict[str, tuple[Mono, Fraction]] = {}
    for ma, ca in a.terms:
        for mb, cb in b.terms:
            m = mono_mul(ma, mb)
            k = _mono_key(m)
            acc[k] = (m, acc.get(k, (m, Fraction(0)))[1] + ca * cb)
    return _make(acc)


def scale(a: Poly, c: Fraction) -> Poly:
    return _make({_mono_key(m): (m, c * x) for m, x in a.terms})


def dim_poly(d: Dim) -> Poly:
    out = const(0)
    for mono, coef in d.terms:
        m: Mono = ()
        for sym, p in mono:
            m = mono_mul(m, ((Size(sym), p),))
        out = add(out, mono_poly(m, coef))
    return out


# substitution ----------------------------------------------------------------------------------
def subst_atom(a: Atom, var: str, repl: Dim) -> Atom:
    if var not in a.free:
        return a
    if isinstance(a, Elem):
        return Elem(a.name, tuple(idx_subst(i, var, repl) for i in a.index))
    if isinstance(a, Fn):
        extra = a.extra
        if a.name == "cases":
            extra = (idx_subst(extra[0], var, repl), extra[1])
        return Fn(a.name, tuple(subst(p, var, repl) for p in a.args), extra, a.pos)
    if isinstance(a, Red):
        return Red(a.kind, a.var, dim_subst(a.extent, var, repl), subst(a.body, var, repl), a.pos)
    raise Unsupported(f"cannot substitute into {a.key}")  # Size atoms are dims, never index vars


def subst(p: Poly, var: str, repl: Dim) -> Poly:
    if var not in p.free:
        return p
    out = const(0)
    for m, c in p.terms:
        term = const(c)
        for a, e in m:
            term = mul(term, atom(subst_atom(a, var, repl), e))
        out = add(out, term)
    return out


def split_dep(m: Mono, var: str) -> tuple[Mono, Mono]:
    """(factors not depending on var, factors depending on var)."""
    return tuple(f for f in m if var not in f[0].free), tuple(f for f in m if var in f[0].free)


def mono_pos(m: Mono, c: Fraction) -> bool:
    return c > 0 and all(a.pos for a, _ in m)


def mono_nonneg(m: Mono, c: Fraction) -> bool:
    return c > 0 and all(a.pos or e % 2 == 0 for a, e in m)


@dataclass(frozen=True)
class Names:
    """Fresh index-variable names for one proof (bound names are made canonical afterwards)."""

    counter: list = field(default_factory=lambda: [0])

    def fresh(self, stem: str = "k") -> str:
        self.counter[0] += 1
        return f"__{stem}{self.counter[0]}"


def canonical_var(height: int) -> str:
    return f"__b{height}"
