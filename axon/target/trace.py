"""The instruction trace: what the NKI emulator records and the timing simulator consumes.

This file is the contract between `axon.nki` (producer) and `axon.sim` and `axon.target.costs`
(consumers); it sits in `target`, below both. A trace lists every instruction a kernel issued, in
program order, with the memory it read and wrote, so that the simulator can rebuild dependencies
(RAW, WAR, WAW) and cost each instruction from the ISA table.
It holds no array data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

BUFFERS = ("hbm", "sbuf", "psum")
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
# The attr of an instruction whose kernel left the engine to the compiler (`engine=unknown_engine`,
# or an `nl.*` call): `Instr.engine` is the ISA default, and the simulator may place it elsewhere.
AUTO_ENGINE = ("auto_engine", True)


@dataclass(frozen=True, slots=True)
class Alloc:
    """One allocation of on-chip or HBM memory.

    A tile allocated inside a loop body is a new `Alloc` each iteration, all with the same `site`;
    the simulator maps allocations of one site onto a bounded number of rotating buffers.
    """

    id: int
    buffer: str  # "hbm" | "sbuf" | "psum"
    name: str
    shape: tuple[int, ...]
    dtype: str
    partitions: int  # extent of the partition axis (1 for HBM tensors)
    bytes_per_partition: int  # for HBM: total bytes
    site: str  # "file:line" of the allocation
    loop_depth: int = 0


@dataclass(frozen=True, slots=True)
class Access:
    """A region of an allocation read or written by one instruction.

    For SBUF/PSUM: partitions [partition_lo, partition_hi) and bytes [byte_lo, byte_hi) within each
    partition (a conservative bounding box). For HBM: the flat byte range [byte_lo, byte_hi), with
    partition_lo=0, partition_hi=1.
    """

    alloc: int
    buffer: str
    partition_lo: int
    partition_hi: int
    byte_lo: int
    byte_hi: int
    nbytes: int  # bytes actually touched
    stride_bytes: int = 0  # innermost access stride in bytes (element size when contiguous)


@dataclass(frozen=True, slots=True)
class Instr:
    """One issued instruction."""

    index: int
    opcode: str  # nki.isa name: "nc_matmul", "activation", "tensor_tensor", "dma_copy", ...
    engine: str  # "tensor" | "vector" | "scalar" | "gpsimd" | "dma"
    partitions: int  # partitions of the main operand
    free_size: int  # elements per partition of the main operand
    dtype: str  # dtype of the main input operand
    reads: tuple[Access, ...]
    writes: tuple[Access, ...]
    line: int  # kernel source line that issued it
    loops: tuple[tuple[int, str, int], ...] = ()  # enclosing loops, outermost first: (loop id, kind, iteration)
    attrs: tuple[tuple[str, Any], ...] = ()  # opcode specifics, e.g. ("moving_free", 512), ("func", "exp")

    def attr(self, name: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        return default


@dataclass(frozen=True, slots=True)
class Loop:
    """A loop of the kernel: `kind` is "affine", "sequential", "static" or "dynamic"."""

    id: int
    kind: str
    trip_count: int
    line: int
    parent: int | None = None


@dataclass(frozen=True)
class Trace:
    """Everything a kernel issued, in program order."""

    kernel: str
    file: str
    hw: str
    instructions: tuple[Instr, ...]
    allocs: tuple[Alloc, ...]
    loops: tuple[Loop, ...] = ()
    outputs: tuple[int, ...] = ()  # alloc ids of the kernel's returned HBM tensors
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.instructions)

    def count(self) -> dict[str, int]:
        """Instructions per opcode."""
        out: dict[str, int] = {}
        for ins in self.instructions:
            out[ins.opcode] = out.get(ins.opcode, 0) + 1
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self))
