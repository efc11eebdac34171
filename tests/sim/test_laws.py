"""The timing model's laws, on small exact synthetic traces."""

from __future__ import annotations

import dataclasses
import json

import pytest

from axon.sim import simulate
from axon.sim.synthetic import TraceBuilder
from axon.target import load_hw
from axon.target.costs import CYCLES, dma_cost, engine_cycles


@pytest.fixture(scope="module")
def trn1():
    return load_hw("trn1")


@pytest.fixture(scope="module")
def trn2():
    return load_hw("trn2")


def _with(hw, section, **changes):
    return dataclasses.replace(hw, **{section: dataclasses.replace(getattr(hw, section), **changes)})


def test_engine_busy_is_the_sum_of_its_instruction_costs(trn1):
    b = TraceBuilder()
    tiles = [b.sbuf(f"t{k}", 128, 2048) for k in range(4)]
    b.op("memset", "vector", writes=[b.whole(tiles[0])], free_size=2048)
    b.op(
        "tensor_tensor",
        "vector",
        reads=[b.whole(tiles[0]), b.whole(tiles[0])],
        writes=[b.whole(tiles[1])],
        free_size=2048,
        op="multiply",
    )
    b.op(
        "tensor_reduce", "vector", reads=[b.whole(tiles[1])], writes=[b.whole(tiles[2], 0, 4)], free_size=2048, op="add"
    )
    b.op("bn_aggr", "vector", reads=[b.whole(tiles[2], 0, 4)], writes=[b.whole(tiles[3], 0, 8)], free_size=6)
    b.op("activation", "scalar", reads=[b.whole(tiles[1])], writes=[b.whole(tiles[3])], free_size=2048, func="exp")
    trace = b.build()
    timing = simulate(trace, trn1)
    for engine in ("vector", "scalar"):
        expected = sum(engine_cycles(i, trn1) for i in trace.instructions if i.engine == engine)
        assert timing.busy_ns[engine] == pytest.approx(expected / trn1.engines[engine].clock_ghz, rel=1e-12)
    # fp32 tensor_tensor in SBUF costs 2N (the hardware file's factor): the formula actually applied
    assert CYCLES["tensor_tensor"](trace.instructions[1], trn1) == trn1.costs.tensor_tensor_factor * 2048
    assert timing.busy_ns["tensor"] == 0.0


def test_independent_instructions_on_different_engines_overlap(trn1):
    b = TraceBuilder()
    x, y, u, v = (b.sbuf(n, 128, 4096) for n in "xyuv")
    b.op("tensor_copy", "vector", reads=[b.whole(x)], writes=[b.whole(y)], free_size=4096)
    b.op("activation", "scalar", reads=[b.whole(u)], writes=[b.whole(v)], free_size=4096, func="exp")
    t = simulate(b.build(), trn1)
    vec, sca = t.busy_ns["vector"], t.busy_ns["scalar"]
    assert t.span_ns == pytest.approx(max(vec, sca))
    assert t.span_ns < 0.75 * (vec + sca)


def test_a_dependent_chain_serializes(trn1):
    b = TraceBuilder()
    tiles = [b.sbuf(f"t{k}", 128, 1024) for k in range(7)]
    engines = ["vector", "scalar", "gpsimd", "vector", "scalar", "vector"]
    for k, eng in enumerate(engines):
        b.op("tensor_copy", eng, reads=[b.whole(tiles[k])], writes=[b.whole(tiles[k + 1])], free_size=1024)
    t = simulate(b.build(), trn1)
    work = sum(t.busy_ns.values())
    # every hop waits for its producer, plus a semaphore between engines
    assert t.span_ns >= work + 5 * trn1.costs.semaphore_latency_ns
    assert t.critical_path == tuple(range(6))
    # the same six copies without the chain (each from its own source) finish far sooner
    b2 = TraceBuilder()
    for k, eng in enumerate(engines):
        src, dst = b2.sbuf(f"s{k}", 128, 1024), b2.sbuf(f"d{k}", 128, 1024)
        b2.op("tensor_copy", eng, reads=[b2.whole(src)], writes=[b2.whole(dst)], free_size=1024)
    assert simulate(b2.build(), trn1).span_ns < 0.7 * t.span_ns


def test_write_after_read_waits_for_the_reader(trn1):
    b = TraceBuilder()
    x, y = b.sbuf("x", 128, 4096), b.sbuf("y", 128, 4096)
    b.op("tensor_copy", "vector", reads=[b.whole(x)], writes=[b.whole(y)], free_size=4096)  # long read of x
    b.op("memset", "gpsimd", writes=[b.whole(x, 0, 256)], free_size=64)  # then x is overwritten
    t = simulate(b.build(), trn1)
    assert t.timeline.start_ns[1] >= t.timeline.end_ns[0]


def _dma_bound(n_loads: int, hw, chunk_bytes: int = 4096):
    b = TraceBuilder()
    src = b.hbm("a", n_loads * 128 * chunk_bytes)
    loop = b.loop("affine", n_loads)
    for i in range(n_loads):
        lp = ((loop, "affine", i),)
        t = b.sbuf("t", 128, chunk_bytes // 4, site="k.py:4", loop_depth=1)
        o = b.sbuf("o", 128, 1, site="k.py:5", loop_depth=1)
        b.dma(b.whole(t), b.whole(src, i * 128 * chunk_bytes, (i + 1) * 128 * chunk_bytes), loops=lp)
        b.op("tensor_reduce", "vector", reads=[b.whole(t)], writes=[b.whole(o)], free_size=64, op="add", loops=lp)
    return simulate(b.build(), hw)


def test_doubling_the_bytes_of_a_dma_bound_kernel_about_doubles_latency(trn1):
    one, two = _dma_bound(200, trn1), _dma_bound(400, trn1)  # spans: the launch overhead is fixed
    assert one.busy_ns["dma"] / one.span_ns > 0.9
    assert 1.85 < two.span_ns / one.span_ns < 2.05
    assert two.dma_bytes == 2 * one.dma_bytes


def test_bigger_chunks_use_the_dma_engines_better(trn1):
    small, big = _dma_bound(64, trn1, chunk_bytes=256), _dma_bound(64, trn1, chunk_bytes=8192)
    per_byte_small = small.span_ns / small.dma_bytes
    per_byte_big = big.span_ns / big.dma_bytes
    assert per_byte_small > 3 * per_byte_big  # under 256 B per partition is overhead-bound


def test_trn2_differs_from_trn1_as_clocks_and_bandwidths_say(trn1, trn2):
    b = TraceBuilder()
    x, y = b.sbuf("x", 128, 8192), b.sbuf("y", 128, 8192)
    for _ in range(8):
        b.op("tensor_tensor", "vector", reads=[b.whole(x), b.whole(x)], writes=[b.whole(y)], free_size=8192, op="add")
    a, c = b.sbuf("a", 128, 128, "bfloat16"), b.sbuf("c", 128, 512, "bfloat16")
    p = b.psum("p")
    for _ in range(16):
        b.op(
            "nc_matmul",
            "tensor",
            reads=[b.whole(a), b.whole(c)],
            writes=[b.whole(p)],
            dtype="bfloat16",
            moving_free=512,
            stationary_free=128,
        )
    trace = b.build()
    t1, t2 = simulate(trace, trn1), simulate(trace, trn2)
    assert t2.busy_ns["vector"] / t1.busy_ns["vector"] == pytest.approx(1.12 / 0.96)
    assert t2.busy_ns["tensor"] / t1.busy_ns["tensor"] == pytest.approx(2.8 / 2.4)
    # a DMA-bound kernel with large chunks runs at about the ratio of the per-engine bandwidths
    # (each capped by the core's HBM bandwidth over its engines)
    d1, d2 = _dma_bound(100, trn1, 16384), _dma_bound(100, trn2, 16384)

    def rate(hw):
        return min(hw.dma.bytes_per_ns_per_engine, hw.hbm_bytes_per_ns / hw.dma.engines)

    assert d1.span_ns / d2.span_ns == pytest.approx(rate(trn2) / rate(trn1), rel=0.08)


def test_port_conflicts_serialize_vector_and_gpsimd_only_on_nc_v2(trn1):
    b = TraceBuilder()
    x, y, u, v = (b.sbuf(n, 128, 4096) for n in "xyuv")
    b.op("tensor_copy", "vector", reads=[b.whole(x)], writes=[b.whole(y)], free_size=4096)
    b.op("tensor_copy", "gpsimd", reads=[b.whole(u)], writes=[b.whole(v)], free_size=4096)
    trace = b.build()
    shared = simulate(trace, trn1)
    free = simulate(trace, _with(trn1, "ports", vector_gpsimd_share_sbuf=False))
    assert shared.span_ns == pytest.approx(shared.busy_ns["vector"] + shared.busy_ns["gpsimd"])
    assert free.span_ns == pytest.approx(max(free.busy_ns["vector"], free.busy_ns["gpsimd"]))


def _loop_kernel(kind: str, n: int = 16):
    b = TraceBuilder()
    src = b.hbm("a", n * 128 * 2048)
    loop = b.loop(kind, n)
    for i in range(n):
        lp = ((loop, kind, i),)
        t = b.sbuf("t", 128, 512, site="k.py:4", loop_depth=1)
        o = b.sbuf("o", 128, 512, site="k.py:5", loop_depth=1)
        b.dma(b.whole(t), b.whole(src, i * 128 * 2048, (i + 1) * 128 * 2048), loops=lp)
        b.op("activation", "scalar", reads=[b.whole(t)], writes=[b.whole(o)], free_size=1536, func="exp", loops=lp)
        b.op("tensor_copy", "vector", reads=[b.whole(o)], writes=[b.whole(t)], free_size=1536, loops=lp)
    return b.build()


def test_affine_iterations_overlap_and_sequential_ones_do_not(trn1):
    affine = simulate(_loop_kernel("affine"), trn1)
    sequential = simulate(_loop_kernel("sequential"), trn1)
    assert affine.span_ns < 0.6 * sequential.span_ns
    # in a sequential loop no instruction of iteration i+1 starts before iteration i ended
    tl = sequential.timeline
    for i in range(1, 16):
        assert tl.start_ns[3 * i : 3 * i + 3].min() >= tl.end_ns[3 * i - 3 : 3 * i].max()


def test_rotating_buffers_bound_the_overlap(trn1):
    trace = _loop_kernel("affine")
    one = simulate(trace, _with(trn1, "memory", loop_tile_buffers=1))
    two = simulate(trace, _with(trn1, "memory", loop_tile_buffers=2))
    many = simulate(trace, _with(trn1, "memory", loop_tile_buffers=16))
    assert one.span_ns > two.span_ns >= many.span_ns
    assert one.span_ns > 1.5 * many.span_ns


def test_dma_fixed_cost_is_latency_not_throughput(trn1):
    one = _dma_bound(1, trn1, 256)
    c = one.timeline
    assert c.end_ns[0] - c.start_ns[0] == pytest.approx(trn1.dma.fixed_cost_ns)
    b = TraceBuilder()
    h, t = b.hbm("h", 32768), b.sbuf("t", 128, 64)
    engine_ns = dma_cost(b.dma(b.whole(t), b.whole(h)), trn1).engine_ns
    many = _dma_bound(64, trn1, 256)
    # 64 transfers take about 64 x their engine time, not 64 x (fixed cost + engine time)
    assert many.span_ns < 64 * engine_ns + 2 * trn1.dma.fixed_cost_ns
    assert many.span_ns < 0.7 * 64 * (engine_ns + trn1.dma.fixed_cost_ns)


def test_dma_spreads_over_engines_by_partitions(trn1):
    b = TraceBuilder()
    h = b.hbm("h", 1 << 20)
    for parts in (8, 64, 128):
        t = b.sbuf(f"t{parts}", parts, 1024)
        b.dma(b.whole(t), b.whole(h, 0, parts * 4096))
    engines = [dma_cost(i, trn1).engines for i in b.build().instructions]
    assert engines == [1, 8, 16]


def test_timeline_exports(tmp_path, trn1):
    timing = simulate(_loop_kernel("affine", 4), trn1)
    js = json.loads(timing.timeline.to_perfetto(tmp_path / "t.json").read_text())
    spans = [e for e in js["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 12
    names = {e["args"]["name"] for e in js["traceEvents"] if e["name"] == "thread_name"}
    assert {"scalar", "vector"} <= names and any(n.startswith("dma") for n in names)
    png = timing.timeline.to_png(tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "latency" in timing.summary()


def test_flop_utilization_of_back_to_back_matmuls(trn1):
    b = TraceBuilder()
    a, c = b.sbuf("a", 128, 128, "bfloat16"), b.sbuf("c", 128, 512, "bfloat16")
    p = b.psum("p")
    for _ in range(1000):
        b.op(
            "nc_matmul",
            "tensor",
            reads=[b.whole(a), b.whole(c)],
            writes=[b.whole(p)],
            dtype="bfloat16",
            moving_free=512,
            stationary_free=128,
        )
    t = simulate(b.build(), trn1)
    assert t.matmul_flops == 1000 * 2 * 128 * 128 * 512
    assert t.tensor_flop_utilization * t.latency_ns == pytest.approx(t.span_ns, rel=1e-9)


def test_a_ready_load_is_not_held_back_by_a_store_waiting_for_compute(trn1):
    b = TraceBuilder()
    h, o = b.hbm("h", 1 << 20), b.hbm("o", 1 << 20)
    x, _y, z = b.sbuf("x", 128, 8192), b.sbuf("y", 128, 8192), b.sbuf("z", 128, 512)
    b.op("memset", "vector", writes=[b.whole(x)], free_size=8192)  # long compute
    b.dma(b.whole(o, 0, 128 * 32768), b.whole(x))  # store: waits for the memset
    b.dma(b.whole(z), b.whole(h, 0, 128 * 2048))  # independent load, later in program order
    tl = simulate(b.build(), trn1).timeline
    assert tl.end_ns[2] < tl.start_ns[1]


def _dependent_pairs(kind: str):
    b = TraceBuilder()
    loop = b.loop(kind, 8)
    for i in range(8):
        lp = ((loop, kind, i),)
        t = b.sbuf("t", 128, 512, site="k.py:3", loop_depth=1)
        u = b.sbuf("u", 128, 512, site="k.py:4", loop_depth=1)
        b.op("memset", "vector", writes=[b.whole(t)], free_size=512, loops=lp)
        b.op("tensor_copy", "vector", reads=[b.whole(t)], writes=[b.whole(u)], free_size=512, loops=lp)
    return simulate(b.build(), trn1_hw := load_hw("trn1")), trn1_hw


def test_the_pipeline_drain_is_paid_by_dependent_neighbours_unless_iterations_interleave():
    static, hw = _dependent_pairs("static")
    affine, _ = _dependent_pairs("affine")
    drain = (hw.memory.access_overhead_cycles + hw.costs.static_overhead_cycles) / hw.engines.vector.clock_ghz
    assert affine.span_ns == pytest.approx(affine.busy_ns["vector"])
    assert static.span_ns == pytest.approx(static.busy_ns["vector"] + 8 * drain)
