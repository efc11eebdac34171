"""The cheap first check: both graphs in float64 on random small shapes (size 1 included).

Sizes are chosen so every dimension expression of either graph is a positive whole number (a
`D/2` forces even D). This refutes most wrong rewrites in milliseconds; it proves nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from math import lcm

import numpy as np

from axon.errors import SpecError
from axon.ir import Graph, evaluate
from axon.ir.dims import Dim


@dataclass(frozen=True)
class Mismatch:
    """Concrete sizes and inputs on which two graphs differ, with both outputs."""

    sizes: dict[str, int]
    inputs: dict[str, np.ndarray]
    outputs_a: dict[str, np.ndarray]
    outputs_b: dict[str, np.ndarray]
    max_abs_diff: float


def _all_dims(g: Graph) -> list[Dim]:
    dims = [d for n in g.nodes for d in n.shape]
    dims += [v for n in g.nodes for _, v in n.attrs if isinstance(v, Dim)]
    return dims


def size_trials(graphs: tuple[Graph, ...], trials: int, seed: int) -> list[dict[str, int]]:
    """Size assignments: the smallest admissible one first, then random small multiples."""
    # each distinct dimension once: the nodes of a graph share a few shapes, and a trial evaluates them all
    dims = list(dict.fromkeys(d for g in graphs for d in _all_dims(g)))
    shapes = list(dict.fromkeys(d for g in graphs for n in g.nodes for d in n.shape))
    syms = sorted({s for d in dims for s in d.symbols})
    step = {s: 1 for s in syms}
    for d in dims:
        for mono, coef in d.terms:
            for s, _ in mono:
                step[s] = lcm(step[s], coef.denominator)
    rng = np.random.default_rng(seed)
    out: list[dict[str, int]] = []
    for t in range(trials * 4):
        if len(out) >= trials:
            break
        low = 1 if t in (0, 2) else 2  # size 1 everywhere first, then mixtures, then all > 1
        # a symbol forced to multiples of a tile (K/128) stays at one or two tiles: cost, not coverage
        mult = {
            s: 1 if t == 0 else int(rng.integers(low, 5 if step[s] < 16 else 3)) if step[s] < 16 or t % 2 else 1
            for s in syms
        }
        sizes = {s: step[s] * mult[s] for s in syms}
        try:
            if all(d.evaluate(sizes) >= 0 for d in dims) and all(d.evaluate(sizes) >= 1 for d in shapes):
                out.append(sizes)
        except SpecError:
            continue
    return out


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    finite = np.abs(a[np.isfinite(a)])
    scale = max(1.0, float(finite.max()) if finite.size else 1.0)
    return bool(np.allclose(a, b, rtol=1e-9, atol=1e-12 * scale, equal_nan=True))


# The last few first sides of `compare` (graph, sizes, seed -> the graph held, inputs, outputs): variant
# discovery checks every proposal against its parent, so the parent's side is the same for all of them.
_FIRST_SIDES: OrderedDict[tuple[int, tuple[tuple[str, int], ...], int], tuple[Graph, dict, dict]] = OrderedDict()
_FIRST_SIDES_KEPT = 8


def _first_side(a: Graph, bindings: tuple[tuple[str, int], ...], seed: int) -> tuple[dict, dict]:
    """`a`'s random inputs at these sizes and its outputs on them (pure: kept for the same `a` object)."""
    key = (id(a), bindings, seed)
    kept = _FIRST_SIDES.get(key)
    if kept is not None and kept[0] is a:
        _FIRST_SIDES.move_to_end(key)
        return kept[1], kept[2]
    ga = Graph(a.name, a.nodes, a.outputs, bindings, a.output_names)
    rng = np.random.default_rng(seed)
    inputs = {n.attr("name"): rng.uniform(-1.0, 1.0, n.type.concrete(ga.bindings)) for n in ga.inputs}
    outputs = evaluate(ga, inputs)
    _FIRST_SIDES[key] = (a, inputs, outputs)
    if len(_FIRST_SIDES) > _FIRST_SIDES_KEPT:
        _FIRST_SIDES.popitem(last=False)
    return inputs, outputs


def compare(a: Graph, b: Graph, sizes: Mapping[str, int], seed: int) -> Mismatch | None:
    """Mismatch of a and b at these sizes on random inputs, or None if they agree."""
    bindings = tuple(sorted(sizes.items()))
    inputs, out_a = _first_side(a, bindings, seed)
    gb = Graph(b.name, b.nodes, b.outputs, bindings, b.output_names)
    out_b = evaluate(gb, inputs)
    worst = 0.0
    bad = False
    for va, vb in zip(out_a.values(), out_b.values()):
        if not _close(va, vb):
            bad = True
            if va.shape != vb.shape:
                worst = float("inf")
                continue
            one_nan = np.isnan(va) != np.isnan(vb)  # a NaN on one side only is a difference too
            gap = np.abs(va - vb)[np.isfinite(va - vb)]
            worst = max(worst, float(gap.max()) if gap.size else 0.0, float("inf") if one_nan.any() else 0.0)
    if not bad:
        return None
    copied = {k: v.copy() for k, v in inputs.items()}, {k: v.copy() for k, v in out_a.items()}  # the kept side stays
    return Mismatch(dict(sizes), copied[0], copied[1], out_b, worst)


def refute(a: Graph, b: Graph, trials: int = 4, seed: int = 0) -> Mismatch | None:
    """A mismatch on one of `trials` size assignments (a finite difference preferred to a NaN one), or None.

    >>> import axon.spec as ax
    >>> from axon.ir import trace
    >>> @ax.spec(x="M N")
    ... def s(x):
    ...     return ax.sum(ax.exp(x))
    >>> @ax.spec(x="M N")
    ... def e(x):
    ...     return ax.exp(ax.sum(x))
    >>> refute(trace(s), trace(e)) is not None
    True
    """
    first = None
    for t, sizes in enumerate(size_trials((a, b), trials, seed)):
        found = compare(a, b, sizes, seed + t)
        if found is not None and np.isfinite(found.max_abs_diff):
            return found
        first = first or found
    return first
