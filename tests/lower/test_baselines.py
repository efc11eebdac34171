"""The baselines: hand-written expert kernels and the unfused op-by-op lowering compute their specs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import axon.nki
from axon.ir import max_rel_error, reference_case
from axon.lower.baselines import expert_source, unfused, unfused_source
from axon.lower.expert import KERNELS
from axon.search.baselines import expert_kernel
from axon.target import load_hw
from axon.workloads import get

from .conftest import TOL


def _run(src, graph, x):
    args = [x[n] for n in graph.input_names]
    res = axon.nki.run(src, *args, hw="trn1")
    return res if isinstance(res, (tuple, list)) else (res,)


# Expert kernels take tiles of their inputs' dtype; the float64 reference inputs are cast to the
# graph's dtype first (NKI has no float64 tile).
NP_DTYPE = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", KERNELS)
def test_expert_kernel_matches_reference(name, dtype):
    graph = get(name).graph("small", dtype=dtype)
    x, ref = reference_case(graph)
    x = {n: v.astype(NP_DTYPE[dtype]) for n, v in x.items()}
    out = _run(expert_source(name), graph, x)
    assert max_rel_error({"out": np.asarray(out[0], dtype=np.float64)}, ref) <= TOL[dtype]


@pytest.mark.parametrize("name", KERNELS)
def test_a_tune_in_a_half_precision_dtype_has_its_expert_figure(name):
    """A bfloat16 or float16 tune is compared with the expert kernel too (it was float32 only), and a
    dtype the kernels were not checked in has no figure."""
    for dtype in ("float32", "bfloat16", "float16"):
        src, kernel, inputs = expert_kernel(name, get(name).graph("small", dtype=dtype))
        assert kernel == name and {dt for _, _, dt in inputs} == {dtype}
    assert expert_kernel(name, get(name).graph("small", dtype="float8_e4m3")) is None


@pytest.mark.parametrize("name", ["rmsnorm", "attention", "adamw"])
def test_unfused_round_trips_every_op_through_hbm(name):
    graph = get(name).graph("small")
    prog = unfused(graph, load_hw("trn1"))
    computed = [n for n in graph.nodes if n.op not in ("input", "const", "dimsize") and n.type.rank > 0]
    assert len(prog.scratch) + len(prog.outputs) >= len(computed) - 2  # slices/views may share a pass
    x, ref = reference_case(graph)
    res = _run(unfused_source(graph, load_hw("trn1")), graph, x)
    got = {n: np.asarray(r, dtype=np.float64) for n, r in zip(prog.output_names, res)}
    assert max_rel_error(got, ref) <= TOL["float32"]
