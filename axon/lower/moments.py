"""Row mean and variance in one VectorE pass: `bn_stats` over chunks of a row, `bn_aggr` of the chunks.

A graph that computes, for a full row tile X with F free elements,

    total = sum(X);  mean = total / F;  centred = X - mean;  sumsq = sum(square(centred))

(the two-pass mean and centred sum of squares of a layer norm or a variance) may get `mean` and
`sumsq` from one read of X instead of two: `nki.isa.bn_stats` gives, per chunk of at most
`bn_stats_fmax` elements, count, mean and centred sum of squares (of the even and of the odd
elements), and `bn_aggr` combines the chunks into the row's mean and (population) variance with the
parallel-variance formula (Chan et al.), not as E[x^2] - E[x]^2. So `mean` is the aggregate's first
column and `sumsq` is F times its second.

This is a lowering of a recognised reduction pattern, not a synthesized instruction sequence: the
statistics are aggregates over the free axis, which the elementwise SMT semantics of
`axon.synth.isel` do not express. Its numerics are those of the emulator's `bn_stats`/`bn_aggr`
(`axon.target.semantics`), tested against the float64 two-pass form on offset and near-constant
rows (tests/lower/test_moments.py), and every kernel using it is checked like any other.
The knob `moments` chooses ("bn_stats", the default, or "two_pass"); the pattern is found on the graph's
structure only.
"""

from __future__ import annotations

from dataclasses import dataclass

from axon.ir import Graph
from axon.lower.elementwise import iteration, new_view
from axon.lower.program import Expr, Stmt, TileInstr, tile_ref
from axon.lower.roles import scalar_value
from axon.lower.state import LoweringState, View, for_j, j_off
from axon.target.isa import ISA_LIMITS

MOMENTS_CHOICES = ("bn_stats", "two_pass")  # the default reads the row once
_STATS = 6  # bn_stats values per chunk: [count, mean, M2] of the even and of the odd elements


@dataclass(frozen=True)
class Moments:
    """Node ids of one matched pattern (see the module doc)."""

    x: int
    total: int
    mean: int
    centred: int
    square: int
    sumsq: int


def _is_row_sum(g: Graph, nid: int) -> bool:
    n = g.nodes[nid]
    rank = len(g.concrete_shape(nid))
    return n.op == "reduce" and n.attr("kind") == "sum" and n.attr("keepdims") and n.attr("axis") in (rank - 1, -1)


def _scaled_by(g: Graph, nid: int, total: int, f: int) -> bool:
    """Whether node `nid` is total / f or total * (1 / f)."""
    n = g.nodes[nid]
    if len(n.inputs) != 2 or n.inputs[0] != total:
        return False
    c = scalar_value(g, g.nodes[n.inputs[1]])
    if c is None:
        return False
    if n.op == "div":
        return c == f
    return n.op == "mul" and c * f == 1.0


def _squares(g: Graph, nid: int, of: int) -> bool:
    n = g.nodes[nid]
    if n.op == "square":
        return n.inputs == (of,)
    if n.op == "mul":
        return n.inputs == (of, of)
    return n.op == "pow" and n.inputs == (of,) and n.attr("exponent") == 2


def match_moments(g: Graph) -> tuple[Moments, ...]:
    """Every instance of the two-pass mean/centred-sum-of-squares pattern in `g` (see the module doc).

    `total` and `square` must have no other readers (they are not computed when the pattern is
    lowered with bn_stats); `mean`, `centred` and `sumsq` may have any."""
    users = g.users()
    out = []
    for n in g.nodes:
        if not _is_row_sum(g, n.id):
            continue
        total, x = n.id, n.inputs[0]
        f = g.concrete_shape(x)[-1]
        if len(users[total]) != 1 or not _scaled_by(g, users[total][0], total, f):
            continue
        mean = users[total][0]
        for c in dict.fromkeys(users[mean]):
            if g.nodes[c].op != "sub" or g.nodes[c].inputs != (x, mean):
                continue
            for sq in dict.fromkeys(users[c]):
                if not _squares(g, sq, c) or len(users[sq]) != 1 or not _is_row_sum(g, users[sq][0]):
                    continue
                out.append(Moments(x, total, mean, c, sq, users[sq][0]))
    return tuple(out)


def _planned(st: LoweringState) -> tuple[Moments, ...]:
    if st.knobs.get("moments", MOMENTS_CHOICES[0]) != "bn_stats" or st.knobs.get("fusion") == "unfused":
        return ()
    return tuple(m for m in match_moments(st.graph) if st.roles.role.get(m.x) == "row")


def moment_nodes(st: LoweringState) -> frozenset[int]:
    """The nodes this point computes with bn_stats/bn_aggr (none unless knob moments=bn_stats):
    the fused groups leave them out (`axon.lower.groups.fused_groups`, `dropped`)."""
    return frozenset(n for m in _planned(st) for n in (m.total, m.mean, m.square, m.sumsq))


def plan_moments(st: LoweringState) -> None:
    """Record, by node, the planned patterns and that node's part of one (`st.moments`)."""
    plan: dict[int, tuple[Moments, str]] = {}
    for m in _planned(st):
        for part, nid in (("stats", m.total), ("mean", m.mean), ("skip", m.square), ("sumsq", m.sumsq)):
            plan[nid] = (m, part)
    st.__dict__["moments"] = plan


def lower_moment(st: LoweringState, node_id: int) -> list[Stmt]:
    """The instructions of one part of a planned pattern, emitted where that node is."""
    m, part = st.__dict__["moments"][node_id]
    if part == "stats":
        return _stats(st, m)
    if part == "sumsq":  # F * variance, a [P, 1] instruction
        f = st.graph.concrete_shape(m.x)[-1]
        src, dst = st.views[m.mean], new_view(st, st.graph.nodes[m.sumsq])

        def body(j: Expr) -> list[Stmt]:
            var = tile_ref(src.tensor, 0, st.tm, src.base + j_off(j, src.jstride) + 1, 1)
            args = (("data", var), ("op0", "nl.multiply"), ("operand0", float(f)))
            return [TileInstr("tensor_scalar", "vector", dst.ref(j, st.tm), args, "sum of squares = F * variance")]

        return for_j(st, body)
    return []  # the mean is the aggregate's first column; the square is not computed


def _stats(st: LoweringState, m: Moments) -> list[Stmt]:
    f = st.graph.concrete_shape(m.x)[-1]
    fmax = int(ISA_LIMITS["bn_stats_fmax"])
    chunks = -(-f // fmax)
    bufs = max(1, int(st.knobs.get("bufs", 1)))
    rotate = bufs > 1 and st.__dict__.get("tail_base") is None
    stats = st.tile(f"t{m.total}_stats", st.tm, bufs * st.mb * _STATS * chunks, "float32")
    aggr = st.tile(f"t{m.mean}_mean_var", st.tm, bufs * st.mb * 2, "float32")
    # rotating like the loads: the next row block's statistics need not wait for this one's readers
    sbase = Expr.of(iteration(st).modulo(bufs, st.mb * _STATS * chunks)) if rotate else Expr.of(0)
    abase = Expr.of(iteration(st).modulo(bufs, st.mb * 2)) if rotate else Expr.of(0)
    st.views[m.mean] = View(aggr.name, 2, abase, 1, "float32")
    x = st.views[m.x]

    def body(j: Expr) -> list[Stmt]:
        out: list[Stmt] = []
        s0 = sbase + j_off(j, _STATS * chunks)
        for c in range(chunks):
            size = min(fmax, f - c * fmax)
            dst = tile_ref(stats.name, 0, st.tm, s0 + c * _STATS, _STATS)
            note = f"mean and variance of %{m.x} in one pass (%{m.mean}, %{m.sumsq})" if c == 0 else ""
            out.append(TileInstr("bn_stats", "vector", dst, (("data", x.ref(j, st.tm, c * fmax, size)),), note))
        all_stats = tile_ref(stats.name, 0, st.tm, s0, _STATS * chunks)
        mv = tile_ref(aggr.name, 0, st.tm, abase + j_off(j, 2), 2)
        out.append(TileInstr("bn_aggr", "vector", mv, (("data", all_stats),), "[mean, variance] per row"))
        return out

    return for_j(st, body)
