"""Spec declarations: `@spec(x="M K")` and `tensor(shape, range=...)`, and where the user's line is.

`spec` records a function's tensor inputs (`SpecSignature`) for `axon.ir.trace`; the frontend and the
declarations both name the user's spec line in their errors (`user_location`).
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from axon.errors import SpecError
from axon.ir.dims import Dim, parse_shape

_AXON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str:
    """`file:line` of the innermost frame outside the axon package (the user's spec line)."""
    frame = inspect.currentframe()
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_AXON_DIR + os.sep) or os.sep + "workloads" + os.sep in filename:
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


# spec declaration -------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecSignature:
    """Input names with their declared (symbolic) shapes, in argument order, and declared value ranges."""

    inputs: tuple[tuple[str, tuple[Dim, ...]], ...]
    ranges: tuple[tuple[str, tuple[float, float]], ...] = ()


@dataclass(frozen=True)
class TensorDecl:
    """A spec input declared with `tensor(shape, range=(lo, hi))`: its shape and the values it takes."""

    shape: str
    range: tuple[float, float] | None = None


def tensor(shape: str, range: tuple[float, float] | None = None) -> TensorDecl:  # noqa: A002 - the user-facing word
    """An input declaration with the range of values it takes (what floating-point checks assume).

    >>> import axon.spec as ax
    >>> @ax.spec(x=ax.tensor("M N", range=(-10, 10)))
    ... def softmax(x):
    ...     e = ax.exp(x - ax.max(x))
    ...     return e / ax.sum(e)
    """
    if range is not None:
        if (
            not isinstance(range, (tuple, list))
            or len(range) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in range)
            or not range[0] < range[1]
        ):
            raise SpecError(
                f"tensor {shape!r}: range must be two finite numbers (lo, hi) with lo < hi, got {range!r} "
                f"(at {user_location()})"
            )
        range = (float(range[0]), float(range[1]))
    return TensorDecl(shape, range)


def spec(**shapes: str | TensorDecl) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a spec function's tensor inputs and their shapes (a string, or `tensor(...)` with a range).

    >>> import axon.spec as ax
    >>> @ax.spec(x="M K", w="K N")
    ... def proj(x, w):
    ...     return ax.relu(x @ w)
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = list(inspect.signature(fn).parameters)
        unknown = [name for name in shapes if name not in params]
        if unknown:
            raise SpecError(f"spec {fn.__name__}: declared input {unknown[0]!r} is not a parameter")
        decls = {p: d if isinstance(d, TensorDecl) else TensorDecl(d) for p, d in shapes.items()}
        ordered = tuple((p, _shape(fn.__name__, p, decls[p].shape)) for p in params if p in decls)
        ranges = tuple((p, r) for p in params if p in decls for r in [decls[p].range] if r is not None)
        fn.__axon_spec__ = SpecSignature(ordered, ranges)  # type: ignore[attr-defined]
        return fn

    return wrap


def _shape(spec_name: str, arg: str, text: str) -> tuple[Dim, ...]:
    """`parse_shape(text)`; a SpecError names the spec and the argument (it named only the dimension)."""
    try:
        return parse_shape(text)
    except SpecError as exc:
        raise SpecError(f"spec {spec_name}: input {arg} ({text!r}): {exc}") from None


def signature_of(fn: Callable[..., Any]) -> SpecSignature:
    sig = getattr(fn, "__axon_spec__", None)
    if sig is None:
        name = getattr(fn, "__name__", repr(fn))
        raise SpecError(f"{name} is not a spec: declare its inputs with @axon.spec.spec(x='M K', ...)")
    return sig
