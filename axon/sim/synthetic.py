"""Hand-built traces: a small builder for exact model tests and the synthetic benchmark trace.

For tests and benchmarks of the simulator without the emulator; real kernels come from
`axon.nki.trace`. It checks nothing about hardware rules.
"""

from __future__ import annotations

from axon.target.hardware import DEFAULT_HW
from axon.target.trace import Access, Alloc, Instr, Loop, Trace

_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3": 1, "float8_e5m2": 1}


class TraceBuilder:
    """Append allocations and instructions; `build()` gives a `Trace`.

    >>> b = TraceBuilder()
    >>> x = b.hbm("x", 128 * 512 * 4)
    >>> t = b.sbuf("t", 128, 512)
    >>> _ = b.dma(dst=b.whole(t), src=b.whole(x))
    >>> _ = b.op("activation", "scalar", reads=[b.whole(t)], writes=[b.whole(t)], free_size=512)
    >>> len(b.build())
    2
    """

    def __init__(self, kernel: str = "synthetic", hw: str = DEFAULT_HW):
        self.kernel, self.hw = kernel, hw
        self.allocs: list[Alloc] = []
        self.instrs: list[Instr] = []
        self.loops: list[Loop] = []

    def _alloc(
        self,
        buffer: str,
        name: str,
        shape: tuple[int, ...],
        dtype: str,
        partitions: int,
        bytes_pp: int,
        site: str | None,
        loop_depth: int,
    ) -> Alloc:
        a = Alloc(
            len(self.allocs),
            buffer,
            name,
            shape,
            dtype,
            partitions,
            bytes_pp,
            site or f"{self.kernel}.py:{len(self.allocs)}",
            loop_depth,
        )
        self.allocs.append(a)
        return a

    def hbm(self, name: str, nbytes: int) -> Alloc:
        return self._alloc("hbm", name, (nbytes,), "uint8", 1, nbytes, None, 0)

    def sbuf(
        self,
        name: str,
        partitions: int,
        free: int,
        dtype: str = "float32",
        site: str | None = None,
        loop_depth: int = 0,
        buffer: str = "sbuf",
    ) -> Alloc:
        size = _ITEMSIZE[dtype]
        return self._alloc(buffer, name, (partitions, free), dtype, partitions, free * size, site, loop_depth)

    def psum(
        self, name: str, partitions: int = 128, free: int = 512, site: str | None = None, loop_depth: int = 0
    ) -> Alloc:
        return self.sbuf(name, partitions, free, "float32", site, loop_depth, buffer="psum")

    def loop(self, kind: str, trip_count: int) -> int:
        self.loops.append(Loop(len(self.loops), kind, trip_count, 0))
        return len(self.loops) - 1

    @staticmethod
    def whole(a: Alloc, byte_lo: int = 0, byte_hi: int | None = None, stride_bytes: int = 0) -> Access:
        """All partitions of `a` over bytes [byte_lo, byte_hi) of each (HBM: the flat range)."""
        hi = a.bytes_per_partition if byte_hi is None else byte_hi
        parts = a.partitions if a.buffer != "hbm" else 1
        itemsize = _ITEMSIZE.get(a.dtype, 1)
        return Access(a.id, a.buffer, 0, parts, byte_lo, hi, parts * (hi - byte_lo), stride_bytes or itemsize)

    def op(
        self,
        opcode: str,
        engine: str,
        reads=(),
        writes=(),
        free_size: int = 512,
        partitions: int = 128,
        dtype: str = "float32",
        loops=(),
        **attrs,
    ) -> Instr:
        ins = Instr(
            len(self.instrs),
            opcode,
            engine,
            partitions,
            free_size,
            dtype,
            tuple(reads),
            tuple(writes),
            len(self.instrs) + 1,
            tuple(loops),
            tuple(sorted(attrs.items())),
        )
        self.instrs.append(ins)
        return ins

    def dma(self, dst: Access, src: Access, loops=(), opcode: str = "dma_copy") -> Instr:
        onchip = dst if dst.buffer != "hbm" else src
        parts = onchip.partition_hi - onchip.partition_lo
        return self.op(
            opcode,
            "dma",
            reads=[src],
            writes=[dst],
            free_size=max(dst.nbytes // max(parts, 1), 1),
            partitions=parts,
            dtype="uint8",
            loops=loops,
        )

    def build(self) -> Trace:
        return Trace(
            self.kernel, f"{self.kernel}.py", self.hw, tuple(self.instrs), tuple(self.allocs), tuple(self.loops)
        )


def pipelined_trace(n_instructions: int = 100_000, kernel: str = "synthetic") -> Trace:
    """A tiled-matmul-like trace: per iteration of an affine loop, two loads into loop-body tiles,
    a matmul accumulating into PSUM, and every 8 iterations an evacuation and a store.

    >>> len(pipelined_trace(1000))
    1000
    """
    b = TraceBuilder(kernel)
    a_hbm = b.hbm("a", 1 << 30)
    c_hbm = b.hbm("c", 1 << 30)
    loop = b.loop("affine", n_instructions // 3)
    acc = None
    it = 0
    while len(b.instrs) < n_instructions:
        lp = ((loop, "affine", it),)
        if it % 8 == 0:
            acc = b.psum("acc", site="k.py:3", loop_depth=1)
        assert acc is not None  # the first iteration allocates it
        lhs = b.sbuf("lhs", 128, 128, "bfloat16", site="k.py:5", loop_depth=1)
        rhs = b.sbuf("rhs", 128, 512, "bfloat16", site="k.py:6", loop_depth=1)
        off = (it * 163840) % (1 << 29)
        b.dma(b.whole(lhs), b.whole(a_hbm, off, off + 32768), loops=lp)
        b.dma(b.whole(rhs), b.whole(a_hbm, off + 32768, off + 163840), loops=lp)
        b.op(
            "nc_matmul",
            "tensor",
            reads=[b.whole(lhs), b.whole(rhs)],
            writes=[b.whole(acc)],
            free_size=512,
            dtype="bfloat16",
            loops=lp,
            moving_free=512,
            stationary_free=128,
        )
        if it % 8 == 7:
            out = b.sbuf("out", 128, 512, "float32", site="k.py:9", loop_depth=1)
            b.op("tensor_copy", "vector", reads=[b.whole(acc)], writes=[b.whole(out)], loops=lp)
            o = (it * 262144) % (1 << 29)
            b.dma(b.whole(c_hbm, o, o + 262144), b.whole(out), loops=lp, opcode="dma_copy")
        it += 1
    b.instrs = b.instrs[:n_instructions]
    return b.build()
