"""`prove(g1, g2)`: equivalence of two graphs for every size, or a NumPy-confirmed counterexample.

Cheapest first: float64 on random small shapes (refutes); then both graphs in normal form (equal
normal forms prove it); then one quantifier-free Z3 query over the atoms; then induction over a
reduction length. Z3 always has a timeout and `Unknown` is never a proof. Bindings of the graphs are
ignored: what is proved holds for all sizes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from axon.errors import SpecError
from axon.ir import Graph, evaluate
from axon.verify import expr as E
from axon.verify.numeric import refute
from axon.verify.semantics import Semantics
from axon.verify.smt import check_equal, induction


@dataclass(frozen=True)
class Proof:
    """The graphs are equal for every size; `certificate` says why, in words a reader can check."""

    method: str  # "normalization" | "smt" | "induction"
    time_s: float
    certificate: str

    status = "proved"


@dataclass(frozen=True)
class Counterexample:
    """Concrete small inputs on which the graphs differ; `confirmed` by re-running NumPy."""

    sizes: dict[str, int]
    inputs: dict[str, np.ndarray] = field(repr=False)
    outputs_a: dict[str, np.ndarray] = field(repr=False)
    outputs_b: dict[str, np.ndarray] = field(repr=False)
    max_abs_diff: float
    confirmed: bool
    time_s: float

    status = "refuted"

    @property
    def certificate(self) -> str:
        if self.max_abs_diff == float("inf"):
            return f"one output is NaN where the other is a number, at sizes {self.sizes}"
        return f"differs by {self.max_abs_diff:.3g} at sizes {self.sizes}"


@dataclass(frozen=True)
class Unknown:
    """Neither proved nor refuted within the budget (never treated as proved)."""

    reason: str
    time_s: float

    status = "unknown"

    @property
    def certificate(self) -> str:
        return self.reason


Result = Proof | Counterexample | Unknown


def _check_signature(g1: Graph, g2: Graph) -> None:
    t1 = {n.attr("name"): n.type.shape for n in g1.inputs}
    t2 = {n.attr("name"): n.type.shape for n in g2.inputs}
    if t1 != t2:
        raise SpecError(f"prove: graphs {g1.name} and {g2.name} have different inputs ({sorted(t1)} vs {sorted(t2)})")
    if len(g1.outputs) != len(g2.outputs):
        raise SpecError(f"prove: {g1.name} has {len(g1.outputs)} outputs, {g2.name} has {len(g2.outputs)}")
    for a, b in zip(g1.outputs, g2.outputs):
        if g1.nodes[a].shape != g2.nodes[b].shape:
            raise SpecError(f"prove: output shapes differ: {g1.nodes[a].type} vs {g2.nodes[b].type}")


def prove(g1: Graph, g2: Graph, timeout_s: float = 5.0, trials: int = 4, seed: int = 0) -> Result:
    """Is g2 equal to g1 for every size of the symbolic dimensions?

    >>> import axon.spec as ax
    >>> from axon.ir import trace
    >>> @ax.spec(x="M K", w="K N", r="M 1")
    ... def before(x, w, r):
    ...     return (x * r) @ w
    >>> @ax.spec(x="M K", w="K N", r="M 1")
    ... def after(x, w, r):
    ...     return r * (x @ w)
    >>> prove(trace(before), trace(after)).status
    'proved'
    """
    start = time.perf_counter()
    _check_signature(g1, g2)
    found = refute(g1, g2, trials=trials, seed=seed)
    if found is not None:
        again = _recheck(g1, g2, found)
        if not again:  # a mismatch NumPy cannot reproduce is not a counterexample
            return Unknown(f"unconfirmed mismatch at sizes {found.sizes}", time.perf_counter() - start)
        return Counterexample(
            found.sizes,
            found.inputs,
            found.outputs_a,
            found.outputs_b,
            found.max_abs_diff,
            again,
            time.perf_counter() - start,
        )
    lhs, used = g1.memo(("proof_semantics",), lambda: _normal_forms(g1))
    if isinstance(lhs, E.Unsupported):
        return Unknown(f"no proof semantics: {lhs}", time.perf_counter() - start)
    names = E.Names([used])  # as if g1's normal forms had just been computed with these names
    try:
        rhs = [v.poly for v in Semantics(g2, names).outputs()]
        _ = [p.key for p in rhs]  # compared below: a key too large raises here, not there
    except E.Unsupported as exc:
        return Unknown(f"no proof semantics: {exc}", time.perf_counter() - start)
    if all(a == b for a, b in zip(lhs, rhs)):
        cert = "identical normal forms: " + " | ".join(p.key[:240] for p in lhs)
        return Proof("normalization", time.perf_counter() - start, cert)
    budget = max(0.05, timeout_s - (time.perf_counter() - start))
    status = check_equal(lhs, rhs, budget)
    if status == "unsat":
        cert = "normal forms differ only up to real arithmetic and the stated facts; Z3: unsat of lhs != rhs"
        return Proof("smt", time.perf_counter() - start, cert)
    for a, b in zip(lhs, rhs):
        if a == b:
            continue
        budget = max(0.05, timeout_s - (time.perf_counter() - start))
        outcome, cert = induction(a, b, budget, names)
        if outcome != "proved":
            why = (
                f"Z3 said {status} on the normal forms (a model with uninterpreted functions is not a real "
                f"counterexample; NumPy found none); {cert}"
            )
            return Unknown(why, time.perf_counter() - start)
    return Proof("induction", time.perf_counter() - start, cert)


def _normal_forms(g: Graph) -> tuple[list[E.Poly] | E.Unsupported, int]:
    """g's outputs in normal form with fresh names (or why there are none), and how many names that
    took: a pure function of the (immutable) graph, remembered on it, since discovery proves every
    proposal of a parent against the parent (qknorm_attention: 199 proofs, half the semantics time)."""
    names = E.Names()
    try:
        polys = [v.poly for v in Semantics(g, names).outputs()]
        _ = [p.key for p in polys]  # compared in `prove`: a key too large raises here, not there
        return polys, names.counter[0]
    except E.Unsupported as exc:
        return exc.with_traceback(None), names.counter[0]


def _recheck(g1: Graph, g2: Graph, found) -> bool:  # noqa: ANN001 - a numeric.Mismatch
    a = evaluate(
        Graph(g1.name, g1.nodes, g1.outputs, tuple(sorted(found.sizes.items())), g1.output_names), found.inputs
    )
    b = evaluate(
        Graph(g2.name, g2.nodes, g2.outputs, tuple(sorted(found.sizes.items())), g2.output_names), found.inputs
    )
    return any(not np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True) for x, y in zip(a.values(), b.values()))
