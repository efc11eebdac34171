"""Laws: any tiled matmul shape computes A @ B in both API styles; elementwise instructions agree
with the ISA table's definition applied by NumPy in float64."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import axon.nki
from tests.conftest import rel_err
from tests.nki.helpers import kernel


@settings(max_examples=12, deadline=None)
@given(
    K=st.integers(1, 300),
    M=st.integers(1, 260),
    N=st.integers(1, 700),
    api=st.sampled_from(["current_api", "legacy_api"]),
)
def test_tiled_matmul_any_shape(K, M, N, api):
    rng = np.random.default_rng(K * 1000 + M)
    a_t = rng.standard_normal((K, M)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    out = axon.nki.run(kernel(api, "matmul_tiled"), a_t, b)
    assert rel_err(out, a_t.astype(np.float64).T @ b) <= 1e-5


@settings(max_examples=25, deadline=None)
@given(
    op0=st.sampled_from(["add", "subtract", "multiply", "maximum", "minimum", "divide"]),
    op1=st.sampled_from(["add", "subtract", "multiply", "maximum", "minimum"]),
    c0=st.floats(0.5, 3.0),
    c1=st.floats(-2.0, 2.0),
    reverse0=st.booleans(),
)
def test_tensor_scalar_matches_its_definition(op0, op1, c0, c1, reverse0):
    import nki.isa as nisa
    import nki.language as nl

    from axon.ir.ops import NumpyMath
    from axon.target import ALU

    def k(a, v):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        vec = nl.ndarray(v.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=vec, src=v)
        nisa.tensor_scalar(dst=t, data=t, op0=op0, operand0=vec, reverse0=reverse0, op1=op1, operand1=c1)
        nisa.dma_copy(dst=out, src=t)
        return out

    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2.0, (64, 32)).astype(np.float32)
    v = np.full((64, 1), c0, np.float32)
    m = NumpyMath()
    a64, v64 = a.astype(np.float64), v.astype(np.float64)
    x = ALU[op0](m, v64, a64) if reverse0 else ALU[op0](m, a64, v64)
    ref = ALU[op1](m, x, c1)
    assert np.max(np.abs(axon.nki.run(k, a, v) - ref)) <= 1e-5 * max(1.0, np.max(np.abs(ref)))
