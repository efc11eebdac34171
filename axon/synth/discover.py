"""Variant discovery: breadth-first search over proved moves, deduplicated by canonical graph hash.

Each step takes a variant, lets every generic move propose rewrites, proves each proposal equal to
the graph it came from (`axon.verify.prove`) and keeps only proved ones. Refuted and unknown steps
are counted, never used. It deliberately does not rank variants: that is the tuner's job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from axon.ir import Graph
from axon.synth.moves import proposals
from axon.synth.rewrite import Move
from axon.verify import Proof, Result, prove


@dataclass(frozen=True)
class Variant:
    """A graph equal to the original for every size, with the chain of moves and their proofs.

    >>> from axon.workloads import get
    >>> vs = discover_variants(get("matmul").symbolic(), max_depth=1)
    >>> vs[0].moves
    ()
    """

    graph: Graph
    moves: tuple[Move, ...] = ()
    proofs: tuple[Proof, ...] = ()
    hash: str = ""

    def __post_init__(self) -> None:
        if not self.hash:
            object.__setattr__(self, "hash", self.graph.canonical_hash())


@dataclass(frozen=True)
class Attempt:
    """One proposed step and the verdict on it."""

    parent: str
    move: Move
    result: Result


@dataclass(frozen=True)
class Discovery:
    """Everything a search found: the kept variants and every attempted step."""

    variants: tuple[Variant, ...]
    attempts: tuple[Attempt, ...] = field(repr=False)
    time_s: float
    # why the search ended before its last level ("" when it did not): a user waited for it, and a
    # listing cut short looked complete
    stopped: str = ""

    def count(self, status: str) -> int:
        return sum(1 for a in self.attempts if a.result.status == status)


def discover(
    graph: Graph,
    max_depth: int = 4,
    timeout_s: float = 5.0,
    max_variants: int = 200,
    budget_s: float = 50.0,
    exclude: frozenset[str] = frozenset(),
    until: str | None = None,
) -> Discovery:
    """Breadth-first search to `max_depth` moves; at most `max_variants` variants, `budget_s` seconds.

    `exclude` names moves not to use (e.g. `{"split-tiles"}` for a consumer that cannot lower reshapes).
    `until`: stop once the variant of that hash is kept. The search's order does not depend on the
    clock, so the variants found up to it are those a search cut by its budget later found first.

    >>> from axon.workloads import get
    >>> d = discover(get("softmax").symbolic(), max_depth=1)
    >>> sorted({v.moves[0].name for v in d.variants[1:]})
    ['fold-divisor-into-exp', 'split-tiles', 'unshift-exp']
    """
    start = time.perf_counter()
    root = Variant(graph)
    kept = [root]
    seen = {root.hash}
    attempts: list[Attempt] = []
    frontier = [] if root.hash == until else [root]
    for _ in range(max_depth):
        nxt: list[Variant] = []
        for parent in frontier:
            for move, candidate in proposals(parent.graph):
                if move.name in exclude:
                    continue
                if len(kept) >= max_variants or time.perf_counter() - start > budget_s:
                    stopped = (
                        f"the cap of {max_variants} variants"
                        if len(kept) >= max_variants
                        else f"the {budget_s:g} s budget, with proposals at depth {len(parent.moves) + 1} untried"
                    )
                    return Discovery(tuple(kept), tuple(attempts), time.perf_counter() - start, stopped)
                h = candidate.canonical_hash()
                if h in seen:
                    continue
                seen.add(h)
                result = prove(parent.graph, candidate, timeout_s=timeout_s)
                attempts.append(Attempt(parent.hash, move, result))
                if isinstance(result, Proof):
                    child = Variant(candidate, parent.moves + (move,), parent.proofs + (result,), h)
                    kept.append(child)
                    nxt.append(child)
                    if child.hash == until:
                        return Discovery(tuple(kept), tuple(attempts), time.perf_counter() - start)
        frontier = nxt
    return Discovery(tuple(kept), tuple(attempts), time.perf_counter() - start)


def discover_variants(
    graph: Graph,
    max_depth: int = 4,
    timeout_s: float = 5.0,
    max_variants: int = 200,
    exclude: frozenset[str] = frozenset(),
) -> list[Variant]:
    """Proved variants of `graph`, the original first (no moves); see `discover`."""
    return list(discover(graph, max_depth, timeout_s, max_variants, exclude=frozenset(exclude)).variants)
