"""Loop-carried dependencies of `nl.affine_range` loops of `neuronxcc.nki` kernels (a mixin of
`Machine`, execute mode only; the current NKI unrolls such loops in order, NKI.md).

Every write inside an affine loop stamps its elements with the machine's clock, which ticks as each
affine loop and each of its iterations begins; a read inside one finds the elements an earlier
iteration of an enclosing affine loop instance wrote. The compiler may reorder or pipeline those
iterations (nki.language.affine_range), so such a kernel is refused, except for the associative
reductions the docs allow. Sequential loops, current-API kernels and trace mode are not looked at.
"""

from __future__ import annotations

import bisect
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from axon.errors import NKIError
from axon.nki.allocation import Allocation
from axon.nki.memory import View

# Reductions in any order give the same result ("associative reductions are not considered loop
# carried dependencies", nki.language.affine_range; `b = nisa.tensor_tensor(data1=b, data2=a,
# op=np.add)` is nl.loop_reduce's own example); a subtraction only in place (`acc -= x`).
_ASSOCIATIVE = frozenset(
    {"add", "multiply", "maximum", "minimum", "max", "min", "bitwise_and", "bitwise_or", "bitwise_xor"}
    | {"logical_and", "logical_or", "logical_xor"}
)
_IN_PLACE = _ASSOCIATIVE | {"subtract"}
# which operand of each instruction may carry the accumulator, and which attributes name its ops
_ACCUMULATOR = {
    "tensor_tensor": (("data1", "data2"), ("op",)),
    "tensor_scalar": (("data",), ("op0", "op1")),
    "scalar_tensor_tensor": (("operand1",), ("op1",)),
}


class Window:
    """One running affine loop instance: the clock when it began, when its current iteration
    began, the clock at each iteration's start, and its kernel line."""

    __slots__ = ("begin", "now", "starts", "site", "values")

    def __init__(self, begin: int, site: tuple[str, int], values: range) -> None:
        self.begin, self.now, self.site, self.values = begin, begin, site, values
        self.starts: list[int] = []


class MachineCarried:
    """Write stamps and the read check; the attributes are `Machine`'s (set in its `__init__`)."""

    clock: int
    windows: tuple[Window, ...]  # the affine loop instances running, outermost first
    instrs: list[Any]
    # a read of an earlier iteration's data into a result tile, allowed if that tile is assigned
    # back over the data read (`acc[...] = nl.add(acc, x)`): the error to raise otherwise
    pending_carried: tuple[NKIError, View] | None

    if TYPE_CHECKING:  # Machine's, declared for the type checker only

        def fail(self, rule: str, detail: str, site: tuple[str, int] | None = None) -> NKIError: ...

    def begin_affine(self, site: tuple[str, int], values: range) -> Window:
        self.clock += 1
        return Window(self.clock, site, values)

    def next_iteration(self, outer: tuple[Window, ...], w: Window) -> None:
        self.clock += 1
        w.now = self.clock
        w.starts.append(self.clock)
        self.windows = outer + (w,)

    def birth(self, v: View) -> int:
        """When the tile `v` lies in came to be: its allocation, or for one block of a block tensor
        (each block a tile of its own, as the compiler allocates them) the first touch of the block.
        An operand spanning several blocks puts the partition axis after them, which no instruction
        accepts, so it has no block of its own."""
        al = v.alloc
        pa = al.par_axis
        if al.blocks is None or pa is None or any(v.sizes[a] != 1 for a in range(pa)):
            return al.root.born
        return al.root.block_born.setdefault(v.starts[:pa], self.clock)

    def stamp(self, v: View) -> None:
        if self.birth(v) >= self.windows[-1].now:
            return  # a tile of this iteration: its birth says when (`check_carried`)
        v.alloc.root.stamped = self.clock
        st = _stamps(v.alloc)
        if st is not None:
            st[v.np_index()] = self.clock
            return
        # an HBM tensor no loop has read back: its writes are listed, not stamped (no host memory
        # touched for outputs written once); writes before the outermost running loop are history
        boxes = v.alloc.root.boxes
        if boxes and boxes[0][0] < self.windows[0].begin:
            boxes[:] = [b for b in boxes if b[0] >= self.windows[0].begin]
        boxes.append((self.clock, v))

    def check_carried(
        self,
        opcode: str,
        attrs: tuple[tuple[str, Any], ...],
        reads: list[tuple[str, View]],
        writes: list[tuple[str, View]],
        site: tuple[str, int],
    ) -> None:
        """Fail if a read takes elements an earlier iteration of a running affine loop wrote."""
        self.settle_carried()
        windows = self.windows
        first, last = windows[0].begin, windows[-1].now
        for role, v in reads:
            born = self.birth(v)
            if born >= last:
                continue  # allocated in this iteration: nothing in it is older
            if born < first and v.alloc.root.stamped < first:
                continue  # allocated before the loops and not written in them
            st = _stamps(v.alloc)
            if st is None:
                boxes = v.alloc.root.boxes
                if not boxes or boxes[-1][0] < first:
                    continue
                st = _follow(v.alloc)
            region = st[v.np_index()]
            if born >= first:  # allocated in an earlier iteration: unstamped data is from then
                region = np.maximum(region, born)
            if region.size == 0:
                continue
            lo, hi = int(region.min()), int(region.max())
            if hi < first or lo >= last:  # written before the loops, or just now
                continue
            for w in windows:
                if hi < w.begin or lo >= w.now:
                    continue
                hit = region[(region >= w.begin) & (region < w.now)]
                if not hit.size:
                    continue
                form = _accumulation(opcode, attrs, role, v, writes, site[1], self.instrs)
                error = self._carried_error(opcode, role, v, w, int(hit.max()), site)
                if form == "maybe":  # `acc[...] = nl.add(acc, x)`: in place if the result lands on acc
                    self.pending_carried = (error, v)
                elif not form:
                    raise error

    def settle_carried(self, assigned: View | None = None) -> None:
        """A result tile read from an earlier iteration is assigned (`assigned`) or used otherwise."""
        pending = self.pending_carried
        if pending is not None:
            self.pending_carried = None
            if assigned is None or not assigned.same_region(pending[1]):
                raise pending[0]

    def _carried_error(self, opcode: str, role: str, v: View, w: Window, stamp: int, site: tuple[str, int]) -> NKIError:
        wrote = w.values[bisect.bisect_right(w.starts, stamp) - 1]
        now = w.values[len(w.starts) - 1]
        loop = f"{os.path.basename(w.site[0])}:{w.site[1]}"
        return self.fail(
            "loop-carried dependency in nl.affine_range",
            f"{opcode} reads {role} {v!r} in iteration {now} of the affine_range loop at {loop}, data its "
            f"iteration {wrote} wrote; affine_range iterations must be independent (the compiler may "
            "reorder them) except for accumulations: use nl.sequential_range for that loop",
            site,
        )


def _stamps(al: Allocation) -> np.ndarray | None:
    """The stamps of `al`'s elements: its own on chip; of an HBM tensor (or a header over one, as
    `View.reshape` makes) once `_follow` gave its root some."""
    if al.stamp is not None or al.kind != "hbm":
        return al.stamp
    root = al.root
    if root.stamp is None:
        return None
    # a header's element strides are offsets into the root's row-major storage
    item = root.stamp.itemsize
    al.stamp = np.lib.stride_tricks.as_strided(root.stamp.reshape(-1), al.shape, [s * item for s in al.strides])
    return al.stamp


def _follow(al: Allocation) -> np.ndarray:
    """Stamps for an HBM tensor a loop reads back: its listed writes replayed, in order."""
    root = al.root
    root.stamp = np.zeros(root.shape, dtype=np.int32)
    for clock, v in root.boxes:
        _stamps(v.alloc)[v.np_index()] = clock  # type: ignore[index]
    root.boxes = []
    return _stamps(al)  # type: ignore[return-value]


def _accumulation(
    opcode: str,
    attrs: tuple[tuple[str, Any], ...],
    role: str,
    v: View,
    writes: list[tuple[str, View]],
    line: int,
    instrs: list[Any],
) -> bool | str:
    """Is this read the accumulator of an associative reduction: in place (`acc += x`), or a result
    tile of the same line of the previous iteration (`b = nl.maximum(b, a)`)? "maybe" when the
    result goes to a tile of its own that the kernel may assign to `v` next."""
    form = _ACCUMULATOR.get(opcode)
    if form is None or role not in form[0]:
        return False
    named = dict(attrs)
    ops = {named.get(k) for k in form[1]} - {None, ""}
    if len(ops) != 1:
        return False
    op = ops.pop()
    dst = writes[0][1]
    if dst.same_region(v):
        return op in _IN_PLACE
    if op not in _ASSOCIATIVE:
        return False
    producer = v.alloc.root.producer
    if v.alloc.temp and 0 <= producer < len(instrs) and instrs[producer].line == line:
        return True
    return "maybe" if dst.alloc.temp else False
