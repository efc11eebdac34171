"""Instruction cost formulas of a NeuronCore (HARDWARE.md section 3), one function per opcode.

`CYCLES[opcode](instr, hw)` is the occupancy of the instruction's engine in that engine's cycles
(back-to-back issue), including the stride penalty; `dma_cost(instr, hw)` splits a transfer over
DMA engines. These are the only cost formulas in Axon: the ISA table points at them and the
simulator charges them. Scheduling effects (dependencies, semaphores, ports, overlap) are not
here; they belong to `axon.sim`.

>>> from axon.target.trace import Instr
>>> from axon.target import load_hw
>>> mm = Instr(0, "nc_matmul", "tensor", 128, 512, "bfloat16", (), (), 1,
...            attrs=(("moving_free", 512), ("stationary_free", 128)))
>>> CYCLES["nc_matmul"](mm, load_hw("trn1"))
512.0
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from axon.target.hardware import HardwareSpec
from axon.target.trace import Instr

CostFn = Callable[[Instr, HardwareSpec], float]

_HALF_WIDTH = ("bfloat16", "float16", "bf16", "fp16")
_FP32 = ("float32", "fp32")


def _min_ii(hw: HardwareSpec) -> float:
    return float(hw.costs.min_ii_cycles)


def _n(ins: Instr) -> float:
    return float(max(ins.free_size, 1))


def _reads_psum(ins: Instr) -> bool:
    return any(a.buffer == "psum" for a in ins.reads)


def _op(ins: Instr, name: str = "op") -> str:
    return str(ins.attr(name, ins.attr("op0", "")) or "").lower()


def _perf_mode(ins: Instr, hw: HardwareSpec) -> float:
    """NC-v3 bf16/fp16 performance mode: contiguous SBUF-only copies and tensor_scalar run faster."""
    factor = hw.ports.vector_perf_mode_factor
    if factor <= 1.0 or ins.engine != "vector" or ins.dtype not in _HALF_WIDTH or _reads_psum(ins):
        return 1.0
    if any(a.stride_bytes > 2 for a in ins.reads):
        return 1.0
    return factor


# ---- TensorE -----------------------------------------------------------------------------------

_ITEMSIZE = {"float32": 4, "fp32": 4, "bfloat16": 2, "float16": 2, "tfloat32": 4, "float8_e4m3": 1, "float8_e5m2": 1}


def matmul_free_sizes(ins: Instr, hw: HardwareSpec) -> tuple[float, float]:
    """(moving free, stationary free) of an nc_matmul: from its attrs, else from its operands
    (reads are stationary then moving), else the main operand as moving and a full stationary."""
    moving = ins.attr("moving_free")
    stationary = ins.attr("stationary_free")
    size = _ITEMSIZE.get(ins.dtype, 2)
    if stationary is None and ins.reads:
        stationary = (ins.reads[0].byte_hi - ins.reads[0].byte_lo) // size
    if moving is None and len(ins.reads) > 1:
        moving = (ins.reads[1].byte_hi - ins.reads[1].byte_lo) // size
    return (
        float(moving if moving is not None else ins.free_size),
        float(stationary if stationary is not None else hw.tensor_engine.stationary_fmax),
    )


def nc_matmul(ins: Instr, hw: HardwareSpec) -> float:
    """max(min(64, N_stationary), N_moving); fp32 operands cost `fp32_slowdown` times more."""
    moving, stationary = matmul_free_sizes(ins, hw)
    cycles = max(min(64.0, stationary), moving)
    if ins.dtype in _FP32:
        cycles *= hw.tensor_engine.fp32_slowdown
    return cycles


def nc_transpose(ins: Instr, hw: HardwareSpec) -> float:
    """TensorE: max(P, min(64, F)); VectorE (32x32 blocks): max(MIN_II, N)."""
    if ins.engine == "vector":
        return max(_min_ii(hw), _n(ins))
    cycles = max(float(ins.partitions), min(64.0, _n(ins)))
    if ins.dtype in _FP32:
        cycles *= hw.tensor_engine.fp32_slowdown
    return cycles


# ---- Vector / Scalar / GpSimd ------------------------------------------------------------------


def _streaming(ins: Instr, hw: HardwareSpec) -> float:
    return max(_min_ii(hw), _n(ins))


def activation(ins: Instr, hw: HardwareSpec) -> float:
    """out = f(in*scale + bias) on ScalarE: max(MIN_II, N); with a fused reduction + MIN_II."""
    cycles = _streaming(ins, hw)
    if ins.attr("reduce", False) or ins.opcode == "activation_reduce":
        cycles += _min_ii(hw)
    return cycles


def tensor_scalar(ins: Instr, hw: HardwareSpec) -> float:
    """(x op0 a) op1 b: two ops cost as one; GpSimd rsqrt is ~4x ScalarE's; a fused reduction + MIN_II."""
    cycles = _streaming(ins, hw) / _perf_mode(ins, hw)
    if ins.engine == "gpsimd" and "rsqrt" in (_op(ins, "op0"), _op(ins, "op1")):
        cycles *= hw.costs.gpsimd_rsqrt_factor
    if ins.opcode == "tensor_scalar_reduce" or ins.attr("reduce", False):
        cycles += _min_ii(hw)
    return cycles


def tensor_tensor(ins: Instr, hw: HardwareSpec) -> float:
    """max(MIN_II, N) if an input is in PSUM or both are bf16 SBUF add/sub/mul; else max(MIN_II, 2N)
    (the 2 is `tensor_tensor_factor`)."""
    fast_op = _op(ins) in ("add", "subtract", "sub", "multiply", "mul")
    contiguous = all(a.stride_bytes <= 2 for a in ins.reads)
    if _reads_psum(ins) or (ins.dtype in ("bfloat16", "bf16") and fast_op and contiguous):
        return max(_min_ii(hw), _n(ins))
    return max(_min_ii(hw), hw.costs.tensor_tensor_factor * _n(ins))


def scalar_tensor_tensor(ins: Instr, hw: HardwareSpec) -> float:
    """N for bf16 subtract-then-multiply with even N, else 2N."""
    n = _n(ins)
    if (
        ins.dtype in ("bfloat16", "bf16")
        and _op(ins, "op0") in ("subtract", "sub")
        and _op(ins, "op1") in ("multiply", "mul")
        and int(n) % 2 == 0
    ):
        return max(_min_ii(hw), n)
    return max(_min_ii(hw), 2 * n)


def tensor_reduce(ins: Instr, hw: HardwareSpec) -> float:
    """N/2 for bf16 add/max, else N (over the reduced free elements)."""
    n = _n(ins)
    if ins.dtype in ("bfloat16", "bf16") and _op(ins) in ("add", "max", "maximum", "sum"):
        n /= 2
    return max(_min_ii(hw), n)


def tensor_tensor_scan(ins: Instr, hw: HardwareSpec) -> float:
    return max(_min_ii(hw), 2 * _n(ins))


def tensor_copy(ins: Instr, hw: HardwareSpec) -> float:
    return _streaming(ins, hw) / _perf_mode(ins, hw)


def memset(ins: Instr, hw: HardwareSpec) -> float:
    """Zero in bf16/fp16 writes two elements a cycle."""
    n = _n(ins)
    if ins.dtype in _HALF_WIDTH and float(ins.attr("value", 0) or 0) == 0.0:
        n /= 2
    return max(_min_ii(hw), n)


def reciprocal(ins: Instr, hw: HardwareSpec) -> float:
    """VectorE iterates (~8N); ScalarE's activation(reciprocal) streams at N."""
    if ins.engine == "scalar":
        return _streaming(ins, hw)
    return max(_min_ii(hw), hw.costs.reciprocal_vector_factor * _n(ins))


def bn_stats(ins: Instr, hw: HardwareSpec) -> float:
    return _streaming(ins, hw)


def bn_aggr(ins: Instr, hw: HardwareSpec) -> float:
    return max(_min_ii(hw), hw.costs.bn_aggr_factor * _n(ins))


def gpsimd_generate(ins: Instr, hw: HardwareSpec) -> float:
    """iota, affine_select: a fixed base plus one cycle per element."""
    return hw.costs.gpsimd_op_base_cycles + _n(ins)


def _stride_factor(ins: Instr, hw: HardwareSpec) -> float:
    """An innermost on-chip stride above `stride_penalty_bytes` halves SBUF/PSUM bandwidth."""
    limit = hw.memory.stride_penalty_bytes
    for a in ins.reads + ins.writes:
        if a.buffer != "hbm" and a.stride_bytes > limit:
            return hw.memory.stride_penalty_factor
    return 1.0


def _with_stride(fn: CostFn) -> CostFn:
    def cost(ins: Instr, hw: HardwareSpec) -> float:
        return float(fn(ins, hw)) * _stride_factor(ins, hw)

    cost.__name__ = fn.__name__
    cost.__doc__ = fn.__doc__
    return cost


_FORMULAS: dict[str, CostFn] = {
    "nc_matmul": nc_matmul,
    "nc_transpose": nc_transpose,
    "activation": activation,
    "activation_reduce": activation,
    "tensor_scalar": tensor_scalar,
    "tensor_scalar_reduce": tensor_scalar,
    "tensor_tensor": tensor_tensor,
    "scalar_tensor_tensor": scalar_tensor_tensor,
    "tensor_reduce": tensor_reduce,
    "tensor_tensor_scan": tensor_tensor_scan,
    "tensor_copy": tensor_copy,
    "memset": memset,
    "reciprocal": reciprocal,
    "bn_stats": bn_stats,
    "bn_aggr": bn_aggr,
    "iota": gpsimd_generate,
    "affine_select": gpsimd_generate,
}

# Data-movement opcodes, costed by `dma_cost` (the simulator never asks CYCLES about them).
DMA_OPCODES = frozenset({"dma_copy", "dma_transpose", "load", "store", "load_transpose2d", "dma"})


def _dma_engine_ns(ins: Instr, hw: HardwareSpec) -> float:
    """DMA engines have no clock in the hardware file: for a DMA opcode the figure is the ns each
    engine it uses is kept busy (see `dma_cost` for the split and the fixed latency)."""
    return dma_cost(ins, hw).engine_ns


CYCLES: dict[str, CostFn] = {name: _with_stride(fn) for name, fn in _FORMULAS.items()}
CYCLES.update({name: _dma_engine_ns for name in DMA_OPCODES})


def engine_cycles(ins: Instr, hw: HardwareSpec) -> float:
    """Cycles of a compute instruction; an opcode without a formula streams at max(MIN_II, N).
    On ScalarE an fp32 instruction costs `scalar_fp32_factor` times its formula (the measured trn1
    kernels: experiments/calibration.py)."""
    fn = CYCLES.get(ins.opcode)
    cycles = _streaming(ins, hw) * _stride_factor(ins, hw) if fn is None else fn(ins, hw)
    if ins.engine == "scalar" and ins.dtype in _FP32:
        return cycles * hw.costs.scalar_fp32_factor
    return cycles


@dataclass(frozen=True, slots=True)
class DMACost:
    """How one transfer occupies the DMA engines.

    `engines` engines each move `bytes_per_engine` bytes in `chunks_per_engine` descriptors, which
    keeps each of them busy `engine_ns`; the transfer cannot complete sooner than `fixed_ns` after
    it is issued (descriptor setup and completion semaphore, overlapped with other transfers since
    every engine has many queues). An engine processes the next descriptor while the previous
    one's bytes are in flight, so it is busy for whichever is longer: its descriptors at
    `chunk_overhead_ns` each, or its bytes at its bandwidth (`engine_busy_ns`).
    """

    engines: int
    bytes_per_engine: float
    chunks_per_engine: float
    engine_ns: float
    fixed_ns: float
    nbytes: int
    hbm_bytes: int


def dma_cost(ins: Instr, hw: HardwareSpec) -> DMACost:
    """A transfer over DMA engines: one engine per `partitions_per_engine` on-chip partitions.

    >>> from axon.target.trace import Access, Instr
    >>> from axon.target import load_hw
    >>> src = Access(0, "hbm", 0, 1, 0, 32768, 32768)
    >>> dst = Access(1, "sbuf", 0, 128, 0, 256, 32768)
    >>> c = dma_cost(Instr(0, "dma_copy", "dma", 128, 128, "bfloat16", (src,), (dst,), 1), load_hw("trn1"))
    >>> c.engines, c.chunks_per_engine
    (16, 8.0)
    """
    d = hw.dma
    nbytes = 0
    partitions = 0
    hbm_bytes = 0
    onchip = hbm_only = False
    for a in ins.writes:
        if a.nbytes > nbytes:
            nbytes = a.nbytes
    for group in (ins.reads, ins.writes):
        for a in group:
            if a.buffer == "hbm":
                hbm_bytes += a.nbytes
            else:
                onchip = True
                if a.partition_hi - a.partition_lo > partitions:
                    partitions = a.partition_hi - a.partition_lo
    if not nbytes:
        nbytes = max((a.nbytes for a in ins.reads), default=0)
    hbm_only = not onchip
    if not partitions:
        partitions = max(ins.partitions, 1)
    engines = max(1, min(d.engines, -(-partitions // d.partitions_per_engine)))
    # One descriptor per partition row; an HBM-to-HBM copy is one contiguous chunk per engine.
    chunks = float(engines) if hbm_only else float(partitions)
    bandwidth = min(d.bytes_per_ns_per_engine, hw.hbm_bytes_per_ns / d.engines)
    if ins.opcode in ("dma_transpose", "load_transpose2d") or (ins.attrs and ins.attr("transpose", False)):
        bandwidth *= d.transpose_bandwidth_factor
    elif not hbm_bytes:
        bandwidth *= d.sbuf_to_sbuf_bandwidth_factor
    per_engine_bytes = nbytes / engines
    per_engine_chunks = chunks / engines
    engine_ns = engine_busy_ns(per_engine_chunks, per_engine_bytes, bandwidth, hw)
    return DMACost(engines, per_engine_bytes, per_engine_chunks, engine_ns, d.fixed_cost_ns, int(nbytes), hbm_bytes)


def spill_cost(nbytes: int, partitions: int, hw: HardwareSpec) -> DMACost:
    """A transfer the compiler adds between SBUF and HBM (a spill or a reload): one descriptor per
    partition row, split over the engines like a kernel's own load of the same tile."""
    d = hw.dma
    engines = max(1, min(d.engines, -(-partitions // d.partitions_per_engine)))
    bandwidth = min(d.bytes_per_ns_per_engine, hw.hbm_bytes_per_ns / d.engines)
    engine_ns = engine_busy_ns(partitions / engines, nbytes / engines, bandwidth, hw)
    return DMACost(engines, nbytes / engines, partitions / engines, engine_ns, d.fixed_cost_ns, nbytes, nbytes)


def engine_busy_ns(chunks: float, nbytes: float, bandwidth: float, hw: HardwareSpec) -> float:
    """How long one DMA engine is busy moving `nbytes` in `chunks` descriptors: descriptor processing
    is pipelined with the data movement of the descriptors before it (each engine serves 16 queues),
    so the slower of the two sets the rate. A transfer of rows under `chunk_overhead_ns x bandwidth`
    bytes is overhead-bound, above it bandwidth-bound (HARDWARE.md section 4: under 256 B per
    partition badly overhead-bound, 2 KiB close to and 4 KiB at full bandwidth)."""
    return max(chunks * hw.dma.chunk_overhead_ns, nbytes / bandwidth)


def is_dma(ins: Instr) -> bool:
    return ins.engine == "dma" or ins.opcode in DMA_OPCODES
