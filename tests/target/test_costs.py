"""The cost formulas of HARDWARE.md section 3, opcode by opcode."""

from __future__ import annotations

import dataclasses

import pytest

from axon.target import load_hw
from axon.target.costs import CYCLES, dma_cost, engine_cycles
from axon.target.trace import Access, Instr


@pytest.fixture(scope="module")
def hw():
    return load_hw("trn1")


def _acc(buffer="sbuf", stride=4, parts=128, nbytes=2048):
    return Access(0, buffer, 0, parts if buffer != "hbm" else 1, 0, nbytes, parts * nbytes, stride)


def _ins(opcode, engine="vector", n=512, dtype="float32", reads=None, writes=None, **attrs):
    reads = (_acc(),) if reads is None else reads
    writes = (_acc(),) if writes is None else writes
    return Instr(0, opcode, engine, 128, n, dtype, tuple(reads), tuple(writes), 1, (), tuple(attrs.items()))


def test_matmul_cost_is_moving_free_bounded_below_by_stationary(hw):
    assert (
        CYCLES["nc_matmul"](_ins("nc_matmul", "tensor", dtype="bfloat16", moving_free=512, stationary_free=128), hw)
        == 512
    )
    assert (
        CYCLES["nc_matmul"](_ins("nc_matmul", "tensor", dtype="bfloat16", moving_free=16, stationary_free=128), hw)
        == 64
    )
    assert (
        CYCLES["nc_matmul"](_ins("nc_matmul", "tensor", dtype="bfloat16", moving_free=16, stationary_free=32), hw) == 32
    )
    assert (
        CYCLES["nc_matmul"](_ins("nc_matmul", "tensor", dtype="float32", moving_free=512, stationary_free=128), hw)
        == 2048
    )


def test_vector_and_scalar_formulas(hw):
    assert CYCLES["activation"](_ins("activation", "scalar", n=10), hw) == 64  # MIN_II
    assert CYCLES["activation_reduce"](_ins("activation_reduce", "scalar", n=1000), hw) == 1064
    assert CYCLES["tensor_scalar"](_ins("tensor_scalar", n=1000, op0="multiply", op1="add"), hw) == 1000
    psum_in = (_acc("psum"), _acc())
    assert CYCLES["tensor_tensor"](_ins("tensor_tensor", n=512, reads=psum_in, op="add"), hw) == 512
    bf = (_acc(stride=2), _acc(stride=2))
    assert CYCLES["tensor_tensor"](_ins("tensor_tensor", n=512, dtype="bfloat16", reads=bf, op="add"), hw) == 512
    assert (
        CYCLES["tensor_tensor"](_ins("tensor_tensor", n=512, dtype="bfloat16", reads=bf, op="divide"), hw)
        == 512 * hw.costs.tensor_tensor_factor
    )
    fp32 = _ins("tensor_tensor", n=512, op="add")  # fp32 in SBUF: off the fast path
    assert CYCLES["tensor_tensor"](fp32, hw) == 512 * hw.costs.tensor_tensor_factor
    assert CYCLES["tensor_reduce"](_ins("tensor_reduce", n=512, dtype="bfloat16", op="add"), hw) == 256
    assert CYCLES["tensor_tensor_scan"](_ins("tensor_tensor_scan", n=512), hw) == 1024
    assert CYCLES["reciprocal"](_ins("reciprocal", n=512), hw) == hw.costs.reciprocal_vector_factor * 512
    assert CYCLES["reciprocal"](_ins("reciprocal", "scalar", n=512), hw) == 512
    assert CYCLES["bn_aggr"](_ins("bn_aggr", n=96), hw) == pytest.approx(4.333 * 96)
    assert CYCLES["memset"](_ins("memset", n=512, dtype="bfloat16", value=0.0), hw) == 256
    assert CYCLES["iota"](_ins("iota", "gpsimd", n=512), hw) == 662
    assert CYCLES["tensor_scalar"](_ins("tensor_scalar", "gpsimd", n=512, op0="rsqrt"), hw) == 4 * 512


def test_a_wide_stride_doubles_the_cost(hw):
    strided = _ins("tensor_copy", n=512, reads=(_acc(stride=64),))
    assert CYCLES["tensor_copy"](strided, hw) == 2 * CYCLES["tensor_copy"](_ins("tensor_copy", n=512), hw)


def test_trn2_performance_mode_speeds_bf16_copies_only(hw):
    trn2 = load_hw("trn2")
    bf = _ins("tensor_copy", n=1024, dtype="bfloat16", reads=(_acc(stride=2),))
    fp = _ins("tensor_copy", n=1024, dtype="float32")
    assert CYCLES["tensor_copy"](bf, trn2) == 512 and CYCLES["tensor_copy"](bf, hw) == 1024
    assert CYCLES["tensor_copy"](fp, trn2) == 1024


def test_unknown_opcode_streams_at_min_ii(hw):
    assert engine_cycles(_ins("tensor_partition_reduce", "gpsimd", n=10), hw) == 64


def test_dma_cost_counts_descriptors_and_bytes(hw):
    src, dst = _acc("hbm", nbytes=128 * 1024), _acc("sbuf", nbytes=1024)
    c = dma_cost(Instr(0, "dma_copy", "dma", 128, 512, "bfloat16", (src,), (dst,), 1), hw)
    assert (c.engines, c.chunks_per_engine, c.bytes_per_engine) == (16, 8.0, 8192.0)
    # descriptor processing overlaps the bytes in flight: the slower of the two sets an engine's time
    bandwidth = min(hw.dma.bytes_per_ns_per_engine, hw.hbm_bytes_per_ns / hw.dma.engines)
    assert c.engine_ns == pytest.approx(max(8 * hw.dma.chunk_overhead_ns, 8192 / bandwidth))
    slow = dataclasses.replace(hw, memory=dataclasses.replace(hw.memory, hbm_bandwidth_gbps=16 * 4.0))
    assert dma_cost(
        Instr(0, "dma_copy", "dma", 128, 512, "bfloat16", (src,), (dst,), 1), slow
    ).engine_ns == pytest.approx(max(8 * hw.dma.chunk_overhead_ns, 8192 / 4.0))  # the shared HBM cap binds


def test_dma_small_rows_are_descriptor_bound(hw):
    """Rows under chunk_overhead_ns x bandwidth bytes cost a descriptor each, whatever their size."""
    bandwidth = min(hw.dma.bytes_per_ns_per_engine, hw.hbm_bytes_per_ns / hw.dma.engines)
    small = int(hw.dma.chunk_overhead_ns * bandwidth) // 4  # bytes per partition row
    big = int(hw.dma.chunk_overhead_ns * bandwidth) * 4

    def cost(row_bytes):
        src, dst = _acc("hbm", nbytes=128 * row_bytes), _acc("sbuf", nbytes=row_bytes)
        return dma_cost(Instr(0, "dma_copy", "dma", 128, row_bytes // 2, "bfloat16", (src,), (dst,), 1), hw)

    assert cost(small).engine_ns == pytest.approx(8 * hw.dma.chunk_overhead_ns)
    assert cost(small // 2).engine_ns == pytest.approx(cost(small).engine_ns)
    assert cost(big).engine_ns == pytest.approx(8 * big / bandwidth)
