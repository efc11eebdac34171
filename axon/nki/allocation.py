"""`Allocation`: one tensor in HBM, SBUF or PSUM (NumPy storage and a written-mask in execute
mode, shape only in trace mode), with its liveness."""

from __future__ import annotations

from typing import Any

import numpy as np

from axon.nki.dtypes import bfloat16, float8_e4m3, float8_e5m2


class Allocation:
    """One tensor in one memory. `data`/`written` are None in trace mode."""

    __slots__ = (
        "id",
        "kind",
        "name",
        "shape",
        "dtype",
        "par_axis",
        "strides",
        "data",
        "written",
        "stamp",
        "boxes",
        "born",
        "block_born",
        "stamped",
        "ever_written",
        "temp",
        "producer",
        "last_write",
        "release",
        "blocks",
        "block_bytes",
        "block_peak",
        "_root",
        "first",
        "last",
        "__weakref__",
    )

    def __init__(
        self,
        id: int,
        kind: str,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        par_axis: int | None,
        execute: bool,
    ) -> None:
        self.id = id
        self.kind = kind
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.par_axis = par_axis
        # Element strides of the layout: HBM is row-major over all axes; on chip the partition
        # axis is the physical partition and the other axes are row-major within each partition.
        strides = [0] * len(shape)
        acc = 1
        for a in range(len(shape) - 1, -1, -1):
            if a != par_axis:
                strides[a] = acc
                acc *= shape[a]
        self.strides = tuple(strides)
        self.data: np.ndarray | None = None
        self.written: np.ndarray | None = None
        # the clock of the last write inside an affine loop, per element (`axon.nki.carried`);
        # zeroed pages cost no host memory until an affine loop writes them. An HBM tensor gets
        # one only once a loop reads back what it wrote: until then its writes are listed in `boxes`.
        self.stamp: np.ndarray | None = None
        self.boxes: list[Any] = []
        self.born = 0  # the machine's clock when it was allocated (`axon.nki.carried`)
        self.block_born: dict[tuple[int, ...], int] = {}  # of a block tensor: per block, at its first touch
        self.stamped = 0  # the clock of its latest stamp
        if execute:
            if par_axis:
                # Block dimensions: often far larger than the memory they are allocated in (by
                # liveness); untouched blocks must cost no host memory, so no fill (pages stay
                # unmapped). What was never written is tracked by `written`, not by the values.
                self.data = np.empty(shape, dtype=dtype)
            else:
                fill = np.nan if dtype.kind == "f" or dtype in (bfloat16, float8_e4m3, float8_e5m2) else 0
                self.data = np.full(shape, fill, dtype=dtype)
            self.written = np.zeros(shape, dtype=bool)
            if kind != "hbm":
                self.stamp = np.zeros(shape, dtype=np.int32)
        self.ever_written = False
        self.temp = False  # a result tile an instruction allocated itself (legacy return values)
        self.producer = -1  # index of the last instruction that wrote it
        self.last_write: Any = None  # the View that instruction wrote
        self.release: Any = None  # callback that frees it from the live set
        # Tensors with block dimensions: block index -> [first, last] instruction touching it.
        self.blocks: dict[tuple[int, ...], list[int]] | None = None
        self.block_bytes = 0
        self.block_peak = 1  # most blocks one instruction touches at once
        self.first = self.last = -1  # first and last instruction that accessed it (liveness)
        self._root: Allocation | None = None  # the allocation an alias header belongs to

    @property
    def root(self) -> Allocation:
        """The allocation this header belongs to: itself, unless it is an alias."""
        return self._root or self

    def alias(self, axis: int, split: tuple[int, ...], order: tuple[int, ...]) -> Allocation:
        """A second header over the same memory (same id, storage, blocks) with `axis` split into
        `split` (row-major) and the sub-axes then taken in `order`; writes through it count for this
        allocation (`root`)."""
        n = len(self.shape)
        flat = self.shape[:axis] + split + self.shape[axis + 1 :]
        perm = tuple(range(axis)) + tuple(axis + j for j in order) + tuple(range(axis + len(split), len(flat)))
        shape = tuple(flat[p] for p in perm)
        alias = Allocation(self.id, self.kind, self.name, shape, self.dtype, self.par_axis, False)
        strides = []
        for a in range(n):
            if a != axis:
                strides.append(self.strides[a])
                continue
            inner = self.strides[a]
            sub = []
            for size in reversed(split):
                sub.append(inner)
                inner *= size
            strides.extend(reversed(sub))
        alias.strides = tuple(strides[p] for p in perm)
        alias._root = self.root
        if self.data is not None:
            alias.data = np.reshape(self.data, flat, copy=False).transpose(perm)
            alias.written = np.reshape(self.written, flat, copy=False).transpose(perm)  # type: ignore[arg-type]
            if self.stamp is not None:
                alias.stamp = np.reshape(self.stamp, flat, copy=False).transpose(perm)
        alias.blocks, alias.block_bytes, alias.temp = self.blocks, self.block_bytes, False
        return alias

    @property
    def free_bytes(self) -> int:
        """Bytes per partition (on chip) or total bytes (HBM)."""
        n = 1
        for a, s in enumerate(self.shape):
            if a != self.par_axis:
                n *= s
        return n * self.dtype.itemsize

    def __del__(self) -> None:
        # an __init__ stopped part way (a kernel's time limit fires inside it) set no callback yet
        release = getattr(self, "release", None)
        if release is not None:
            release(self)
