"""The baselines: hand-written expert kernels and the unfused op-by-op lowering compute their specs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError
from axon.ir import max_rel_error, reference_case
from axon.lower.baselines import expert_source, unfused, unfused_source
from axon.lower.expert import KERNELS
from axon.target import load_hw
from axon.workloads import get

from .conftest import TOL


def _run(src, graph, x):
    args = [x[n] for n in graph.input_names]
    res = axon.nki.run(src, *args, hw="trn1")
    return res if isinstance(res, (tuple, list)) else (res,)


# Expert kernels take tiles of their inputs' dtype; the float64 reference inputs are cast to the
# graph's dtype first (NKI has no float64 tile).
NP_DTYPE = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
# Written for float32 (axon.search.baselines.expert_kernel measures no other dtype): their TensorE
# transposes write a float32 PSUM tile, which nki.isa.nc_transpose refuses for bfloat16 data ("The
# output dst tile must have the same data type as that of data").
FLOAT32_ONLY = {"rmsnorm_matmul", "attention"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", KERNELS)
def test_expert_kernel_matches_reference(name, dtype):
    graph = get(name).graph("small", dtype=dtype)
    x, ref = reference_case(graph)
    x = {n: v.astype(NP_DTYPE[dtype]) for n, v in x.items()}
    if dtype != "float32" and name in FLOAT32_ONLY:
        with pytest.raises(NKIError, match="nc_transpose dst dtype"):
            _run(expert_source(name), graph, x)
        return
    out = _run(expert_source(name), graph, x)
    assert max_rel_error({"out": np.asarray(out[0], dtype=np.float64)}, ref) <= TOL[dtype]


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
