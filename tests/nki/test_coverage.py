"""The rest of the language surface: par_dim buffers, nl.ds, nl.matmul/transpose, loop_reduce,
constants, tensor_scalar_reduce, fp8 storage, static/sequential/plain loops."""

import ml_dtypes
import numpy as np

import axon.nki
from tests.conftest import rel_err


def test_par_dim_buffer_ds_and_nl_matmul():
    import neuronxcc.nki.language as nl

    def k(x, y):  # x [256, 128] (M, K), y [128, 256] (K, N): out = x @ y
        out = nl.ndarray((256, 256), nl.float32, buffer=nl.shared_hbm)
        xs = nl.ndarray((2, nl.par_dim(128), 128), nl.float32, buffer=nl.sbuf)
        yt = nl.load(y)
        for i in nl.static_range(2):
            xs[i] = nl.load(x[nl.ds(i * 128, 128), :])
        for i in nl.sequential_range(2):
            res = nl.matmul(xs[i], yt)  # transposes x on TensorE, then nc_matmul
            nl.store(out[nl.ds(i * 128, 128), :], value=nl.copy(res))
        return out

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((256, 128)).astype(np.float32), rng.standard_normal((128, 256)).astype(np.float32)
    out, tr = axon.nki.run_with_trace(k, x, y)
    assert rel_err(out, x.astype(np.float64) @ y) <= 1e-5
    assert tr.count()["nc_transpose"] == 2 and tr.count()["nc_matmul"] == 2
    xs = next(a for a in tr.allocs if a.shape == (2, 128, 128))
    assert xs.partitions == 128 and xs.bytes_per_partition == 2 * 128 * 4
    assert [lp.kind for lp in tr.loops] == ["static", "sequential"]


def test_loop_reduce_identity_and_tensor_scalar_reduce():
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    def k(x):  # x [4, 128, 64]: out[:, :64] = max over the 4 slabs of (x * I-diag weight), out[:, 64] = row sums
        out = nl.ndarray((128, 65), nl.float32, buffer=nl.shared_hbm)
        ident = nl.load(nl.shared_identity_matrix(128))
        red = None
        for i in nl.affine_range(4):
            t = nl.load(x[i])
            red = nl.loop_reduce(t, op=nl.maximum, loop_indices=[i])
        sums = nl.ndarray((128, 1), nl.float32)
        scaled = nisa.tensor_scalar_reduce(data=red, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=sums)
        back = nl.matmul(ident, scaled, transpose_x=True)  # I.T @ scaled == scaled
        nl.store(out[:, 0:64], value=nl.copy(back))
        nl.store(out[:, 64:65], value=sums)
        return out

    x = np.random.default_rng(1).standard_normal((4, 128, 64)).astype(np.float32)
    out = axon.nki.run(k, x)
    m = x.max(axis=0).astype(np.float64) * 2
    assert rel_err(out[:, :64], m) <= 1e-6 and rel_err(out[:, 64], m.sum(axis=1)) <= 1e-5


def test_fp8_and_fp16_storage_round_on_write():
    import nki.isa as nisa
    import nki.language as nl

    def k(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        t8 = nl.ndarray(a.shape, nl.float8_e4m3, buffer=nl.sbuf)
        t16 = nl.ndarray(a.shape, nl.float16, buffer=nl.sbuf)
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.tensor_copy(dst=t8, src=t)
        nisa.tensor_copy(dst=t16, src=t8)
        nisa.tensor_copy(dst=t, src=t16)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.linspace(-3, 3, 128 * 8, dtype=np.float32).reshape(128, 8)
    out = axon.nki.run(k, a)
    assert np.array_equal(out, a.astype(ml_dtypes.float8_e4m3).astype(np.float32))
    assert not np.array_equal(out, a)


def test_tile_operators_and_reductions():
    import neuronxcc.nki.language as nl

    def k(a, b):
        out = nl.ndarray((128, 3), nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        z = (x + y) * 2.0 - y / 4.0
        res = nl.ndarray((128, 3), nl.float32)
        res[:, 0:1] = nl.sum(z, axis=1, keepdims=True)
        res[:, 1:2] = nl.min(nl.relu(z), axis=1, keepdims=True)
        res[:, 2:3] = nl.mean(nl.exp(nl.tanh(z)), axis=1, keepdims=True)
        nl.store(out, value=res)
        return out

    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((128, 32)).astype(np.float32), rng.standard_normal((128, 32)).astype(np.float32)
    out = axon.nki.run(k, a, b)
    z = (a.astype(np.float64) + b) * 2 - b / 4
    ref = np.stack([z.sum(1), np.maximum(z, 0).min(1), np.exp(np.tanh(z)).mean(1)], axis=1)
    assert rel_err(out, ref) <= 1e-5
