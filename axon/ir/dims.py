"""Symbolic dimensions: polynomials over named sizes with rational coefficients.

A shape entry is a `Dim`: `M`, `KV*G`, `D/2`, or a constant. Dims compare structurally after
normalization, which is what shape inference over symbolic sizes needs. Dims never hold sizes;
bindings (name -> int) are passed in when a concrete size is asked for.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from axon.errors import SpecError

Monomial = tuple[tuple[str, int], ...]  # sorted (symbol, power) pairs; () is the constant term


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    powers: dict[str, int] = dict(a)
    for sym, p in b:
        powers[sym] = powers.get(sym, 0) + p
    return tuple(sorted((s, p) for s, p in powers.items() if p))


@dataclass(frozen=True)
class Dim:
    """An immutable polynomial in named sizes, e.g. `Dim.sym("M")`, `Dim.sym("D") / 2`."""

    terms: tuple[tuple[Monomial, Fraction], ...]

    # construction ----------------------------------------------------------------------------
    @staticmethod
    def sym(name: str) -> Dim:
        if not name.isidentifier():
            raise SpecError(f"dimension name {name!r} is not an identifier")
        return Dim._make({((name, 1),): Fraction(1)})

    @staticmethod
    def const(value: int | Fraction) -> Dim:
        return Dim._make({(): Fraction(value)})

    @staticmethod
    def of(value: DimLike) -> Dim:
        if isinstance(value, Dim):
            return value
        if isinstance(value, bool):
            raise SpecError(f"{value!r} is not a dimension")
        if isinstance(value, int):
            return Dim.const(value)
        if isinstance(value, str):
            return parse_dim(value)
        raise SpecError(f"{value!r} is not a dimension (expected a name, an int or a Dim)")

    @staticmethod
    def _make(terms: Mapping[Monomial, Fraction]) -> Dim:
        return Dim(tuple(sorted((m, c) for m, c in terms.items() if c != 0)))

    # arithmetic ------------------------------------------------------------------------------
    def _dict(self) -> dict[Monomial, Fraction]:
        return dict(self.terms)

    def __add__(self, other: DimLike) -> Dim:
        out = self._dict()
        for m, c in Dim.of(other).terms:
            out[m] = out.get(m, Fraction(0)) + c
        return Dim._make(out)

    __radd__ = __add__

    def __sub__(self, other: DimLike) -> Dim:
        return self + Dim.of(other) * -1

    def __rsub__(self, other: DimLike) -> Dim:
        return Dim.of(other) - self

    def __mul__(self, other: DimLike) -> Dim:
        out: dict[Monomial, Fraction] = {}
        for ma, ca in self.terms:
            for mb, cb in Dim.of(other).terms:
                m = _mono_mul(ma, mb)
                out[m] = out.get(m, Fraction(0)) + ca * cb
        return Dim._make(out)

    __rmul__ = __mul__

    def __truediv__(self, other: int | Dim) -> Dim:
        if isinstance(other, Dim) and not other.is_const:
            return self._divide_by_monomial(other)
        divisor = Fraction(other.const_value if isinstance(other, Dim) else other)
        if divisor == 0:
            raise SpecError(f"dimension {self} divided by zero")
        return Dim._make({m: c / divisor for m, c in self.terms})

    __floordiv__ = __truediv__

    def _divide_by_monomial(self, other: Dim) -> Dim:
        if len(other.terms) != 1:
            raise SpecError(f"cannot divide dimension {self} by {other}: not a single term")
        ((mono, coef),) = other.terms
        out: dict[Monomial, Fraction] = {}
        for m, c in self.terms:
            powers = dict(m)
            for sym, p in mono:
                if powers.get(sym, 0) < p:
                    raise SpecError(f"cannot divide dimension {self} by {other}: {sym} does not divide every term")
                powers[sym] -= p
            key = tuple(sorted((s_, p_) for s_, p_ in powers.items() if p_))
            out[key] = out.get(key, Fraction(0)) + c / coef
        return Dim._make(out)

    # queries ---------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def const_value(self) -> Fraction:
        if not self.is_const:
            raise SpecError(f"dimension {self} is symbolic")
        return self.terms[0][1] if self.terms else Fraction(0)

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.terms for s, _ in m)

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The concrete size under `bindings`; SpecError naming the first unbound symbol.

        In int arithmetic while every coefficient and size is an int (nearly every dimension:
        Fraction arithmetic made this a tenth of variant discovery), exact rationals otherwise."""
        total: int | Fraction = 0
        for mono, coef in self.terms:
            value: int | Fraction = coef.numerator if coef.denominator == 1 else coef
            for sym, power in mono:
                if sym not in bindings:
                    raise SpecError(f"unbound dimension {sym!r} (in {self}); bind it, e.g. --shape {sym}=128")
                size = bindings[sym]
                value *= (size if type(size) is int else Fraction(size)) ** power
            total += value
        if type(total) is int:
            return total
        if total.denominator != 1:
            raise SpecError(f"dimension {self} is not a whole number under {dict(bindings)} ({total})")
        return int(total)

    def __str__(self) -> str:
        # formatted once per Dim (a frozen value): graph digests and proofs format the same dims often
        text = self.__dict__.get("_text")
        if text is None:
            text = self._format()
            object.__setattr__(self, "_text", text)
        return text

    def _format(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for mono, coef in self.terms:
            body = "*".join(s if p == 1 else f"{s}^{p}" for s, p in mono)
            if not body:
                parts.append(str(coef))
            elif coef == 1:
                parts.append(body)
            elif coef.denominator == 1:
                parts.append(f"{coef.numerator}*{body}")
            elif coef.numerator == 1:
                parts.append(f"{body}/{coef.denominator}")
            else:
                parts.append(f"{coef.numerator}*{body}/{coef.denominator}")
        return " + ".join(parts)

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"


DimLike = Dim | int | str


def parse_dim(text: str) -> Dim:
    """Parse `M`, `KV*G`, `D/2`, `2*N + 1`, `128` into a Dim."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise SpecError(f"cannot parse dimension {text!r}") from None

    def walk(node: ast.AST) -> Dim:
        if isinstance(node, ast.Name):
            return Dim.sym(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return Dim.const(node.value)
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, (ast.Div, ast.FloorDiv)):
                return left / right
        raise SpecError(f"cannot parse dimension {text!r}: only names, ints, +, -, * and / are allowed")

    return walk(tree)


def parse_shape(text: str) -> tuple[Dim, ...]:
    """Parse a shape declaration: `"M K"`, `"M, K"`, `"KV*G S D"` or `""` (a scalar)."""
    items = [p for p in text.replace(",", " ").split() if p]
    return tuple(parse_dim(p) for p in items)


def shape_str(shape: tuple[Dim, ...], bindings: Mapping[str, int] | None = None) -> str:
    """`[M, K]`, or `[M=4096, K=1024]` with bindings."""
    parts = []
    for d in shape:
        text = str(d)
        if bindings is not None and not d.is_const:
            try:
                text = f"{text}={d.evaluate(bindings)}"
            except SpecError:
                pass
        parts.append(text)
    return "[" + ", ".join(parts) + "]"
