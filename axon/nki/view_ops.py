"""The operators of a view in kernel expressions (`t[...] = x`, `t += x`, `a * b`, `-t`,
`t.broadcast_to(shape)`): a mixin of `View`. They are instructions, and the modules that define
those (`language`, `legacy_isa`) register them in `OPERATORS` when they load, so views do not
import the instruction modules built on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from axon.errors import NKIError
from axon.nki.context import maybe_active

if TYPE_CHECKING:
    from axon.nki.allocation import Allocation

OPERATORS: dict[str, Callable[..., Any]] = {}


def _operator(name: str) -> Callable[..., Any]:
    op = OPERATORS.get(name)
    if op is None:  # pragma: no cover - axon.nki loads both registering modules
        raise NKIError(f"the view operator {name!r} is not registered: import axon.nki first")
    return op


def _is_number(o: object) -> bool:
    return isinstance(o, int | float | np.number) and not isinstance(o, bool | np.bool_)


def _binary(fn: str, reverse: bool = False) -> Callable[[Any, Any], Any]:
    """The view operator that is the instruction `fn` (`reverse`: the other operand first)."""

    def operator(self: Any, other: Any) -> Any:
        return self._bin(other, fn, reverse)

    return operator


def _accumulate(fn: str) -> Callable[[Any, Any], Any]:
    """`t op= x`: `fn` accumulated into the view."""

    def operator(self: Any, value: Any) -> Any:
        return _operator("accumulate")(self, value, fn)

    return operator


class ViewOperators:
    """What a `View` does in a kernel expression (`self.index` is the View's)."""

    if TYPE_CHECKING:  # View's, declared for the type checker only
        alloc: Allocation

        def index(self, key: Any) -> Any: ...

        @property
        def dtype(self) -> Any: ...

    # a NumPy scalar on the left (`np.int8(2) * t`, the reference's way to type a scalar) defers to the
    # view's reflected operator instead of iterating the view as an array
    __array_ufunc__ = None

    def __getitem__(self, key: Any) -> Any:
        return self.index(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        _operator("assign")(self.index(key), value)

    # in-place operators accumulate into the tile; the arithmetic ones are the nl functions of the
    # same names, the reflected forms with the number as their first operand (`2 ** t` is nl.power)
    __iadd__, __isub__, __imul__ = _accumulate("add"), _accumulate("subtract"), _accumulate("multiply")
    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("subtract"), _binary("subtract", True)
    __mul__, __rmul__ = _binary("multiply"), _binary("multiply", True)
    __truediv__, __rtruediv__ = _binary("divide"), _binary("divide", True)
    __pow__, __rpow__ = _binary("power"), _binary("power", True)

    def _bin(self, other: Any, fn: str, reverse: bool = False) -> Any:
        op = _operator(fn)
        return op(other, self) if reverse else op(self, other)

    # comparisons give 1.0/0.0 tiles (nki.errors err_ambiguous_tensor_truth_value writes `a_tile > 0`);
    # == and != too (nl.equal, nl.not_equal: `t == 1.0` was Python's False, a silent 0); views stay
    # dictionary keys by identity (the emulator never compares two views with ==)
    __hash__ = object.__hash__

    def __eq__(self, o: object) -> Any:
        return self._bin(o, "equal") if _is_number(o) or isinstance(o, ViewOperators) else NotImplemented

    def __ne__(self, o: object) -> Any:
        return self._bin(o, "not_equal") if _is_number(o) or isinstance(o, ViewOperators) else NotImplemented

    __gt__, __ge__ = _binary("greater"), _binary("greater_equal")
    __lt__, __le__ = _binary("less"), _binary("less_equal")

    # bitwise operators are nl.bitwise_and & co. on integer tiles ("This function implements the
    # C/Python operator &", nki.language.bitwise_and; `~` is nl.invert): a comparison's 1/0 tile
    # takes them when compared with dtype=nl.uint8
    __and__, __rand__ = _binary("bitwise_and"), _binary("bitwise_and", True)
    __or__, __ror__ = _binary("bitwise_or"), _binary("bitwise_or", True)
    __xor__, __rxor__ = _binary("bitwise_xor"), _binary("bitwise_xor", True)
    __lshift__, __rshift__ = _binary("left_shift"), _binary("right_shift")

    def __invert__(self) -> Any:
        return _operator("invert")(self)

    # `%` is nl.mod ("equivalent to the Python modulus x % y"), abs() nl.abs; NKI documents no
    # floor division of tiles, so `//` is refused by name rather than a Python TypeError
    __mod__, __rmod__ = _binary("mod"), _binary("mod", True)

    def __abs__(self) -> Any:
        return _operator("abs")(self)

    def __floordiv__(self, o: Any) -> Any:
        detail = f"{self!r} // {o!r}: NKI has no floor division of tiles: write (x - nl.mod(x, y)) / y"
        m = maybe_active()
        raise m.fail("floor division of a tile", detail) if m is not None else NKIError(detail)

    __rfloordiv__ = __floordiv__

    def __bool__(self) -> bool:
        # `if t > 0:` is a compile-time error in NKI (nki.errors err_ambiguous_tensor_truth_value): a
        # tile was always true, so the kernel silently took the branch; an HBM tensor stays true (an
        # optional kernel argument tested with `if bias:`)
        if self.alloc.kind == "hbm":
            return True
        detail = f"{self!r} has no single truth value (`if t > 0:`); select elementwise with nl.where"
        m = maybe_active()
        raise m.fail("ambiguous tile truth value", detail) if m is not None else NKIError(detail)

    def __neg__(self) -> Any:  # keeps the tile's dtype: -1.0 here is no operand of the kernel's
        return _operator("multiply")(self, -1.0, dtype=self.dtype)

    def broadcast_to(self, shape: Any) -> Any:
        return _operator("broadcast")(self, tuple(shape))
