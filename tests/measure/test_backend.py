"""The sim backend: whole simulation and loop extrapolation agree; partial traces keep trip counts."""

from __future__ import annotations

import pytest

from axon import nki
from axon.lower import lower
from axon.lower.emit import emit
from axon.measure.backend import SimBackend, write_kernel
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


def _kernel(name, dims, point):
    graph = get(name).graph("small", **dims)
    prog = lower(graph, point, HW)
    inputs = tuple((t.name, t.shape, t.dtype) for t in prog.inputs)
    return emit(prog), graph.name, inputs


def test_partial_trace_cuts_top_level_loops_and_keeps_trip_counts(tmp_path):
    src, kernel, inputs = _kernel("softmax", dict(M=4096), {"tile_m": 128})
    fn = nki.load_kernel(f"{write_kernel(src, tmp_path)}:{kernel}")
    specs = [(shape, dtype) for _, shape, dtype in inputs]
    whole = nki.trace(fn, *specs, hw=HW)
    part = nki.trace(fn, *specs, hw=HW, loop_limit=lambda trips: trips // 16)
    top = [l for l in whole.loops if l.parent is None]
    assert top and top[0].trip_count == 32
    assert [l.trip_count for l in part.loops if l.parent is None] == [l.trip_count for l in top]
    assert len(part) * 16 == pytest.approx(len(whole), rel=0.1)


@pytest.mark.parametrize(
    "name,dims,point",
    [
        ("softmax", dict(M=4096), {"tile_m": 128, "bufs": 2}),
        ("rmsnorm_matmul", dict(M=2048), {"tile_m": 64, "m_block": 2, "bufs": 2}),
        ("rmsnorm_matmul", dict(M=2048), {"fusion": "unfused", "weights": "resident"}),
    ],
)
def test_extrapolated_timing_agrees_with_whole_simulation(name, dims, point):
    src, kernel, inputs = _kernel(name, dims, point)
    fast = SimBackend().measure(src, kernel, inputs, HW)
    whole = SimBackend(extrapolate=False).measure(src, kernel, inputs, HW)
    assert fast.status == whole.status == "ok", (fast.error, whole.error)
    assert fast.details["timing"] == "extrapolated" and whole.details["timing"] == "whole"
    assert fast.latency_ns == pytest.approx(whole.latency_ns, rel=0.02)
    assert fast.instructions == whole.instructions
    assert fast.dma_bytes == pytest.approx(whole.dma_bytes, rel=1e-6)


def test_small_kernels_are_simulated_whole():
    src, kernel, inputs = _kernel("softmax", {}, {})
    m = SimBackend().measure(src, kernel, inputs, HW)
    assert m.status == "ok" and m.details["timing"] == "whole"
