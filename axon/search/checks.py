"""The checks a chosen kernel passes before `axon tune` reports it, run in the NKI emulator.

`numerics_check`: uniform [-1, 1] inputs against the float64 reference, within the dtype's tolerance
or, where the spec as written is itself further off in the kernel's dtype, twice its error (a bfloat16
softmax of sharp logits). `adversarial_check`: the
input classes of `axon.verify.adversarial` (large offsets, large magnitudes, a dominant element,
near-constant rows, values at the range's edge), quantized to the kernel's dtype, against the
float64 reference on those quantized inputs. Neither tunes anything; both only measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from axon import nki
from axon.errors import AxonError, SpecError
from axon.ir import Graph, evaluate, flops, max_rel_error, reference_case
from axon.measure.backend import write_kernel
from axon.search.problem import LoweredProblem
from axon.verify.adversarial import (
    ALL,
    all_cases,
    class_inputs,
    evaluate_in,
    finite_edge_cases,
    input_ranges,
    joint_ranges,
    numpy_dtype,
    quantize,
    tolerance,
)
from axon.verify.allowance import allowed_error

# How far a kernel may be off on the uniform case relative to the spec as written computed in the
# kernel's dtype on the same inputs: both compute the same values and differ in rounding order, while a
# wrong kernel is off by far more. The adversarial classes allow more (`ACCURACY_FACTOR`): their
# errors swing with the input drawn.
UNIFORM_SPEC_FACTOR = 2.0
# Above this many FLOPs the uniform check runs at reduced sizes (every dimension cut to 512-2048).
NUMERICS_FLOPS = 4e9


@dataclass(frozen=True)
class NumericsCheck:
    """`tolerance` is what the kernel may have: the dtype's tolerance, or `UNIFORM_SPEC_FACTOR` times
    `spec_error` (the spec as written in the kernel's dtype, on the same inputs) where that is larger."""

    dims: dict[str, int]
    max_rel_err: float
    tolerance: float
    spec_error: float = 0.0
    reference_not_finite: int = 0  # elements of the float64 reference that are inf or NaN
    dtype_tolerance: float = 0.0  # the dtype's own bar, before the spec as written widens it

    @property
    def ok(self) -> bool:
        return self.max_rel_err <= self.tolerance

    def verdict(self) -> str:
        """OK or FAILED; an OK only because the spec as written is itself off the float64 reference by
        more than the dtype allows says so (mean(x * x) - mean(x) ** 2 on x near 1e4 in float32: 1.6e+03,
        which read as 'OK' for a kernel that matches the spec, not the answer)."""
        if not self.ok:
            return "FAILED"
        if self.spec_error > self.dtype_tolerance > 0:
            return (
                f"OK only as the spec as written: the spec as written is itself {self.spec_error:.1e} off the "
                f"float64 reference in this dtype (over the dtype's {self.dtype_tolerance:g}: it loses accuracy "
                "on these inputs); the kernel matches the spec, not the float64 answer"
            )
        return "OK"

    def why_not(self) -> str:
        """What a failure with a non-finite reference is: the spec's (exp(1000 * x) on [-1, 1] read as
        'the best kernel does not match the reference (max rel err inf)'), not the kernel's."""
        if not self.reference_not_finite:
            return ""
        return (
            f": the float64 reference itself is inf or NaN at {self.reference_not_finite:,} elements on the "
            f"random inputs at {self.dims} (the spec overflows there: declare its inputs' range, "
            "ax.tensor(..., range=(lo, hi)), or rescale it)"
        )

    def describe(self) -> str:
        """'(tolerance 0.02)', or with the spec's own error where that sets the bound."""
        if self.spec_error * UNIFORM_SPEC_FACTOR >= self.tolerance > 0:
            return (
                f"(tolerance {self.tolerance:.2g}: {UNIFORM_SPEC_FACTOR:g}x the spec as written in the dtype, "
                f"{self.spec_error:.2e})"
            )
        return f"(tolerance {self.tolerance:g})"


def _checkable(
    problem: LoweredProblem, point: dict[str, Any], max_flops: float, caps: tuple[int, ...] = (512, 1024, 2048)
) -> tuple[LoweredProblem, Graph, dict[str, int]]:
    """The problem at the tuned shape when it is small enough, else at the smallest reduced shape at
    which the same point lowers: each dimension over a cap is cut to the cap plus its remainder modulo
    the cap (so a tile that divides the cap ends as raggedly as at the tuned shape: S=1152 is checked
    at 640, still one whole and one narrow 512-chunk) or, where that does not lower, to the cap."""
    graph = problem.graph
    dims = dict(graph.bindings)
    if flops(graph) > max_flops:
        for small in _reductions(dims, caps):
            g = graph.bind(**small)
            try:
                g.check_bound()
            except SpecError:  # a fixed slice past the cut (x[:, 0:2048] at N=128): a larger reduction
                continue
            p = LoweredProblem(
                problem.workload, g, problem.hw, [_rebind(v, small) for v in problem.variants], problem.dtype
            )
            if p.validate(point) is None:
                problem, graph, dims = p, g, small
                break
    reason = problem.validate(point)
    if reason is not None:
        raise AxonError(f"the best point cannot be checked at {dims}: {reason}")
    return problem, graph, dims


def _reductions(dims: dict[str, int], caps: tuple[int, ...]) -> list[dict[str, int]]:
    """Reduced shapes to try, smallest cap first, the remainder-keeping cut before the plain one.

    >>> _reductions({"S": 1152, "D": 128}, (512, 1024))
    [{'S': 640, 'D': 128}, {'S': 512, 'D': 128}, {'S': 1024, 'D': 128}]
    """
    out: list[dict[str, int]] = []
    for cap in caps:
        for small in (
            {k: cap + v % cap if v > cap else v for k, v in dims.items()},
            {k: min(v, cap) for k, v in dims.items()},
        ):
            if small != dims and small not in out:
                out.append(small)
    return out


def _kernel(problem: LoweredProblem, point: dict[str, Any], directory: str | Path) -> Any:

    cand = problem.build(point)
    path = write_kernel(cand.source, directory)
    return nki.load_kernel(f"{path}:{cand.kernel}")


def _run(fn: Any, problem: LoweredProblem, graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:

    arrays = [inputs[n].astype(numpy_dtype(problem.dtype)) for n in graph.input_names]
    with np.errstate(all="ignore"):  # a kernel's inf and NaN are results, compared against the reference's
        out = nki.run(fn, *arrays, hw=problem.hw)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return dict(zip(graph.output_names, outs))


def numerics_check(
    problem: LoweredProblem,
    point: dict[str, Any],
    max_flops: float = NUMERICS_FLOPS,
    seed: int = 0,
    directory: str | Path = ".axon/cache/kernels",
) -> NumericsCheck:
    """Execute the kernel of `point` in the emulator against the float64 reference.

    At the tuned shape when it is small enough, otherwise at a reduced shape (each dimension cut to
    at most 512, 1024 or 2048: the first at which the point lowers) with the same point, so the same
    tiling code runs on real numbers.
    """

    problem, graph, dims = _checkable(problem, point, max_flops)
    fn = _kernel(problem, point, directory)
    # the reference on what the kernel is given: the inputs rounded to its dtype (a bfloat16 kernel's
    # error was its inputs' rounding, 2e-3 of the 2e-2 it may have, before any of its own arithmetic)
    inputs, expected = reference_case(graph, seed, lambda x: quantize(x, problem.dtype))
    worst = max_rel_error(_run(fn, problem, graph, inputs), expected)
    with np.errstate(all="ignore"):
        spec_err = max_rel_error(evaluate_in(graph, inputs, problem.dtype), expected)
    # the float64 reference does not round at the spec's own casts (ax.cast(x, "bfloat16")): a kernel
    # that does is held to the tolerance of the narrowest dtype the spec casts to
    casts = {str(n.attr("dtype")) for n in graph.nodes if n.op == "cast"}
    allowed = base = max(tolerance(d) for d in {problem.dtype, *casts})
    if math.isfinite(spec_err):
        allowed = max(allowed, UNIFORM_SPEC_FACTOR * spec_err)
    not_finite = sum(int(np.size(v) - np.count_nonzero(np.isfinite(v))) for v in expected.values())
    return NumericsCheck(dims, worst, allowed, spec_err, not_finite, base)


@dataclass(frozen=True)
class ClassFigure:
    """One input class, worst over the inputs it was applied to: the kernel's relative error, the
    spec's as written computed in the dtype, and the most the kernel may have."""

    cls: str
    kernel_error: float
    spec_error: float
    allowed: float
    worst_case: str

    @property
    def ok(self) -> bool:
        return self.kernel_error <= self.allowed


@dataclass(frozen=True)
class AdversarialReport:
    dims: dict[str, int]
    dtype: str
    ranges: dict[str, tuple[float, float]]
    classes: tuple[ClassFigure, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.classes)

    def verdict(self) -> str:
        """OK or FAILED; an OK where the kernel is inf or NaN (allowed only because the spec as written is
        too, in the dtype) says so: it read as a kernel right on the whole declared range."""
        if not self.ok:
            return "FAILED"
        broken = [c.cls for c in self.classes if not math.isfinite(c.kernel_error)]
        if not broken:
            return "OK"
        ranges = ", ".join(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in self.ranges.items())
        return (
            f"OK only as the spec as written: both give inf or NaN in {self.dtype} on the {', '.join(broken)} "
            f"inputs of {ranges}: the spec as written is not finite there in {self.dtype} "
            "(an overflow, or an op outside its domain)"
        )

    def worst(self) -> dict[str, float]:
        """Worst relative error of the kernel per input class."""
        return {c.cls: c.kernel_error for c in self.classes}

    def failure(self) -> str:
        bad = [c for c in self.classes if not c.ok]
        if not bad:
            return ""
        c = max(bad, key=lambda c: c.kernel_error / max(c.allowed, 1e-30))
        return (
            f"relative error {c.kernel_error:.2g} on {c.worst_case} inputs in {self.dtype} "
            f"(allowed {c.allowed:.2g}; the spec as written {c.spec_error:.2g})"
        )

    def summary(self) -> str:
        """Each class's worst error; where it is past the tolerance (allowed only when the spec as
        written is about as far off there), the spec's own figure beside it."""
        return ", ".join(
            f"{c.cls} {c.kernel_error:.1e}"
            + (f" ({c.worst_case}: as written {c.spec_error:.1e})" if c.kernel_error > self.tolerance else "")
            for c in self.classes
        )

    @property
    def tolerance(self) -> float:
        return tolerance(self.dtype)


def adversarial_check(
    problem: LoweredProblem,
    point: dict[str, Any],
    kernel_dir: str | Path,
    max_flops: float = 1e8,
    seed: int = 0,
    ranges: dict[str, tuple[float, float]] | None = None,
) -> AdversarialReport:
    """Execute the kernel of `point` in the emulator on every adversarial input class.

    It runs a case per class and input, so above `max_flops` it runs at a reduced shape with the same
    point (as `numerics_check` does above its larger threshold): what the classes probe is values,
    not sizes. Inputs are drawn in each input's range (declared, or derived from the spec as written:
    `axon.verify.adversarial.input_ranges`; for a class on every input at once, scaled together to
    where the spec survives it: `joint_ranges`), quantized to the kernel's dtype; the reference is the
    float64 spec on those quantized inputs. A class passes when the kernel's error is at most the
    larger of the kernel tolerance and `ACCURACY_FACTOR` times the error of the spec as written
    computed in the dtype (what any kernel of the spec could be held to).

    >>> import tempfile
    >>> from axon.synth import discover_variants
    >>> from axon.target import load_hw
    >>> from axon.workloads import get
    >>> g = get("softmax").graph("small")
    >>> p = LoweredProblem("softmax", g, load_hw("trn1"), discover_variants(g, max_depth=0), "float32")
    >>> adversarial_check(p, p.default_point(0), tempfile.mkdtemp()).ok
    True
    """
    full, full_graph, full_dims = _checkable(problem, point, NUMERICS_FLOPS, (1024, 2048))
    problem, graph, dims = _checkable(problem, point, max_flops, (128, 256, 512, 1024, 2048))
    fn = _kernel(problem, point, kernel_dir)
    derived = ranges is None
    ranges = dict(ranges) if ranges is not None else input_ranges(graph, problem.dtype, seed)
    worst: dict[str, ClassFigure] = {}

    def measure(cls: str, label: str, inputs: dict[str, np.ndarray], kernel: Any, g: Graph, p: LoweredProblem) -> None:
        with np.errstate(all="ignore"):  # overflows are what some classes are for; they are measured, not warned
            expected = evaluate(g, inputs)
            spec_err = max_rel_error(evaluate_in(g, inputs, p.dtype), expected)
            err = max_rel_error(_run(kernel, p, g, inputs), expected)
        allowed = allowed_error(spec_err, err, tolerance(p.dtype))  # as the variant screen's
        figure = ClassFigure(cls, err, spec_err, allowed, label)
        prev = worst.get(cls)
        if prev is None or err / max(allowed, 1e-30) > prev.kernel_error / max(prev.allowed, 1e-30):
            worst[cls] = figure

    for cls, target, _, inputs in all_cases(graph, ranges, problem.dtype, seed):
        label = cls if target is None else f"{cls}({'all inputs' if target == ALL else target})"
        measure(cls, label, inputs, fn, graph, problem)
    for name, inputs in finite_edge_cases(graph, ranges, problem.dtype, seed) if derived else ():
        measure(FINITE_EDGE, f"{FINITE_EDGE}({name})", inputs, fn, graph, problem)
    if full_dims != dims:
        # The classes run at reduced sizes, where a tiled loop may run once (attention at S=1024 is checked
        # at S=128: one key chunk, so the online softmax never rescales). One case more at sizes cut to
        # 1024 or 2048 (two 512-column tiles at least), where the loops run as tuned: one dominant element
        # per row on every input, so that a row's maximum often lies past its first tile.
        joint = joint_ranges(full_graph, ranges, "dominant", full.dtype, seed)
        inputs = class_inputs(full_graph, joint, "dominant", ALL, full.dtype, seed)
        label = f"dominant(all inputs, at {' '.join(f'{k}={v}' for k, v in full_dims.items())})"
        measure("dominant", label, inputs, _kernel(full, point, kernel_dir), full_graph, full)
    return AdversarialReport(dims, problem.dtype, ranges, tuple(worst.values()))


FINITE_EDGE = "finite-edge"  # the class of `finite_edge_cases`: an input where the spec is barely finite


def _rebind(variant: Any, dims: dict[str, int]) -> Any:
    return replace(variant, graph=variant.graph.bind(**dims))


__all__ = ["AdversarialReport", "ClassFigure", "NumericsCheck", "adversarial_check", "numerics_check", "tolerance"]
