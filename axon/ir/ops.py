"""The IR's operators, each defined once over an abstract math namespace.

An elementwise op's meaning is a function `f(m, *xs)` where `m` supplies the primitives (`exp`,
`log`, `sqrt`, `rsqrt`, `tanh`, `abs`, `maximum`, `minimum`, `power`). NumPy (`axon.ir.evaluate`)
and Z3 (`axon.verify`) pass their own `m`, so the reference and the proofs cannot disagree about what
an op means. Composite functions (sigmoid, silu, gelu) are written in terms of the primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# The tanh-approximation of GELU, as in WORKLOADS.md.
GELU_C = 0.7978845608028654  # sqrt(2 / pi)
GELU_A = 0.044715


def _sigmoid(m: Any, x: Any) -> Any:
    return 1 / (1 + m.exp(-x))


def _gelu(m: Any, x: Any) -> Any:
    return 0.5 * x * (1 + m.tanh(GELU_C * (x + GELU_A * x * x * x)))


UNARY: dict[str, Callable[..., Any]] = {
    "exp": lambda m, x: m.exp(x),
    "log": lambda m, x: m.log(x),
    "sqrt": lambda m, x: m.sqrt(x),
    "rsqrt": lambda m, x: m.rsqrt(x),
    "reciprocal": lambda m, x: 1 / x,
    "square": lambda m, x: x * x,
    "neg": lambda m, x: -x,
    "abs": lambda m, x: m.abs(x),
    "tanh": lambda m, x: m.tanh(x),
    "sigmoid": _sigmoid,
    "silu": lambda m, x: x * _sigmoid(m, x),
    "gelu": _gelu,
    "relu": lambda m, x: m.maximum(x, 0.0),
}

BINARY: dict[str, Callable[..., Any]] = {
    "add": lambda m, a, b: a + b,
    "sub": lambda m, a, b: a - b,
    "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b,
    "maximum": lambda m, a, b: m.maximum(a, b),
    "minimum": lambda m, a, b: m.minimum(a, b),
}

# Binary ops whose operands may be swapped (used by canonical hashing).
COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum"})

REDUCTIONS = frozenset({"sum", "max", "min"})

# Ops that are not elementwise, with the attributes they carry.
STRUCTURAL = {
    "input": ("name",),
    "const": ("value",),
    "dimsize": ("dim",),
    "pow": ("exponent",),
    "reduce": ("kind", "axis", "keepdims"),
    "matmul": (),
    "transpose": ("axes",),
    "reshape": ("shape",),
    "slice": ("axis", "start", "stop"),
    "concat": ("axis",),
    "repeat": ("axis", "repeats"),
    "cast": ("dtype",),
}

ALL_OPS = frozenset(UNARY) | frozenset(BINARY) | frozenset(STRUCTURAL)


def is_elementwise(op: str) -> bool:
    return op in UNARY or op in BINARY or op == "pow" or op == "cast"


def flops_per_element(op: str) -> int:
    """Arithmetic operations charged per output element (for FLOP counts and intensity)."""
    if op in ("input", "const", "dimsize", "transpose", "reshape", "slice", "concat", "repeat", "cast"):
        return 0
    return 1


class NumpyMath:
    """The `m` namespace for float64 NumPy evaluation."""

    def __init__(self) -> None:
        self.np = np

    def exp(self, x: Any) -> Any:
        return self.np.exp(x)

    def log(self, x: Any) -> Any:
        return self.np.log(x)

    def sqrt(self, x: Any) -> Any:
        return self.np.sqrt(x)

    def rsqrt(self, x: Any) -> Any:
        return 1.0 / self.np.sqrt(x)

    def tanh(self, x: Any) -> Any:
        return self.np.tanh(x)

    def abs(self, x: Any) -> Any:
        return self.np.abs(x)

    def maximum(self, a: Any, b: Any) -> Any:
        return self.np.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return self.np.minimum(a, b)

    def power(self, x: Any, p: float) -> Any:
        return self.np.power(x, p)
