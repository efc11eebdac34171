"""The graphs a tuning run searches: the spec bound to its shape, and its verified variants."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from axon.errors import AxonError
from axon.ir import Graph
from axon.synth import discover
from axon.verify import Proof
from axon.verify.floating import screen

# Splitting a reduction into tiles is what the lowering's tile loops already do; as a graph move it
# only adds reshapes the lowering does not take.
TUNING_EXCLUDED_MOVES = frozenset({"split-tiles"})
SLOW_DISCOVERY_S = 10.0  # a tune silent this long before its first trial says why, after


def workload_graph(workload: Any, preset: str, dtype: str, shape: Mapping[str, int] | None) -> Graph:
    """A workload's graph at `preset` (when it has presets) with `shape` bound over it."""
    dims = dict(shape or {})
    if workload.presets:
        return workload.graph(preset, dtype=dtype, **dims)
    workload.dims(preset)  # a preset it does not have is refused, not ignored
    return workload.graph(None, dtype=dtype, **dims)


def verified_variants(
    graph: Graph,
    depth: int = 4,
    max_variants: int = 24,
    rejected: list[Any] | None = None,
    stopped: list[str] | None = None,
    budget_s: float = 50.0,
    until: str | None = None,
) -> list[Any]:
    """The graph's variants whose every move was proved and that pass the floating-point gate in the
    graph's dtype (`axon.verify.floating.screen`; the original first). Rejections are appended to
    `rejected` when given, and to `stopped` why the search took long (over `SLOW_DISCOVERY_S`: proofs
    that ran out their timeout) or ended early (its time budget, `budget_s`). `until`: stop at the
    variant of that hash (see `discover`)."""
    discovery = discover(
        graph, max_depth=depth, max_variants=max_variants, budget_s=budget_s, exclude=TUNING_EXCLUDED_MOVES, until=until
    )
    found = discovery.variants
    cut = discovery.stopped and len(found) < max_variants  # the cap is tune's own choice, not a cut
    if stopped is not None and (cut or discovery.time_s > SLOW_DISCOVERY_S):
        unknown = discovery.count("unknown")
        stopped.append(
            f"variant discovery took {discovery.time_s:.0f} s"
            + (f" ({unknown} proofs ran out their timeout, unproved)" if unknown else "")
            + (f" and stopped at {discovery.stopped}" if cut else "")
        )
    kept, dropped = screen(graph, [v for v in found if all(isinstance(p, Proof) for p in v.proofs)])
    if rejected is not None:
        rejected.extend(dropped)
    if not kept:
        raise AxonError(f"{graph.name}: variant discovery returned nothing")
    return kept
