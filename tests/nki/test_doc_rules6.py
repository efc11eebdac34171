"""Sixth round of reference-page rules: Python's bitwise operators on tiles (nl.bitwise_and "implements
the C/Python operator &", nl.invert "~"), slices past a tile's end, the hardware file's partition
count in the partition-limit error, tfloat32 storage."""

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
