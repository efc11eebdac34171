"""The messages a spec gets for NumPy calls and indices the tracer does not take.

They name the call or the index as the user wrote it and what to write instead; raising is the
frontend's. Nothing here traces.
"""

from __future__ import annotations

from typing import Any

# a NumPy function's name -> the ax.* op that does what it does, where the names differ
NUMPY_EQUIVALENTS = {
    "absolute": "abs",
    "true_divide": "divide",
    "concatenate": "concatenate",
    "amax": "max",
    "amin": "min",
    "dot": "matmul",
}


def numpy_name(func: Any) -> str:
    """`np.linalg.norm` for numpy.linalg's norm (it was named `np.norm`), `np.exp` for the rest."""
    module = getattr(func, "__module__", None) or "numpy"
    sub = module.removeprefix("numpy").lstrip(".")
    return f"np.{sub}.{func.__name__}" if sub and not sub.startswith("_") else f"np.{func.__name__}"


def numpy_refusal(name: str, where: str, spec_names: frozenset[str]) -> str:
    """Why NumPy's `name` (np.X, or np.sub.X) cannot trace, and the ax.* op that can where there is one."""
    short = name.rpartition(".")[2]
    equivalent = NUMPY_EQUIVALENTS.get(short, short)
    hint = f"use ax.{equivalent}" if equivalent in spec_names else "it has no ax.* equivalent (see axon/spec.py)"
    return f"{name} applied to a traced tensor (at {where}): {hint}"


def index_refusal(item: Any, where: str) -> str:
    """Why an index of a traced tensor is refused: only unit-step slices (and `...`) keep every axis."""
    if item is None:  # was "too many indices for a rank-2 tensor" of x[:, None, :]
        what = "None (np.newaxis) adds an axis, which indexing does not: use ax.reshape"
    elif isinstance(item, int):  # was "only unit-step slices are supported, got 0"
        what = f"an integer index ({item}) drops an axis, which indexing does not: slice it, {item}:{item + 1}"
    else:
        what = f"only unit-step slices are supported, got {item!r}"
    return f"index: {what} (at {where})"
