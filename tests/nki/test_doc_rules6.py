"""Sixth round of reference-page rules: Python's bitwise operators on tiles (nl.bitwise_and "implements
the C/Python operator &", nl.invert "~"), slices past a tile's end, the hardware file's partition
count in the partition-limit error, tfloat32 storage."""

import re

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError

X = np.array([[1.0, -2.0, 3.0, 0.0]], np.float32)
Y = np.array([[0.0, 0.0, 5.0, 0.0]], np.float32)


def _stored(fn):
    """A kernel storing `fn(x, y, nl)` of its two loaded inputs."""

    def k(a, b):
        import neuronxcc.nki.language as nl

        t = fn(nl.load(a), nl.load(b), nl)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    return k


def _gt(x, y, nl):
    return nl.greater(x, y, dtype=nl.uint8)


@pytest.mark.parametrize(
    ("expr", "expected", "dtype"),
    [
        (lambda x, y, nl: _gt(x, y, nl) & _gt(x, 0.0, nl), [1, 0, 0, 0], np.uint8),
        (lambda x, y, nl: _gt(x, y, nl) | _gt(y, x, nl), [1, 1, 1, 0], np.uint8),
        (lambda x, y, nl: ~_gt(x, y, nl), [254, 255, 255, 255], np.uint8),  # XOR with all-ones (nl.invert)
        # a weakly typed integer is int32 ("Weakly Typed Scalar Type Inference")
        (lambda x, y, nl: _gt(x, y, nl) ^ 1, [0, 1, 1, 1], np.int32),
        (lambda x, y, nl: 1 & _gt(x, y, nl), [1, 0, 0, 0], np.int32),
        (lambda x, y, nl: _gt(x, y, nl) << 3, [8, 0, 0, 0], np.int32),
    ],
)
def test_bitwise_operators_on_comparison_tiles(expr, expected, dtype):
    got = axon.nki.run(_stored(expr), X, Y)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.array([expected], dtype))


def test_bitwise_operator_on_a_float_comparison_says_how_to_compare():
    # x > y writes 1/0 in float32: & is an integer operator, refused with the way out, not a TypeError
    with pytest.raises(NKIError, match=r"takes integer tiles.*dtype=nl.uint8"):
        axon.nki.run(_stored(lambda x, y, nl: ~(x > y)), X, Y)


def _exp_of(key):
    def k(a):
        import neuronxcc.nki.language as nl

        t = nl.exp(nl.load(a)[key])
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    return k


@pytest.mark.parametrize(
    "key", [(slice(None), slice(0, 600)), (slice(None), slice(-600, None)), (slice(0, 129), slice(None))]
)
def test_a_slice_past_the_tiles_end_is_refused(key):
    # NumPy clips t[:, 0:600] of a [128, 512] tile to 512 columns: the kernel computed on a shorter tile
    with pytest.raises(NKIError, match=r"slice -?\d*:\d* of axis [01] of <sbuf tensor t\d+ \[128, 512\] float32>.*"):
        axon.nki.run(_exp_of(key), np.zeros((128, 512), np.float32))


def test_a_slice_within_the_tile_still_runs():
    got = axon.nki.run(_exp_of((slice(None), slice(-512, 512))), np.zeros((128, 512), np.float32))
    np.testing.assert_array_equal(got, np.ones((128, 512), np.float32))


def test_the_partition_limit_error_names_the_hardware_files_partition_count():
    import dataclasses

    from axon.target.hardware import DEFAULT_HW, load_hw

    hw = load_hw(DEFAULT_HW)
    narrow = dataclasses.replace(hw, memory=dataclasses.replace(hw.memory, partitions=64))
    with pytest.raises(NKIError, match=r"partition axis > 64: tile shape \[128, 512\].*at most 64 partitions"):
        axon.nki.run(_exp_of(slice(None)), np.zeros((128, 512), np.float32), hw=narrow)


def _tf32(x, y, nl):
    return nl.copy(x, dtype=nl.tfloat32)


def test_a_tfloat32_tile_holds_a_10_bit_mantissa():
    # tfloat32 is (1S,8E,10M) ("Supported Data Types"): written as float32 it kept all 23 bits
    x = np.array([[1 + 2**-12, 1 + 2**-10 + 2**-11, 1 + 2**-11, 1000.3]], np.float32)
    got = axon.nki.run(_stored(_tf32), x, x)
    assert got.dtype == np.float32  # stored in fp32's four bytes
    np.testing.assert_array_equal(got, np.array([[1.0, 1 + 2**-9, 1.0, 1000.5]], np.float32))


def test_a_tfloat32_tile_is_float32_for_promotion_and_full():
    def k(a):
        import neuronxcc.nki.language as nl

        t = nl.full((1, 2), 1 + 2**-12, dtype=nl.tfloat32)
        s = nl.add(t, nl.load(a))  # float32 + tfloat32: float32, unrounded
        out = nl.ndarray(s.shape, s.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=s)
        return out

    got = axon.nki.run(k, np.full((1, 2), 2**-20, np.float32))
    np.testing.assert_array_equal(got, np.full((1, 2), 1 + 2**-20, np.float32))


def test_a_number_to_the_power_of_a_tile():
    # nl.power takes "a tile or a scalar value" for x: 2 ** t was a TypeError
    got = axon.nki.run(_stored(lambda x, y, nl: 2.0**x), X, Y)
    np.testing.assert_array_equal(got, np.array([[2.0, 0.25, 8.0, 1.0]], np.float32))


def test_where_of_two_tiles_writes_their_promoted_dtype():
    # nki.language.where: the dtype defaults to "whichever input type has the highest precision";
    # the float32 y was rounded to x's bfloat16 (1.001 -> 1.0)
    import ml_dtypes

    def k(c, a, b):
        import neuronxcc.nki.language as nl

        t = nl.where(nl.load(c), nl.load(a), nl.load(b))
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    cond = np.array([[1.0, 0.0]], np.float32)
    got = axon.nki.run(k, cond, np.ones((1, 2), ml_dtypes.bfloat16), np.full((1, 2), 1.001, np.float32))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array([[1.0, 1.001]], np.float32))


def _into_zeros(op, shape=(2, 4)):
    """`acc = zeros(shape); acc <op> v` for an input v (e.g. [2, 1]: one value per partition)."""

    def k(v):
        import neuronxcc.nki.language as nl

        acc = nl.zeros(shape, nl.float32)
        t = nl.load(v)
        if op == "=":
            acc[...] = t
        elif op == "+=":
            acc += t
        else:
            acc -= t
        out = nl.ndarray(shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=acc)
        return out

    return k


@pytest.mark.parametrize(("op", "sign"), [("=", 1.0), ("+=", 1.0), ("-=", -1.0)])
def test_a_per_partition_value_broadcasts_along_the_free_axis(op, sign):
    # acc += v is nl.add(acc, v), which broadcasts a [P, 1] v; only acc's first column changed
    v = np.array([[1.0], [2.0]], np.float32)
    got = axon.nki.run(_into_zeros(op), v)
    np.testing.assert_array_equal(got, sign * np.broadcast_to(v, (2, 4)))


def test_equality_with_a_number_is_elementwise():
    # t == 1.0 was Python's identity comparison: False, so x * (x == 1.0) was silently all zeros
    def k(a):
        import neuronxcc.nki.language as nl

        x = nl.load(a)
        t = nl.add(x * (x == 1.0), x != 2)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    got = axon.nki.run(k, np.array([[1.0, 2.0, 3.0]], np.float32))
    np.testing.assert_array_equal(got, np.array([[2.0, 0.0, 1.0]], np.float32))


def test_equality_of_two_tiles_is_elementwise():
    def k(a, b):
        import neuronxcc.nki.language as nl

        x, y = nl.load(a), nl.load(b)
        t = nl.add(x * (x == y), (x != y) * 10.0)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    got = axon.nki.run(k, np.array([[1.0, 2.0, 3.0]], np.float32), np.array([[1.0, 5.0, 3.0]], np.float32))
    np.testing.assert_array_equal(got, np.array([[1.0, 10.0, 3.0]], np.float32))


def test_a_tile_in_an_if_is_refused():
    # nki.errors err_ambiguous_tensor_truth_value: a view was always true, the branch silently taken
    def k(a):
        import neuronxcc.nki.language as nl

        x = nl.load(a)
        if x > 0.0:
            x = nl.exp(x)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=x)
        return out

    with pytest.raises(NKIError, match=r"ambiguous tile truth value: <sbuf tensor t\d+ \[1, 2\] float32>"):
        axon.nki.run(k, np.array([[-1.0, 2.0]], np.float32))


def test_an_hbm_tensor_argument_is_still_true():
    def k(a, bias=None):
        import neuronxcc.nki.language as nl

        x = nl.load(a)
        if bias:  # an optional argument, not a computed tile
            x = nl.add(x, nl.load(bias))
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=x)
        return out

    ones = np.ones((1, 2), np.float32)
    np.testing.assert_array_equal(axon.nki.run(k, ones, ones), 2 * ones)


def test_where_with_one_condition_per_partition():
    # nl.where is "similar to numpy.where": a [P, 1] condition selects whole rows (refused before as a
    # tensor_tensor shape mismatch)
    def k(c, a):
        import neuronxcc.nki.language as nl

        t = nl.where(nl.load(c), nl.load(a), 0.0)
        out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    x = np.arange(8, dtype=np.float32).reshape(2, 4) + 1
    got = axon.nki.run(k, np.array([[1.0], [0.0]], np.float32), x)
    np.testing.assert_array_equal(got, np.where(np.array([[True], [False]]), x, 0.0))


def test_a_typed_numpy_scalar_on_the_left():
    # "explicitly set the datatype of the scalar, like np.int8(2)" (NKI Type Promotion): np.int8(2) * t
    # iterated the tile as an array and failed ("NKI tensors cannot be iterated")
    def k(a):
        import neuronxcc.nki.language as nl

        x = nl.load(a)
        t = np.int8(2) * x
        out = nl.ndarray(a.shape, t.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    got = axon.nki.run(k, np.array([[1, -3, 5]], np.int8))
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.array([[2, -6, 10]], np.int8))


def test_tile_size_pmax_is_the_hardware_files_partition_count():
    # nl.tile_size.pmax was a fixed 128: on a 64-partition NeuronCore a kernel tiling by it was refused
    import dataclasses

    from axon.target.hardware import DEFAULT_HW, load_hw

    hw = load_hw(DEFAULT_HW)
    narrow = dataclasses.replace(hw, memory=dataclasses.replace(hw.memory, partitions=64))

    def k(a):
        import neuronxcc.nki.language as nl

        pmax = nl.tile_size.pmax
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // pmax):
            nl.store(out[i * pmax : (i + 1) * pmax, :], value=nl.exp(nl.load(a[i * pmax : (i + 1) * pmax, :])))
        return out

    x = np.zeros((128, 4), np.float32)
    np.testing.assert_array_equal(axon.nki.run(k, x, hw=narrow), np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(axon.nki.run(k, x), np.ones((128, 4), np.float32))


def test_an_instruction_assigned_to_a_tfloat32_tile_is_rounded():
    # t[...] = nl.exp(x) redirects the activation to t: its fp32 result was copied in unrounded
    def k(a):
        import neuronxcc.nki.language as nl

        t = nl.ndarray(a.shape, nl.tfloat32)
        t[...] = nl.multiply(nl.load(a), 1.0)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    got = axon.nki.run(k, np.array([[1 + 2**-12, 1000.3]], np.float32))
    np.testing.assert_array_equal(got, np.array([[1.0, 1000.5]], np.float32))


def test_where_into_tfloat32_is_rounded():
    def k(c, a):
        import neuronxcc.nki.language as nl

        t = nl.where(nl.load(c), nl.load(a), 0.0, dtype=nl.tfloat32)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    got = axon.nki.run(k, np.ones((1, 2), np.float32), np.array([[1 + 2**-12, 1000.3]], np.float32))
    np.testing.assert_array_equal(got, np.array([[1.0, 1000.5]], np.float32))


@pytest.mark.parametrize(("op", "shape"), [("=", (2, 4)), ("+=", (2, 4)), ("=", (1, 8)), ("-=", (4, 6))])
def test_a_smaller_tile_is_not_written_into_a_corner(op, shape):
    # s[...] = t with t smaller than s wrote t into s's corner and left the rest: NumPy refuses it
    k = _into_zeros(op, (4, 8))
    want = re.escape(f"a {list(shape)} tile")
    with pytest.raises(NKIError, match=rf"shape mismatch: <sbuf tensor t\d+ \[4, 8\] float32> .* {want}"):
        axon.nki.run(k, np.ones(shape, np.float32))
