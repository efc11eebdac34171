"""A sum of two matmuls accumulated in one PSUM bank: add(X1 @ W1, X2 @ W2) as one contraction.

Per n tile and row tile the bank accumulates every K tile of the first product and then every K
tile of the second (the contraction over K1 + K2 of [X1 | X2] @ [W1; W2]), and the sum leaves PSUM
once: neither product is kept full width in SBUF and no VectorE add reads them back. Row operands
shared by both products (x in x @ w + (x @ a) @ b) are transposed once. Taken when the `accumulate`
knob is "shared" and the add is a group of its own whose two operands are matmuls read by nothing
else; an add inside a longer elementwise chain keeps the separate lowering. It does not subtract
(a PSUM accumulation only adds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from axon.ir import Graph, Node
from axon.lower.elementwise import new_view, out_dtype
from axon.lower.matmul import _scale, _stationary, n_tiling
from axon.lower.program import Affine, Expr, Ref, Stmt, TileInstr, TileLoop, tile_ref
from axon.lower.roles import Roles, classify
from axon.lower.state import LoweringState, for_j, hbm_ref, j_off, rows_expr
from axon.lower.weights import dims, scaled, weight_dtype


def shared_sums(graph: Graph, roles: Roles | None = None) -> dict[int, tuple[int, int]]:
    """add node id -> its two matmul operands, for every add of a pass graph this form can take."""
    roles = roles if roles is not None else classify(graph)
    users = graph.users()
    out: dict[int, tuple[int, int]] = {}
    for node in graph.nodes:
        if node.op != "add" or roles.role.get(node.id) != "row" or len(node.inputs) != 2:
            continue
        a, b = node.inputs
        if a == b or node.id in graph.outputs and users[node.id]:
            continue
        shape = graph.concrete_shape(node.id)
        ok = all(
            graph.nodes[i].op == "matmul"
            and roles.role.get(i) == "row"
            and graph.concrete_shape(i) == shape
            and i not in graph.outputs
            and list(users[i]) == [node.id]
            for i in (a, b)
        )
        # an add read by one elementwise op is an inner member of that op's fused group
        chained = len(users[node.id]) == 1 and node.id not in graph.outputs
        if ok and not chained:
            out[node.id] = (a, b)
    return out


def transposed_products(graph: Graph, roles: Roles | None = None) -> dict[int, int]:
    """matmul id -> the matmul whose row operand it alone is (T in (X @ A) @ B), for every such T
    whose weight A is an untransposed, unscaled input: T can be produced already transposed."""
    roles = roles if roles is not None else classify(graph)
    users = graph.users()
    out: dict[int, int] = {}
    for node in graph.nodes:
        if node.op != "matmul" or roles.role.get(node.id) != "row":
            continue
        t = node.inputs[0]
        tn = graph.nodes[t]
        w = roles.weight.get(t)
        if (
            tn.op == "matmul"
            and roles.role.get(t) == "row"
            and t not in graph.outputs
            and list(users[t]) == [node.id]
            and node.inputs[1] != t
            and w is not None
            and not w.transposed
            and w.scale is None
        ):
            out[t] = node.id
    return out


def plan_sums(st: LoweringState) -> None:
    """Record the adds this pass accumulates in PSUM and the products it makes transposed (none
    unless `accumulate` is "shared")."""
    shared = st.knobs.get("accumulate", "shared") == "shared"
    sums = shared_sums(st.graph, st.roles) if shared else {}
    st.__dict__["sums"] = sums
    st.__dict__["sum_terms"] = {t for pair in sums.values() for t in pair}
    st.__dict__["tproducts"] = transposed_products(st.graph, st.roles) if shared else {}


def is_transposed_product(st: LoweringState, nid: int) -> bool:
    return nid in st.__dict__.get("tproducts", {})


def lower_transposed_product(st: LoweringState, node: Node) -> list[Stmt]:
    """T = X @ A read only as the row operand of T @ B, produced as T^T = A^T @ X^T: A's K tiles are
    the stationary operand and X^T (already the stationary tiles of X) the moving one, so each
    PSUM result [R chunk, rows] is a stationary tile of T @ B as it stands; no TensorE transposes,
    no [rows, R] copy, and one PSUM bank for all row tiles of the block."""
    g = st.graph
    consumer = g.nodes[st.__dict__["tproducts"][node.id]]
    w = st.roles.weight[node.id]
    wdt = weight_dtype(st, w)
    out = _stationary(st, node, wdt)  # X^T, unless an earlier product made it
    x = node.inputs[0]
    x_t, x_base = st.transposed[x], st.__dict__["tbase"][x]
    _, r, tk, nk = dims(st, node)
    _, _, rk, nr = dims(st, consumer)  # the consumer's contraction tile: the rows of each result
    tm, mb = st.tm, st.mb
    dt = weight_dtype(st, st.roles.weight[consumer.id])
    t_t = st.tile(f"t{node.id}_T", rk, mb * nr * tm, dt)
    st.transposed[node.id] = t_t.name
    st.__dict__.setdefault("tbase", {})[node.id] = Expr.of(0)
    ps = st.tile(f"t{node.id}_T_psum", rk, st.bank, "float32", "psum")
    kind, res = st.__dict__["wplan"][node.id]
    a_tile = None if kind == "resident" else st.tile(f"{w.input}_chunk", tk, rk, wdt)
    w_shape = g.concrete_shape(g.input(w.input).id)
    kt, rt = Expr.of(Affine.of("i_k")), Expr.of(Affine.of("i_c"))

    def k_step(first: bool, kv: Expr) -> list[Stmt]:
        stmts: list[Stmt] = []
        if a_tile is None:
            stationary = tile_ref(str(res), 0, tk, _scale(kv, r) + _scale(rt, rk), rk)
        else:
            stationary = tile_ref(a_tile.name, 0, tk, 0, rk)
            src = hbm_ref(st, w.input, w.bmap, _scale(kv, tk), tk, _scale(rt, rk), rk, w_shape)
            stmts.append(TileInstr("dma_copy", "dma", stationary, (("src", src),), f"{w.input} chunk"))

        def mm(j: Expr) -> list[Stmt]:
            moving = tile_ref(x_t, 0, tk, x_base + j_off(j, nk * tm) + _scale(kv, tm), tm)
            dst = tile_ref(ps.name, 0, rk, _scale(j, tm), tm)
            args = (("stationary", stationary), ("moving", moving), ("accumulate", not first))
            return [TileInstr("nc_matmul", "tensor", dst, args, "product made transposed" if first else "")]

        return stmts + for_j(st, mm)

    body = k_step(True, Expr.of(0))
    if nk > 1:
        body.append(TileLoop("i_k", nk - 1, tuple(k_step(False, kt + 1)), "contraction"))

    def evac(j: Expr) -> list[Stmt]:
        dst = tile_ref(t_t.name, 0, rk, j_off(j, nr * tm) + _scale(rt, tm), tm)
        return [TileInstr("tensor_copy", "vector", dst, (("src", tile_ref(ps.name, 0, rk, _scale(j, tm), tm)),))]

    body += for_j(st, evac)
    return out + [TileLoop("i_c", nr, tuple(body), "rank_chunk")]


def is_sum(st: LoweringState, nid: int) -> bool:
    return nid in st.__dict__.get("sums", {})


def is_term(st: LoweringState, nid: int) -> bool:
    return nid in st.__dict__.get("sum_terms", ())


def lower_term(st: LoweringState, node: Node) -> list[Stmt]:
    """A product of a shared sum, where it stands in the graph: only its stationary tiles (its
    row operand transposed now, while that operand is live; the sum runs the contraction)."""
    w = st.roles.weight[node.id]
    return _stationary(st, node, weight_dtype(st, w))


@dataclass(frozen=True)
class _Term:
    node: Node
    stationary: str
    base: Expr
    tk: int
    nk: int
    kind: str  # "stream" | "resident"
    source: str  # the weight's HBM input (streamed) or its resident SBUF tile


def lower_sum(st: LoweringState, node: Node) -> list[Stmt]:
    """The add of two products as one PSUM accumulation group per (n tile, row tile)."""
    g = st.graph
    n = g.concrete_shape(node.id)[-1]
    tm, mb = st.tm, st.mb
    tn, bufs, pbufs, group, nfull, tail = n_tiling(st, n)
    terms = []
    for t in st.__dict__["sums"][node.id]:
        mm = g.nodes[t]
        _, _, tk, nk = dims(st, mm)
        kind, res = st.__dict__["wplan"][t]
        w = st.roles.weight[t]
        src = res if kind == "resident" else st.tile(f"{w.input}_tile", tk, bufs * group * tn, weight_dtype(st, w)).name
        a = mm.inputs[0]
        terms.append(_Term(mm, st.transposed[a], st.__dict__["tbase"][a], tk, nk, kind, src))
    ntiles = pbufs * mb * group
    ps = st.tile(f"t{node.id}_psum", tm, st.bank, "float32", "psum", tiles=ntiles if ntiles > 1 else 0)
    direct = node.id in g.outputs
    if direct:
        stage = st.tile(f"t{node.id}_stage", tm, ntiles * tn, out_dtype(st, node))
        st.__dict__.setdefault("stored", set()).add(node.id)
        name = g.output_names[g.outputs.index(node.id)]
    else:
        view = new_view(st, node)
    total_k = sum(t.nk for t in terms)

    def bank(gvar: Expr, gi: Expr, j: Expr, unit: int = 1) -> Expr:
        """The PSUM tile of row tile j and n tile gi of group gvar (groups rotate over psum_bufs),
        times `unit`."""
        idx = Expr.of(0)
        if pbufs > 1:
            idx = Expr.of(_linear(gvar).modulo(pbufs, mb * group * unit))
        return idx + _scale(gi, mb * unit) + _scale(j, unit)

    def ps_ref(gvar: Expr, gi: Expr, j: Expr, width: int) -> Ref:
        if ntiles == 1:
            return tile_ref(ps.name, 0, tm, 0, width)
        return Ref(ps.name, ((bank(gvar, gi, j), None), (Expr.of(0), tm), (Expr.of(0), width)))

    def k_step(t: _Term, step: Expr, kt: Expr, gvar: Expr, n0: Expr, width: int, first: bool) -> list[Stmt]:
        """K tile kt of term t for the group's `group` n tiles (`step` counts K tiles over both terms)."""
        w = st.roles.weight[t.node.id]
        stmts: list[Stmt] = []
        span = group * width
        if t.kind == "stream":
            rot = Expr.of(_linear(_scale(gvar, total_k) + step).modulo(bufs, span)) if bufs > 1 else Expr.of(0)
            block = tile_ref(t.source, 0, t.tk, rot, span)
            w_shape = g.concrete_shape(g.input(w.input).id)
            src = hbm_ref(st, w.input, w.bmap, _scale(kt, t.tk), t.tk, n0, span, w_shape)
            stmts.append(TileInstr("dma_copy", "dma", block, (("src", src),), f"{w.input} tile"))
            stmts.extend(scaled(st, t.node.id, block, kt))

            def moving(gi: Expr) -> Ref:
                return tile_ref(t.source, 0, t.tk, rot + _scale(gi, width), width)
        else:

            def moving(gi: Expr) -> Ref:
                return tile_ref(
                    t.source, 0, t.tk, _scale(kt, g.concrete_shape(t.node.id)[-1]) + n0 + _scale(gi, width), width
                )

        def per_tile(gi: Expr) -> list[Stmt]:
            def mm(j: Expr) -> list[Stmt]:
                stationary = tile_ref(t.stationary, 0, t.tk, t.base + j_off(j, t.nk * tm) + _scale(kt, tm), tm)
                return [
                    TileInstr(
                        "nc_matmul",
                        "tensor",
                        ps_ref(gvar, gi, j, width),
                        (("stationary", stationary), ("moving", moving(gi)), ("accumulate", not first)),
                        "shared accumulation" if not first else "",
                    )
                ]

            return for_j(st, mm)

        return stmts + _over_group(group, per_tile)

    def evac(gvar: Expr, gi: Expr, n0: Expr, width: int) -> list[Stmt]:
        def one(j: Expr) -> list[Stmt]:
            src = ps_ref(gvar, gi, j, width)
            slot = bank(gvar, gi, j, tn) if ntiles > 1 else Expr.of(0)
            if direct:
                dst = tile_ref(stage.name, 0, tm, slot, width)
            else:
                dst = tile_ref(view.tensor, 0, tm, view.base + j_off(j, view.jstride) + n0 + _scale(gi, width), width)
            if st.knobs["evac"] == "scalar":
                ins = TileInstr("activation", "scalar", dst, (("op", "nl.copy"), ("data", src)), "evacuate the sum")
            else:
                ins = TileInstr("tensor_copy", "vector", dst, (("src", src),), "evacuate the sum")
            stmts: list[Stmt] = [ins]
            if direct:
                col = n0 + _scale(gi, width)
                hdst = hbm_ref(
                    st, name, st.roles.bmap[node.id], rows_expr(st, j), tm, col, width, g.concrete_shape(node.id)
                )
                stmts.append(TileInstr("dma_copy", "dma", hdst, (("src", dst),), f"store {name}"))
            return stmts

        return for_j(st, one)

    def body(gvar: Expr, n0: Expr, width: int) -> list[Stmt]:
        stmts: list[Stmt] = []
        done = 0
        for i, t in enumerate(terms):
            first = i == 0
            if first:  # the first K tile of the first product opens the accumulation group
                stmts += k_step(t, Expr.of(0), Expr.of(0), gvar, n0, width, True)
            lo = 1 if first else 0
            if t.nk > lo:
                kt = Expr.of(Affine.of("i_k")) + lo
                inner = k_step(t, kt + done, kt, gvar, n0, width, False)
                stmts.append(TileLoop("i_k", t.nk - lo, tuple(inner), "contraction"))
            done += t.nk
        return stmts + _over_group(group, lambda gi: evac(gvar, gi, n0, width))

    out: list[Stmt] = []
    if nfull:
        gv = Expr.of(Affine.of("i_g" if group > 1 else "i_n"))
        loop = TileLoop(
            "i_g" if group > 1 else "i_n",
            nfull // group,
            tuple(body(gv, _scale(gv, group * tn), tn)),
            "n_group" if group > 1 else "n_tile",
        )
        out.append(loop)
    if tail:
        out.extend(body(Expr.of(nfull), Expr.of(nfull * tn), tail))
    return out


def _over_group(group: int, fn: Callable[[Expr], list[Stmt]]) -> list[Stmt]:
    if group == 1:
        return fn(Expr.of(0))
    return [TileLoop("i_n", group, tuple(fn(Expr.of(Affine.of("i_n")))), "n_in_group")]


def _linear(e: Expr) -> Affine:
    out = Affine()
    for part in e.parts:
        out = out + part
    return out
