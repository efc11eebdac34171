"""Third round of reference-page rules (nki.isa / nki.language, both API generations): tensor_copy on
the Scalar Engine of NeuronCore-v2, ..."""

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
