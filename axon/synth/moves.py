"""The generic moves of variant discovery, each driven by which indices a subexpression depends on.

A move looks at a contraction or reduction and the operands feeding it, asks which axes each factor
or added term varies along, and proposes the rewrite that dependence allows (pulling out what does
not depend on the contracted index, with the compensating term it needs). It never looks at workload
or function names, and it never claims correctness: every proposal is proved before it is kept.
"""

from __future__ import annotations

from collections.abc import Iterator

from axon.ir import Graph
from axon.ir.dims import Dim
from axon.synth.contraction import _combine, _factors, _propose, _terms, contraction_moves
from axon.synth.rewrite import Move, bound_ok, varies

Proposal = tuple[Move, Graph]
TILE = 128  # tile length of a split reduction: the partition count of a NeuronCore


def reduction_moves(graph: Graph) -> Iterator[Proposal]:
    nodes = graph.nodes
    for r in nodes:
        if r.op != "reduce":
            continue
        axis, kind, keep = r.attr("axis"), r.attr("kind"), r.attr("keepdims")
        X = nodes[r.inputs[0]]
        rank = X.type.rank
        extent = X.shape[axis]

        def red(b, x, kind=kind, axis=axis, keep=keep):
            return b.add("reduce", (x,), kind=kind, axis=axis, keepdims=keep)

        for rest, f, op in _factors(X):
            F = nodes[f]
            if varies(F, axis - rank) or (kind != "sum" and F.type.rank > 0) or not keep:
                continue

            def build_hoist_factor(b, m, rest=rest, f=f, op=op, red=red):
                return b.add(op, (red(b, m(rest)), m(f)))

            yield from _propose(
                graph,
                r.id,
                "hoist-factor",
                f"%{f} does not depend on the index reduced by %{r.id}: applied after the {kind}",
                build_hoist_factor,
                (r.id, X.id, f),
            )
        for rest, t, op, first in _terms(X):
            T = nodes[t]
            if varies(T, axis - rank) or not keep or (kind != "sum" and first):
                continue

            def build_hoist_term(b, m, rest=rest, t=t, op=op, first=first, red=red, extent=extent, kind=kind):
                corr = b.add("mul", (m(t), b.add("dimsize", (), dim=extent))) if kind == "sum" else m(t)
                return _combine(b, op, red(b, m(rest)), corr, first)

            yield from _propose(
                graph,
                r.id,
                "hoist-term",
                f"added %{t} does not depend on the index reduced by %{r.id}: added after the {kind}"
                + (" times the range length" if kind == "sum" else ""),
                build_hoist_term,
                (r.id, X.id, t),
            )
        if kind == "sum" and keep and X.op in ("square", "mul") and (X.op == "square" or X.inputs[0] == X.inputs[1]):
            D = nodes[X.inputs[0]]
            if D.op == "sub" and not varies(nodes[D.inputs[1]], axis - rank):
                y, c = D.inputs

                def build_fuse_reductions(b, m, y=y, c=c, red=red, extent=extent):
                    s2 = red(b, b.add("square", (m(y),)))
                    s1 = red(b, m(y))
                    cross = b.add("mul", (b.add("mul", (b.const(2.0), m(c))), s1))
                    tail = b.add("mul", (b.add("dimsize", (), dim=extent), b.add("square", (m(c),))))
                    return b.add("add", (b.add("sub", (s2, cross)), tail))

                yield from _propose(
                    graph,
                    r.id,
                    "fuse-reductions",
                    f"the square of %{y} shifted by %{c} (constant along the reduced index) expanded, "
                    f"so %{r.id} becomes sums of %{y} and %{y}^2 over one index, fusable in one pass",
                    build_fuse_reductions,
                    (r.id, X.id, D.id),
                )
        if _untiled(extent) and bound_ok(graph, extent / TILE) and keep:
            tiles = extent / TILE

            def build_split_tiles(b, m, x=X.id, axis=axis, kind=kind, rank=rank, tiles=tiles, X=X, r=r):
                shape = X.shape[:axis] + (tiles, Dim.const(TILE)) + X.shape[axis + 1 :]
                t = b.add("reshape", (m(x),), shape=shape)
                inner = b.add("reduce", (t,), kind=kind, axis=axis + 1, keepdims=True)
                outer = b.add("reduce", (inner,), kind=kind, axis=axis, keepdims=True)
                return b.add("reshape", (outer,), shape=r.shape)

            yield from _propose(
                graph,
                r.id,
                "split-tiles",
                f"%{r.id} split into {tiles} tiles of {TILE}: a {kind} per tile, then a {kind} of tiles",
                build_split_tiles,
                (r.id,),
            )
    for n in nodes:
        for red_id, f, op in _factors(n):
            R, F = nodes[red_id], nodes[f]
            if R.op != "reduce" or F.type.rank != 0:
                continue

            def build_fold_scale(b, m, red_id=red_id, f=f, op=op, R=R):
                inner = b.add(op, (m(R.inputs[0]), m(f)))
                return b.add("reduce", (inner,), kind=R.attr("kind"), axis=R.attr("axis"), keepdims=R.attr("keepdims"))

            yield from _propose(
                graph,
                n.id,
                "fold-scale",
                f"scalar %{f} folded into the operand of reduction %{red_id}",
                build_fold_scale,
                (n.id, red_id, f),
            )


def _untiled(extent: Dim) -> bool:
    """A symbolic extent not already a tile count (tiling a tile count only multiplies sizes)."""
    return not extent.is_const and all(c.denominator == 1 for _, c in extent.terms)


# elementwise -----------------------------------------------------------------------------------
def elementwise_moves(graph: Graph) -> Iterator[Proposal]:
    nodes = graph.nodes
    users = graph.users()
    for n in nodes:
        if n.op in ("add", "sub"):
            a, c = (nodes[i] for i in n.inputs)
            if a.op == c.op and a.op in ("mul", "div") and a.inputs[1] == c.inputs[1]:

                def build_factor_common(b, m, a=a, c=c, op=n.op):
                    return b.add(a.op, (b.add(op, (m(a.inputs[0]), m(c.inputs[0]))), m(a.inputs[1])))

                yield from _propose(
                    graph,
                    n.id,
                    "factor-common",
                    f"the common {'factor' if a.op == 'mul' else 'divisor'} %{a.inputs[1]} of %{n.id} applied once",
                    build_factor_common,
                    (n.id, a.id, c.id),
                )
        if n.op == "exp":
            arg = nodes[n.inputs[0]]
            if arg.op == "sub":

                def build_unshift_exp(b, m, arg=arg):
                    return b.add("exp", (m(arg.inputs[0]),))

                yield from _propose(
                    graph,
                    n.id,
                    "unshift-exp",
                    f"the shift by %{arg.inputs[1]} dropped from exp %{n.id} (it cancels where the exp is normalized)",
                    build_unshift_exp,
                    (n.id, arg.id),
                )
            else:
                for u in users[n.id]:
                    U = nodes[u]
                    if U.op == "reduce" and U.attr("kind") == "sum":

                        def build_shift_exp(b, m, arg=arg, U=U):
                            mx = b.add("reduce", (m(arg.id),), kind="max", axis=U.attr("axis"), keepdims=True)
                            return b.add("exp", (b.add("sub", (m(arg.id), mx)),))

                        yield from _propose(
                            graph,
                            n.id,
                            "shift-exp",
                            f"exp %{n.id} shifted by the max along the axis %{u} sums over",
                            build_shift_exp,
                            (n.id, u),
                        )
        if n.op == "div":
            e, s = (nodes[i] for i in n.inputs)
            if e.op == "exp":

                def build_fold_divisor_into_exp(b, m, e=e, s=s):
                    return b.add("exp", (b.add("sub", (m(e.inputs[0]), b.add("log", (m(s.id),)))),))

                yield from _propose(
                    graph,
                    n.id,
                    "fold-divisor-into-exp",
                    f"the division of exp %{e.id} by %{s.id} moved into the exponent as a shift by log(%{s.id})",
                    build_fold_divisor_into_exp,
                    (n.id, e.id, s.id),
                )


ALL_MOVES = (contraction_moves, reduction_moves, elementwise_moves)


def proposals(graph: Graph) -> Iterator[Proposal]:
    """Every rewrite the moves propose for `graph` (unproved)."""
    for family in ALL_MOVES:
        yield from family(graph)
