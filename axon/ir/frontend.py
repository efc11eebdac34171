"""The NumPy-like tracing frontend: `Tensor` proxies that record operations into a GraphBuilder.

Users write specs against `axon.spec` (which re-exports this module's functions). No tracing state is
global: every `Tensor` knows the builder it belongs to. The declarations (`spec`, `tensor`) live in
`axon.ir.declare` and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NoReturn

from axon.errors import SpecError
from axon.ir.builder import GraphBuilder
from axon.ir.declare import SpecSignature, TensorDecl, signature_of, spec, tensor
from axon.ir.declare import user_location as _where
from axon.ir.dims import Dim, DimLike
from axon.ir.refusals import index_refusal, numpy_name, numpy_refusal


class Tensor:
    """A traced value. Supports + - * / ** @, comparisons are not traced, indexing slices axes."""

    __array_priority__ = 1000  # make numpy scalars defer to our operators

    def __init__(self, builder: GraphBuilder, node: int) -> None:
        self._b = builder
        self._node = node

    # basic properties -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[Dim, ...]:
        return self._b.nodes[self._node].type.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> str:
        return self._b.nodes[self._node].type.dtype

    def size(self, axis: int) -> Tensor:
        """The extent of `axis` as a scalar tensor (for 1/K, 1/sqrt(d), ...)."""
        return dimsize(self, axis)

    @property
    def T(self) -> Tensor:
        return transpose(self)

    def __repr__(self) -> str:
        node = self._b.nodes[self._node]
        return f"<Tensor %{node.id} {node.op} {node.type}>"

    def __bool__(self) -> bool:
        raise SpecError("a traced tensor has no truth value (data-dependent control flow is not supported)")

    # operators ------------------------------------------------------------------------------------
    def __add__(self, o: Any) -> Tensor:
        return add(self, o)

    def __radd__(self, o: Any) -> Tensor:
        return add(o, self)

    def __sub__(self, o: Any) -> Tensor:
        return subtract(self, o)

    def __rsub__(self, o: Any) -> Tensor:
        return subtract(o, self)

    def __mul__(self, o: Any) -> Tensor:
        return multiply(self, o)

    def __rmul__(self, o: Any) -> Tensor:
        return multiply(o, self)

    def __truediv__(self, o: Any) -> Tensor:
        return divide(self, o)

    def __rtruediv__(self, o: Any) -> Tensor:
        return divide(o, self)

    def __matmul__(self, o: Any) -> Tensor:
        return matmul(self, o)

    def __rmatmul__(self, o: Any) -> Tensor:
        return matmul(o, self)

    def __abs__(self) -> Tensor:  # abs(x) was "bad operand type for abs()": ax.abs is an op
        return abs(self)

    def __neg__(self) -> Tensor:
        return _unary("neg", self)

    def __pow__(self, p: Any) -> Tensor:
        return power(self, p)

    def __getitem__(self, index: Any) -> Tensor:
        return _getitem(self, index)

    # methods --------------------------------------------------------------------------------------
    def sum(self, axis: int = -1, keepdims: bool = True) -> Tensor:
        return sum(self, axis, keepdims)

    def max(self, axis: int = -1, keepdims: bool = True) -> Tensor:
        return max(self, axis, keepdims)

    def min(self, axis: int = -1, keepdims: bool = True) -> Tensor:
        return min(self, axis, keepdims)

    def mean(self, axis: int = -1, keepdims: bool = True) -> Tensor:
        return mean(self, axis, keepdims)

    def var(self, axis: int = -1, keepdims: bool = True) -> Tensor:
        return var(self, axis, keepdims)

    def reshape(self, *shape: Any) -> Tensor:
        one = len(shape) == 1 and isinstance(shape[0], (tuple, list, str))  # ("M", "N"), or "M N" as declared
        return reshape(self, shape[0] if one else shape)

    def transpose(self, *axes: int) -> Tensor:
        return transpose(self, axes or None)

    # NumPy ----------------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Tensor:
        # `np.float32(2) * x` reaches here as np.multiply: the operators trace; other NumPy functions
        # would compute on a proxy, so they are refused with the spec language's equivalent
        ops = {
            "add": add,
            "subtract": subtract,
            "multiply": multiply,
            "true_divide": divide,
            "divide": divide,
            "power": power,
            "matmul": matmul,
        }
        if method == "__call__" and not kwargs and ufunc.__name__ in ops and len(inputs) == 2:
            return ops[ufunc.__name__](*inputs)
        _numpy_refused(f"np.{ufunc.__name__}")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Tensor:
        _numpy_refused(numpy_name(func))


def _numpy_refused(name: str) -> NoReturn:
    raise SpecError(numpy_refusal(name, _where(), SPEC_NAMES))


def _finite(value: Any) -> float:
    """A constant of the spec as a float; inf and NaN have no literal in a kernel, so they are refused."""
    out = float(value)
    if not math.isfinite(out):
        raise SpecError(f"constant {out!r} is not finite (at {_where()}): a spec's constants must be finite numbers")
    return out


def _lift(value: Any, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        if value._b is not like._b:
            raise SpecError("tensors from two different traces were mixed")
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Tensor(like._b, like._b.const(_finite(value)))
    if isinstance(value, Dim):
        return Tensor(like._b, like._b.add("dimsize", (), _where(), dim=value))
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return Tensor(like._b, like._b.const(_finite(value.item())))
    raise SpecError(f"cannot use {type(value).__name__} {value!r} in a traced expression (at {_where()})")


def _first_tensor(*values: Any) -> Tensor:
    for v in values:
        if isinstance(v, Tensor):
            return v
    raise SpecError(f"expected a traced tensor among {values!r} (at {_where()})")


def _node(b: GraphBuilder, op: str, ins: Sequence[Tensor], **attrs: Any) -> Tensor:
    return Tensor(b, b.add(op, [t._node for t in ins], _where(), **attrs))


def _unary(op: str, x: Any) -> Tensor:
    x = _first_tensor(x)
    return _node(x._b, op, [x])


def _binary(op: str, a: Any, b: Any) -> Tensor:
    t = _first_tensor(a, b)
    return _node(t._b, op, [_lift(a, t), _lift(b, t)])


# elementwise ------------------------------------------------------------------------------------
def exp(x: Tensor) -> Tensor:
    return _unary("exp", x)


def log(x: Tensor) -> Tensor:
    return _unary("log", x)


def sqrt(x: Tensor) -> Tensor:
    return _unary("sqrt", x)


def rsqrt(x: Tensor) -> Tensor:
    return _unary("rsqrt", x)


def reciprocal(x: Tensor) -> Tensor:
    return _unary("reciprocal", x)


def square(x: Tensor) -> Tensor:
    return _unary("square", x)


def negative(x: Tensor) -> Tensor:
    return _unary("neg", x)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - mirrors numpy's name
    return _unary("abs", x)


def tanh(x: Tensor) -> Tensor:
    return _unary("tanh", x)


def sigmoid(x: Tensor) -> Tensor:
    return _unary("sigmoid", x)


def silu(x: Tensor) -> Tensor:
    return _unary("silu", x)


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation."""
    return _unary("gelu", x)


def relu(x: Tensor) -> Tensor:
    return _unary("relu", x)


def add(a: Any, b: Any) -> Tensor:
    return _binary("add", a, b)


def subtract(a: Any, b: Any) -> Tensor:
    return _binary("sub", a, b)


def multiply(a: Any, b: Any) -> Tensor:
    return _binary("mul", a, b)


def divide(a: Any, b: Any) -> Tensor:
    if not isinstance(b, (Tensor, Dim)) and _finite(b.item() if hasattr(b, "item") else b) == 0:
        raise SpecError(f"division by the constant 0 (at {_where()}): every element it makes is inf or NaN")
    return _binary("div", a, b)


def maximum(a: Any, b: Any) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return _binary("minimum", a, b)


def power(x: Tensor, p: Any) -> Tensor:
    """`x ** p` for a constant exponent (2 becomes square, 0.5 sqrt, -0.5 rsqrt, -1 reciprocal)."""
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise SpecError(f"power: the exponent must be a constant number, got {p!r} (at {_where()})")
    _finite(p)
    if p == 1:
        return x
    special = {2: "square", 0.5: "sqrt", -0.5: "rsqrt", -1: "reciprocal"}
    if p in special:
        return _unary(special[p], x)
    return _node(x._b, "pow", [x], exponent=float(p))


def cast(x: Tensor, dtype: str) -> Tensor:
    return _node(x._b, "cast", [x], dtype=dtype)


# reductions -------------------------------------------------------------------------------------
def _reduce(kind: str, x: Tensor, axis: int, keepdims: bool) -> Tensor:
    return _node(x._b, "reduce", [x], kind=kind, axis=axis, keepdims=bool(keepdims))


def sum(x: Tensor, axis: int = -1, keepdims: bool = True) -> Tensor:  # noqa: A001
    return _reduce("sum", x, axis, keepdims)


def max(x: Tensor, axis: int = -1, keepdims: bool = True) -> Tensor:  # noqa: A001
    return _reduce("max", x, axis, keepdims)


def min(x: Tensor, axis: int = -1, keepdims: bool = True) -> Tensor:  # noqa: A001
    return _reduce("min", x, axis, keepdims)


def dimsize(x: Tensor, axis: int) -> Tensor:
    """The size of `x` along `axis`, as a scalar."""
    shape = x.shape
    if not -len(shape) <= axis < len(shape):
        raise SpecError(f"size: axis {axis} out of range for a rank-{len(shape)} tensor (at {_where()})")
    return Tensor(x._b, x._b.add("dimsize", (), _where(), dim=shape[axis]))


def mean(x: Tensor, axis: int = -1, keepdims: bool = True) -> Tensor:
    """Sum divided by the extent: the 1/K stays visible to variant discovery."""
    return divide(sum(x, axis, keepdims), dimsize(x, axis))


def var(x: Tensor, axis: int = -1, keepdims: bool = True) -> Tensor:
    """Population variance, mean((x - mean(x))^2)."""
    centered = subtract(x, mean(x, axis, True))
    return mean(square(centered), axis, keepdims)


# structure --------------------------------------------------------------------------------------
def matmul(a: Tensor, b: Tensor) -> Tensor:
    t = _first_tensor(a, b)
    return _node(t._b, "matmul", [_lift(a, t), _lift(b, t)])


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute axes; by default swap the last two (like `.T` on a matrix, `.mT` on a batch)."""
    if axes is None:
        if x.ndim < 2:
            raise SpecError(f"transpose: needs rank >= 2, got {x.ndim} (at {_where()})")
        axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return _node(x._b, "transpose", [x], axes=tuple(axes))


def reshape(x: Tensor, shape: Sequence[DimLike]) -> Tensor:
    return _node(x._b, "reshape", [x], shape=shape if isinstance(shape, str) else tuple(shape))


def concatenate(xs: Sequence[Tensor], axis: int = -1) -> Tensor:
    if not xs:
        raise SpecError(f"concatenate: needs at least one tensor (at {_where()})")
    t = _first_tensor(*xs)
    return _node(t._b, "concat", [_lift(v, t) for v in xs], axis=axis)


concat = concatenate


def repeat(x: Tensor, repeats: DimLike, axis: int) -> Tensor:
    """`np.repeat`: each slice along `axis` repeated `repeats` times in place (grouped heads)."""
    return _node(x._b, "repeat", [x], axis=axis, repeats=Dim.of(repeats))


def split(x: Tensor, parts: int, axis: int = -1) -> list[Tensor]:
    """Equal parts along `axis` (the two halves of rope's head dimension)."""
    extent = x.shape[axis % x.ndim]
    step = extent / parts
    return [_slice(x, axis, step * i, step * (i + 1)) for i in range(parts)]


def _slice(x: Tensor, axis: int, start: DimLike, stop: DimLike) -> Tensor:
    return _node(x._b, "slice", [x], axis=axis, start=Dim.of(start), stop=Dim.of(stop))


def _getitem(x: Tensor, index: Any) -> Tensor:
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis for i in index):
        pos = index.index(Ellipsis)
        fill = (slice(None),) * (x.ndim - len(index) + 1)
        index = index[:pos] + fill + index[pos + 1 :]
    refused = [i for i in index if not isinstance(i, slice) or i.step not in (None, 1)]
    if refused:
        raise SpecError(index_refusal(refused[0], _where()))
    if len(index) > x.ndim:
        raise SpecError(f"index: too many indices for a rank-{x.ndim} tensor (at {_where()})")
    out = x
    for axis, item in enumerate(index):
        if item.start is None and item.stop is None:
            continue
        start = Dim.of(0 if item.start is None else item.start)
        stop = x.shape[axis] if item.stop is None else Dim.of(item.stop)
        out = _slice(out, axis, start, stop)
    return out


# the spec language: the ops `axon.spec` exports (and nothing else is an op), then its declarations
OPS = tuple(
    """abs add cast concat concatenate dimsize divide exp gelu log matmul max maximum mean min minimum multiply negative
    power reciprocal relu repeat reshape rsqrt sigmoid silu split sqrt square subtract sum tanh transpose var""".split()
)
SPEC_NAMES = frozenset(OPS) | {"Tensor", "spec", "tensor"}

__all__ = ["OPS", "SPEC_NAMES", "SpecSignature", "Tensor", "TensorDecl", *OPS, "signature_of", "spec", "tensor"]
