"""Plausible but wrong rewrites: the generic moves with their dependence condition violated or their
compensating term forgotten. They exist to show the prover refutes what a careless optimizer would
do (each must end as a NumPy-confirmed counterexample); discovery never uses them.
"""

from __future__ import annotations

from collections.abc import Iterator

from axon.ir import Graph
from axon.synth.contraction import _factors, _terms
from axon.synth.rewrite import Move, replace_node, varies

Proposal = tuple[Move, Graph]


def _mean_last(b, fid: int, f, axis: int) -> int:
    s = b.add("reduce", (fid,), kind="sum", axis=axis, keepdims=True)
    return b.add("div", (s, b.add("dimsize", (), dim=f.shape[axis])))


def _yield(
    graph: Graph, target: int, name: str, text: str, build, touched, same_shape: bool = True
) -> Iterator[Proposal]:
    new = replace_node(graph, target, build, same_shape)
    if new is not None and new.canonical_hash() != graph.canonical_hash():
        yield Move(name, text, touched), new


def wrong_proposals(graph: Graph) -> Iterator[Proposal]:
    """Every distinct wrong rewrite these generators make of `graph`."""
    seen: set[str] = set()
    for move, candidate in _all_wrong(graph):
        h = candidate.canonical_hash()
        if h not in seen:
            seen.add(h)
            yield move, candidate


def _all_wrong(graph: Graph) -> Iterator[Proposal]:
    nodes = graph.nodes
    for n in nodes:
        if n.op == "matmul":
            a_id, b_id = n.inputs
            for side, X, other, k_axis in (("left", nodes[a_id], b_id, -1), ("right", nodes[b_id], a_id, -2)):
                for rest, f, op in _factors(X):
                    F = nodes[f]
                    if nodes[rest].type.rank >= 2 and varies(F, k_axis) and F.type.rank >= 1:

                        def build_hoist_dependent_factor(
                            b, m, rest=rest, f=f, op=op, side=side, other=other, F=F, k_axis=k_axis
                        ):
                            inner = b.add("matmul", (m(rest), m(other)) if side == "left" else (m(other), m(rest)))
                            axis = F.type.rank + k_axis if F.type.rank >= -k_axis else F.type.rank - 1
                            mean = _mean_last(b, m(f), F, axis)
                            if side == "right" and F.type.rank >= 2:
                                mean = b.add(
                                    "transpose",
                                    (mean,),
                                    axes=tuple(range(F.type.rank - 2)) + (F.type.rank - 1, F.type.rank - 2),
                                )
                            return b.add(op, (inner, mean))

                        yield from _yield(
                            graph,
                            n.id,
                            "wrong:hoist-dependent-factor",
                            f"%{f} depends on the contracted index of %{n.id} but is pulled out (as its mean)",
                            build_hoist_dependent_factor,
                            (n.id, f),
                        )
                if side == "left" and X.op in ("exp", "tanh", "sigmoid", "square") and nodes[X.inputs[0]].op == "sub":
                    t_id, c_id = nodes[X.inputs[0]].inputs
                    if not varies(nodes[c_id], -1):

                        def build_shift_past_contraction(b, m, X=X, t_id=t_id, c_id=c_id, other=other):
                            inner = b.add("matmul", (b.add(X.op, (m(t_id),)), m(other)))
                            return b.add("sub", (inner, m(c_id)))

                        yield from _yield(
                            graph,
                            n.id,
                            "wrong:shift-past-contraction",
                            f"the row shift %{c_id} inside {X.op} %{X.id} moved past %{n.id} as a subtraction",
                            build_shift_past_contraction,
                            (n.id, X.id, c_id),
                        )
                for rest, t, op, first in _terms(X):
                    if nodes[rest].type.rank >= 2 and not varies(nodes[t], k_axis):

                        def build_drop_compensation(b, m, rest=rest, t=t, op=op, first=first, side=side, other=other):
                            inner = b.add("matmul", (m(rest), m(other)) if side == "left" else (m(other), m(rest)))
                            return b.add(op, (m(t), inner) if first else (inner, m(t)))

                        yield from _yield(
                            graph,
                            n.id,
                            "wrong:drop-compensation",
                            f"added %{t} moved past %{n.id} without the sum-of-weights correction",
                            build_drop_compensation,
                            (n.id, t),
                        )
        if n.op == "reduce":
            X = nodes[n.inputs[0]]
            axis, kind = n.attr("axis"), n.attr("kind")
            rank = X.type.rank
            if kind == "max" and X.op == "matmul" and axis == rank - 1:

                def build_max_past_matmul(b, m, X=X, axis=axis):
                    mb = b.add(
                        "reduce", (m(X.inputs[1]),), kind="max", axis=nodes[X.inputs[1]].type.rank - 1, keepdims=True
                    )
                    return b.add("matmul", (m(X.inputs[0]), mb))

                yield from _yield(
                    graph,
                    n.id,
                    "wrong:max-past-matmul",
                    f"max %{n.id} moved past matmul %{X.id} onto its right operand",
                    build_max_past_matmul,
                    (n.id, X.id),
                )
            if kind == "sum" and X.op == "exp":

                def build_exp_through_sum(b, m, X=X, n=n):
                    s = b.add("reduce", (m(X.inputs[0]),), kind="sum", axis=n.attr("axis"), keepdims=n.attr("keepdims"))
                    return b.add("exp", (s,))

                yield from _yield(
                    graph,
                    n.id,
                    "wrong:exp-through-sum",
                    f"exp %{X.id} pushed through sum %{n.id}",
                    build_exp_through_sum,
                    (n.id, X.id),
                )
            for other_axis in range(rank):
                if other_axis != axis and varies(X, other_axis - rank) and n.attr("keepdims"):

                    def build_reduce_wrong_axis(b, m, X=X, other_axis=other_axis, kind=kind):
                        return b.add("reduce", (m(X.id),), kind=kind, axis=other_axis, keepdims=True)

                    yield from _yield(
                        graph,
                        n.id,
                        "wrong:reduce-wrong-axis",
                        f"{kind} %{n.id} taken over axis {other_axis} instead of {axis}",
                        build_reduce_wrong_axis,
                        (n.id,),
                        same_shape=False,
                    )
            if kind == "sum":
                for rest, t, op, first in _terms(X):
                    if not varies(nodes[t], axis - rank) and not first and n.attr("keepdims"):

                        def build_drop_count(b, m, rest=rest, t=t, op=op, n=n):
                            s = b.add("reduce", (m(rest),), kind="sum", axis=n.attr("axis"), keepdims=True)
                            return b.add(op, (s, m(t)))

                        yield from _yield(
                            graph,
                            n.id,
                            "wrong:drop-count",
                            f"added %{t} moved out of sum %{n.id} without the range length",
                            build_drop_count,
                            (n.id, t),
                        )
                for rest, f, op in _factors(X):
                    F = nodes[f]
                    if varies(F, axis - rank) and F.type.rank >= rank - axis and n.attr("keepdims"):

                        def build_hoist_varying_factor(b, m, rest=rest, f=f, op=op, n=n, F=F, rank=rank):
                            s = b.add("reduce", (m(rest),), kind="sum", axis=n.attr("axis"), keepdims=True)
                            return b.add(op, (s, _mean_last(b, m(f), F, F.type.rank - (rank - n.attr("axis")))))

                        yield from _yield(
                            graph,
                            n.id,
                            "wrong:hoist-varying-factor",
                            f"%{f} varies along the index of sum %{n.id} but is pulled out (as its mean)",
                            build_hoist_varying_factor,
                            (n.id, f),
                        )
                if X.op == "square" and nodes[X.inputs[0]].op == "sub" and n.attr("keepdims"):
                    y, c = nodes[X.inputs[0]].inputs

                    def build_expand_without_cross_term(b, m, y=y, c=c, n=n, X=X):
                        s2 = b.add(
                            "reduce", (b.add("square", (m(y),)),), kind="sum", axis=n.attr("axis"), keepdims=True
                        )
                        tail = b.add(
                            "mul", (b.add("dimsize", (), dim=X.shape[n.attr("axis")]), b.add("square", (m(c),)))
                        )
                        return b.add("add", (s2, tail))

                    yield from _yield(
                        graph,
                        n.id,
                        "wrong:expand-without-cross-term",
                        f"the square under sum %{n.id} expanded without its cross term",
                        build_expand_without_cross_term,
                        (n.id, X.id),
                    )
        if n.op == "sqrt" and nodes[n.inputs[0]].op == "add":
            a, c = nodes[n.inputs[0]].inputs

            def build_sqrt_over_sum(b, m, a=a, c=c):
                return b.add("add", (b.add("sqrt", (m(a),)), b.add("sqrt", (m(c),))))

            yield from _yield(
                graph,
                n.id,
                "wrong:sqrt-over-sum",
                f"sqrt %{n.id} distributed over its sum",
                build_sqrt_over_sum,
                (n.id,),
            )
            if nodes[c].op == "const":

                def build_drop_epsilon(b, m, a=a):
                    return b.add("sqrt", (m(a),))

                yield from _yield(
                    graph,
                    n.id,
                    "wrong:drop-epsilon",
                    f"the constant %{c} under sqrt %{n.id} dropped",
                    build_drop_epsilon,
                    (n.id, c),
                )
        if n.op == "exp" and nodes[n.inputs[0]].op in ("add", "sub"):
            arg = nodes[n.inputs[0]]

            def build_exp_additive(b, m, arg=arg):
                return b.add(arg.op, (b.add("exp", (m(arg.inputs[0]),)), b.add("exp", (m(arg.inputs[1]),))))

            yield from _yield(
                graph,
                n.id,
                "wrong:exp-additive",
                f"exp %{n.id} of a {arg.op} taken as the {arg.op} of exps",
                build_exp_additive,
                (n.id,),
            )
        if n.op == "log" and nodes[n.inputs[0]].op in ("add", "mul"):
            arg = nodes[n.inputs[0]]

            def build_log_split(b, m, arg=arg):
                return b.add("add", (b.add("log", (m(arg.inputs[0]),)), b.add("log", (m(arg.inputs[1]),))))

            yield from _yield(
                graph,
                n.id,
                "wrong:log-split",
                f"log %{n.id} of a {arg.op} split into a sum of logs",
                build_log_split,
                (n.id,),
            )
        if n.op == "div":
            num, den = (nodes[i] for i in n.inputs)
            if num.op in ("add", "sub"):

                def build_divide_one_term(b, m, num=num, den=den):
                    return b.add(num.op, (b.add("div", (m(num.inputs[0]), m(den.id))), m(num.inputs[1])))

                yield from _yield(
                    graph,
                    n.id,
                    "wrong:divide-one-term",
                    f"divisor %{den.id} applied to one term of %{num.id} only",
                    build_divide_one_term,
                    (n.id, num.id),
                )
            if num.op == "reduce" and den.op == "dimsize":

                def build_mean_without_count(b, m, num=num):
                    return m(num.id)

                yield from _yield(
                    graph,
                    n.id,
                    "wrong:mean-without-count",
                    f"the division of %{num.id} by its range length dropped",
                    build_mean_without_count,
                    (n.id, num.id),
                )
