"""Second round of reference-page rules (nki.isa / nki.language, both API generations): copies of one
dtype are bit-exact, memset of an integer is exact, nl.transpose's dtype, nki.isa DMA refuses PSUM,
shared_identity_matrix's default dtype, and documented nl calls that are not emulated."""

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError

# int32/uint32 values fp32 cannot hold (beyond 2^24, and the extremes)
BIG = np.array([[2**24 + 1, -(2**31), 2**31 - 1, 123456789]] * 4, np.int32)
UBIG = np.array([[2**32 - 1, 2**31 + 5, 2**24 + 3, 7]] * 4, np.uint32)


def _dma_roundtrip(a):
    import nki.isa as nisa
    import nki.language as nl

    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def _tensor_copy(engine):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        c = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t, engine=getattr(nisa, f"{engine}_engine"))
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=c)
        return out

    return k


def _legacy_load_store(a):
    import neuronxcc.nki.language as nl

    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def _legacy_load_transpose(a):
    import neuronxcc.nki.language as nl

    out = nl.ndarray(a.shape[::-1], a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load_transpose2d(a))
    return out


# ---- G1: a DMA moves bytes; tensor_copy of one dtype "performs a bit-accurate copy" ----------------


@pytest.mark.parametrize("x", [BIG, UBIG], ids=["int32", "uint32"])
def test_same_dtype_copies_are_bit_exact(x):
    np.testing.assert_array_equal(axon.nki.run(_dma_roundtrip, x), x)
    np.testing.assert_array_equal(axon.nki.run(_legacy_load_store, x), x)
    np.testing.assert_array_equal(axon.nki.run(_legacy_load_transpose, x), x.T)
    for engine in ("vector", "gpsimd"):
        np.testing.assert_array_equal(axon.nki.run(_tensor_copy(engine), x), x)
    # ScalarE has a tensor_copy from NeuronCore-v3 on (current page): bit-exact there too
    np.testing.assert_array_equal(axon.nki.run(_tensor_copy("scalar"), x, hw="trn2"), x)


def test_converting_copy_still_casts():
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        f = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=f, src=t)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=f)
        return out

    np.testing.assert_array_equal(axon.nki.run(k, BIG), BIG.astype(np.float32))


# ---- G2: memset "supports all valid NKI dtypes": an integer fills an integer tile exactly ----------


def _memset(value, dtype):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray((4, 4), dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=value)
        out = nl.ndarray((4, 4), dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return k


def test_memset_of_an_integer_is_exact():
    x = np.zeros((1, 1), np.float32)
    assert (axon.nki.run(_memset(2**31 - 1, "int32"), x) == 2**31 - 1).all()
    assert (axon.nki.run(_memset(2**24 + 1, "int32"), x) == 2**24 + 1).all()
    assert (axon.nki.run(_memset(2**32 - 1, "uint32"), x) == 2**32 - 1).all()
    assert (axon.nki.run(_memset(0.5, "float32"), x) == 0.5).all()
    with pytest.raises(NKIError, match="memset value 300 is outside the range of int8"):
        axon.nki.run(_memset(300, "int8"), x)


def test_legacy_full_of_an_integer_is_exact():
    def k(a):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((8, 4), nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.full((8, 4), 2**24 + 1, dtype=nl.int32))
        return out

    assert (axon.nki.run(k, np.zeros((1, 1), np.float32)) == 2**24 + 1).all()


# ---- G3: nl.transpose(x, dtype=): "data type to cast the output type to", default x's ------------


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_nl_transpose_dtype(dtype):
    import ml_dtypes

    x = np.random.default_rng(3).standard_normal((32, 48)).astype(np.float32)

    def k(a):
        import neuronxcc.nki.language as nl

        y = nl.transpose(nl.load(a), dtype=dtype)
        out = nl.ndarray(y.shape, y.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(y))
        return out

    got = axon.nki.run(k, x)
    want = x.T if dtype is None else x.T.astype(ml_dtypes.bfloat16)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# ---- G4: nki.isa.dma_copy / dma_transpose move data "between memory locations (SBUF or HBM)" -----


def _dma_psum(which):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        p = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
        if which == "copy_dst":
            nisa.dma_copy(dst=p, src=a)
        else:
            nisa.tensor_copy(dst=p, src=t)
            pt = nl.ndarray(a.shape[::-1], nl.float32, buffer=nl.sbuf)
            nisa.dma_transpose(dst=pt, src=p)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return k


def test_isa_dma_refuses_psum():
    x = np.ones((8, 8), np.float32)
    with pytest.raises(NKIError, match="dma_copy dst in PSUM"):
        axon.nki.run(_dma_psum("copy_dst"), x)
    with pytest.raises(NKIError, match="dma_transpose src in PSUM"):
        axon.nki.run(_dma_psum("transpose_src"), x)

    def legacy(a):  # nl.store of a PSUM tile stays legal (the compiler goes through SBUF)
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        p = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
        p[...] = nl.copy(nl.load(a))
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=p)
        out2 = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out2, src=p)
        return out

    with pytest.raises(NKIError, match="dma_copy src in PSUM"):
        axon.nki.run(legacy, x)


def test_dma_transpose_of_3d_names_the_rank():
    def k(a):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((8, 8, 4), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load_transpose2d(a))
        return out

    with pytest.raises(NKIError, match=r"dma_transpose of a 3-D tile \[4, 8, 8\]: 2-D tiles only"):
        axon.nki.run(k, np.ones((4, 8, 8), np.float32))


# ---- G5: shared_identity_matrix's dtype defaults to uint8 ---------------------------------------


def test_shared_identity_matrix_default_dtype():
    def k(a):
        import neuronxcc.nki.language as nl

        ident = nl.shared_identity_matrix(16)
        out = nl.ndarray((16, 16), ident.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(ident))
        return out

    got = axon.nki.run(k, np.zeros((1, 1), np.float32))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, np.eye(16))


# ---- G6: documented nl calls the emulator lacks are an NKIError naming them -----------------------


@pytest.mark.parametrize("name", ["sign", "erf", "all", "gather_flattened"])
def test_not_emulated_language_calls_are_named(name):
    def k(a):
        import nki.language as nl

        getattr(nl, name)
        return a

    with pytest.raises(NKIError, match=f"nki.language.{name} is not emulated"):
        axon.nki.run(k, np.ones((2, 2), np.float32))
