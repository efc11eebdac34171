"""Memory of the emulated NeuronCore: dtypes, buffers, allocations and views of them.

An `Allocation` is one tensor in HBM, SBUF or PSUM (with NumPy storage and a written-mask in
execute mode, shape only in trace mode). A `View` is a strided box of an allocation: what kernels
index, slice and pass to instructions; index expressions and masks (`indexing.py`) are resolved
to boxes here. Instruction semantics, hardware rules and recording are
not here (see `machine.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from axon.errors import NKIError
from axon.nki.aliases import ViewAliases, _index_error
from axon.nki.allocation import Allocation
from axon.nki.context import maybe_active
from axon.nki.dtypes import Buffer, psum, sbuf, shared_hbm
from axon.nki.indexing import DynSlice, IndexExpr, MGrid, Predicate, arange, ds, mgrid  # noqa: F401
from axon.nki.view_ops import ViewOperators

# ---- allocations and views ---------------------------------------------------------------------

_new_view = object.__new__  # a View without `__init__` (the fast path sets every slot itself)


class View(ViewOperators, ViewAliases):
    """A strided box of an allocation: `starts`/`steps`/`sizes` per allocation axis, `kept` the
    axes that remain dimensions (integer-indexed axes are dropped), `vars` the index variable
    behind each kept dimension (for masks), or None.
    """

    __slots__ = ("alloc", "starts", "steps", "sizes", "kept", "vars", "vpos", "shape", "_np", "maybe_oob")

    def __init__(
        self,
        alloc: Allocation,
        starts: tuple[int, ...],
        steps: tuple[int, ...],
        sizes: tuple[int, ...],
        kept: tuple[int, ...],
        vars: tuple[int | None, ...] | None = None,
        vpos: tuple[int | None, ...] | None = None,
    ) -> None:
        self.alloc = alloc
        self.starts = starts
        self.steps = steps
        self.sizes = sizes
        self.kept = kept
        self.vars = vars
        self.vpos = vpos  # the broadcast position of each dim's variable (what a mask refers to)
        self.shape = tuple([sizes[a] for a in kept])
        self._np: tuple[Any, ...] | None = None
        # Only affine index expressions can point outside the tensor (a mask must then cut them
        # back); slices clip and integers are checked on the spot.
        self.maybe_oob = False

    @classmethod
    def whole(cls, alloc: Allocation) -> View:
        n = len(alloc.shape)
        return cls(alloc, (0,) * n, (1,) * n, alloc.shape, tuple(range(n)))

    def _with(
        self,
        alloc: Allocation,
        starts: tuple[int, ...],
        steps: tuple[int, ...],
        sizes: tuple[int, ...],
        kept: tuple[int, ...],
        vars: tuple[int | None, ...] | None = None,
        vpos: tuple[int | None, ...] | None = None,
    ) -> View:
        """A view over `alloc` (how `ViewAliases` builds the views of its aliases)."""
        return View(alloc, starts, steps, sizes, kept, vars, vpos)

    # ---- what kernels see --------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self.alloc.dtype

    @property
    def ndim(self) -> int:
        return len(self.kept)

    @property
    def buffer(self) -> Buffer:
        return {"sbuf": sbuf, "psum": psum, "hbm": shared_hbm}[self.alloc.kind]

    @property
    def name(self) -> str:
        return self.alloc.name

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Iterator[Any]:
        raise NKIError("NKI tensors cannot be iterated; index them with a loop variable")

    def __repr__(self) -> str:
        return f"<{self.alloc.kind} tensor {self.alloc.name} {list(self.shape)} {self.dtype.name}>"

    # ---- geometry ----------------------------------------------------------------------------
    @property
    def partitions(self) -> int:
        pa = self.alloc.par_axis
        return 1 if pa is None else self.sizes[pa]

    @property
    def free_size(self) -> int:
        pa = self.alloc.par_axis
        n = 1
        for a in self.kept:
            if a != pa:
                n *= self.sizes[a]
        return n

    @property
    def partition_first(self) -> bool:
        pa = self.alloc.par_axis
        return pa is None or (bool(self.kept) and self.kept[0] == pa) or pa not in self.kept

    def np_index(self) -> tuple[Any, ...]:
        if self._np is None:
            idx = []
            kept = set(self.kept)
            for a, (st, sp, sz) in enumerate(zip(self.starts, self.steps, self.sizes)):
                idx.append(slice(st, st + sp * sz, sp) if a in kept else st)
            self._np = tuple(idx)
        return self._np

    def in_bounds(self) -> bool:
        if not self.maybe_oob:
            return True
        for st, sp, sz, n in zip(self.starts, self.steps, self.sizes, self.alloc.shape):
            if sz and (st < 0 or st + sp * (sz - 1) >= n):
                return False
        return True

    def same_region(self, other: View) -> bool:
        return (
            self.alloc is other.alloc
            and self.starts == other.starts
            and self.sizes == other.sizes
            and self.steps == other.steps
            and self.kept == other.kept
        )

    def restrict(self, box: dict[int, tuple[int, int, int]]) -> View:
        """The part a mask keeps. A mask is an affine predicate over the instruction's iteration
        space: a dim carrying the mask's own variable, else the dim whose variable sits at the
        same broadcast position (compiler-emitted kernels write a fresh nl.arange in the mask), else
        (views without index variables) the dim at that position, shrinks to [lo, hi)."""
        starts, sizes = list(self.starts), list(self.sizes)
        # Only a mask variable no index expression uses is positional (a fresh nl.arange, as the
        # compiler writes masks); one that indexes some operand restricts the dims it indexes.
        m = maybe_active()
        used = m.indexed_vars if m is not None else set()
        by_pos = {pos: (lo, hi) for lo, hi, pos in box.values()}
        fresh_pos = {pos: (lo, hi) for vid, (lo, hi, pos) in box.items() if vid not in used}
        changed = False
        for d, a in enumerate(self.kept):
            rng = None
            var = self.vars[d] if self.vars is not None else None
            if var is not None:
                v = box.get(var)
                pos = self.vpos[d] if self.vpos is not None else None
                rng = (v[0], v[1]) if v else (fresh_pos.get(pos) if pos is not None else None)
            elif self.vars is None:
                rng = by_pos.get(d)
            if rng is None:
                continue
            lo, hi = max(0, rng[0]), min(sizes[a], rng[1])
            starts[a] += self.steps[a] * lo
            sizes[a] = max(0, hi - lo)
            changed = True
        if not changed:
            return self
        out = View(self.alloc, tuple(starts), self.steps, tuple(sizes), self.kept, self.vars, self.vpos)
        out.maybe_oob = self.maybe_oob
        return out

    def index(self, key: Any) -> View:
        """Apply a NumPy-style key (ints, slices, nl.ds, affine index expressions, ...)."""
        if not isinstance(key, tuple):
            key = (key,)
        plain = self._index_plain(key)
        if plain is not None:
            return plain
        for i, k in enumerate(key):
            if k is Ellipsis:
                fill = len(self.kept) - (len(key) - 1)
                key = key[:i] + (slice(None),) * fill + key[i + 1 :]
                break
        if len(key) > len(self.kept):
            raise _index_error(f"too many indices ({len(key)}) for a tensor of shape {list(self.shape)}")
        last = -1
        for d, k in enumerate(key):
            if type(k) is IndexExpr and len(k.terms) > 1:
                view, parts = self._split(d, k)
                return view.index(key[:d] + parts + key[d + 1 :])
            if type(k) is IndexExpr and k.terms:
                if k.terms[0][2] < last and self.alloc.kind == "hbm":
                    return self._permuted(key)
                last = k.terms[0][2]
        starts, steps, sizes = list(self.starts), list(self.steps), list(self.sizes)
        kept: list[int] = []
        vars: list[int | None] = []
        vpos: list[int | None] = []
        has_var = False
        last_pos = -1
        indexed: set[int] | None = None
        for d, a in enumerate(self.kept):
            old_var = self.vars[d] if self.vars is not None else None
            old_pos = self.vpos[d] if self.vpos is not None else None
            if d >= len(key):
                kept.append(a)
                vars.append(old_var)
                vpos.append(old_pos)
                continue
            k = key[d]
            if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                k = int(k)
                if k < 0:
                    k += sizes[a]
                if not 0 <= k < sizes[a]:
                    raise _index_error(
                        f"index {key[d]} out of range for axis {d} of size {sizes[a]} "
                        f"(tensor {self.alloc.name} {list(self.shape)})"
                    )
                starts[a] += steps[a] * k
                sizes[a] = 1
            elif isinstance(k, slice):
                if not _slice_within(k, sizes[a]):
                    raise _index_error(
                        f"slice {_slice_text(k)} of axis {d} of {self!r} is past its end (axis {d} holds "
                        f"{sizes[a]} elements, indices 0 to {sizes[a] - 1}); NKI does not clip slices"
                    )
                lo, hi, st = k.indices(sizes[a])
                if st <= 0:
                    raise _index_error("negative slice steps are not supported on NKI tensors")
                n = len(range(lo, hi, st))
                starts[a] += steps[a] * lo
                steps[a] *= st
                sizes[a] = n
                kept.append(a)
                vars.append(old_var)
                vpos.append(old_pos)
            elif isinstance(k, DynSlice):
                if k.start < 0 or k.size < 0 or k.start + k.size > sizes[a]:
                    raise _index_error(f"nl.ds({k.start}, {k.size}) out of range for axis {d} of size {sizes[a]}")
                starts[a] += steps[a] * k.start
                sizes[a] = k.size
                kept.append(a)
                vars.append(old_var)
                vpos.append(old_pos)
            elif isinstance(k, IndexExpr):
                if not k.terms:
                    starts[a] += steps[a] * k.const
                    sizes[a] = 1
                    continue
                vid, size, pos, _, coef = k.terms[0]
                if coef <= 0 or pos <= last_pos:
                    raise _index_error(
                        "index expressions must use positive coefficients with arange variables in axis order"
                    )
                last_pos = pos
                if indexed is None:
                    m = maybe_active()
                    indexed = m.indexed_vars if m is not None else set()
                indexed.add(vid)
                starts[a] += steps[a] * k.const
                steps[a] *= coef
                sizes[a] = size
                kept.append(a)
                vars.append(vid)
                vpos.append(pos)
                has_var = True
            else:
                raise _index_error(f"unsupported index {k!r} on tensor {self.alloc.name}")
        with_vars = has_var or self.vars is not None
        out = View(
            self.alloc,
            tuple(starts),
            tuple(steps),
            tuple(sizes),
            tuple(kept),
            tuple(vars) if with_vars else None,
            tuple(vpos) if with_vars else None,
        )
        out.maybe_oob = has_var or self.maybe_oob
        return out

    __getitem__ = index  # `ViewOperators.__getitem__` without its call: kernels index views everywhere

    def _index_plain(self, key: tuple[Any, ...]) -> View | None:
        """`index` for the keys kernels use most (Python ints and slices, on a view without index
        variables), without the general path's scans; None for any other key, or one that is out of
        range (the general path then indexes it, or raises its error)."""
        axes = self.kept
        n = len(key)
        if self.vars is not None or n > len(axes):
            return None
        starts, steps, sizes = list(self.starts), list(self.steps), list(self.sizes)
        kept: list[int] = []
        shape: list[int] = []
        for d in range(n):
            a = axes[d]
            k = key[d]
            if type(k) is slice:
                if not _slice_within(k, sizes[a]):
                    return None
                lo, hi, st = k.indices(sizes[a])
                if st == 1:
                    size = hi - lo if hi > lo else 0
                elif st <= 0:
                    return None
                else:
                    size = len(range(lo, hi, st))
                starts[a] += steps[a] * lo
                steps[a] *= st
                sizes[a] = size
                kept.append(a)
                shape.append(size)
            elif isinstance(k, int) and not isinstance(k, bool):
                k = int(k)
                if k < 0:
                    k += sizes[a]
                if not 0 <= k < sizes[a]:
                    return None
                starts[a] += steps[a] * k
                sizes[a] = 1
            else:
                return None
        for a in axes[n:]:
            kept.append(a)
            shape.append(sizes[a])
        out = _new_view(View)
        out.alloc = self.alloc
        out.starts = tuple(starts)
        out.steps = tuple(steps)
        out.sizes = tuple(sizes)
        out.kept = tuple(kept)
        out.vars = out.vpos = out._np = None
        out.shape = tuple(shape)
        out.maybe_oob = self.maybe_oob
        return out


def _slice_within(k: slice, n: int) -> bool:
    """Whether the bounds of slice `k` lie within an axis of `n` elements (negative ones count from
    its end, as in NumPy), so that NumPy's clipping would change nothing."""
    return all(b is None or -n <= b <= n for b in (k.start, k.stop))


def _slice_text(k: slice) -> str:
    text = f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
    return text if k.step is None else f"{text}:{k.step}"
