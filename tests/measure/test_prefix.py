"""The shorter partial trace cut out of the longer one, and both timed in one simulation, give exactly
what tracing and simulating each gives (and kernels of another form are measured the usual way)."""

from __future__ import annotations

import functools
import tempfile

import numpy as np
import pytest

from axon import nki, sim
from axon.lower import lower
from axon.lower.emit import emit
from axon.measure.backend import SimBackend, write_kernel
from axon.measure.prefix import prefix_trace, returns_after_last_loop
from axon.search.api import verified_variants
from axon.search.problem import LoweredProblem
from axon.sim.residency import replay
from axon.sim.synthetic import TraceBuilder
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


class _TwoTraces(SimBackend):
    """The backend as it was: both partial traces traced and simulated on their own."""

    def _one_loop(self, *args, **kwargs):
        return None


def _same(source, kernel, inputs):
    folder = tempfile.mkdtemp()  # one folder, so that error messages name the same kernel file
    new = SimBackend(folder).measure(source, kernel, inputs, HW).as_dict()
    old = _TwoTraces(folder).measure(source, kernel, inputs, HW).as_dict()
    new.pop("wall_s"), old.pop("wall_s")
    assert new == old
    return new


@functools.cache  # the parametrized test below takes one point each: built once, not once per test
def _attention_points(n):
    # 16 heads (the cut loop) at S=1024: the default's loop structure at a sixteenth of its work
    graph = get("attention").graph("default", S=1024)
    problem = LoweredProblem("attention", graph, HW, verified_variants(graph), "float32")
    rng = np.random.default_rng(3)
    points, tries = [problem.default_point()], 0
    while len(points) < n and tries < 200:
        tries += 1
        p = problem.sample(rng)
        if problem.validate(p) is None:
            points.append(p)
    return [problem.build(p) for p in points]


@pytest.mark.parametrize("k", range(3))
def test_attention_measurements_are_those_of_two_traces(k):
    c = _attention_points(3)[k]
    assert returns_after_last_loop(c.source, c.kernel)
    got = _same(c.source, c.kernel, c.inputs)
    assert got["status"] == "ok" and got["details"]["timing"] == "extrapolated"


@pytest.mark.parametrize(
    "name,dims,point",
    [
        ("softmax", dict(M=4096), {"tile_m": 128, "bufs": 2}),
        ("rmsnorm_matmul", dict(M=2048), {"tile_m": 64, "m_block": 2, "bufs": 2}),
        ("rmsnorm_matmul", dict(M=2048), {"fusion": "unfused", "weights": "resident"}),
    ],
)
def test_other_workloads_measure_as_before(name, dims, point):
    graph = get(name).graph("small", **dims)
    prog = lower(graph, point, HW)
    _same(emit(prog), graph.name, tuple((t.name, t.shape, t.dtype) for t in prog.inputs))


_HEAD = """
import nki
import nki.isa as nisa
import nki.language as nl


def k(a):
    out = nl.ndarray((32, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    u = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(32):
        nisa.dma_copy(dst=t[0:128, 0:512], src=a[i, 0:128, 0:512])
{body}
        nisa.dma_copy(dst=out[i, 0:128, 0:512], src=t[0:128, 0:512])
{tail}
"""
_EVERY = "        nisa.tensor_scalar(dst=t[0:128, 0:512], data=t[0:128, 0:512], op0=nl.multiply, operand0=2.0)"
# the body depends on the iteration other than by address: more work in every third iteration,
# a tile allocated per iteration, a value carried from one iteration to the next
_ODD = """        for _ in range(1 + (i % 3 == 0)):
            nisa.tensor_scalar(dst=t[0:128, 0:512], data=t[0:128, 0:512], op0=nl.multiply, operand0=2.0)
        w = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=w[0:128, 0:512], src=t[0:128, 0:512])
        if i > 0:
            nisa.tensor_tensor(dst=t[0:128, 0:512], data1=t[0:128, 0:512], data2=u[0:128, 0:512], op=nl.add)
        nisa.tensor_copy(dst=u[0:128, 0:512], src=w[0:128, 0:512])"""


@pytest.mark.parametrize(
    "body,tail,prefix",
    [
        (_EVERY, "    return out", True),
        (_ODD, "    return out", True),
        # work after the loop: the shorter trace is not a prefix of the longer one
        (_EVERY, "    nisa.dma_copy(dst=out[0, 0:128, 0:512], src=t[0:128, 0:512])\n    return out", False),
        # the loop assigns what is returned
        (_EVERY + "\n        out = out", "    return out", False),
    ],
)
def test_hand_written_kernels(tmp_path, body, tail, prefix):
    source = _HEAD.format(body=body, tail=tail)
    inputs = (("a", (32, 128, 512), "float32"),)
    assert returns_after_last_loop(source, "k") is prefix
    got = _same(source, "k", inputs)
    assert got["status"] == "ok" and got["details"]["timing"] == "extrapolated", got
    # the cut trace is the one tracing with fewer iterations gives
    fn = nki.load_kernel(f"{write_kernel(source, tmp_path)}:k")
    short, long = (nki.trace(fn, ((32, 128, 512), "float32"), hw=HW, loop_limit=lambda n, d=d: n // d) for d in (8, 4))
    cut = prefix_trace(long, 0, 4)
    if not prefix:  # measured the usual way (checked above); the source does not allow the cut
        return
    assert cut is not None
    for field in ("instructions", "allocs", "loops", "outputs", "kernel", "file", "hw"):
        assert getattr(cut, field) == getattr(short, field), field
    b, a = sim.simulate_with_prefix(long, cut, HW)
    for one, other in ((a, sim.simulate(short, HW)), (b, sim.simulate(long, HW))):
        assert one == other
        assert one.timeline.lane == other.timeline.lane
        assert np.array_equal(one.timeline.start_ns, other.timeline.start_ns)


def test_prefix_of_a_kernel_whose_compiler_evicts_tiles():
    """Residency looks ahead: tiles read again after the prefix outgrow SBUF in the whole trace (spills
    within the prefix) but not in the prefix alone. Two passes then, and the same results."""
    b = TraceBuilder()
    tiles = [b.sbuf(f"t{i}", 128, 8192) for i in range(12)]
    for t in tiles:  # computed tiles, each read soon after it is written
        b.op("memset", "vector", writes=[b.whole(t)], free_size=2048)
        b.op("tensor_copy", "vector", reads=[b.whole(t)], writes=[b.whole(t)], free_size=2048)
    n = len(b.instrs)
    for t in tiles:  # and again after the prefix
        b.op("tensor_copy", "scalar", reads=[b.whole(t)], writes=[b.whole(t)], free_size=2048)
    trace = b.build()
    head = type(trace)(trace.kernel, trace.file, trace.hw, trace.instructions[:n], trace.allocs, trace.loops)
    assert any(i < n for i in replay(trace, HW).spills) and not replay(head, HW).spills
    whole, cut = sim.simulate_with_prefix(trace, head, HW)
    assert whole == sim.simulate(trace, HW) and cut == sim.simulate(head, HW)
