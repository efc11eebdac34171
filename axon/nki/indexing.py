"""Affine index expressions (`nl.arange`, `nl.mgrid`, `nl.ds`) and mask predicates.

An `IndexExpr` is const + sum(coef * variable) over arange variables with broadcast positions; a
`Predicate` is a conjunction of comparisons of such expressions. `View.index` turns expressions
into strided boxes and a mask into a box restriction; nothing here touches memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from axon.errors import NKIError

# ---- affine index expressions and masks --------------------------------------------------------

_VAR_IDS = iter(range(1, 1 << 62))  # identity of arange variables; a counter, not kernel state


class IndexExpr:
    """An affine expression over arange variables: const + sum(coef * var).

    `terms` holds (var_id, size, position, ndim, coef); `position` is the axis the variable
    occupies once the expression is broadcast (`nl.arange(128)[:, None]` is position 0 of 2).
    """

    __slots__ = ("terms", "const")

    def __init__(self, terms: tuple[tuple[int, int, int, int, int], ...], const: int = 0) -> None:
        self.terms = terms
        self.const = const

    @property
    def ndim(self) -> int:
        return max((t[3] for t in self.terms), default=0)

    @property
    def shape(self) -> tuple[int, ...]:
        out = [1] * self.ndim
        for _, size, pos, _, _ in self.terms:
            out[pos] = size
        return tuple(out)

    def __getitem__(self, key: Any) -> IndexExpr:
        # Positioning a 1-D arange: [:, None] -> axis 0 of 2, [None, :] -> axis 1 of 2.
        key = key if isinstance(key, tuple) else (key,)
        if len(self.terms) != 1 or self.terms[0][3] != 1:
            raise NKIError("only a 1-D nl.arange can be positioned with [:, None] / [None, :]")
        slots = [i for i, k in enumerate(key) if isinstance(k, slice)]
        if len(slots) != 1 or any(k is not None for k in key if not isinstance(k, slice)):
            raise NKIError(f"unsupported arange indexing {key!r}")
        vid, size, _, _, coef = self.terms[0]
        return IndexExpr(((vid, size, slots[0], len(key), coef),), self.const)

    def _combine(self, other: Any, sign: int) -> IndexExpr:
        if isinstance(other, IndexExpr):
            merged: dict[int, list[int]] = {t[0]: list(t) for t in self.terms}
            for t in other.terms:
                if t[0] in merged:
                    merged[t[0]][4] += sign * t[4]
                else:
                    merged[t[0]] = [t[0], t[1], t[2], t[3], sign * t[4]]
            terms = tuple(tuple(v) for v in merged.values() if v[4] != 0)
            return IndexExpr(terms, self.const + sign * other.const)  # type: ignore[arg-type]
        if isinstance(other, (int, np.integer)):
            return IndexExpr(self.terms, self.const + sign * int(other))
        return NotImplemented

    def __add__(self, other: Any) -> IndexExpr:
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> IndexExpr:
        return self._combine(other, -1)

    def __rsub__(self, other: Any) -> IndexExpr:
        return (self * -1) + other

    def __neg__(self) -> IndexExpr:
        return self * -1

    def __mul__(self, other: Any) -> IndexExpr:
        if not isinstance(other, (int, np.integer)):
            return NotImplemented
        k = int(other)
        return IndexExpr(tuple((v, s, p, n, c * k) for v, s, p, n, c in self.terms if c * k), self.const * k)

    __rmul__ = __mul__

    def _cmp(self, other: Any, op: str) -> Predicate:
        diff = self - other
        if diff is NotImplemented:
            return NotImplemented
        return Predicate(((diff, op),))

    def __lt__(self, other: Any) -> Predicate:
        return self._cmp(other, "<")

    def __le__(self, other: Any) -> Predicate:
        return self._cmp(other, "<=")

    def __gt__(self, other: Any) -> Predicate:
        return self._cmp(other, ">")

    def __ge__(self, other: Any) -> Predicate:
        return self._cmp(other, ">=")

    def __eq__(self, other: Any) -> Predicate:  # type: ignore[override]
        return self._cmp(other, "==")

    def __ne__(self, other: Any) -> Predicate:  # type: ignore[override]
        return self._cmp(other, "!=")

    __hash__ = object.__hash__

    def evaluate(self, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """The expression's values broadcast to its shape (or `shape`), as int64."""
        nd = self.ndim if shape is None else len(shape)
        out = np.full((1,) * nd, self.const, dtype=np.int64)
        for _, size, pos, _, coef in self.terms:
            ax = [1] * nd
            ax[pos] = size
            out = out + coef * np.arange(size, dtype=np.int64).reshape(ax)
        return np.broadcast_to(out, shape) if shape is not None else out


def arange(*args: int) -> IndexExpr:
    """`nl.arange(n)` / `nl.arange(start, stop)`: a fresh index variable."""
    r = range(*args)
    if r.step != 1:
        raise NKIError("nl.arange supports unit steps only; scale the expression instead")
    return IndexExpr(((next(_VAR_IDS), len(r), 0, 1, 1),), r.start)


class _MGrid:
    """`nl.mgrid[0:128, 0:512]`: one positioned index expression per axis (`.p`, `.x` names)."""

    def __getitem__(self, key: Any) -> MGrid:
        key = key if isinstance(key, tuple) else (key,)
        exprs = []
        for pos, k in enumerate(key):
            r = range(k.start or 0, k.stop, k.step or 1)
            if r.step != 1:
                raise NKIError("nl.mgrid supports unit steps only")
            exprs.append(IndexExpr(((next(_VAR_IDS), len(r), pos, len(key), 1),), r.start))
        return MGrid(exprs)


class MGrid(tuple):
    @property
    def p(self) -> IndexExpr:
        return self[0]

    @property
    def x(self) -> IndexExpr:
        return self[1]


mgrid = _MGrid()


@dataclass(frozen=True)
class DynSlice:
    """`nl.ds(start, size)`: a slice of `size` elements from `start`."""

    start: int
    size: int


def ds(start: int, size: int) -> DynSlice:
    return DynSlice(int(start), int(size))


class Predicate:
    """A conjunction of affine comparisons (`expr op 0`): a legacy `mask=` or affine_select pred."""

    __slots__ = ("atoms",)

    def __init__(self, atoms: tuple[tuple[IndexExpr, str], ...]) -> None:
        self.atoms = atoms

    def __and__(self, other: Predicate) -> Predicate:
        return Predicate(self.atoms + other.atoms)

    def evaluate(self, shape: tuple[int, ...]) -> np.ndarray:
        ok = np.ones(shape, dtype=bool)
        for expr, op in self.atoms:
            v = expr.evaluate(shape)
            ok &= {"<": v < 0, "<=": v <= 0, ">": v > 0, ">=": v >= 0, "==": v == 0, "!=": v != 0}[op]
        return ok

    def box(self) -> dict[int, tuple[int, int, int]]:
        """var_id -> (lo, hi, position): the range of each variable the mask keeps.

        Only single-variable comparisons shrink a box; anything else is not an instruction mask.
        """
        out: dict[int, tuple[int, int, int]] = {}
        for expr, op in self.atoms:
            if len(expr.terms) != 1 or op in ("!=",):
                raise NKIError(
                    "a mask= must compare one index variable with a constant per term "
                    "(use nisa.affine_select for triangular predicates)"
                )
            vid, size, pos, _, c = expr.terms[0]
            k = expr.const
            lo, hi = out.get(vid, (0, size, pos))[:2]
            # c * v + k  op  0, for integer v in [0, size)
            bound = -k / c
            if op in ("<", "<=", "==") and c > 0 or op in (">", ">=", "==") and c < 0:
                strict = op in ("<", ">")
                top = math.ceil(bound) if strict else math.floor(bound) + 1
                hi = min(hi, top)
            if op in (">", ">=", "==") and c > 0 or op in ("<", "<=", "==") and c < 0:
                strict = op in ("<", ">")
                bottom = math.floor(bound) + 1 if strict else math.ceil(bound)
                lo = max(lo, bottom)
            out[vid] = (lo, max(lo, hi), pos)
        return out
