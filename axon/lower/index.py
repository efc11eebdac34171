"""Index expressions of a lowered kernel: `Affine` (sum of coef * loop variable + const, optionally
floor-divided, taken modulo and scaled) and `Expr` (a sum of them), as `TileProgram` views hold them.
They render as NKI index source and evaluate on loop values; they are not NKI's `nl.arange` algebra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# An index expression: sum(coef * loop_var) + const, optionally floor-divided by `div`
# (np.repeat over a batch axis maps output head h to input head h // repeats).
#
# Lowering builds hundreds of these per candidate point, thousands of points per tune, so the hot
# operations below skip the frozen dataclass's `__init__` (one `object.__setattr__` per field) and
# the constants and single variables of `of` are interned: values, equality and hashes are those of
# the dataclasses.

_new = object.__new__
_INTERN_MAX = 1 << 16  # interned `of` values per table: loop offsets and names, a few hundred in practice


@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0
    div: int = 1
    mod: int = 0  # 0: no modulus; k: the index taken modulo k (rotating multi-buffers)
    mul: int = 1  # applied after div and mod

    @staticmethod
    def of(value: AffineLike) -> Affine:
        if type(value) is Affine:
            return value
        known = _AFFINE_OF.get(value)  # type: ignore[arg-type]
        if known is not None:
            return known
        if isinstance(value, Affine):
            return value
        a = _affine(((value, 1),), 0) if isinstance(value, str) else _affine((), int(value))
        if len(_AFFINE_OF) < _INTERN_MAX:
            _AFFINE_OF[value] = a
        return a

    def __add__(self, other: AffineLike) -> Affine:
        o = other if type(other) is Affine else Affine.of(other)
        if self.div != 1 or self.mod or self.mul != 1 or o.div != 1 or o.mod or o.mul != 1:
            raise ValueError("cannot add to a floor-divided index")
        # terms are kept sorted with no zero coefficient, so a constant on either side merges
        # without re-sorting (lowering adds constants to indices hundreds of thousands of times a tune)
        if not o.terms:
            return self if not o.const else _affine(self.terms, self.const + o.const)
        if not self.terms:
            return _affine(o.terms, self.const + o.const)
        merged: dict[str, int] = dict(self.terms)
        for v, c in o.terms:
            merged[v] = merged.get(v, 0) + c
        return _affine(tuple(sorted((v, c) for v, c in merged.items() if c)), self.const + o.const)

    def __mul__(self, k: int) -> Affine:
        if self.div != 1 or self.mod or self.mul != 1:
            raise ValueError("cannot scale a floor-divided index")
        if not self.terms:
            return _affine((), self.const * k)
        return _affine(tuple((v, c * k) for v, c in self.terms if c * k), self.const * k)

    def floordiv(self, k: int) -> Affine:
        return self if k == 1 else _affine(self.terms, self.const, self.div * k)

    def modulo(self, k: int, then_mul: int = 1) -> Affine:
        return _affine(self.terms, self.const, self.div, k, then_mul)

    def shifted(self, var: str, by: int) -> Affine:
        """This index with loop variable `var` replaced by `var + by` (inside any division and modulus)."""
        coef = dict(self.terms).get(var, 0)
        return _affine(self.terms, self.const + coef * by, self.div, self.mod, self.mul) if coef else self

    def fixed(self, var: str, value: int) -> Affine:
        """This index with loop variable `var` replaced by the constant `value`."""
        coef = dict(self.terms).get(var, 0)
        if not coef:
            return self
        out = _affine(
            tuple(t for t in self.terms if t[0] != var), self.const + coef * value, self.div, self.mod, self.mul
        )
        return out if out.terms else Affine.of(out.value({}))

    @property
    def plain(self) -> bool:
        return self.div == 1 and not self.mod and self.mul == 1

    def value(self, env: Mapping[str, int]) -> int:
        v = (sum(c * env[v] for v, c in self.terms) + self.const) // self.div
        return (v % self.mod if self.mod else v) * self.mul

    def render(self) -> str:
        parts = [v if c == 1 else f"{c} * {v}" for v, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        text = " + ".join(parts)
        if self.div != 1:
            text = f"({text}) // {self.div}"
        if self.mod:
            text = f"({text}) % {self.mod}"
        if self.mul != 1:
            text = f"({text}) * {self.mul}"
        return text


def _affine(terms: tuple[tuple[str, int], ...], const: int, div: int = 1, mod: int = 0, mul: int = 1) -> Affine:
    """`Affine(terms, const, div, mod, mul)`, the fields set straight into the instance dict."""
    a = _new(Affine)
    d = a.__dict__
    d["terms"] = terms
    d["const"] = const
    d["div"] = div
    d["mod"] = mod
    d["mul"] = mul
    return a


AffineLike = Affine | int | str
_AFFINE_OF: dict[int | str, Affine] = {}  # `Affine.of` of ints and names (interned values, not state)


@dataclass(frozen=True)
class Expr:
    """A sum of index terms (a rotating-buffer offset plus an affine offset)."""

    parts: tuple[Affine, ...]

    @staticmethod
    def of(value: ExprLike) -> Expr:
        t = type(value)
        if t is Expr:
            return value  # type: ignore[return-value]
        if t is Affine:
            return _expr((value,))  # type: ignore[arg-type]
        known = _EXPR_OF.get(value)  # type: ignore[arg-type]
        if known is not None:
            return known
        if isinstance(value, Expr):
            return value
        e = _expr((Affine.of(value),))
        if not isinstance(value, Affine) and len(_EXPR_OF) < _INTERN_MAX:
            _EXPR_OF[value] = e
        return e

    def __add__(self, other: ExprLike) -> Expr:
        o = other if type(other) is Expr else Expr.of(other)
        sp, op = self.parts, o.parts
        if len(sp) == 1 and len(op) == 1:  # the common case, as the general one below
            a, b = sp[0], op[0]
            if a.div == 1 and not a.mod and a.mul == 1 and b.div == 1 and not b.mod and b.mul == 1:
                s = a + b
                return self if s is a else _expr((s,))
        plain = [a for a in sp + op if a.plain]
        rest = [a for a in sp + op if not a.plain]
        total = Affine()
        for a in plain:
            total = total + a
        return Expr(tuple(rest) + ((total,) if (total.terms or total.const or not rest) else ()))

    @property
    def is_const(self) -> bool:
        return all(a.plain and not a.terms for a in self.parts)

    @property
    def const(self) -> int:
        return sum(a.const for a in self.parts)

    def value(self, env: Mapping[str, int]) -> int:
        return sum(a.value(env) for a in self.parts)

    def render(self) -> str:
        return " + ".join(a.render() for a in self.parts)


def _expr(parts: tuple[Affine, ...]) -> Expr:
    """`Expr(parts)`, the field set straight into the instance dict."""
    e = _new(Expr)
    e.__dict__["parts"] = parts
    return e


ExprLike = Expr | Affine | int | str
_EXPR_OF: dict[int | str, Expr] = {}  # `Expr.of` of ints and names (interned values, not state)
