"""The float64 NumPy reference: what every variant and every kernel is checked against."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from axon.errors import SpecError
from axon.ir.graph import Graph
from axon.ir.ops import BINARY, UNARY, NumpyMath


@dataclass(frozen=True)
class Arithmetic:
    """How `evaluate` computes: the op namespace, the floating type of every value, and what an input
    and a `cast` round to. The reference is float64 throughout; `axon.verify.adversarial` evaluates
    the way a kernel computes (its dtype at the edges, float32 inside) with the same interpreter."""

    math: Any
    float_type: type
    load: Callable[[np.ndarray], np.ndarray]
    cast: Callable[[np.ndarray, str], np.ndarray]
    # what a matmul reads its operands as (TensorE takes them in the kernel's dtype); None: as they are
    operand: Callable[[np.ndarray], np.ndarray] | None = None


FLOAT64 = Arithmetic(NumpyMath(), np.float64, lambda a: np.asarray(a, dtype=np.float64), lambda v, _dtype: v)
_REDUCE: dict[str, Callable[..., Any]] = {"sum": np.sum, "max": np.max, "min": np.min}


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray], arithmetic: Arithmetic = FLOAT64) -> dict[str, np.ndarray]:
    """Outputs of `graph` (by output name) on `inputs` (by input name), computed in float64 (or as
    `arithmetic` says).

    >>> import numpy as np, axon.spec as ax
    >>> from axon.ir import trace, evaluate
    >>> @ax.spec(x="M K")
    ... def rowsum(x):
    ...     return x.sum(axis=-1)
    >>> evaluate(trace(rowsum, M=2, K=3), {"x": np.ones((2, 3))})["out"].ravel().tolist()
    [3.0, 3.0]
    """
    graph.check_bound()
    dims = graph.bindings
    real = arithmetic.float_type
    values: list[np.ndarray] = []
    with np.errstate(all="ignore"):  # overflow and NaN are results here, compared by the callers
        for node in graph.nodes:
            args = [values[i] for i in node.inputs]
            values.append(np.asarray(_value(graph, node, args, inputs, arithmetic, dims), dtype=real))
    return {name: values[o] for name, o in zip(graph.output_names, graph.outputs)}


def _value(
    graph: Graph,
    node: Any,
    args: list[np.ndarray],
    inputs: Mapping[str, np.ndarray],
    arithmetic: Arithmetic,
    dims: Mapping[str, int],
) -> Any:
    op, real = node.op, arithmetic.float_type
    if op == "input":
        name = node.attr("name")
        if name not in inputs:
            raise SpecError(f"evaluate {graph.name}: missing input {name!r}")
        value = np.asarray(inputs[name])
        expected = node.type.concrete(dims)
        if value.shape != expected:
            raise SpecError(
                f"evaluate {graph.name}: input {name!r} has shape {list(value.shape)}, expected {list(expected)}"
            )
        return arithmetic.load(value)
    if op == "const":
        return real(node.attr("value"))
    if op == "dimsize":
        return real(node.attr("dim").evaluate(dims))
    if op in UNARY:
        return UNARY[op](arithmetic.math, args[0])
    if op in BINARY:
        return BINARY[op](arithmetic.math, args[0], args[1])
    if op == "pow":
        return np.power(args[0], real(node.attr("exponent")))
    if op == "cast":
        return arithmetic.cast(args[0], node.attr("dtype"))
    if op == "reduce":
        return _REDUCE[node.attr("kind")](args[0], axis=node.attr("axis"), keepdims=node.attr("keepdims"))
    if op == "matmul":
        if arithmetic.operand is not None:
            return np.matmul(arithmetic.operand(args[0]), arithmetic.operand(args[1]))
        return np.matmul(args[0], args[1])
    if op == "transpose":
        return np.transpose(args[0], node.attr("axes"))
    if op == "reshape":
        return np.reshape(args[0], node.type.concrete(dims))
    if op == "slice":
        index = [slice(None)] * args[0].ndim
        index[node.attr("axis")] = slice(node.attr("start").evaluate(dims), node.attr("stop").evaluate(dims))
        return args[0][tuple(index)]
    if op == "concat":
        return np.concatenate(args, axis=node.attr("axis"))
    if op == "repeat":
        return np.repeat(args[0], node.attr("repeats").evaluate(dims), axis=node.attr("axis"))
    raise SpecError(f"evaluate: unknown op {op!r}")  # pragma: no cover - the builder only admits known ops


def random_inputs(graph: Graph, seed: int = 0, low: float = -1.0, high: float = 1.0) -> dict[str, np.ndarray]:
    """Float64 uniform random inputs for every input of a bound graph, in [low, high] or, for an input
    with a declared range, in the part of its range within [low, high] (all of it where none is): a
    log of x declared in (1, 10) was evaluated on [-1, 1], so `axon check` said "finite NO"."""
    graph.check_bound()
    rng = np.random.default_rng(seed)
    out = {}
    for n in graph.inputs:
        lo, hi = n.attr("range") or (low, high)
        lo, hi = (max(lo, low), min(hi, high)) if max(lo, low) < min(hi, high) else (lo, hi)
        out[n.attr("name")] = rng.uniform(lo, hi, n.type.concrete(graph.bindings))
    return out


# Where inputs in [-1, 1] leave a reference output undefined, the inputs the checks draw instead.
DEFINED_RANGE = (0.05, 1.0)


def reference_case(
    graph: Graph, seed: int = 0, rounded: Callable[[np.ndarray], np.ndarray] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Random inputs and the float64 reference outputs on them: what a kernel is checked against.

    Inputs are uniform in [-1, 1]. Where that leaves a reference output undefined (a NaN: adamw's
    square root of a negative second moment), they are drawn from `DEFINED_RANGE` instead, so that
    every output element is a number the kernel has to reproduce. `rounded`: what the kernel is
    given of each input (rounded to its dtype), on which the reference is then computed.
    """
    inputs, expected, _ = defined_case(graph, seed, rounded)
    return inputs, expected


def defined_case(
    graph: Graph, seed: int = 0, rounded: Callable[[np.ndarray], np.ndarray] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """`reference_case`, and the outputs that were NaN on [-1, 1] (empty unless it fell back)."""

    def draw(low: float, high: float) -> dict[str, np.ndarray]:
        inputs = random_inputs(graph, seed, low, high)
        return {k: rounded(v) for k, v in inputs.items()} if rounded is not None else inputs

    inputs = draw(-1.0, 1.0)
    expected = evaluate(graph, inputs)
    undefined = [name for name, v in expected.items() if np.isnan(v).any()]
    if undefined:
        inputs = draw(*DEFINED_RANGE)
        expected = evaluate(graph, inputs)
    return inputs, expected, undefined


def max_rel_error(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    """The largest max|got - ref| / max|ref| over the outputs of `expected`.

    Infinite when an output is missing or has another size, when a NaN or infinity appears in
    `got` where the reference has a number (a NaN never compares as a small error), or when the
    reference is infinite and `got` is not the same infinity (a kernel returning 0 for x / 0).
    Where the reference is NaN (undefined in float64: 0 / 0, inf - inf) any value is accepted.
    """
    worst = 0.0
    for name, ref in expected.items():
        if name not in got or np.size(got[name]) != ref.size:
            return float("inf")
        value = np.asarray(got[name], dtype=np.float64).reshape(ref.shape)
        defined = np.isfinite(ref)
        if not np.isfinite(value[defined]).all():
            return float("inf")
        infinite = np.isinf(ref)
        if infinite.any() and not np.array_equal(value[infinite], ref[infinite]):
            return float("inf")
        scale = max(float(np.max(np.abs(ref[defined]), initial=0.0)), 1e-30)
        worst = max(worst, float(np.max(np.abs(value[defined] - ref[defined]), initial=0.0)) / scale)
    return worst
