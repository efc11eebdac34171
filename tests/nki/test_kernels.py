"""Kernels in both NKI API styles compute what NumPy computes, at several (ragged) shapes."""

import ml_dtypes
import numpy as np
import pytest

import axon.nki
from tests.conftest import rel_err
from tests.nki.helpers import kernel

API = ["current_api", "legacy_api"]
TOL = {"float32": 1e-5, "bfloat16": 2e-2}
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}


def _inputs(rng, dtype, *shapes):
    return [rng.standard_normal(s).astype(DTYPES[dtype]) for s in shapes]


def _f64(*xs):
    return [x.astype(np.float64) for x in xs]


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("K,M,N", [(128, 128, 512), (256, 128, 1024), (300, 200, 700)])
def test_tiled_matmul_accumulates_over_k(api, dtype, K, M, N):
    a_t, b = _inputs(np.random.default_rng(0), dtype, (K, M), (K, N))
    out = axon.nki.run(kernel(api, "matmul_tiled"), a_t, b)
    at64, b64 = _f64(a_t, b)
    assert out.shape == (M, N) and out.dtype == a_t.dtype
    assert rel_err(out, at64.T @ b64) <= TOL[dtype]


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("R,C", [(128, 256), (200, 384), (77, 512)])
def test_rmsnorm(api, dtype, R, C):
    x, w = _inputs(np.random.default_rng(1), dtype, (R, C), (C,))
    out = axon.nki.run(kernel(api, "rmsnorm"), x, w)
    x64, w64 = _f64(x, w)
    ref = x64 / np.sqrt((x64**2).mean(axis=1, keepdims=True) + 1e-6) * w64
    assert rel_err(out, ref) <= TOL[dtype]


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("R,C", [(128, 256), (200, 1000), (5, 64)])
def test_softmax(api, dtype, R, C):
    (x,) = _inputs(np.random.default_rng(2), dtype, (R, C))
    out = axon.nki.run(kernel(api, "softmax"), x)
    (x64,) = _f64(x)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    assert rel_err(out, e / e.sum(axis=1, keepdims=True)) <= TOL[dtype]


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("R,C", [(128, 256), (200, 1000), (130, 512)])
def test_layernorm_with_bn_stats(api, dtype, R, C):
    x, g, b = _inputs(np.random.default_rng(3), dtype, (R, C), (C,), (C,))
    f = kernel(api, "layernorm")
    out, trace = axon.nki.run_with_trace(f, x, g, b)
    x64, g64, b64 = _f64(x, g, b)
    ref = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * g64 + b64
    assert rel_err(out, ref) <= TOL[dtype]
    counts = trace.count()
    assert counts["bn_stats"] == -(-R // 128) * -(-C // 512) and counts["bn_aggr"] == -(-R // 128)


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("S,Sk,D", [(128, 256, 64), (200, 384, 128)])
def test_attention_online_softmax(api, dtype, S, Sk, D):
    q, k, v = _inputs(np.random.default_rng(4), dtype, (S, D), (Sk, D), (Sk, D))
    out = axon.nki.run(kernel(api, "attention"), q, k, v)
    q64, k64, v64 = _f64(q, k, v)
    s = q64 @ k64.T / np.sqrt(D)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    assert rel_err(out, (e / e.sum(axis=1, keepdims=True)) @ v64) <= TOL[dtype]


def test_attention_ragged_keys_by_slices():
    q, k, v = _inputs(np.random.default_rng(5), "float32", (200, 64), (300, 64), (300, 64))
    out = axon.nki.run(kernel("current_api", "attention"), q, k, v)
    s = q.astype(np.float64) @ k.T.astype(np.float64) / 8.0
    e = np.exp(s - s.max(axis=1, keepdims=True))
    assert rel_err(out, (e / e.sum(axis=1, keepdims=True)) @ v) <= 1e-5


def test_bf16_rounds_on_write_but_matmul_accumulates_in_fp32():
    # 1024 products of 1 + 2^-8: each partial sum is exact in fp32, but not in bf16.
    K = 1024
    a_t = np.full((K, 128), 1.0, dtype=ml_dtypes.bfloat16)
    b = np.full((K, 512), 1 + 2**-7, dtype=ml_dtypes.bfloat16)
    out = axon.nki.run(kernel("current_api", "matmul_tiled"), a_t, b)
    exact = K * (1 + 2**-7)
    assert out.dtype == ml_dtypes.bfloat16
    assert float(out[0, 0]) == float(np.float32(exact).astype(ml_dtypes.bfloat16))
