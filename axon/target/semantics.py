"""Instruction semantics over a math namespace `m`: ALU operators, activation functions, and what
each NKI instruction computes.

NumPy (`NUMPY_FP32`, the emulator's namespace) and Z3 (passed by `axon.verify`) read the same
definitions. ALU operators and activation functions reuse `axon.ir.ops` wherever the meaning is
identical. The ISA table (`axon.target.isa`) points each instruction at one of these functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from axon.ir.ops import BINARY, UNARY, NumpyMath

# ---- the math namespace the emulator computes with --------------------------------------------


class Fp32Math(NumpyMath):
    """`m` for the emulator: NumPy primitives that keep float32 arrays in float32.

    Beyond `axon.ir.ops.NumpyMath` it supplies what instruction semantics need: `where` (for
    comparisons), `erf` (exact GELU), `matmul`, `transpose` and free-axis reductions. A Z3
    namespace supplies the same names (with `If` for `where`).
    """

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self.np.where(cond, a, b).astype(self.np.float32, copy=False)

    def erf(self, x: Any) -> Any:
        # math.erf per element (correctly rounded in float64): nl.gelu is documented as the exact
        # GELU, and the 1.5e-7 absolute error of a polynomial erf showed up as 1e-5 relative error
        # in gelu's small outputs. NumPy has no erf and SciPy is not a dependency.
        np = self.np
        return np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, dtype=np.float64)).astype(np.float32)

    def concat(self, xs: list[Any], axis: int) -> Any:
        return self.np.concatenate(xs, axis=axis)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.np.matmul(a, b)

    def transpose(self, x: Any) -> Any:
        return self.np.ascontiguousarray(self.np.swapaxes(x, 0, 1))

    def reduce(self, kind: str, x: Any, axis: tuple[int, ...], keepdims: bool) -> Any:
        fn = {"add": self.np.sum, "max": self.np.max, "min": self.np.min, "multiply": self.np.prod}[kind]
        return (
            fn(x, axis=axis, keepdims=keepdims, dtype=self.np.float32)
            if kind in ("add", "multiply")
            else fn(x, axis=axis, keepdims=keepdims)
        )


NUMPY_FP32 = Fp32Math()


# ---- ALU operators (nl.add, nl.subtract, ...) --------------------------------------------------


def _cmp(test: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda m, a, b: m.where(test(a, b), 1.0, 0.0)


ALU: dict[str, Callable[..., Any]] = {
    "add": BINARY["add"],
    "subtract": BINARY["sub"],
    "multiply": BINARY["mul"],
    "divide": BINARY["div"],
    "maximum": BINARY["maximum"],
    "minimum": BINARY["minimum"],
    "power": lambda m, a, b: m.power(a, b),
    "greater": _cmp(lambda a, b: a > b),
    "greater_equal": _cmp(lambda a, b: a >= b),
    "less": _cmp(lambda a, b: a < b),
    "less_equal": _cmp(lambda a, b: a <= b),
    "equal": _cmp(lambda a, b: a == b),
    "not_equal": _cmp(lambda a, b: a != b),
    "bypass": lambda m, a, b: a,
    # nl.logical_and & co.: "inputs should be boolean-like (0 or 1 values)"; nonzero is true
    "logical_and": _cmp(lambda a, b: (a != 0) & (b != 0)),
    "logical_or": _cmp(lambda a, b: (a != 0) | (b != 0)),
    "logical_xor": _cmp(lambda a, b: (a != 0) ^ (b != 0)),
    # nl.mod is Python's x % y (the sign of the divisor), nl.fmod C's (the sign of the dividend)
    "mod": lambda m, a, b: m.np.mod(a, b),
    "fmod": lambda m, a, b: m.np.fmod(a, b),
}


def _bits(f: Callable[[Any, Any, Any], Any]) -> Callable[..., Any]:
    """A bitvec operator (nl.bitwise_and, ...): VectorE treats the integer inputs as bit patterns,
    with no cast to fp32 (`_ival` in the emulator hands it integers)."""
    return lambda m, a, b: f(m.np, m.np.asarray(a).astype(m.np.int64), m.np.asarray(b).astype(m.np.int64))


BITVEC: dict[str, Callable[..., Any]] = {
    "bitwise_and": _bits(lambda np, a, b: np.bitwise_and(a, b)),
    "bitwise_or": _bits(lambda np, a, b: np.bitwise_or(a, b)),
    "bitwise_xor": _bits(lambda np, a, b: np.bitwise_xor(a, b)),
    "left_shift": _bits(lambda np, a, b: np.left_shift(a, b)),
    "right_shift": _bits(lambda np, a, b: np.right_shift(a, b)),
    "invert": _bits(lambda np, a, b: np.invert(a)),  # unary: the operand is ignored
}
ALU.update(BITVEC)

# Reductions an instruction's reduce_op / tensor_reduce op may name, with their identity.
REDUCE_KINDS = {"add": 0.0, "max": float("-inf"), "min": float("inf"), "multiply": 1.0}
# nl.max / nl.min as ALU op names mean maximum / minimum; as reduce ops they are max / min.
REDUCE_ALIASES = {"add": "add", "maximum": "max", "minimum": "min", "max": "max", "min": "min", "multiply": "multiply"}


# ---- activation functions (nl.exp, nl.gelu, ...) -----------------------------------------------


def _gelu_erf(m: Any, x: Any) -> Any:
    return 0.5 * x * (1 + m.erf(x * 0.7071067811865476))


ACTIVATION: dict[str, Callable[..., Any]] = {
    "exp": UNARY["exp"],
    "log": UNARY["log"],
    "sqrt": UNARY["sqrt"],
    "rsqrt": UNARY["rsqrt"],
    "square": UNARY["square"],
    "reciprocal": UNARY["reciprocal"],
    "tanh": UNARY["tanh"],
    "sigmoid": UNARY["sigmoid"],
    "silu": UNARY["silu"],
    "gelu": _gelu_erf,  # nl.gelu is the exact (erf) GELU ...
    "gelu_apprx_tanh": UNARY["gelu"],  # ... the IR's gelu is the tanh approximation
    "relu": UNARY["relu"],
    "abs": UNARY["abs"],
    "negative": UNARY["neg"],
    "copy": lambda m, x: x,
    "identity": lambda m, x: x,
}


# ---- instruction semantics, over m ------------------------------------------------------------


def _alu(m: Any, op: str, a: Any, b: Any, reverse: bool) -> Any:
    return ALU[op](m, b, a) if reverse else ALU[op](m, a, b)


def sem_activation(m: Any, data: Any, op: str, scale: Any = 1.0, bias: Any = None) -> Any:
    """op(data * scale + bias), the ScalarE pipeline."""
    x = data * scale
    if bias is not None:
        x = x + bias
    return ACTIVATION[op](m, x)


def sem_tensor_scalar(
    m: Any,
    data: Any,
    op0: str,
    operand0: Any,
    reverse0: bool = False,
    op1: str | None = None,
    operand1: Any = None,
    reverse1: bool = False,
) -> Any:
    """(data op0 operand0) op1 operand1, operands scalars or [P, 1] broadcast along the free axes."""
    x = _alu(m, op0, data, operand0, reverse0)
    return x if op1 is None else _alu(m, op1, x, operand1, reverse1)


def sem_tensor_tensor(m: Any, data1: Any, data2: Any, op: str) -> Any:
    return ALU[op](m, data1, data2)


def sem_scalar_tensor_tensor(
    m: Any, data: Any, op0: str, operand0: Any, op1: str, operand1: Any, reverse0: bool = False, reverse1: bool = False
) -> Any:
    return _alu(m, op1, _alu(m, op0, data, operand0, reverse0), operand1, reverse1)


def sem_reduce(m: Any, data: Any, op: str, axis: tuple[int, ...], negate: bool = False, keepdims: bool = False) -> Any:
    r = m.reduce(REDUCE_ALIASES[op], data, axis, keepdims)
    return -r if negate else r


def sem_nc_matmul(m: Any, stationary: Any, moving: Any) -> Any:
    """stationary[K, M].T @ moving[K, N] -> [M, N]; the contraction runs over partitions."""
    return m.matmul(m.transpose(stationary), moving)


def sem_transpose(m: Any, data: Any) -> Any:
    return m.transpose(data)


def sem_copy(m: Any, data: Any) -> Any:
    return data


def sem_reciprocal(m: Any, data: Any) -> Any:
    return UNARY["reciprocal"](m, data)


def sem_scan(m: Any, data0: Any, data1: Any, initial: Any, op0: str, op1: str) -> Any:
    """r[:, i] = (data0[:, i] op0 r[:, i-1]) op1 data1[:, i], r[:, -1] = initial, along the free axis."""
    prev = initial
    cols = []
    for i in range(data0.shape[1]):
        prev = ALU[op1](m, ALU[op0](m, data0[:, i : i + 1], prev), data1[:, i : i + 1])
        cols.append(prev)
    return m.concat(cols, axis=1)


# bn_stats / bn_aggr are statistics over a whole free axis; they are defined on NumPy only (`m.np`).
def _stats(np: Any, x: Any) -> list[Any]:
    n = x.shape[1]
    if n == 0:
        z = np.zeros((x.shape[0], 1), np.float32)
        return [z, z, z]
    mean = np.mean(x, axis=1, keepdims=True, dtype=np.float32)
    m2 = np.sum(np.square(x - mean), axis=1, keepdims=True, dtype=np.float32)
    return [np.full_like(mean, n), mean, m2]


def sem_bn_stats(m: Any, data: Any) -> Any:
    """Per partition, 6 values: [count, mean, count * variance] of the even-indexed free elements,
    then the same of the odd-indexed ones (nki.isa.bn_stats, Neuron 2.30), what `sem_bn_aggr` combines."""
    np = m.np
    return np.concatenate(_stats(np, data[:, 0::2]) + _stats(np, data[:, 1::2]), axis=1)


def sem_bn_aggr(m: Any, data: Any) -> Any:
    """Combine bn_stats records [count, mean, M2]*G along the free axis into [mean, variance]."""
    np = m.np
    g = data.reshape(data.shape[0], -1, 3).astype(np.float64)
    count, mean, m2 = g[:, :, 0], g[:, :, 1], g[:, :, 2]
    total = np.sum(count, axis=1, keepdims=True)
    mu = np.sum(count * mean, axis=1, keepdims=True) / total
    m2_total = np.sum(m2 + count * np.square(mean - mu), axis=1, keepdims=True)
    return np.concatenate([mu, m2_total / total], axis=1).astype(np.float32)
