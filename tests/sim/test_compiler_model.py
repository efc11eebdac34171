"""What the simulator assumes of the Neuron compiler: SBUF residency (hoisted loads, spills), the
engine it picks for an unbound instruction, and legacy `range` loops as sequential loops."""

from __future__ import annotations

import dataclasses

import pytest

import axon.nki
from axon.sim import simulate
from axon.sim.balance import place_unbound
from axon.sim.residency import replay
from axon.sim.synthetic import TraceBuilder
from axon.target import load_hw
from axon.target.trace import AUTO_ENGINE


@pytest.fixture(scope="module")
def trn1():
    return load_hw("trn1")


def _with(hw, section, **changes):
    return dataclasses.replace(hw, **{section: dataclasses.replace(getattr(hw, section), **changes)})


def test_a_load_of_resident_bytes_is_not_issued_again(trn1):
    b = TraceBuilder()
    x = b.hbm("x", 128 * 2048 * 4)
    out = b.hbm("out", 128 * 2048 * 4)
    for k in range(4):  # a loop-invariant load, repeated as a kernel's inner loop would
        t = b.sbuf(f"t{k}", 128, 2048)
        b.dma(dst=b.whole(t), src=b.whole(x))
        r = b.sbuf(f"r{k}", 128, 2048)
        b.op("tensor_copy", "vector", reads=[b.whole(t)], writes=[b.whole(r)], free_size=2048)
        b.dma(dst=b.whole(out), src=b.whole(r))
    trace = b.build()
    res = replay(trace, trn1)
    assert len(res.elided) == 3 and res.read_bytes == x.bytes_per_partition
    timing = simulate(trace, trn1)
    assert timing.hbm_read_bytes == x.bytes_per_partition and timing.hbm_write_bytes == 4 * out.bytes_per_partition


def _many_live_tiles(n: int):
    """n computed [128, 4096] fp32 tiles (16 KiB a partition each), all read after all are written."""
    b = TraceBuilder()
    out = b.hbm("out", 128 * 4096 * 4)
    tiles = [b.sbuf(f"t{k}", 128, 4096) for k in range(n)]
    for t in tiles:
        b.op("memset", "vector", writes=[b.whole(t)], free_size=4096)
    for t in tiles:
        b.dma(dst=b.whole(out), src=b.whole(t))
    return b.build()


def test_tiles_that_outgrow_sbuf_are_spilled_and_reloaded(trn1):
    trace = _many_live_tiles(16)  # 256 KiB a partition: more than SBUF holds
    res = replay(trace, trn1)
    stores = 16 * 128 * 4096 * 4
    assert res.write_bytes > stores and res.read_bytes == res.write_bytes - stores
    assert res.spills and res.before
    roomy = _with(trn1, "memory", sbuf_bytes_per_partition=1 << 20)
    assert replay(trace, roomy).write_bytes == stores
    assert simulate(trace, trn1).latency_ns > simulate(trace, roomy).latency_ns


def _block_reused_by_a_loop(block_kib: int, body_kib: int, iterations: int = 4, tile_kib: int = 4):
    """A block of B ([128, block_kib KiB] a partition, fp32 tiles of tile_kib KiB) loaded before an
    affine loop and read whole by every iteration, whose body writes body_kib KiB a partition of its
    own tiles (as the compiler-style matmuls do: B's block for a column block, A's row blocks in the
    loop)."""
    b = TraceBuilder()
    tiles = block_kib // tile_kib
    tile = tile_kib * 1024
    bh = b.hbm("b", 128 * block_kib * 1024)
    a = b.hbm("a", iterations * 128 * body_kib * 1024)
    out = b.hbm("out", iterations * 128 * 2048)
    blk = [b.sbuf(f"b{k}", 128, tile // 4) for k in range(tiles)]
    for k, t in enumerate(blk):
        b.dma(dst=b.whole(t), src=b.whole(bh, k * 128 * tile, (k + 1) * 128 * tile))
    loop = b.loop("affine", iterations)
    for it in range(iterations):
        lp = ((loop, "affine", it),)
        own = b.sbuf("a_tile", 128, body_kib * 256, site="k.py:9", loop_depth=1)
        lo = it * 128 * body_kib * 1024
        b.dma(dst=b.whole(own), src=b.whole(a, lo, lo + 128 * body_kib * 1024), loops=lp)
        acc = b.psum("acc", site="k.py:10", loop_depth=1)
        for t in blk:
            b.op(
                "nc_matmul",
                "tensor",
                reads=[b.whole(own, 0, 512), b.whole(t)],
                writes=[b.whole(acc)],
                free_size=512,
                loops=lp,
            )
        res = b.sbuf("res", 128, 512, site="k.py:11", loop_depth=1)
        b.op("tensor_copy", "vector", reads=[b.whole(acc)], writes=[b.whole(res)], free_size=512, loops=lp)
        b.dma(dst=b.whole(out, it * 128 * 2048, (it + 1) * 128 * 2048), src=b.whole(res), loops=lp)
    return b.build(), bh.bytes_per_partition, a.bytes_per_partition


def test_a_loop_invariant_block_that_does_not_fit_beside_the_body_is_reloaded_every_iteration(trn1):
    """The allocator decides per loop: B stays only if it fits beside the body's tiles x
    loop_tile_buffers; otherwise every iteration reads all of B again (no spills: B is in HBM).
    SBUF as the compiler uses it here: 0.92 x 192 = 176.6 KiB a partition."""
    fits, b_bytes, a_bytes = _block_reused_by_a_loop(block_kib=96, body_kib=28)  # 96 + 2 x 30 KiB fits
    assert replay(fits, trn1).read_bytes == b_bytes + a_bytes
    big, b_bytes, a_bytes = _block_reused_by_a_loop(block_kib=128, body_kib=28)  # 128 + 2 x 30 does not
    res = replay(big, trn1)
    assert res.read_bytes == 4 * b_bytes + a_bytes and res.write_bytes == 4 * 128 * 2048
    one_buffer = _with(trn1, "memory", loop_tile_buffers=1)  # 128 + 30 fits: B stays
    assert replay(big, one_buffer).read_bytes == b_bytes + a_bytes
    roomy = _with(trn1, "memory", sbuf_bytes_per_partition=1 << 20)  # B stays, same buffering
    assert replay(big, roomy).read_bytes == b_bytes + a_bytes
    assert simulate(big, trn1).busy_ns["dma"] > 2 * simulate(big, roomy).busy_ns["dma"]
    assert simulate(big, trn1).latency_ns > simulate(big, roomy).latency_ns
    # a body too big to pipeline (2 x 92 KiB) runs unpipelined: 64 + 92 fits beside one body
    unpipelined, b_bytes, a_bytes = _block_reused_by_a_loop(block_kib=64, body_kib=90)
    assert replay(unpipelined, trn1).read_bytes == b_bytes + a_bytes


def test_reloads_are_prefetched_into_rotating_buffers(trn1):
    """Each matmul reads a tile the compiler reloads (B does not fit beside the body): a reload goes
    into the buffer of the reload loop_tile_buffers before it, free once that one's reader has
    ended, so two are in flight and the fixed DMA latency is hidden (it paced one reload at a time)."""
    hw = _with(trn1, "dma", chunk_overhead_ns=95.0, fixed_cost_ns=3000.0)
    trace, _, _ = _block_reused_by_a_loop(block_kib=128, body_kib=28, iterations=8, tile_kib=2)
    reloads = sum(len(v) for v in replay(trace, hw).before.values())
    assert reloads >= 7 * 64
    timing = simulate(trace, hw)
    # a 2 KiB-row reload keeps the DMA engines 8 x 95 ns and a matmul 0.84 us: the latency sets the
    # pace, (fixed + matmul) / 2 a reload with two in flight, fixed_cost_ns with one
    assert timing.busy_ns["tensor"] / reloads < 0.3 * hw.dma.fixed_cost_ns
    assert timing.span_ns / reloads < 0.8 * hw.dma.fixed_cost_ns


def _windows_written_in_place(rows: int):
    """A rotating pair of [128, 8192] fp32 slots (32 KiB a partition each, 64 KiB in all): each row
    tile is loaded whole, rewritten in place in column windows, read in chunks and stored, as a
    fused group over column windows does."""
    b = TraceBuilder()
    x, out = b.hbm("x", rows * 128 * 32768), b.hbm("out", rows * 128 * 32768)
    t = b.sbuf("x_sb", 128, 2 * 8192)
    for r in range(rows):
        slot, src = (r % 2) * 32768, b.whole(x, r * 128 * 32768, (r + 1) * 128 * 32768)
        src = dataclasses.replace(src, nbytes=128 * 32768)
        b.dma(dst=b.whole(t, slot, slot + 32768), src=src)
        for c in range(0, 32768, 2048):  # read in chunks, as bn_stats does
            b.op("bn_stats", "vector", reads=[b.whole(t, slot + c, slot + c + 2048)], free_size=512)
        for w in range(0, 32768, 4096):  # rewritten in place, window by window
            win = b.whole(t, slot + w, slot + w + 4096)
            b.op("tensor_scalar", "vector", reads=[win], writes=[win], free_size=1024)
        dst = dataclasses.replace(b.whole(out, r * 128 * 32768, (r + 1) * 128 * 32768), nbytes=128 * 32768)
        b.dma(dst=dst, src=b.whole(t, slot, slot + 32768))
    return b.build()


def test_a_tile_rewritten_in_windows_is_replaced_whole_by_the_next_load(trn1):
    """The windows of an old row tile name bytes the next load of the slot overwrote: reading them
    again is reading the new tile, not reloading the old one (which spilled a 64 KiB kernel)."""
    rows = 6
    res = replay(_windows_written_in_place(rows), trn1)
    assert not res.spills and not res.before
    assert res.read_bytes == res.write_bytes == rows * 128 * 32768


def _copies(auto: bool):
    b = TraceBuilder()
    src = b.sbuf("src", 128, 2048)
    b.op("memset", "vector", writes=[b.whole(src)], free_size=2048)
    for k in range(6):
        dst = b.sbuf(f"d{k}", 128, 2048)
        attrs = dict([AUTO_ENGINE]) if auto else {}
        b.op("tensor_copy", "vector", reads=[b.whole(src)], writes=[b.whole(dst)], free_size=2048, **attrs)
    return b.build()


def test_unbound_instructions_are_spread_over_vector_and_scalar(trn1):
    bound, free = simulate(_copies(False), trn1), simulate(_copies(True), trn1)
    assert set(bound.timeline.lane) == {"vector"}
    assert {"vector", "scalar"} <= set(free.timeline.lane)
    assert free.latency_ns < bound.latency_ns


def _adamw_like(n_tiles: int):
    """Per tile: three unbound tensor_scalar issued first, then three tensor_tensor only VectorE runs."""
    b = TraceBuilder()
    lp = b.loop("affine", n_tiles)
    for t in range(n_tiles):
        loops = [(lp, "affine", t)]
        x = b.sbuf(f"x{t}", 128, 2048)
        b.op("memset", "gpsimd", writes=[b.whole(x)], loops=loops)
        outs = []
        for k in range(3):
            y = b.sbuf(f"y{t}_{k}", 128, 2048)
            b.op("tensor_scalar", "vector", reads=[b.whole(x)], writes=[b.whole(y)], loops=loops, **dict([AUTO_ENGINE]))
            outs.append(y)
        for k in range(3):
            z = b.sbuf(f"z{t}_{k}", 128, 2048)
            b.op(
                "tensor_tensor",
                "vector",
                reads=[b.whole(outs[k]), b.whole(outs[k - 1])],
                writes=[b.whole(z)],
                loops=loops,
            )
    return b.build()


def test_unbound_work_goes_where_its_loop_body_is_lighter(trn1):
    """The compiler balances before it schedules: unbound instructions issued ahead of a body's
    VectorE-only work still leave VectorE to it (adamw's profile: ScalarE 62% busy, VectorE 90%)."""
    trace = _adamw_like(8)
    placed = place_unbound(trace, trn1)
    unbound = [i for i, ins in enumerate(trace.instructions) if AUTO_ENGINE in ins.attrs]
    assert sorted(placed) == unbound and {ins.engine for ins in placed.values()} == {"scalar"}
    timing = simulate(trace, trn1)
    lanes = [lane for lane, ins in zip(timing.timeline.lane, trace.instructions) if AUTO_ENGINE in ins.attrs]
    assert set(lanes) == {"scalar"}


_UNBOUND_TRANSPOSES = """
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

def k(a):
    out = nl.ndarray((8, 128, 128), a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for i in nl.affine_range(8):
        s = nisa.tensor_copy(nisa.nc_transpose(t[:, nl.ds(i * 128, 128)]), engine=nisa.scalar_engine)
        nl.store(out[i], value=s)
    small = nisa.tensor_copy(nisa.nc_transpose(t[0:32, 0:32]), engine=nisa.scalar_engine)
    return out
"""


def test_an_unbound_transpose_larger_than_32x32_stays_on_tensore(trn1):
    # the simulator used to move every unbound nc_transpose to VectorE (the first engine it balanced
    # over), timing a 128x128 fp32 transpose as a 128-element VectorE stream: AWS's attention tutorials
    # leave their transposes of P unbound, and came out 1.5x fast on trn2
    trace = axon.nki.trace(axon.nki.load_source(_UNBOUND_TRANSPOSES), ((128, 1024), "float32"), hw=trn1)
    timing = simulate(trace, trn1)
    lanes = [lane for ins, lane in zip(trace.instructions, timing.timeline.lane) if ins.opcode == "nc_transpose"]
    big = [
        lane
        for ins, lane in zip(trace.instructions, timing.timeline.lane)
        if ins.opcode == "nc_transpose" and ins.partitions == 128
    ]
    assert len(lanes) == 9 and big == ["tensor"] * 8
    assert timing.busy_ns["tensor"] >= 8 * 128 * trn1.tensor_engine.fp32_slowdown / trn1.engines["tensor"].clock_ghz


def _range_kernel(module: str) -> str:
    return "\n".join(
        [
            f"import {module}.language as nl",
            f"import {module}.isa as nisa",
            "",
            "def k(a):",
            "    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)",
            "    for i in range(2):",
            "        t = nl.load(a[i * 128 : (i + 1) * 128, :])",
            "        nl.store(out[i * 128 : (i + 1) * 128, :], value=t)",
            "    return out",
            "",
        ]
    )


def test_a_legacy_kernels_python_range_is_a_sequential_loop():
    """neuronxcc replaced `range` in a kernel by `sequential_range`; the current NKI unrolls it."""
    legacy = axon.nki.trace(axon.nki.load_source(_range_kernel("neuronxcc.nki")), ((256, 64), "float32"))
    current = axon.nki.trace(axon.nki.load_source(_range_kernel("nki")), ((256, 64), "float32"))
    assert [lp.kind for lp in legacy.loops] == ["sequential"]
    assert current.loops == ()
