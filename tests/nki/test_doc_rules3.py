"""Third round of reference-page rules (nki.isa / nki.language, both API generations): tensor_copy on
the Scalar Engine of NeuronCore-v2, nl.mean of integers, nl.var's shape, nc_transpose's legacy dtype
and TensorE memories, tensor_scalar_reduce's accumulator options."""

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError

# int32 values fp32 cannot hold exactly, and what an fp32 cast makes of them
WIDE = np.array([[2**24 + 1, 123456789, -(2**24) - 3, 7]] * 4, np.int32)
WIDE_VIA_FP32 = WIDE.astype(np.float32).astype(np.int32)


# ---- H1: tensor_copy on ScalarE of NeuronCore-v2 ---------------------------------------------------


def _copy_current(engine):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        c = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t, **({} if engine is None else {"engine": engine(nisa)}))
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=c)
        return out

    return k


def _copy_legacy(engine):
    def k(a):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_copy(nl.load(a), engine=engine(nisa)))
        return out

    return k


@pytest.mark.parametrize(
    "engine", [lambda n: n.scalar_engine, lambda n: n.engine.scalar], ids=["scalar_engine", "engine.scalar"]
)
def test_current_tensor_copy_has_no_scalar_engine_on_v2(engine):
    # page nki.isa.tensor_copy (2.28 on): NeuronCore v2 copies on Vector or GpSimd; use activation(op=nl.copy)
    with pytest.raises(NKIError, match=r"tensor_copy engine: NeuronCore-v2 \(trn1\).*activation\(op=nl.copy\)"):
        axon.nki.run(_copy_current(engine), WIDE, hw="trn1")
    np.testing.assert_array_equal(axon.nki.run(_copy_current(engine), WIDE, hw="trn2"), WIDE)


def test_current_tensor_copy_engine_left_to_the_compiler_stays_legal():
    for hw in ("trn1", "trn2"):
        np.testing.assert_array_equal(axon.nki.run(_copy_current(None), WIDE, hw=hw), WIDE)


def test_legacy_tensor_copy_on_v2_scalar_engine_goes_through_fp32():
    # page neuronxcc.nki.isa.tensor_copy (2.26): v2's ScalarE casts to fp32 first, then to the dtype
    np.testing.assert_array_equal(axon.nki.run(_copy_legacy(lambda n: n.scalar_engine), WIDE, hw="trn1"), WIDE_VIA_FP32)
    np.testing.assert_array_equal(axon.nki.run(_copy_legacy(lambda n: n.scalar_engine), WIDE, hw="trn2"), WIDE)
    np.testing.assert_array_equal(axon.nki.run(_copy_legacy(lambda n: n.vector_engine), WIDE, hw="trn1"), WIDE)


# ---- H2: nl.mean of an integer tile is float32 -------------------------------------------------------


def _legacy_reduce(fn, out_shape, **kw):
    def k(a):
        import neuronxcc.nki.language as nl

        r = getattr(nl, fn)(nl.load(a), axis=1, **kw)
        out = nl.ndarray(out_shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=r)
        return out

    return k


def test_mean_of_integers_is_float32():
    # page nki.language.mean: integer inputs give float32 intermediates and result
    x = np.array([[1, 2], [3, 4], [-1, 0], [7, 8]], np.int32)
    np.testing.assert_array_equal(axon.nki.run(_legacy_reduce("mean", (4, 1)), x)[:, 0], [1.5, 3.5, -0.5, 7.5])
    # an explicit dtype still wins
    np.testing.assert_array_equal(
        axon.nki.run(_legacy_reduce("mean", (4, 1), dtype=np.int32), np.array([[2, 4]] * 4, np.int32))[:, 0], [3] * 4
    )


# ---- H3: nl.var drops the reduced axes -----------------------------------------------------------


def test_var_result_drops_the_reduced_axes():
    # page nki.language.var: the result is the input's shape without the reduced axes
    def k(a):
        import neuronxcc.nki.language as nl

        v = nl.var(nl.load(a), axis=1)
        assert tuple(v.shape) == (a.shape[0],), v.shape
        out = nl.ndarray((a.shape[0], 1), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=v)
        return out

    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(axon.nki.run(k, x)[:, 0], x.var(axis=1), rtol=1e-5)


# ---- H4/H5: nc_transpose: the legacy dtype, and TensorE's SBUF -> PSUM -------------------------------


def test_legacy_nc_transpose_casts_to_dtype():
    # page neuronxcc nki.isa.nc_transpose (2.26) takes dtype= for the result; it was ignored (fp32 kept)
    def k(a):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        p = nisa.nc_transpose(nl.load(a), dtype=nl.bfloat16)
        assert p.dtype == nl.bfloat16
        out = nl.ndarray(a.shape[::-1], nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(p, dtype=nl.float32))
        return out

    x = np.full((4, 8), 1.005859375, np.float32)  # between two bfloat16 values, nearer 1.0078125
    np.testing.assert_array_equal(axon.nki.run(k, x), np.full((8, 4), 1.0078125, np.float32))


def _transpose_into(buffer, n, engine, dst_dtype=None):
    """A current-API kernel: `a` transposed by nc_transpose into a `buffer` tile (of `dst_dtype`, else
    a's dtype) on `engine` (None: the default), copied out in a's dtype."""

    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        p = nl.ndarray(a.shape[::-1], getattr(nl, dst_dtype) if dst_dtype else a.dtype, buffer=getattr(nl, buffer))
        nisa.nc_transpose(dst=p, data=t, **({} if engine is None else {"engine": getattr(nisa, engine)}))
        s = nl.ndarray(a.shape[::-1], a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=p)
        out = nl.ndarray(a.shape[::-1], a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    return k


def test_tensor_engine_transpose_writes_psum():
    # page nki.isa.nc_transpose: TensorE reads SBUF and writes PSUM; VectorE (<= 32x32) may write SBUF
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    with pytest.raises(NKIError, match="TensorE transpose memory"):
        axon.nki.run(_transpose_into("sbuf", 64, "tensor_engine"), x)
    with pytest.raises(NKIError, match="TensorE transpose memory"):
        axon.nki.run(_transpose_into("sbuf", 64, None), x)  # too big for VectorE
    np.testing.assert_array_equal(axon.nki.run(_transpose_into("psum", 64, None), x), x.T)
    small = x[:16, :16].copy()
    np.testing.assert_array_equal(axon.nki.run(_transpose_into("sbuf", 16, None), small), small.T)  # VectorE
    np.testing.assert_array_equal(axon.nki.run(_transpose_into("sbuf", 16, "vector_engine"), small), small.T)


def test_nl_transpose_of_a_psum_tile_goes_through_sbuf():
    # nl.transpose runs on TensorE, which reads SBUF: a PSUM operand is copied out first (guard for H5)
    def k(x, y):
        import neuronxcc.nki.language as nl

        t = nl.transpose(nl.matmul(nl.load(x), nl.load(y), transpose_x=True))
        out = nl.ndarray(t.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(t))
        return out

    x = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    y = np.random.default_rng(1).standard_normal((32, 24)).astype(np.float32)
    np.testing.assert_allclose(axon.nki.run(k, x, y), (x.T @ y).T, rtol=1e-5, atol=1e-5)


# ---- H6: tensor_scalar_reduce's accumulator parameters are not silently dropped -------------------


@pytest.mark.parametrize(
    "extra",
    [{"reduce_cmd": "reduce"}, {"reduce_cmd": "load_reduce"}, {"reduce_init": 5.0}, {"reduce_res_negate": True}],
    ids=["reduce", "load_reduce", "reduce_init", "negate"],
)
def test_tensor_scalar_reduce_accumulator_options_are_refused(extra):
    # page nki.isa.tensor_scalar_reduce (2.30+): these change what reduce_res receives
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        d = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        r = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.sbuf)
        kw = dict(extra)
        if "reduce_cmd" in kw:
            kw["reduce_cmd"] = getattr(nisa.reduce_cmd, kw["reduce_cmd"], kw["reduce_cmd"])
        nisa.tensor_scalar_reduce(dst=d, data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=r, **kw)
        out = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out

    x = np.ones((4, 8), np.float32)
    with pytest.raises(NKIError, match="tensor_scalar_reduce accumulator"):
        axon.nki.run(k, x)
    ok = {"reduce_cmd": "reset_reduce"}
    extra.clear()
    extra.update(ok)
    np.testing.assert_array_equal(axon.nki.run(k, x)[:, 0], [16.0] * 4)


# ---- H7: a value-returning tensor_tensor writes the higher-precision input dtype ------------------


def test_legacy_tensor_tensor_result_has_the_higher_precision_dtype():
    # page nki.isa.tensor_tensor (neuronxcc API): without dtype=, the result has data1's or data2's
    # dtype, whichever is of higher precision; data1's was used, so bf16 * fp32 rounded to bf16
    def k(a, b):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        x, y = nl.load(a, dtype=nl.bfloat16), nl.load(b)
        r1 = nisa.tensor_tensor(x, y, np.multiply)
        r2 = nl.add(nl.load(a, dtype=nl.int32), y)
        assert r1.dtype == nl.float32 and r2.dtype == nl.float32, (r1.dtype, r2.dtype)
        out = nl.ndarray((2,) + a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=r1)
        nl.store(out[1], value=r2)
        return out

    a = np.full((4, 4), 3.0, np.float32)
    b = np.full((4, 4), 1.0 + 2**-10, np.float32)  # 3 * b is not a bfloat16
    got = axon.nki.run(k, a, b)
    np.testing.assert_array_equal(got[0], a * b)
    np.testing.assert_array_equal(got[1], a + b)


# ---- H8: dma_copy's dst_rmw_op=add accumulates into dst -----------------------------------------


def test_dma_copy_read_modify_write_adds():
    # page nki.isa.dma_copy (neuronxcc 2.26; nki 2.28): dst_rmw_op=add gives dst = dst + src; it was
    # dropped, so the DMA overwrote dst
    def legacy(a, b):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        nisa.dma_copy(dst=out, src=nl.load(b), dst_rmw_op=np.add)
        return out

    def current(a, b):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        u = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=u, src=b)
        nisa.dma_copy(dst=t, src=u, dst_rmw_op=nl.add)
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.full((4, 8), 0.5, np.float32)
    np.testing.assert_array_equal(axon.nki.run(legacy, a, b), a + b)
    np.testing.assert_array_equal(axon.nki.run(current, a, b), a + b)

    def other_op(a, b):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=nl.load(b), dst_rmw_op=np.multiply)
        return out

    with pytest.raises(NKIError, match="dma_copy dst_rmw_op"):
        axon.nki.run(other_op, a, b)
