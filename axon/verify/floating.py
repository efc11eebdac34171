"""The floating-point gate on variants: proved equal over the reals is not enough to be offered.

A variant is kept only when neither the range analysis (`axon.verify.ranges`: a hazard the spec as
written does not have) nor the adversarial measurement (`axon.verify.adversarial`: less accurate in
the kernel's dtype than the spec as written) rejects it. The two look at the variant independently;
a rejection carries the first reason found, in words a user can act on (declare a range).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from axon.ir import Graph
from axon.verify.adversarial import AdversarialCheck, finite_ranges, input_ranges, reduced
from axon.verify.ranges import new_hazards


@dataclass(frozen=True)
class Rejection:
    variant: Any
    gate: str  # "range analysis" or "adversarial check"
    reason: str

    def describe(self) -> str:
        moves = " + ".join(m.name for m in getattr(self.variant, "moves", ())) or "as written"
        return f"{moves}: {self.reason} [{self.gate}]"


def screen(
    spec: Graph, variants: Sequence[Any], dtype: str | None = None, seed: int = 0
) -> tuple[list[Any], list[Rejection]]:
    """Split `variants` (objects with `.graph`; the spec as written first) into kept and rejected.

    `spec` must be bound (sizes matter for reductions); `dtype` defaults to the spec's input dtype.

    >>> from axon.workloads import get
    >>> from axon.synth import discover_variants
    >>> g = get("softmax").graph("small")
    >>> kept, rejected = screen(g, discover_variants(g, max_depth=1, exclude=frozenset({"split-tiles"})))
    >>> [r.describe().split(":")[0] for r in rejected]
    ['unshift-exp']
    """
    dtype = dtype or (spec.inputs[0].type.dtype if spec.inputs else "float32")
    ranges = input_ranges(spec, dtype, seed)
    # where the spec as written stays finite: a variant that overflows there returns NaN where it does not
    finite = finite_ranges(spec, dtype, seed)
    check = AdversarialCheck(spec, dtype, ranges, seed)
    analyzed = reduced(spec)
    kept, rejected = [], []
    for v in variants:
        if v.graph.canonical_hash() == spec.canonical_hash():
            kept.append(v)
            continue
        bound = v.graph.bind(**analyzed.bindings)
        hazards = new_hazards(analyzed, bound, ranges, dtype)
        if not hazards and finite != ranges:
            hazards = [h for h in new_hazards(analyzed, bound, finite, dtype) if h.kind != "error-growth"]
        measured = check.reason(v.graph)
        if hazards:
            rejected.append(Rejection(v, "range analysis", hazards[0].text))
        elif measured:
            rejected.append(Rejection(v, "adversarial check", measured))
        else:
            kept.append(v)
    return kept, rejected
