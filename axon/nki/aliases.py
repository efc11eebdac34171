"""Views over aliases of a tensor's memory (a mixin of `View`): an axis indexed by several
`nl.arange` terms seen as sub-axes, an HBM access whose index variables come in another order than
the axes (a transposing DMA), and `reshape`. Each alias is a second `Allocation` header over the same
storage and id, so the trace still names the original tensor. Plain indexing is `View.index`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from axon.errors import NKIError
from axon.nki.allocation import Allocation
from axon.nki.context import maybe_active
from axon.nki.indexing import IndexExpr

if TYPE_CHECKING:  # the class this is a mixin of
    from axon.nki.memory import View


def _index_error(msg: str) -> NKIError:
    """An indexing error at the kernel line being executed (when a kernel is running)."""
    m = maybe_active()
    return m.fail("index", msg) if m is not None else NKIError(msg)


class ViewAliases:
    """What a `View` does through aliases of its allocation (the attributes are the View's)."""

    if TYPE_CHECKING:  # View's, declared for the type checker only
        alloc: Allocation
        starts: tuple[int, ...]
        steps: tuple[int, ...]
        sizes: tuple[int, ...]
        kept: tuple[int, ...]
        vars: tuple[int | None, ...] | None
        vpos: tuple[int | None, ...] | None
        shape: tuple[int, ...]
        maybe_oob: bool

        def index(self, key: Any) -> View: ...

        def _with(
            self,
            alloc: Allocation,
            starts: tuple[int, ...],
            steps: tuple[int, ...],
            sizes: tuple[int, ...],
            kept: tuple[int, ...],
            vars: tuple[int | None, ...] | None = None,
            vpos: tuple[int | None, ...] | None = None,
        ) -> View: ...

        @classmethod
        def whole(cls, alloc: Allocation) -> View: ...

    def _permuted(self, key: tuple[Any, ...]) -> View:
        """An HBM access whose index variables come in another order than the axes (`out[i_f, i_p]`,
        a transposing DMA): the same memory seen with those axes swapped, indexed in order."""
        dims = [d for d, k in enumerate(key) if type(k) is IndexExpr and k.terms]
        by_pos = [d for _, d in sorted((key[d].terms[0][2], d) for d in dims)]
        order = list(range(len(self.kept)))
        for slot, d in zip(dims, by_pos):
            order[slot] = d
        perm = list(range(len(self.alloc.shape)))
        for slot, d in enumerate(order):
            perm[self.kept[slot]] = self.kept[d]
        al = self.alloc
        alias = Allocation(al.id, al.kind, al.name, tuple(al.shape[p] for p in perm), al.dtype, None, False)
        alias.strides = tuple(al.strides[p] for p in perm)
        alias._root = al.root
        if al.data is not None:
            alias.data = al.data.transpose(perm)
            alias.written = al.written.transpose(perm)  # type: ignore[union-attr]
            alias.stamp = None if al.stamp is None else al.stamp.transpose(perm)
        pick = lambda t: tuple(t[p] for p in perm)  # noqa: E731
        vars = None if self.vars is None else tuple(self.vars[d] for d in order)
        vpos = None if self.vpos is None else tuple(self.vpos[d] for d in order)
        view = self._with(alias, pick(self.starts), pick(self.steps), pick(self.sizes), self.kept, vars, vpos)
        view.maybe_oob = self.maybe_oob
        return view.index(
            tuple(key[order[i]] if order[i] < len(key) else slice(None) for i in range(max(len(key), max(dims) + 1)))
        )

    def _split(self, d: int, expr: IndexExpr) -> tuple[View, tuple[Any, ...]]:
        """`c1 * i + c2 * j + k` on one axis (several nl.arange terms): the axis, seen as
        [n / c1, c1] (then c1 as [c1 / c2, c2], ...) in an alias of the same memory, takes one
        term per sub-axis. Returns the view over the alias and the key parts for the sub-axes."""
        a = self.kept[d]
        n = self.alloc.shape[a]
        where = (
            f"index expression with {len(expr.terms)} nl.arange terms on axis {d} of {self.alloc.name} "
            f"{list(self.shape)}"
        )
        if self.starts[a] != 0 or self.steps[a] != 1 or self.sizes[a] != n:
            raise _index_error(f"{where}: only a whole axis can be indexed with several nl.arange terms")
        pa = self.alloc.par_axis
        if pa is not None and a <= pa:
            raise _index_error(f"{where}: the partition axis and block axes take one nl.arange term")
        terms = sorted(expr.terms, key=lambda t: -abs(t[4]))
        if any(t[4] <= 0 for t in terms):
            raise _index_error(f"{where}: coefficients must be positive")
        split: list[int] = []
        parts: list[Any] = []
        extent, const = n, expr.const
        for j, (vid, size, pos, ndim, coef) in enumerate(terms):
            if j + 1 == len(terms):  # the last term indexes what is left directly
                split.append(extent)
                parts.append(IndexExpr(((vid, size, pos, ndim, coef),), const))
                break
            inner = coef
            rest = const % inner + sum(c * (sz - 1) for _, sz, _, _, c in terms[j + 1 :])
            if extent % inner or rest >= inner:
                raise _index_error(f"{where}: the terms do not tile the axis (an axis of {extent} split by {inner})")
            split.append(extent // inner)
            parts.append(IndexExpr(((vid, size, pos, ndim, 1),), const // inner))
            extent, const = inner, const % inner
        # Sub-axes in the order of their variables' broadcast positions (`i_f2 * n + i_f1` walks
        # the axis column-major: a transposing access).
        order = tuple(sorted(range(len(split)), key=lambda j: parts[j].terms[0][2]))
        alias = self.alloc.alias(a, tuple(split), order)
        k = len(split) - 1
        starts = self.starts[:a] + (0,) * len(split) + self.starts[a + 1 :]
        steps = self.steps[:a] + (1,) * len(split) + self.steps[a + 1 :]
        kept = (
            tuple(x if x < a else x + k for x in self.kept[:d])
            + tuple(range(a, a + len(split)))
            + tuple(x + k for x in self.kept[d + 1 :])
        )
        vars = vpos = None
        if self.vars is not None:
            vars = self.vars[:d] + (None,) * len(split) + self.vars[d + 1 :]
            vpos = self.vpos[:d] + (None,) * len(split) + self.vpos[d + 1 :]  # type: ignore[index]
        view = self._with(
            alias,
            starts,
            steps,
            self.sizes[:a] + tuple(split[j] for j in order) + self.sizes[a + 1 :],
            kept,
            vars,
            vpos,
        )
        view.maybe_oob = self.maybe_oob
        return view, tuple(parts[j] for j in order)

    def reshape(self, *shape: Any) -> View:
        shp = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        return self.reshaped(shp)

    def reshaped(self, shape: tuple[int, ...]) -> View:
        """A reshape of a whole, contiguous HBM tensor (the only reshape NKI allows)."""
        if self.alloc.kind != "hbm" or self.shape != self.alloc.shape:
            raise NKIError(f"reshape is supported on whole HBM tensors only, not {self!r}")
        if int(np.prod(shape)) != int(np.prod(self.shape)):
            raise NKIError(f"cannot reshape {list(self.shape)} into {list(shape)}")
        # A second header over the same storage and id: accesses still name the original tensor.
        alias = Allocation(
            self.alloc.id, "hbm", self.alloc.name, tuple(int(s) for s in shape), self.alloc.dtype, None, False
        )
        if self.alloc.data is not None:
            alias.data = self.alloc.data.reshape(alias.shape)
            alias.written = self.alloc.written.reshape(alias.shape)  # type: ignore[union-attr]
            alias.stamp = None if self.alloc.stamp is None else self.alloc.stamp.reshape(alias.shape)
        alias.ever_written = True  # trace mode cannot follow writes through the alias: trust it
        return self.whole(alias)
