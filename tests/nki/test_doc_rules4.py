"""Fourth round of reference-page rules: the current nki.isa.nc_transpose writes dst in data's dtype
("The output dst tile must have the same data type as that of data", page nki.isa.nc_transpose,
Data types, Neuron 2.28+), on either engine; the legacy neuronxcc.nki.isa.nc_transpose (2.26) and
nl.transpose keep their `dtype=` cast."""

import ml_dtypes
import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError
from tests.nki.test_doc_rules3 import _transpose_into as transpose_into

BF16 = ml_dtypes.bfloat16


def _bf16(shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(BF16)


def _transpose_into(dst_dtype, buffer="psum", engine=None):
    return transpose_into(buffer, None, engine, dst_dtype)


@pytest.mark.parametrize("engine", [None, "tensor_engine"], ids=["default", "tensor_engine"])
def test_current_tensor_engine_transpose_refuses_a_dst_of_another_dtype(engine):
    x = _bf16((128, 64))
    with pytest.raises(NKIError, match="nc_transpose dst dtype: .*data is bfloat16, dst is float32"):
        axon.nki.run(_transpose_into("float32", engine=engine), x)
    got = axon.nki.run(_transpose_into("bfloat16", engine=engine), x)
    np.testing.assert_array_equal(got, x.astype(np.float32).T)


def test_current_vector_engine_transpose_refuses_a_dst_of_another_dtype():
    # the page's Data types paragraph names no engine: VectorE's dst keeps data's dtype too
    x = _bf16((16, 32))
    for buffer in ("sbuf", "psum"):
        with pytest.raises(NKIError, match="nc_transpose dst dtype"):
            axon.nki.run(_transpose_into("float32", buffer, "vector_engine"), x)
        got = axon.nki.run(_transpose_into("bfloat16", buffer, "vector_engine"), x)
        np.testing.assert_array_equal(got, x.astype(np.float32).T)


def test_current_float32_transpose_into_float32_psum_stays_legal():
    x = np.random.default_rng(1).standard_normal((96, 128)).astype(np.float32)
    np.testing.assert_array_equal(axon.nki.run(_transpose_into("float32"), x), x.T)


@pytest.mark.parametrize("dtype", [None, "float32", "bfloat16"])
def test_legacy_nc_transpose_keeps_its_dtype_argument(dtype):
    # page neuronxcc.nki.isa.nc_transpose (2.26): nc_transpose(data, *, mask=None, dtype=None, engine=...),
    # the result's dtype given by dtype=; a bf16 tile may still be transposed into a float32 tile
    def k(a):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        p = nisa.nc_transpose(nl.load(a), **({} if dtype is None else {"dtype": getattr(nl, dtype)}))
        assert dtype is None or p.dtype == getattr(nl, dtype)
        out = nl.ndarray(a.shape[::-1], nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(p, dtype=nl.float32))
        return out

    x = _bf16((128, 64), seed=2)
    np.testing.assert_array_equal(axon.nki.run(k, x), x.astype(np.float32).T)


def test_nl_transpose_dtype_still_casts_under_the_current_api():
    # page nki.language.transpose: "dtype - (optional) data type to cast the output type to"
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        p = nl.transpose(t, dtype=nl.float32)
        s = nl.ndarray(a.shape[::-1], nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=p)
        out = nl.ndarray(a.shape[::-1], nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        return out

    x = _bf16((64, 32), seed=3)
    np.testing.assert_array_equal(axon.nki.run(k, x), x.astype(np.float32).T)
