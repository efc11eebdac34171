"""Fifth round of reference-page rules: the dtype an arithmetic operation on two tiles of different
dtypes writes without dtype= ("NKI Type Promotion", nki.api.shared, Neuron 2.21+; the pages of
nl.add and nki.isa.tensor_tensor refer to it)."""

import ml_dtypes
import numpy as np
import pytest

import axon.nki

BF16, FP8E4, FP8E5 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2


def _add(a, b):
    import neuronxcc.nki.language as nl

    s = nl.add(nl.load(a), nl.load(b))
    out = nl.ndarray(a.shape, s.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=s)
    return out


@pytest.mark.parametrize(
    ("da", "db", "expected"),
    [
        (np.float16, BF16, np.float32),  # "new widened type"
        (FP8E4, FP8E5, BF16),
        (FP8E4, BF16, BF16),
        (np.int32, np.float16, np.float16),  # float over integer, whatever the widths
        (np.int8, np.uint8, np.int16),
        (np.int8, np.uint16, np.int32),
        (np.uint16, np.int32, np.int32),
        (np.int32, np.uint32, np.float32),
        (np.float32, BF16, np.float32),
    ],
)
def test_mixed_dtype_arithmetic_writes_the_promoted_dtype(da, db, expected):
    got = axon.nki.run(_add, np.ones((4, 8), da), np.ones((4, 8), db))
    assert got.dtype == np.dtype(expected)


def test_int32_plus_float16_keeps_the_fraction():
    # the int32 tile's dtype was kept (the wider one), so 1 + 0.5 was written as 1
    a = np.arange(32, dtype=np.int32).reshape(4, 8)
    b = np.full((4, 8), 0.5, np.float16)
    np.testing.assert_array_equal(axon.nki.run(_add, a, b), (a + 0.5).astype(np.float16))


def test_float16_plus_bfloat16_is_not_rounded_to_float16():
    a = np.full((4, 8), 1024.0, np.float16)
    b = np.full((4, 8), 0.25, BF16)  # 1024.25 is a float32, not a float16 (ulp 1 at 1024)
    np.testing.assert_array_equal(axon.nki.run(_add, a, b), np.full((4, 8), 1024.25, np.float32))
