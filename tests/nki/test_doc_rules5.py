"""Fifth round of reference-page rules: the dtype an arithmetic operation on two tiles of different
dtypes writes without dtype= ("NKI Type Promotion", nki.api.shared, Neuron 2.21+; the pages of
nl.add and nki.isa.tensor_tensor refer to it)."""

import ml_dtypes
import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError

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


def _scaled(value):
    def k(a):
        import neuronxcc.nki.language as nl

        s = nl.add(nl.load(a), value)
        out = nl.ndarray(a.shape, s.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=s)
        return out

    return k


@pytest.mark.parametrize(
    ("da", "value", "expected"),
    [
        (np.int8, 2, np.int32),  # the page's examples
        (np.float16, 1.2, np.float32),
        (BF16, 2.0, np.float32),
        (BF16, 2, BF16),  # a float over an integer
        (np.float16, np.float16(2), np.float16),  # a typed scalar keeps its dtype
        (np.int8, np.int8(2), np.int8),
        (np.float32, 0.5, np.float32),
    ],
)
def test_a_weakly_typed_scalar_is_int32_or_float32(da, value, expected):
    # "Weakly Typed Scalar Type Inference" (nki.api.shared): bool -> uint8, integer -> int32,
    # floating -> float32, then promoted with the tile's dtype; the tile's dtype was kept
    got = axon.nki.run(_scaled(value), np.ones((4, 8), da))
    assert got.dtype == np.dtype(expected)


def test_int8_plus_2_does_not_wrap():
    a = np.array([[127, -128, 5, 100]], np.int8)
    np.testing.assert_array_equal(axon.nki.run(_scaled(2), a), a.astype(np.int32) + 2)  # was [-127, ...]


def test_negation_keeps_the_tile_dtype():
    def k(a):
        import neuronxcc.nki.language as nl

        s = -nl.load(a)
        out = nl.ndarray(a.shape, s.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=s)
        return out

    x = np.arange(8, dtype=np.float32).reshape(1, 8).astype(BF16)
    got = axon.nki.run(k, x)
    assert got.dtype == np.dtype(BF16)
    np.testing.assert_array_equal(got, -x)


def test_float8_e4m3fn_is_a_dtype_of_its_own():
    # page nki.language.float8_e4m3fn (Neuron 2.29+): "no inf, NaN represented by 0bS111'1111",
    # (1S,4E,3M) extended range, so 300 rounds to 288 where float8_e4m3 overflows; nl had no such name
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        f8 = nl.ndarray(a.shape, nl.float8_e4m3fn, buffer=nl.sbuf)
        nisa.tensor_copy(dst=f8, src=t)
        back = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=back, src=f8)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=back)
        return out

    x = np.array([[300.0, 448.0, 1.0, -17.0]], np.float32)
    np.testing.assert_array_equal(axon.nki.run(k, x), [[288.0, 448.0, 1.0, -16.0]])


@pytest.mark.parametrize(
    ("role", "dtype", "legal"),
    [
        ("bias", np.float32, True),
        ("bias", BF16, True),
        ("bias", np.float16, True),
        ("bias", np.int8, False),
        ("scale", np.float32, True),
        ("scale", BF16, False),
        ("scale", np.float16, False),
    ],
)
def test_activation_bias_and_scale_vector_dtypes(role, dtype, legal):
    # page nki.errors: err_activation_bias_invalid_type ("a vector of type float32, float16, or
    # bfloat16") and err_activation_scale_invalid_type ("a scalar or vector of type float32");
    # any dtype was taken
    def k(a, v):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.activation(op=nl.exp, data=nl.load(a), **{role: nl.load(v)}))
        return out

    x = np.zeros((4, 8), np.float32)
    v = np.ones((4, 1), dtype)
    if legal:
        expected = np.exp(x * 1.0 + 1.0) if role == "bias" else np.ones_like(x)
        np.testing.assert_allclose(axon.nki.run(k, x, v), expected, rtol=1e-6)
    else:
        with pytest.raises(NKIError, match=f"activation {role} dtype: .*must be"):
            axon.nki.run(k, x, v)


def test_python_comparisons_on_tiles():
    # page nki.errors, err_ambiguous_tensor_truth_value: `a_tile > 0` is an elementwise comparison
    # (its correct usage negates it with ~); a TypeError was raised
    def k(a, b):
        import neuronxcc.nki.language as nl

        x, y = nl.load(a), nl.load(b)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.where(x > 0.0, x, y) + (x <= y) + (0.5 < x) * 2.0 + (x >= y) * 4.0)
        return out

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32)
    expected = np.where(a > 0, a, b) + (a <= b) + (0.5 < a) * 2.0 + (a >= b) * 4.0
    np.testing.assert_allclose(axon.nki.run(k, a, b), expected, rtol=1e-6)
