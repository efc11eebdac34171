"""Moves through a contraction: factors and terms of a matmul's operands moved across it (a per-row
factor of the row operand out of the contraction, a per-column gain onto the weight), every move a
proposal that discovery then proves."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from axon.ir import Graph, GraphBuilder, Node
from axon.synth.rewrite import ONE, Move, replace_node, varies

Proposal = tuple[Move, Graph]


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

                    def build_hoist_factor(b, m, rest=rest, f=f, op=op, side=side, other=other):
                        inner = b.add("matmul", (m(rest), m(other)) if side == "left" else (m(other), m(rest)))
                        return b.add(op, (inner, m(f)))

                    yield from _propose(
                        graph,
                        mm.id,
                        "hoist-factor",
                        f"%{f} does not depend on the contracted index of %{mm.id}: applied after it",
                        build_hoist_factor,
                        (mm.id, X.id, f),
                    )
                elif not varies(F, free_axis) and op == "mul":

                    def build_move_factor_across(b, m, rest=rest, f=f, side=side, other=other, F=F):
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
                        build_move_factor_across,
                        (mm.id, X.id, f),
                    )
            for rest, t, op, first in _terms(X):
                R, T = nodes[rest], nodes[t]
                if R.type.rank < 2:
                    continue
                if not varies(T, k_axis):

                    def build_hoist_term(b, m, rest=rest, t=t, op=op, first=first, side=side, other=other):
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
                        build_hoist_term,
                        (mm.id, X.id, t),
                    )
                elif side == "left" and not varies(T, free_axis):

                    def build_precompute_term(b, m, rest=rest, t=t, op=op, first=first, other=other, T=T):
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
                        build_precompute_term,
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

                def build_sink_factor(b, m, f=f, op=op, onto=onto, a_id=a_id, b_id=b_id):
                    if onto == "left":
                        return b.add("matmul", (b.add(op, (m(a_id), m(f))), m(b_id)))
                    return b.add("matmul", (m(a_id), b.add(op, (m(b_id), m(f)))))

                yield from _propose(
                    graph,
                    n.id,
                    "sink-factor",
                    f"%{f} is constant along the {'columns' if onto == 'left' else 'rows'} of %{mm_id}: "
                    f"applied to its {onto} operand instead",
                    build_sink_factor,
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

            def build_reassociate(b, m, A=A, b_id=b_id):
                return b.add("matmul", (m(A.inputs[0]), b.add("matmul", (m(A.inputs[1]), m(b_id)))))

            yield from _propose(
                graph,
                mm.id,
                "reassociate",
                f"%{A.inputs[1]} @ %{b_id} computed first (it does not depend on %{A.inputs[0]})",
                build_reassociate,
                (mm.id, A.id),
            )
        if B.op == "matmul":  # p @ (a @ b) -> (p @ a) @ b

            def build_reassociate_2(b, m, B=B, a_id=a_id):
                return b.add("matmul", (b.add("matmul", (m(a_id), m(B.inputs[0]))), m(B.inputs[1])))

            yield from _propose(
                graph,
                mm.id,
                "reassociate",
                f"%{a_id} @ %{B.inputs[0]} computed first",
                build_reassociate_2,
                (mm.id, B.id),
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

            def build_merge_contractions(b, m, L=L, R=R, shared=shared, op=n.op):
                other = b.add(op, (m(L.inputs[1 - shared]), m(R.inputs[1 - shared])))
                ins = (m(L.inputs[0]), other) if shared == 0 else (other, m(L.inputs[1]))
                return b.add("matmul", ins)

            yield from _propose(
                graph,
                n.id,
                "merge-contractions",
                f"%{L.id} and %{R.id} share operand %{L.inputs[shared]}: one contraction of the "
                f"{n.op} of the other operands",
                build_merge_contractions,
                (n.id, L.id, R.id),
            )


# reductions ------------------------------------------------------------------------------------
