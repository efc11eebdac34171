"""Adversarial numerics: a graph evaluated the way a kernel computes it, on inputs chosen to hurt.

A kernel of dtype D reads and writes D but computes every intermediate in float32 (the lowering keeps
tiles and scratch in float32) except a matmul's operands, which TensorE reads in D, so `evaluate_in`
rounds inputs, outputs and matmul operands to D and computes in float32. The input classes (large
offsets, large magnitudes, one dominant element per row, near-constant rows, values at the edge of
the range) live inside each input's range: the declared `ax.tensor(..., range=...)`, or else the
largest magnitude at which the spec as written stays accurate in D (`derived_range`). This checks
variants by measurement; `axon.verify.ranges` bounds them by analysis. Neither knows the other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from axon.ir import Graph, evaluate, max_rel_error
from axon.ir.evaluate import Arithmetic
from axon.ir.ops import NumpyMath
from axon.verify.allowance import allowed_error

CLASSES = ("typical", "offset", "magnitude", "dominant", "near-constant", "limit")
# Reduced sizes for the adversarial evaluation: rows of up to 128 elements, enough for a reduction
# to show cancellation and for one element to dominate; at most 2^15 elements a value, so that the
# hundreds of evaluations a range derivation takes stay under a few seconds.
_BUDGET = 2**15


def tolerance(dtype: str) -> float:
    """Relative error a kernel of `dtype` may have against the float64 reference (the tuner's check)."""
    return 1e-5 if dtype == "float32" else 2e-2


def numpy_dtype(dtype: str) -> np.dtype:
    if dtype in ("bfloat16", "float8_e4m3", "float8_e5m2"):  # a spec's cast to float8 was kept in float32
        return np.dtype(getattr(ml_dtypes, dtype))  # the emulator's types (axon.nki.dtypes)
    return np.dtype({"float16": np.float16}.get(dtype, np.float32))


def quantize(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype` (round to nearest even), returned as float64."""
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(numpy_dtype(dtype)).astype(np.float64)


def dtype_max(dtype: str) -> float:
    return float(ml_dtypes.finfo(numpy_dtype(dtype)).max)  # NumPy's finfo knows none of ml_dtypes' types


class _F32(NumpyMath):
    """The op namespace on float32 arrays (NumPy keeps float32 with Python-float constants)."""

    def rsqrt(self, x: Any) -> Any:
        return np.float32(1.0) / np.sqrt(x)


def _in_kernel(dtype: str) -> Arithmetic:
    """A `dtype` kernel's arithmetic: inputs rounded to `dtype`, every intermediate in float32 but a
    matmul's operands, which TensorE reads in `dtype` (the lowerings keep a computed operand, such
    as normalized rows or softmax probabilities, in the weights' dtype)."""
    rounded = (lambda a: quantize(a, dtype).astype(np.float32)) if dtype != "float32" else None
    return Arithmetic(
        _F32(),
        np.float32,
        lambda a: quantize(a, dtype).astype(np.float32),
        lambda v, to: quantize(v, to).astype(np.float32),
        rounded,
    )


def evaluate_in(graph: Graph, inputs: Mapping[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Outputs of `graph` computed as a `dtype` kernel does: inputs and outputs in `dtype`, the rest
    in float32 (sums accumulate in float32). Returned as float64 arrays of the dtype's values."""
    outputs = evaluate(graph, inputs, _in_kernel(dtype))
    return {name: quantize(value, dtype) for name, value in outputs.items()}


def reduced(graph: Graph, budget: int = _BUDGET) -> Graph:
    """`graph` with every bound dimension cut to the largest of 128, 64, 32, 16 that keeps every value
    within `budget` elements (the same program, fewer elements); `graph` itself if none binds."""
    dims = graph.bindings
    for cap in (128, 64, 32, 16):
        small = graph.bind(**{k: min(v, cap) for k, v in dims.items()})
        try:
            small.check_bound()  # a fixed slice past a cut axis (x[:, 256:512] at N=128): the next cap
            largest = max(math.prod(small.concrete_shape(n.id)) for n in small.nodes)
        except Exception:  # noqa: BLE001 - a cut that breaks a derived size (D/2 of an odd D): the next
            continue
        if largest <= budget:
            return small
    return graph


# input classes -------------------------------------------------------------------------------------
Range = tuple[float, float]
# Classes that probe an input's range, a bound derived from them ("near-constant" is not one of them).
RANGE_CLASSES = ("offset", "magnitude", "dominant", "limit")


def _far_end(r: Range) -> float:
    """The end of the range with the larger magnitude (where offsets and overflow live)."""
    return r[1] if abs(r[1]) >= abs(r[0]) else r[0]


def _typical(r: Range) -> Range:
    lo, hi = max(r[0], -1.0), min(r[1], 1.0)
    return (lo, hi) if lo < hi else r


_PRECISION = {"float32": 24, "bfloat16": 8, "float16": 11}


def _values(shape: tuple[int, ...], r: Range, cls: str, rng: np.random.Generator, dtype: str) -> np.ndarray:
    lo, hi = r
    end = _far_end(r)
    inward = -1.0 if end > 0 else 1.0
    if cls == "typical":
        return rng.uniform(*_typical(r), shape)
    if cls == "offset":  # x + c: an O(1) spread on the largest offset at which the dtype still resolves it
        c = np.sign(end) * min(abs(end), 2.0 ** (_PRECISION.get(dtype, 24) - 2))
        return c + inward * rng.uniform(0.0, min(2.0, hi - lo), shape)
    if cls == "magnitude":
        return rng.uniform(lo, hi, shape)
    if cls == "dominant":  # one element per row at the range's end, the rest typical
        x = rng.uniform(*_typical(r), shape)
        if x.ndim:
            rows = x.reshape(-1, shape[-1])
            rows[np.arange(rows.shape[0]), rng.integers(0, shape[-1], rows.shape[0])] = end
        return x
    if cls == "near-constant":  # each row one value with a relative 1e-3 ripple: anywhere in the range, or every
        # other row at a magnitude log-uniform from 1 to where the dtype resolves an O(1) step, where an eps
        base = rng.uniform(lo, hi, shape[:-1] + (1,) if shape else ())  # counts: (max + 1e-6) - min failed there
        top = min(abs(end), 2.0 ** (_PRECISION.get(dtype, 24) - 2))
        unit = np.exp(rng.uniform(np.log(min(1.0, top)), np.log(top), base.shape)) if top > 0 else base
        unit = unit * (rng.choice([-1.0, 1.0], base.shape) if lo < 0 < hi else np.sign(end))
        base.reshape(-1)[1::2] = np.clip(unit, lo, hi).reshape(-1)[1::2]
        return base * (1.0 + 1e-3 * rng.uniform(-1.0, 1.0, shape))
    if cls == "limit":  # magnitudes in the top half of the range, of either sign the range allows
        sign = rng.choice([-1.0, 1.0], shape) if lo < 0 < hi else np.sign(end) * np.ones(shape)
        return sign * abs(end) * rng.uniform(0.5, 1.0, shape)
    raise ValueError(f"unknown input class {cls!r}")


def class_inputs(
    graph: Graph, ranges: Mapping[str, Range], cls: str, target: str | None, dtype: str, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs of class `cls` for input `target` (or all: `ALL`; the others typical), inside their ranges,
    quantized to `dtype`.

    One input at a time: a class says which input breaks a variant, and products of several inputs
    at their limits overflow in the spec as written too, which would hide the variant's own hazards."""
    rng = np.random.default_rng(seed)
    out = {}
    for node in graph.inputs:
        name = node.attr("name")
        r = ranges[name]
        x = _values(graph.concrete_shape(node.id), r, cls if target in (name, ALL) else "typical", rng, dtype)
        out[name] = quantize(np.clip(x, *r), dtype)
    return out


ALL = "*"  # the target meaning every input at once


def cases(graph: Graph, classes: tuple[str, ...] = CLASSES) -> list[tuple[str, str | None]]:
    """(class, target) pairs: "typical" once; every other class once per input, and once for all inputs
    together when there are several (attention's logits are large only when q and k both are)."""
    names = graph.input_names
    targets = list(names) + ([ALL] if len(names) > 1 else [])
    return [(c, None) for c in classes if c == "typical"] + [(c, t) for c in classes if c != "typical" for t in targets]


def class_error(
    graph: Graph, inputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], dtype: str
) -> float:
    """Relative error of `graph` computed in `dtype` against `expected` (a float64 reference)."""
    return max_rel_error(evaluate_in(graph, inputs, dtype), expected)


# ranges ----------------------------------------------------------------------------------------------
_FIRST_BOUND, _STEP = 1.0, 16.0


def declared_ranges(graph: Graph) -> dict[str, Range]:
    return {n.attr("name"): tuple(n.attr("range")) for n in graph.inputs if n.attr("range") is not None}


# Below a point where the spec as written fails outright (an overflow to inf, or to 0 by way of an
# infinite divisor), a derived bound keeps this much headroom: a variant may sum up to this many
# values before it normalizes (a deferred softmax division over 65,536 keys), which moves its own
# overflow down by that factor. Overflows closer to the limit than that are not what this is for.
HEADROOM = 2.0**16


def headroom(dtype: str) -> float:
    """`HEADROOM`, or an eighth of `dtype`'s binary exponent range where that is less: float32's and
    bfloat16's is 2^16, float16's (largest 65,504) 2^2. A fixed 2^16 is more than float16 has, so a
    float16 spec that computed every input up to its limit was held to [-1, 1], and a variant whose exp
    overflows above 88.7 (softmax without its max shift) was offered and chosen.

    >>> headroom("float32"), headroom("bfloat16"), headroom("float16")
    (65536.0, 65536.0, 4.0)
    """
    return min(HEADROOM, 2.0 ** round(math.log2(dtype_max(dtype)) / 8))


def input_ranges(graph: Graph, dtype: str, seed: int = 0, bar: float | None = None) -> dict[str, Range]:
    """Every input's range: the declared one, or [-R, R] derived from the spec as written.

    R is the largest of 16, 256, ... at which the spec as written, in `dtype`, stays within the kernel
    tolerance of float64 (or `bar`) on every range class of that input (the others typical): the spec
    as written is what the user asked for, and where it already breaks no variant is held to more.
    Where the spec fails outright there (or nowhere below the dtype's limit), R keeps `headroom(dtype)`
    below it. An input the spec breaks on already at 16 gets [-1, 1].
    """
    bar = tolerance(dtype) if bar is None else bar
    g = reduced(graph)
    # a pure function of what the reduced graph computes: the tuner derives them to screen variants and
    # again to check the chosen kernel (at its check shape, which most often reduces to the same graph)
    key = (g.canonical_hash(), tuple(sorted(g.bindings.items())), dtype, seed, bar)
    if key not in _DERIVED:
        if len(_DERIVED) >= 64:
            _DERIVED.pop(next(iter(_DERIVED)))
        _DERIVED[key] = _derive_ranges(graph, g, dtype, seed, bar)
    return dict(_DERIVED[key])


_DERIVED: dict[tuple[Any, ...], dict[str, Range]] = {}  # input_ranges by (reduced graph, dtype, seed, bar)


def _derive_ranges(graph: Graph, g: Graph, dtype: str, seed: int, bar: float) -> dict[str, Range]:
    limit = dtype_max(dtype)  # a declared range past it drew inf inputs: NaN references, every class passed
    ranges = {n: (-1.0, 1.0) for n in g.input_names}
    ranges.update({n: (max(lo, -limit), min(hi, limit)) for n, (lo, hi) in declared_ranges(g).items()})
    for name in g.input_names:
        if graph.input(name).attr("range") is not None:
            continue
        best, outright = _FIRST_BOUND, True
        for step in (_STEP**2, _STEP):  # coarse steps to the failure, then one finer step past the last good bound
            bound = best * step
            while bound < limit:
                worst = max(
                    _spec_error(g, class_inputs(g, {**ranges, name: (-bound, bound)}, c, name, dtype, seed), dtype)
                    for c in RANGE_CLASSES
                )
                if worst > bar:
                    outright = not worst < 0.5
                    break
                best = bound
                bound *= step
        r = max(best / headroom(dtype), 1.0) if outright else best
        ranges[name] = (-r, r)
    return ranges


def finite_ranges(graph: Graph, dtype: str, seed: int = 0) -> dict[str, Range]:
    """Every input's range where the spec as written stays finite: [-R, R], `HEADROOM` below the first
    bound at which it fails outright (a relative error of 0.5 or more: an overflow, a NaN) on a range
    class, or below the dtype's limit; declared ranges as declared.

    Wider than `input_ranges` where the spec loses accuracy before it overflows (softmax with a
    temperature, x / 0.7, is past the float32 tolerance at |x| ~ 256 and finite up to ~1e38): a
    variant that overflows where the spec as written does not (exp without the max shift) returns
    NaN on inputs the spec as written computes, so the overflow and domain hazards are looked for on
    these ranges too (`axon.verify.floating.screen`)."""
    return input_ranges(graph, dtype, seed, bar=0.5)


def finite_edge_cases(
    graph: Graph, ranges: Mapping[str, Range], dtype: str, seed: int = 0
) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(input, inputs): the "limit" class, one input at a time, at the edge of its `finite_ranges`
    range, for each input whose finite range is wider than its range in `ranges`. A kernel must stay
    finite there, and about as close as the spec as written: a temperature softmax is accurate in
    float32 to |x| ~ 16 and finite far beyond, where an exp without the max shift returns NaN."""
    finite = finite_ranges(graph, dtype, seed)
    return [
        (name, class_inputs(graph, {**ranges, name: finite[name]}, "limit", name, dtype, seed))
        for name in graph.input_names
        if abs(_far_end(finite[name])) > abs(_far_end(ranges[name]))
    ]


def joint_ranges(graph: Graph, ranges: Mapping[str, Range], cls: str, dtype: str, seed: int = 0) -> dict[str, Range]:
    """The ranges class `cls` draws from when it pushes every input at once (`ALL`).

    Each input's range is derived with the others typical; at all of their ends together the spec as
    written can fail outright (a matmul of two inputs each at 2^44 overflows float32), and a case where
    the spec is infinitely wrong holds a kernel to nothing. So where this class fails the spec outright,
    every derived range is scaled by the same power of 1/_STEP until it does not, then kept `HEADROOM`
    below that (as a single input's bound is). Where the spec survives the class, the ranges are the
    inputs' own (that case is unchanged); declared ranges and ranges within [-1, 1] are never scaled.
    """
    g = reduced(graph)
    derived = set(g.input_names) - set(declared_ranges(graph))

    def scaled(s: float) -> dict[str, Range]:
        out = dict(ranges)
        for n in derived:
            lo, hi = ranges[n]
            out[n] = (min(lo * s, -1.0), max(hi * s, 1.0)) if lo < 0 < hi else (lo, hi)
        return out

    scale = 1.0
    while True:
        r = scaled(scale)
        if all(max(-lo, hi) <= 1.0 for n, (lo, hi) in r.items() if n in derived):
            return r
        if _spec_error(g, class_inputs(g, r, cls, ALL, dtype, seed), dtype) < 0.5:
            return r if scale == 1.0 else scaled(scale / headroom(dtype))
        scale /= _STEP


def all_cases(
    graph: Graph, ranges: Mapping[str, Range], dtype: str, seed: int = 0
) -> list[tuple[str, str | None, dict[str, Range], dict[str, np.ndarray]]]:
    """(class, target, the ranges drawn from, inputs) for every case of `cases` (`ALL`: `joint_ranges`)."""
    out = []
    for cls, target in cases(graph):
        r = joint_ranges(graph, ranges, cls, dtype, seed) if target == ALL else dict(ranges)
        out.append((cls, target, r, class_inputs(graph, r, cls, target, dtype, seed)))
    return out


def _spec_error(g: Graph, inputs: Mapping[str, np.ndarray], dtype: str) -> float:
    return class_error(g, inputs, evaluate(g, inputs), dtype)


# the variant check ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassResult:
    cls: str
    target: str | None
    spec_error: float
    variant_error: float
    allowed: float

    @property
    def ok(self) -> bool:
        return self.variant_error <= allowed_error(self.spec_error, self.variant_error, self.allowed)

    @property
    def label(self) -> str:
        return self.cls if self.target is None else f"{self.cls}({'all inputs' if self.target == ALL else self.target})"


class AdversarialCheck:
    """The spec's cases computed once; `check(variant)` compares a variant on them.

    >>> from axon.workloads import get
    >>> from axon.synth import discover_variants
    >>> g = get("softmax").graph("small")
    >>> check = AdversarialCheck(g, "float32")
    >>> [check.reason(v.graph) != "" for v in discover_variants(g, max_depth=1, exclude=frozenset({"split-tiles"}))]
    [False, True, False]
    """

    def __init__(self, spec: Graph, dtype: str, ranges: Mapping[str, Range] | None = None, seed: int = 0) -> None:
        self.spec, self.dtype = reduced(spec), dtype
        self.ranges = dict(ranges) if ranges is not None else input_ranges(spec, dtype, seed)
        self.cases = []
        self.case_ranges: dict[tuple[str, str | None], dict[str, Range]] = {}
        for cls, target, ranges_used, inputs in all_cases(self.spec, self.ranges, dtype, seed):
            expected = evaluate(self.spec, inputs)
            self.cases.append((cls, target, inputs, expected, class_error(self.spec, inputs, expected, dtype)))
            self.case_ranges[cls, target] = ranges_used

    def check(self, variant: Graph) -> list[ClassResult]:
        v = variant.bind(**self.spec.bindings)
        return [
            ClassResult(cls, target, err, class_error(v, inputs, expected, self.dtype), tolerance(self.dtype))
            for cls, target, inputs, expected, err in self.cases
        ]

    def reason(self, variant: Graph) -> str:
        """A one-line reason for the worst failing case, or "" when the variant passes every case."""
        bad = [r for r in self.check(variant) if not r.ok]
        if not bad:
            return ""
        worst = max(bad, key=lambda r: r.variant_error / max(r.spec_error, tolerance(self.dtype)))
        used = self.case_ranges[worst.cls, worst.target]
        where = ", ".join(f"{n} in [{lo:.3g}, {hi:.3g}]" for n, (lo, hi) in used.items())
        return (
            f"relative error {worst.variant_error:.2g} in {self.dtype} on {worst.label} inputs ({where}), "
            f"the spec as written {worst.spec_error:.2g}"
        )
