"""Kernels of the same code (sources equal but for their docstring) are measured as measuring each
gives, and only those: other code, docstrings over other lines, failed measurements are measured."""

from __future__ import annotations

import numpy as np

from axon.measure.backend import SimBackend, kernel_hash
from axon.measure.samecode import code_key
from axon.search.api import verified_variants
from axon.search.problem import LoweredProblem
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")

_KERNEL = '''"""{doc}"""

import nki
import nki.language as nl


@nki.jit
def double(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range({trips}):
        t = nl.load(a[i * 128 : (i + 1) * 128, :])
        nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.multiply(t, 2.0))
    return out
'''


def test_code_key_ignores_only_the_docstring_text():
    a = _KERNEL.format(doc="point: 1\nmore", trips=2)
    assert code_key(a) == code_key(_KERNEL.format(doc="point: 22\nother", trips=2))
    assert code_key(a) != code_key(_KERNEL.format(doc="point: 1 more", trips=2))  # other lines
    assert code_key(a) != code_key(_KERNEL.format(doc="point: 1\nmore", trips=4))  # other code
    assert code_key(a) != code_key(a.split('"""', 2)[2])  # no docstring
    assert code_key(a.replace("a.shape", "a.shape if __doc__ else a.shape")) is None  # reads its docstring
    assert code_key("def (") is None


def _measured(m):
    return {k: v for k, v in m.as_dict().items() if k != "wall_s"}


def test_a_kernel_of_the_same_code_gets_the_measurement_measuring_it_gives(tmp_path):
    inputs = (("a", (512, 256), "float32"),)
    first, second = _KERNEL.format(doc="one", trips=4), _KERNEL.format(doc="two", trips=4)
    backend = SimBackend(tmp_path)
    backend.measure(first, "double", inputs, HW)
    got = backend.measure(second, "double", inputs, HW)
    assert backend.same_code == 1 and (tmp_path / f"kernel_{kernel_hash(second)}.py").exists()
    assert _measured(got) == _measured(SimBackend(tmp_path).measure(second, "double", inputs, HW))
    backend.measure(_KERNEL.format(doc="three", trips=2), "double", inputs, HW)  # other code
    backend.measure(second, "double", (("a", (1024, 256), "float32"),), HW)  # other shapes
    assert backend.same_code == 1


def test_failed_measurements_are_measured_again(tmp_path):
    inputs = (("a", (256, 256), "float32"),)  # 4 row tiles of a 2-tile tensor: out of bounds
    backend = SimBackend(tmp_path)
    a = backend.measure(_KERNEL.format(doc="one", trips=4), "double", inputs, HW)
    b = backend.measure(_KERNEL.format(doc="two", trips=4), "double", inputs, HW)
    assert a.status == b.status == "error" and backend.same_code == 0 and a.error != b.error  # each names its file


def test_attention_points_that_emit_the_same_code_measure_the_same():
    graph = get("attention").graph("small")
    problem = LoweredProblem("attention", graph, HW, verified_variants(graph), "float32")
    base = problem.default_point()
    cands = [problem.build(p) for p in [base, *problem.neighbours(base)] if problem.validate(p) is None]
    by_code: dict = {}
    for c in cands:
        by_code.setdefault(code_key(c.source), []).append(c)
    same = next(v for v in by_code.values() if len(v) > 1)  # e.g. a knob the online nest does not read
    assert same[0].source != same[1].source
    backend = SimBackend()
    backend.measure(same[0].source, same[0].kernel, same[0].inputs, HW)
    got = backend.measure(same[1].source, same[1].kernel, same[1].inputs, HW)
    assert backend.same_code == 1 and got.status == "ok"
    assert _measured(got) == _measured(SimBackend().measure(same[1].source, same[1].kernel, same[1].inputs, HW))
    assert np.isfinite(got.latency_ns)
