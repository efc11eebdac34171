"""The generic moves of variant discovery, each driven by which indices a subexpression depends on.

A move looks at a contraction or reduction and the operands feeding it, asks which axes each factor
or added term varies along, and proposes the rewrite that dependence allows (pulling out what does
not depend on the contracted index, with the compensating term it needs). It never looks at workload
or function names, and it never claims correctness: every proposal is proved before it is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from axon.ir import Graph, GraphBuilder, Node
from axon.ir.dims import Dim
from axon.synth.rewrite import ONE, Move, bound_ok, replace_node, varies

Proposal = tuple[Move, Graph]
TILE = 128  # tile length of a split reduction: the partition count of a NeuronCore


def _factors(n: Node) -> list[tuple[int, int, str]]:
    """(rest, factor, op) splits of a product/quotient node: n = rest op factor."""
    if n.op == "mul":
        return [(n.inputs[0], n.inputs[1], "mul"), (n.inputs[1], n.inputs[0], "mul")]
    if n.op == "div":
        return [(n.inputs[0], n.inputs[1], "div")]
    return []


def _terms(n: Node) -> list[tuple[int, int, str, bool]]:
    """(rest, term, op, term_first) splits of a sum/difference node."""
    if n.op == "add":
        return [(n.inputs[0], n.inputs[1], "add", False), (n.inputs[1], n.inputs[0], "add", False)]
    if n.op == "sub":
        return [(n.inputs[0], n.inputs[1], "sub", False), (n.inputs[1], n.inputs[0], "sub", True)]
    return []


def _combine(b: GraphBuilder, op: str, rest: int, term: int, term_first: bool) -> int:
    return b.add(op, (term, rest) if term_first else (rest, term))


def _to_column(b: GraphBuilder, f: Node, fid: int) -> int:
    """A factor varying along the last axis, re-laid out to vary along the second-to-last."""
    if f.type.rank == 1:
        return b.add("reshape", (fid,), shape=(f.shape[0], ONE))
    axes = tuple(range(f.type.rank - 2)) + (f.type.rank - 1, f.type.rank - 2)
    return b.add("transpose", (fid,), axes=axes)


def _to_row(b: GraphBuilder, f: Node, fid: int) -> int:
    if f.type.rank == 1:
        return b.add("reshape", (fid,), shape=(ONE, f.shape[0]))
    return fid


def _propose(
    graph: Graph, target: int, name: str, text: str, build: Callable, touched: tuple[int, ...]
) -> Iterator[Proposal]:
    new = replace_node(graph, target, build)
    if new is not None and new.canonical_hash() != graph.canonical_hash():
        yield Move(name, text, touched), new


# contractions ----------------------------------------------------------------------------------
def contraction_moves(graph: Graph) -> Iterator[Proposal]:
    nodes = graph.nodes
    for mm in nodes:
        if mm.op != "matmul":
            continue
        a_id, b_id = mm.inputs
        A, B = nodes[a_id], nodes[b_id]
        for side, X, other in (("left", A, b_id), ("right", B, a_id)):
            k_axis = -1 if side == "left" else -2
            free_axis = -2 if side == "left" else -1
            for rest, f, op in _factors(X):
                R, F = nodes[rest], nodes[f]
                if R.type.rank < 2:
                    continue
                if not varies(F, k_axis):

                    def build(b, m, rest=rest, f=f, op=op, side=side, other=other):
                        inner = b.add("matmul", (m(rest), m(other)) if side == "left" else (m(other), m(rest)))
                        return b.add(op, (inner, m(f)))

                    yield from _propose(
                        graph,
                        mm.id,
                        "hoist-factor",
                        f"%{f} does not depend on the contracted index of %{mm.id}: applied after it",
                        build,
                        (mm.id, X.id, f),
                    )
                elif not varies(F, free_axis) and op == "mul":

                    def build(b, m, rest=rest, f=f, side=side, other=other, F=F):
                        if side == "left":
                            if F.type.rank == 1:
                                # a vector over k scales the rows of the right operand: (B^T * f)^T,
                                # transposes of the last two axes only (no reshape for the lowering)
                                swap = tuple(range(nodes[other].type.rank - 2)) + (
                                    nodes[other].type.rank - 1,
                                    nodes[other].type.rank - 2,
                                )
                                bt = b.add("transpose", (m(other),), axes=swap)
                                scaled = b.add("transpose", (b.add("mul", (bt, m(f))),), axes=swap)
                                return b.add("matmul", (m(rest), scaled))
                            moved = _to_column(b, F, m(f))
                            return b.add("matmul", (m(rest), b.add("mul", (m(other), moved))))
                        if F.type.rank < 2:
                            raise KeyError("rank-1 factor of the right operand varies along its columns")
                        moved = b.add(
                            "transpose",
                            (m(f),),
                            axes=tuple(range(F.type.rank - 2)) + (F.type.rank - 1, F.type.rank - 2),
                        )
                        return b.add("matmul", (b.add("mul", (m(other), moved)), m(rest)))

                    yield from _propose(
                        graph,
                        mm.id,
                        "move-factor-across",
                        f"%{f} depends only on the contracted index of %{mm.id}: moved onto the other operand",
                        build,
                        (mm.id, X.id, f),
                    )
            for rest, t, op, first in _terms(X):
                R, T = nodes[rest], nodes[t]
                if R.type.rank < 2:
                    continue
                if not varies(T, k_axis):

                    def build(b, m, rest=rest, t=t, op=op, first=first, side=side, other=other):
                        if side == "left":
                            inner = b.add("matmul", (m(rest), m(other)))
                            # column sums as a last-axis sum of the transpose (what the lowering reduces)
                            r = nodes[other].type.rank
                            swap = tuple(range(r - 2)) + (r - 1, r - 2)
                            wt = b.add("transpose", (m(other),), axes=swap)
                            total = b.add(
                                "transpose", (b.add("reduce", (wt,), kind="sum", axis=r - 1, keepdims=True),), axes=swap
                            )
                        else:
                            inner = b.add("matmul", (m(other), m(rest)))
                            total = b.add(
                                "reduce", (m(other),), kind="sum", axis=nodes[other].type.rank - 1, keepdims=True
                            )
                        corr = b.add("mul", (m(t), total))
                        return _combine(b, op, inner, corr, first)

                    yield from _propose(
                        graph,
                        mm.id,
                        "hoist-term",
                        f"added %{t} does not depend on the contracted index of %{mm.id}: "
                        f"applied after it times the sum of the other operand over that index",
                        build,
                        (mm.id, X.id, t),
                    )
                elif side == "left" and not varies(T, free_axis):

                    def build(b, m, rest=rest, t=t, op=op, first=first, other=other, T=T):
                        inner = b.add("matmul", (m(rest), m(other)))
                        if T.type.rank == 1:
                            # t @ W for a vector t over k: (Σ_k W^T * t)^T, last-axis sum and last-two
                            # transposes only (no reshape for the lowering)
                            r = nodes[other].type.rank
                            swap = tuple(range(r - 2)) + (r - 1, r - 2)
                            wt = b.add("mul", (b.add("transpose", (m(other),), axes=swap), m(t)))
                            corr = b.add(
                                "transpose", (b.add("reduce", (wt,), kind="sum", axis=r - 1, keepdims=True),), axes=swap
                            )
                        else:
                            corr = b.add("matmul", (_to_row(b, T, m(t)), m(other)))
                        return _combine(b, op, inner, corr, first)

                    yield from _propose(
                        graph,
                        mm.id,
                        "precompute-term",
                        f"added %{t} depends only on the contracted index of %{mm.id}: "
                        f"its product with the weights is computed on its own",
                        build,
                        (mm.id, X.id, t),
                    )
    yield from _chain_moves(graph)
    for n in nodes:
        for mm_id, f, op in _factors(n):
            MM, F = nodes[mm_id], nodes[f]
            if MM.op != "matmul":
                continue
            a_id, b_id = MM.inputs
            for onto, axis in (("left", -1), ("right", -2)):
                if varies(F, axis):
                    continue

                def build(b, m, f=f, op=op, onto=onto, a_id=a_id, b_id=b_id):
                    if onto == "left":
                        return b.add("matmul", (b.add(op, (m(a_id), m(f))), m(b_id)))
                    return b.add("matmul", (m(a_id), b.add(op, (m(b_id), m(f)))))

                yield from _propose(
                    graph,
                    n.id,
                    "sink-factor",
                    f"%{f} is constant along the {'columns' if onto == 'left' else 'rows'} of %{mm_id}: "
                    f"applied to its {onto} operand instead",
                    build,
                    (n.id, mm_id, f),
                )


def _chain_moves(graph: Graph) -> Iterator[Proposal]:
    """Re-associate chains of contractions; merge contractions that share an operand."""
    nodes = graph.nodes
    for mm in nodes:
        if mm.op != "matmul":
            continue
        a_id, b_id = mm.inputs
        A, B = nodes[a_id], nodes[b_id]
        if A.op == "matmul":  # (p @ a) @ b -> p @ (a @ b): the product of the last two computed alone

            def build(b, m, A=A, b_id=b_id):
                return b.add("matmul", (m(A.inputs[0]), b.add("matmul", (m(A.inputs[1]), m(b_id)))))

            yield from _propose(
                graph,
                mm.id,
                "reassociate",
                f"%{A.inputs[1]} @ %{b_id} computed first (it does not depend on %{A.inputs[0]})",
                build,
                (mm.id, A.id),
            )
        if B.op == "matmul":  # p @ (a @ b) -> (p @ a) @ b

            def build(b, m, B=B, a_id=a_id):
                return b.add("matmul", (b.add("matmul", (m(a_id), m(B.inputs[0]))), m(B.inputs[1])))

            yield from _propose(
                graph, mm.id, "reassociate", f"%{a_id} @ %{B.inputs[0]} computed first", build, (mm.id, B.id)
            )
    for n in nodes:
        if n.op not in ("add", "sub"):
            continue
        L, R = (nodes[i] for i in n.inputs)
        if L.op != "matmul" or R.op != "matmul":
            continue
        for shared in (0, 1):
            if L.inputs[shared] != R.inputs[shared]:
                continue

            def build(b, m, L=L, R=R, shared=shared, op=n.op):
                other = b.add(op, (m(L.inputs[1 - shared]), m(R.inputs[1 - shared])))
                ins = (m(L.inputs[0]), other) if shared == 0 else (other, m(L.inputs[1]))
                return b.add("matmul", ins)

            yield from _propose(
                graph,
                n.id,
                "merge-contractions",
                f"%{L.id} and %{R.id} share operand %{L.inputs[shared]}: one contraction of the "
                f"{n.op} of the other operands",
                build,
                (n.id, L.id, R.id),
            )


# reductions ------------------------------------------------------------------------------------
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

            def build(b, m, rest=rest, f=f, op=op, red=red):
                return b.add(op, (red(b, m(rest)), m(f)))

            yield from _propose(
                graph,
                r.id,
                "hoist-factor",
                f"%{f} does not depend on the index reduced by %{r.id}: applied after the {kind}",
                build,
                (r.id, X.id, f),
            )
        for rest, t, op, first in _terms(X):
            T = nodes[t]
            if varies(T, axis - rank) or not keep or (kind != "sum" and first):
                continue

            def build(b, m, rest=rest, t=t, op=op, first=first, red=red, extent=extent, kind=kind):
                corr = b.add("mul", (m(t), b.add("dimsize", (), dim=extent))) if kind == "sum" else m(t)
                return _combine(b, op, red(b, m(rest)), corr, first)

            yield from _propose(
                graph,
                r.id,
                "hoist-term",
                f"added %{t} does not depend on the index reduced by %{r.id}: added after the {kind}"
                + (" times the range length" if kind == "sum" else ""),
                build,
                (r.id, X.id, t),
            )
        if kind == "sum" and keep and X.op in ("square", "mul") and (X.op == "square" or X.inputs[0] == X.inputs[1]):
            D = nodes[X.inputs[0]]
            if D.op == "sub" and not varies(nodes[D.inputs[1]], axis - rank):
                y, c = D.inputs

                def build(b, m, y=y, c=c, red=red, extent=extent):
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
                    build,
                    (r.id, X.id, D.id),
                )
        if _untiled(extent) and bound_ok(graph, extent / TILE) and keep:
            tiles = extent / TILE

            def build(b, m, x=X.id, axis=axis, kind=kind, rank=rank, tiles=tiles):
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
                build,
                (r.id,),
            )
    for n in nodes:
        for red_id, f, op in _factors(n):
            R, F = nodes[red_id], nodes[f]
            if R.op != "reduce" or F.type.rank != 0:
                continue

            def build(b, m, red_id=red_id, f=f, op=op, R=R):
                inner = b.add(op, (m(R.inputs[0]), m(f)))
                return b.add("reduce", (inner,), kind=R.attr("kind"), axis=R.attr("axis"), keepdims=R.attr("keepdims"))

            yield from _propose(
                graph,
                n.id,
                "fold-scale",
                f"scalar %{f} folded into the operand of reduction %{red_id}",
                build,
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

                def build(b, m, a=a, c=c, op=n.op):
                    return b.add(a.op, (b.add(op, (m(a.inputs[0]), m(c.inputs[0]))), m(a.inputs[1])))

                yield from _propose(
                    graph,
                    n.id,
                    "factor-common",
                    f"the common {'factor' if a.op == 'mul' else 'divisor'} %{a.inputs[1]} of %{n.id} applied once",
                    build,
                    (n.id, a.id, c.id),
                )
        if n.op == "exp":
            arg = nodes[n.inputs[0]]
            if arg.op == "sub":

                def build(b, m, arg=arg):
                    return b.add("exp", (m(arg.inputs[0]),))

                yield from _propose(
                    graph,
                    n.id,
                    "unshift-exp",
                    f"the shift by %{arg.inputs[1]} dropped from exp %{n.id} (it cancels where the exp is normalized)",
                    build,
                    (n.id, arg.id),
                )
            else:
                for u in users[n.id]:
                    U = nodes[u]
                    if U.op == "reduce" and U.attr("kind") == "sum":

                        def build(b, m, arg=arg, U=U):
                            mx = b.add("reduce", (m(arg.id),), kind="max", axis=U.attr("axis"), keepdims=True)
                            return b.add("exp", (b.add("sub", (m(arg.id), mx)),))

                        yield from _propose(
                            graph,
                            n.id,
                            "shift-exp",
                            f"exp %{n.id} shifted by the max along the axis %{u} sums over",
                            build,
                            (n.id, u),
                        )
        if n.op == "div":
            e, s = (nodes[i] for i in n.inputs)
            if e.op == "exp":

                def build(b, m, e=e, s=s):
                    return b.add("exp", (b.add("sub", (m(e.inputs[0]), b.add("log", (m(s.id),)))),))

                yield from _propose(
                    graph,
                    n.id,
                    "fold-divisor-into-exp",
                    f"the division of exp %{e.id} by %{s.id} moved into the exponent as a shift by log(%{s.id})",
                    build,
                    (n.id, e.id, s.id),
                )


ALL_MOVES = (contraction_moves, reduction_moves, elementwise_moves)


def proposals(graph: Graph) -> Iterator[Proposal]:
    """Every rewrite the moves propose for `graph` (unproved)."""
    for family in ALL_MOVES:
        yield from family(graph)
