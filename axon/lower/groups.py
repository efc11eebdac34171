"""Fused groups of a graph: the maximal elementwise chains lowering emits as one instruction
sequence each (a reduction ends its group; [P, 1] and full-tile chains stay apart). Formed here,
from lowering's row roles; `axon.synth.isel` synthesizes each group's instruction sequences.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from axon.ir import Graph
from axon.ir.ops import BINARY, UNARY
from axon.lower.roles import classify, scalar_value
from axon.synth.groups import FusedGroup, Leaf


def fused_groups(
    graph: Graph, row_kinds: Mapping[int, str] | None = None, dropped: frozenset[int] = frozenset()
) -> list[FusedGroup]:
    """Maximal elementwise groups (a reduction ends its group; [P, 1] and full-tile chains apart).

    `dropped` nodes are computed otherwise (`axon.lower.moments`): they are in no group, are leaves
    of the groups that read them, and do not count as readers. A pure function of the (immutable)
    graph: memoized, since lowering asks for every point."""
    if row_kinds is not None:
        return _fused_groups(graph, row_kinds, dropped)
    return list(graph.memo(("fused-groups", dropped), lambda: _groups_of(graph, dropped)))


@lru_cache(maxsize=512)
def _groups_of(graph: Graph, dropped: frozenset[int]) -> tuple[FusedGroup, ...]:
    return tuple(_fused_groups(graph, None, dropped))


def _fused_groups(graph: Graph, row_kinds: Mapping[int, str] | None, dropped: frozenset[int]) -> list[FusedGroup]:
    roles = classify(graph)
    # a dropped reduction still reads its input: the row sum of a mean is bn_stats of that row, so
    # the row (a bias add, `x @ w + b`) must be computed before it and not inside a later group's
    # sink (its stats found no view of it: a KeyError traceback)
    users = {i: [u for u in us if u not in dropped or graph.nodes[u].op == "reduce"] for i, us in graph.users().items()}
    shape = graph.concrete_shape
    group_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    closed: set[int] = set()
    for n in graph.nodes:
        if n.id in dropped:
            continue
        if roles.role.get(n.id) != "row" or not (n.op in UNARY or n.op in BINARY or n.op == "pow" or n.op == "reduce"):
            continue
        gid = n.id
        for i in n.inputs:
            if not shape(i):
                continue
            same_shape = (shape(i)[-1] == 1) == (shape(n.id)[-1] == 1) or n.op == "reduce"
            if (
                i in group_of
                and len(users[i]) == 1
                and group_of[i] not in closed
                and same_shape
                and i not in graph.outputs
            ):
                other = group_of[i]
                if other != gid:
                    members.setdefault(gid, [])
                    for m_ in members.pop(other):
                        group_of[m_] = gid
                        members[gid].append(m_)
        group_of[n.id] = gid
        members.setdefault(gid, []).append(n.id)
        if n.op == "reduce":
            closed.add(gid)
    out = []
    for _, nodes in sorted(members.items()):
        nodes = sorted(nodes)
        sink = max(nodes)
        leaves: list[Leaf] = []
        for nid in nodes:
            for i in graph.nodes[nid].inputs:
                if i in nodes or any(l.node == i for l in leaves):
                    continue
                v = scalar_value(graph, graph.nodes[i])
                if v is not None:
                    leaves.append(Leaf(i, "scalar", v))
                elif roles.role.get(i) == "bcast" and shape(i)[-1] != 1:  # one value ([1, 1]): a vec below
                    leaves.append(Leaf(i, "bcast"))
                else:
                    leaves.append(Leaf(i, "vec" if shape(i)[-1] == 1 else "full"))
        out.append(FusedGroup(graph, tuple(nodes), tuple(leaves), sink))
    return out
