"""The memory side of the running kernel (a mixin of `Machine`): allocation against SBUF/PSUM
capacity, block tensors charged per block, freeing, and the liveness check that finds the peak of
what is live at once.
"""

from __future__ import annotations

import itertools
import os
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from axon.errors import NKIError
from axon.nki.allocation import Allocation
from axon.nki.context import kernel_site
from axon.nki.memory import View
from axon.target.hardware import HardwareSpec
from axon.target.trace import Alloc, Instr


class MachineMemory:
    """Allocation and liveness; the attributes are `Machine`'s (set in its `__init__`)."""

    hw: HardwareSpec
    execute: bool
    file: str
    instrs: list[Instr]
    allocs: list[Alloc]
    loop_stack: tuple[tuple[int, str, int], ...]
    live: dict[int, tuple[Any, int]]
    _block_allocs: list[Allocation]
    _ended: list[tuple[int, int, str, int, str, tuple[int, ...]]]
    peak_bytes: dict[str, int]
    capacity: dict[str, int]
    clock: int

    if TYPE_CHECKING:  # Machine's, declared for the type checker only

        def fail(self, rule: str, detail: str, site: tuple[str, int] | None = None) -> NKIError: ...

    def allocate(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype,
        kind: str,
        name: str = "",
        par_axis: int | None = 0,
        temp: bool = False,
        direct: Any = None,
    ) -> Allocation:
        """A new tensor; checks the partition limit, the PSUM bank size and live capacity.

        Block dimensions (axes before `nl.par_dim`) are logical: such a tensor is charged per block,
        from the first instruction that touches the block to the last (`check_liveness`), as the
        compiler allocates them. A plain tile is charged from its allocation until it dies (its
        loop iteration ends or the kernel drops it). `direct` (an `nki.compiler` allocator) places
        the tensor by hand: it is charged its declared footprint, checked against the memory.
        """
        site = kernel_site()
        shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise self.fail("shape", f"tensor shape {list(shape)} must be positive", site)
        if kind == "hbm":
            par_axis = None
        elif par_axis is not None and not shape:
            raise self.fail("shape", "an on-chip tile needs a partition axis", site)
        alloc = Allocation(len(self.allocs), kind, name or f"t{len(self.allocs)}", shape, dtype, par_axis, self.execute)
        alloc.temp = temp
        alloc.born = self.clock
        charged = alloc.free_bytes
        if kind != "hbm":
            pmax = self.hw.memory.partitions
            if shape[par_axis] > pmax:  # type: ignore[index]
                raise self.fail(
                    f"partition axis > {pmax}",
                    f"tile shape {list(shape)} puts {shape[par_axis]} "  # type: ignore[index]
                    f"on the partition axis (at most {pmax} partitions)",
                    site,
                )
            tile = dtype.itemsize
            for a in range(par_axis + 1, len(shape)):  # type: ignore[operator]
                tile *= shape[a]
            if kind == "psum" and tile > self.hw.memory.psum_bank_bytes:
                bank = self.hw.memory.psum_bank_bytes
                raise self.fail(
                    "PSUM tile larger than a bank",
                    f"tile {list(shape)} {dtype.name} needs {tile} bytes per partition; a PSUM bank holds {bank}",
                    site,
                )
            if direct is not None:
                charged = self._direct_footprint(alloc, tile, direct, site)
            elif par_axis:  # block dimensions: charged per block while live
                alloc.blocks = {}
                alloc.block_bytes = tile
                self._block_allocs.append(alloc)
                charged = tile
            if charged > self.capacity[kind]:
                raise self.fail(
                    f"{kind.upper()} capacity exceeded",
                    f"{list(shape)} {dtype.name} needs {charged} bytes per partition, over the "
                    f"{self.capacity[kind]} of {self.hw.name}",
                    site,
                )
            # A hand-placed tensor owns its address range (the kernel may overlay several on
            # purpose, used at different times): checked against the memory above, not summed.
            if not par_axis and direct is None:
                self.live[alloc.id] = (weakref.ref(alloc), charged)
                alloc.release = self.free
        parts = 1 if par_axis is None else shape[par_axis]
        self.allocs.append(
            Alloc(
                alloc.id,
                kind,
                alloc.name,
                shape,
                dtype.name,
                parts,
                alloc.free_bytes,
                f"{os.path.basename(site[0])}:{site[1]}",
                len(self.loop_stack),
            )
        )
        return alloc

    def _direct_footprint(self, alloc: Allocation, tile: int, direct: Any, site: tuple[str, int]) -> int:
        """Bytes per partition a hand-placed tensor occupies; it must lie inside the memory.

        With block dimensions, `num_free_tiles` / `num_bank_tiles` is the number of physical tiles
        the blocks rotate through (block i in tile i mod n); without, it splits the free size,
        which is then the whole footprint."""
        n = 1
        for t in direct.tiles:
            n *= t
        kind = alloc.kind
        if not alloc.par_axis:
            tile, n = alloc.free_bytes, 1
        if kind == "psum":
            bank = self.hw.memory.psum_bank_bytes
            banks = self.capacity["psum"] // bank
            n = n if alloc.par_axis else -(-tile // bank)
            if direct.base + n > banks:
                raise self.fail(
                    "PSUM direct allocation out of range",
                    f"{alloc.name} {list(alloc.shape)} takes banks "
                    f"{direct.base}..{direct.base + n - 1}; {self.hw.name} has {banks}",
                    site,
                )
            return n * bank
        end = direct.base + n * tile
        if end > self.capacity["sbuf"]:
            raise self.fail(
                "SBUF direct allocation out of range",
                f"{alloc.name} {list(alloc.shape)} at byte "
                f"{direct.base} with {n} tile(s) of {tile} bytes ends at {end}, over the "
                f"{self.capacity['sbuf']} of {self.hw.name}",
                site,
            )
        return n * tile

    def free(self, alloc: Allocation) -> None:
        """A tile the kernel dropped: its span (first to last access) is final."""
        entry = self.live.pop(alloc.id, None)
        if entry is not None and alloc.first >= 0:
            self._ended.append((alloc.first, alloc.last + 1, alloc.kind, entry[1], alloc.name, alloc.shape))

    def touch_blocks(self, al: Allocation, v: View, index: int) -> None:
        """Record that instruction `index` touches the blocks of block tensor `al` that `v` covers."""
        pa = al.par_axis
        blocks = al.blocks
        assert pa is not None and blocks is not None, "touch_blocks is called for block tensors only"
        sizes = v.sizes
        if all(sizes[a] == 1 for a in range(pa)):
            key = v.starts[:pa]
            span = blocks.get(key)
            if span is None:
                blocks[key] = [index, index]
            else:
                span[1] = index
            return

        ranges = [range(v.starts[a], v.starts[a] + v.steps[a] * v.sizes[a], v.steps[a]) for a in range(pa)]
        count = 1
        for r in ranges:
            count *= len(r)
        al.root.block_peak = max(al.root.block_peak, count)
        for key in itertools.product(*ranges):
            span = blocks.get(key)
            if span is None:
                blocks[key] = [index, index]
            else:
                span[1] = index

    def check_liveness(self) -> None:
        """SBUF/PSUM in use over the kernel, by liveness as the compiler allocates: a tile from its
        first to its last access (not while a Python name holds it), a block tensor per block.

        Two figures per memory. In program order (the trace's peak): each block from its first to
        its last access. At best (what is checked): each block tensor needs, from its first to its
        last access, only the blocks one instruction touches at once, since the compiler fuses and
        reorders `affine_range` loops so that a block is consumed soon after it is produced and
        rotates few physical buffers (the measured trn1 kernels rely on it). A kernel is rejected
        only when even that does not fit, naming the tensors live at that point."""
        n = len(self.instrs) + 1
        plain = list(self._ended)
        for ref, b in self.live.values():
            al = ref()
            if al is not None and al.first >= 0:
                plain.append((al.first, al.last + 1, al.kind, b, al.name, al.shape))
        in_order = list(plain)
        at_best = list(plain)
        for al in self._block_allocs:
            spans = list(al.blocks.values())  # type: ignore[union-attr]
            if not spans:
                continue
            for first, last in spans:
                in_order.append((first, last + 1, al.kind, al.block_bytes, al.name, al.shape))
            first = min(f for f, _ in spans)
            last = max(e for _, e in spans)
            at_best.append((first, last + 1, al.kind, al.block_bytes * al.block_peak, al.name, al.shape))
        for kind in ("sbuf", "psum"):
            rows = [iv for iv in at_best if iv[2] == kind]
            use, spans = self._sweep(rows, n)
            if self._block_allocs:
                peak, _ = self._sweep([iv for iv in in_order if iv[2] == kind], n)
            else:
                peak = use  # without block tensors the two figures are one
            if peak is not None:
                self.peak_bytes[kind] = max(self.peak_bytes[kind], int(peak.max()))
            if use is None or use.max() <= self.capacity[kind]:
                continue
            t = int(np.argmax(use > self.capacity[kind]))
            live = [(r[3], f"{r[4]} {list(r[5])} ({r[3]} B)") for r, (s0, e0) in zip(rows, spans) if s0 <= t < e0]
            live.sort(key=lambda x: -x[0])
            names = ", ".join(txt for _, txt in live[:8]) + (f" and {len(live) - 8} more" if len(live) > 8 else "")
            ins = self.instrs[min(t, len(self.instrs) - 1)]
            raise self.fail(
                f"{kind.upper()} capacity exceeded",
                f"{use[t]} bytes per partition live at instruction {t} ({ins.opcode}) even with one block "
                f"of each block tensor, over the {self.capacity[kind]} of {self.hw.name}; live: {names}",
                (self.file, ins.line),
            )

    @staticmethod
    def _sweep(rows: list[tuple[Any, ...]], n: int) -> tuple[Any, list[tuple[int, int]]]:
        """Bytes in use at each instruction index, from (start, end, kind, bytes, ...) spans."""
        if not rows:
            return None, []
        start = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        end = np.fromiter((r[1] for r in rows), np.int64, len(rows))
        size = np.fromiter((r[3] for r in rows), np.int64, len(rows))
        delta = np.bincount(start, weights=size, minlength=n + 1) - np.bincount(end, weights=size, minlength=n + 1)
        return np.cumsum(delta).astype(np.int64), list(zip(start.tolist(), end.tolist()))
