"""The float64 NumPy reference: what every variant and every kernel is checked against."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from axon.errors import SpecError
from axon.ir.graph import Graph
from axon.ir.ops import BINARY, UNARY, NumpyMath

_NP = NumpyMath()
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of `graph` (by output name) on `inputs` (by input name), computed in float64.

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
    values: list[np.ndarray] = []
    for node in graph.nodes:
        args = [values[i] for i in node.inputs]
        op = node.op
        if op == "input":
            name = node.attr("name")
            if name not in inputs:
                raise SpecError(f"evaluate {graph.name}: missing input {name!r}")
            value = np.asarray(inputs[name], dtype=np.float64)
            expected = node.type.concrete(dims)
            if value.shape != expected:
                raise SpecError(f"evaluate {graph.name}: input {name!r} has shape {list(value.shape)}, expected {list(expected)}")
        elif op == "const":
            value = np.float64(node.attr("value"))
        elif op == "dimsize":
            value = np.float64(node.attr("dim").evaluate(dims))
        elif op in UNARY:
            with np.errstate(all="ignore"):
                value = UNARY[op](_NP, args[0])
        elif op in BINARY:
            with np.errstate(all="ignore"):
                value = BINARY[op](_NP, args[0], args[1])
        elif op == "pow":
            with np.errstate(all="ignore"):
                value = np.power(args[0], node.attr("exponent"))
        elif op == "cast":
            value = args[0]
        elif op == "reduce":
            value = _REDUCE[node.attr("kind")](args[0], axis=node.attr("axis"), keepdims=node.attr("keepdims"))
        elif op == "matmul":
            value = np.matmul(args[0], args[1])
        elif op == "transpose":
            value = np.transpose(args[0], node.attr("axes"))
        elif op == "reshape":
            value = np.reshape(args[0], node.type.concrete(dims))
        elif op == "slice":
            axis = node.attr("axis")
            index = [slice(None)] * args[0].ndim
            index[axis] = slice(node.attr("start").evaluate(dims), node.attr("stop").evaluate(dims))
            value = args[0][tuple(index)]
        elif op == "concat":
            value = np.concatenate(args, axis=node.attr("axis"))
        elif op == "repeat":
            value = np.repeat(args[0], node.attr("repeats").evaluate(dims), axis=node.attr("axis"))
        else:  # pragma: no cover - the builder only admits known ops
            raise SpecError(f"evaluate: unknown op {op!r}")
        values.append(np.asarray(value, dtype=np.float64))
    return {name: values[o] for name, o in zip(graph.output_names, graph.outputs)}


def random_inputs(graph: Graph, seed: int = 0, low: float = -1.0, high: float = 1.0) -> dict[str, np.ndarray]:
    """Float64 uniform random inputs for every input of a bound graph."""
    graph.check_bound()
    rng = np.random.default_rng(seed)
    return {n.attr("name"): rng.uniform(low, high, n.type.concrete(graph.bindings)) for n in graph.inputs}


def reference_case(graph: Graph, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Random inputs and the float64 reference outputs on them: what a kernel is checked against.

    Inputs are uniform in [-1, 1]. Where that leaves a reference output undefined (a NaN: adamw's
    square root of a negative second moment), they are drawn from [0.05, 1] instead, so that every
    output element is a number the kernel has to reproduce.
    """
    inputs = random_inputs(graph, seed)
    expected = evaluate(graph, inputs)
    if any(np.isnan(v).any() for v in expected.values()):
        inputs = random_inputs(graph, seed, low=0.05, high=1.0)
        expected = evaluate(graph, inputs)
    return inputs, expected


def max_rel_error(got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> float:
    """The largest max|got - ref| / max|ref| over the outputs of `expected`.

    Infinite when an output is missing or has another size, or when a NaN or infinity appears in
    `got` where the reference has a number: a NaN never compares as a small error.
    """
    worst = 0.0
    for name, ref in expected.items():
        if name not in got or np.size(got[name]) != ref.size:
            return float("inf")
        value = np.asarray(got[name], dtype=np.float64).reshape(ref.shape)
        defined = np.isfinite(ref)
        if not np.isfinite(value[defined]).all():
            return float("inf")
        scale = max(float(np.max(np.abs(ref[defined]), initial=0.0)), 1e-30)
        worst = max(worst, float(np.max(np.abs(value[defined] - ref[defined]), initial=0.0)) / scale)
    return worst
