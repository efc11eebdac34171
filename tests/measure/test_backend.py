"""The sim backend: whole simulation and loop extrapolation agree; partial traces keep trip counts."""

from __future__ import annotations

import pytest

from axon import nki
from axon.lower import lower
from axon.lower.emit import emit
from axon.measure import backend as backend_module
from axon.measure.backend import SimBackend, top_level_trips, write_kernel
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
        # three TensorE-bound phases (the results table's swiglu): run b hides a wait that run a shows,
        # so the growth alone came out 8% under the whole simulation
        (
            "swiglu",
            dict(M=4096, D=1024, F=3072),
            {
                "fusion": "split_matmuls",
                "loop_order": "kn4",
                "tile_n": 256,
                "transpose": "dma",
                "weights": "resident",
                "psum_bufs": 2,
                "bufs": 2,
                "isel.g7": 1,
            },
        ),
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


def _measure_by_probe(monkeypatch, src, kernel, inputs):
    """The measurement with the loop structure found by a probe trace (the source not read)."""
    with monkeypatch.context() as m:
        m.setattr(backend_module, "top_level_trips", lambda source, kernel: None)
        return SimBackend().measure(src, kernel, inputs, HW)


def _same(a, b):
    return (a.status, a.latency_ns, a.instructions, a.dma_bytes, a.engine_busy_ns, a.details) == (
        b.status,
        b.latency_ns,
        b.instructions,
        b.dma_bytes,
        b.engine_busy_ns,
        b.details,
    )


def test_top_level_trips_reads_literal_loops_and_declines_the_rest():
    src, kernel, _ = _kernel("softmax", dict(M=4096), {"tile_m": 128})
    assert top_level_trips(src, kernel) == [32]
    assert top_level_trips(src, "no_such_kernel") is None
    loop = "def k(a):\n    x = 1\n    for i in nl.affine_range({}):\n        pass\n    return x\n"
    assert top_level_trips(loop.format(16), "k") == [16]
    assert top_level_trips(loop.format("n"), "k") is None  # computed trip count
    assert top_level_trips(loop.format("16, 32"), "k") is None
    assert top_level_trips("def k(a):\n    for i in range(16):\n        pass\n", "k") is None  # not an NKI loop
    nested = "def k(a):\n    if a:\n        for i in nl.affine_range(16):\n            pass\n"
    assert top_level_trips(nested, "k") is None  # a loop under an if


@pytest.mark.parametrize(
    "name,dims,point",
    [
        ("softmax", dict(M=4096), {"tile_m": 128, "bufs": 2}),
        ("rmsnorm_matmul", dict(M=2048), {"fusion": "unfused", "weights": "resident"}),
        ("softmax", {}, {}),
    ],
)
def test_loops_read_from_the_source_measure_as_the_probe_does(monkeypatch, name, dims, point):
    src, kernel, inputs = _kernel(name, dims, point)
    assert top_level_trips(src, kernel) is not None
    read = SimBackend().measure(src, kernel, inputs, HW)
    assert read.status == "ok", read.error
    assert _same(read, _measure_by_probe(monkeypatch, src, kernel, inputs))


def test_a_source_whose_loops_hide_in_a_helper_falls_back_to_the_probe(monkeypatch, tmp_path):
    """The kernel body calls a helper holding the long loop: the source shows no top-level loop,
    the whole trace does, and the measurement is the probe's (extrapolated), not the whole trace's."""
    src, kernel, inputs = _kernel("softmax", dict(M=4096), {"tile_m": 128})
    head, _, body = src.partition(f"def {kernel}(")
    params, _, rest = body.partition("):\n")
    head = head.removesuffix("@nki.jit\n")
    hidden = f"{head}def _body({params}):\n{rest}\n\n@nki.jit\ndef {kernel}({params}):\n    return _body({params})\n"
    assert top_level_trips(hidden, kernel) == []
    read = SimBackend().measure(hidden, kernel, inputs, HW)
    assert read.status == "ok", read.error
    assert read.details["timing"] == "extrapolated"
    assert _same(read, _measure_by_probe(monkeypatch, hidden, kernel, inputs))


@pytest.mark.parametrize(
    "name,dims,point",
    [
        ("rmsnorm_matmul", dict(M=2048), {"fusion": "unfused", "weights": "resident"}),  # several cut loops
        ("softmax", dict(M=4096), {"tile_m": 128, "bufs": 2}),  # one loop: a single trace, no child
    ],
)
def test_two_workers_measure_what_one_does(monkeypatch, name, dims, point):
    """With two workers the shorter partial run is traced and simulated by a forked child; the
    measurement is the one of a single process, field for field."""
    src, kernel, inputs = _kernel(name, dims, point)
    children = []

    class Counted(backend_module.Forked):
        def __init__(self, fn):
            children.append(fn)
            super().__init__(fn)

    monkeypatch.setattr(backend_module, "Forked", Counted)
    two = SimBackend(workers=2).measure(src, kernel, inputs, HW)
    assert two.status == "ok", two.error
    assert _same(two, SimBackend().measure(src, kernel, inputs, HW))
    assert len(children) == (1 if len(top_level_trips(src, kernel) or ()) > 1 else 0)
