"""Matmul inside a row block: stationary tiles from the row operand, moving tiles from the weight.

out[rows, N] = A[rows, K] @ W[K, N] becomes, per n tile and row tile j, nc_matmul accumulating over
K tiles in one PSUM bank: stationary = A^T[k tile, rows] and moving = W[k tile, n tile]. A^T comes
from a DMA of an HBM input already laid out [K, M] (no transpose), a DMA transpose, or a TensorE
transpose of an on-chip tile; W is streamed per (k, n) tile through `bufs` rotating buffers or
kept resident per batch; a transposed weight (k.T in attention) is built once per batch
(`axon.lower.weights`).
The first K tile is peeled so that it starts the accumulation group (`accumulate=False`).
"""

from __future__ import annotations

from collections.abc import Callable

from axon.ir import Node
from axon.lower.elementwise import new_view, out_dtype
from axon.lower.fused import fusable_evacuation, prepare_group
from axon.lower.program import Affine, Expr, Ref, Stmt, TileInstr, TileLoop, tile_ref
from axon.lower.state import LoweringState, for_j, hbm_ref, j_off, rows_expr
from axon.lower.weights import dims, scaled, weight_dtype


def n_tiling(st: LoweringState, n: int) -> tuple[int, int, int, int, int, int]:
    """How a matmul output `n` wide is tiled: (n tile, rotating buffers, PSUM buffers, n tiles per K-outer
    group, full n tiles, tail width). A group that does not divide the n tiles falls back to n-outer order
    (group 1); `lower` rejects the point if no matmul could take the order asked for."""
    tn = min(int(st.knobs["tile_n"]), n, st.bank)
    bufs = max(1, int(st.knobs["bufs"]))
    pbufs = max(1, int(st.knobs.get("psum_bufs", 1)))
    order = str(st.knobs.get("loop_order", "nk"))
    group = 1 if order == "nk" else int(order[2:])
    nfull, tail = divmod(n, tn)
    if group > 1 and (tail or nfull % group):
        group = 1
    return tn, bufs, pbufs, group, nfull, tail


def _stationary(st: LoweringState, node: Node, dt: str) -> list[Stmt]:
    """A^T tiles for every row tile j and k tile of the row operand, once per row block."""
    g = st.graph
    a = node.inputs[0]
    if a in st.transposed:
        return []
    k, _, tk, nk = dims(st, node)
    tm = st.tm
    role = st.roles.role[a]
    src_node = g.nodes[g.nodes[a].inputs[0]] if role == "rowT" else g.nodes[a]
    bufs = max(1, int(st.knobs["bufs"]))  # a row block's A^T rotates like its loaded tiles, so the next
    slot = st.mb * nk * tm  # block's transposes need not wait for this block's matmuls
    aT = st.tile(f"t{a}_T", tk, bufs * slot, dt if role != "rowT" else src_node.type.dtype)
    rotate = bufs > 1 and st.__dict__.get("tail_base") is None
    base = Expr.of(Affine.of("i_r").modulo(bufs, slot)) if rotate else Expr.of(0)
    st.transposed[a] = aT.name
    st.__dict__.setdefault("tbase", {})[a] = base
    kt = Affine.of("i_k")
    pbufs = 2 if int(st.knobs.get("psum_bufs", 1)) > 1 else 1  # transposes alternate over two PSUM banks

    def body(j: Expr) -> list[Stmt]:
        dst = tile_ref(aT.name, 0, tk, base + j_off(j, nk * tm) + kt * tm, tm)
        rows = rows_expr(st, j)
        shape = g.concrete_shape(src_node.id)
        if role == "rowT":  # HBM [.., K, M]: already the stationary layout
            src = hbm_ref(
                st, src_node.attr("name"), st.roles.bmap[src_node.id], rows, tm, Expr.of(kt * tk), tk, shape, True
            )
            inner: list[Stmt] = [TileInstr("dma_copy", "dma", dst, (("src", src),), "stationary, no transpose needed")]
        elif a not in st.views:  # an HBM input read only here
            src = hbm_ref(st, src_node.attr("name"), st.roles.bmap[a], rows, tm, Expr.of(kt * tk), tk, shape)
            inner = [TileInstr("dma_transpose", "dma", dst, (("src", src),), "stationary by DMA transpose")]
        else:
            view = st.views[a]
            vdt = view.dtype  # one PSUM tile per dtype: nc_transpose writes PSUM in its data's dtype
            pts = st.__dict__.setdefault("pt", {})
            pt = pts[vdt] = pts.get(vdt) or st.tile(
                "transpose_psum", st.pmax, st.bank, vdt, "psum", tiles=pbufs if pbufs > 1 else 0
            )
            data = tile_ref(view.tensor, 0, tm, view.base + j_off(j, view.jstride) + kt * tk, tk)
            # k tile i_k's transpose has its own columns of the PSUM tiles while they last (a bank holds
            # bank // tm of them), so a row block's transposes need not wait for the copies out of a bank
            per_bank = max(1, st.bank // tm)
            col = Expr.of(kt.modulo(per_bank, tm)) if per_bank > 1 else Expr.of(0)
            tp = (
                Ref(pt.name, ((Expr.of(kt.floordiv(per_bank).modulo(pt.tiles)), None), (Expr.of(0), tk), (col, tm)))
                if pt.tiles
                else tile_ref(pt.name, 0, tk, col, tm)
            )
            inner = [
                TileInstr("nc_transpose", "tensor", tp, (("data", data),), "stationary on TensorE"),
                TileInstr("tensor_copy", "vector", dst, (("src", tp),)),
            ]
        return [TileLoop("i_k", nk, tuple(inner), "stationary_k")]

    return for_j(st, body)


def lower_matmul(st: LoweringState, node: Node) -> list[Stmt]:
    g = st.graph
    w = st.roles.weight[node.id]
    k, n, tk, nk = dims(st, node)
    tm, mb = st.tm, st.mb
    wdt = weight_dtype(st, w)
    out: list[Stmt] = _stationary(st, node, wdt)
    st.__dict__["stationary_len"] = len(out)  # where the row block's preparation ends (`axon.lower.skew`)
    aT = st.transposed[node.inputs[0]]
    aT_base = st.__dict__["tbase"][node.inputs[0]]
    kind, res = st.__dict__["wplan"][node.id]
    tn, bufs, pbufs, group, nfull, tail = n_tiling(st, n)
    ntiles = pbufs * mb * group
    # streamed moving tiles: `bufs` rotating buffers, each one n tile wide (or one group wide under K-outer order)
    wt = st.tile(f"{w.input}_tile", tk, bufs * group * tn, wdt) if kind == "stream" else None
    ps = st.tile(f"t{node.id}_psum", tm, st.bank, "float32", "psum", tiles=ntiles if ntiles > 1 else 0)
    consumer = fusable_evacuation(st, node.id)
    group_emit = prepare_group(st, consumer) if consumer is not None else None
    if consumer is not None:
        st.__dict__.setdefault("evacuated", set()).add(consumer.id)
    direct = node.id in g.outputs and not any(node.id in u.inputs for u in g.nodes)
    # with a consumer group the group writes its own tile, reading this matmul's PSUM tile
    if group_emit is None and direct:
        stage = st.tile(f"t{node.id}_stage", tm, ntiles * tn, out_dtype(st, node))  # one slot per PSUM tile
        st.__dict__.setdefault("stored", set()).add(node.id)
        name = g.output_names[g.outputs.index(node.id)]
    elif group_emit is None:
        view = new_view(st, node)
    w_shape = g.concrete_shape(g.input(w.input).id)

    def bank(nvar: Expr, j: Expr, gi: Expr | None, unit: int) -> Expr:
        """Which PSUM tile holds row tile j of this n tile, times `unit` (rotating over psum_bufs).

        Under K-outer order `nvar` is the rotation index (the n group) and `gi` the n tile in it."""
        idx = Expr.of(0)
        if pbufs > 1:
            lin = Affine()
            for part in nvar.parts:
                lin = lin + part
            idx = Expr.of(lin.modulo(pbufs, mb * group * unit))
        if gi is not None:
            idx = idx + _scale(gi, mb * unit)
        return idx + _scale(j, unit)

    def ps_ref(nvar: Expr, j: Expr, width: int, gi: Expr | None = None) -> Ref:
        """Accumulator of row tile j for this n tile: one PSUM bank each."""
        if ntiles == 1:
            return tile_ref(ps.name, 0, tm, 0, width)
        return Ref(ps.name, ((bank(nvar, j, gi, 1), None), (Expr.of(0), tm), (Expr.of(0), width)))

    def rotation(nvar: Expr, kt: Expr, width: int) -> Expr:
        if bufs == 1:
            return Expr.of(0)
        lin = Affine()
        for part in _scale(nvar, nk).parts + kt.parts:
            lin = lin + part
        return Expr.of(lin.modulo(bufs, width))

    def matmuls(acc: Callable[[Expr], Ref], moving: Ref, kt: Expr, first: bool) -> list[Stmt]:
        def mm(j: Expr) -> list[Stmt]:
            stationary = tile_ref(aT, 0, tk, aT_base + j_off(j, nk * tm) + _scale(kt, tm), tm)
            return [
                TileInstr(
                    "nc_matmul",
                    "tensor",
                    acc(j),
                    (("stationary", stationary), ("moving", moving), ("accumulate", not first)),
                )
            ]

        return for_j(st, mm)

    def k_step(n0: Expr, width: int, kt: Expr, nvar: Expr, first: bool) -> list[Stmt]:
        stmts: list[Stmt] = []
        if kind == "stream":
            assert wt is not None  # a streamed weight has its rotating tile
            moving = tile_ref(wt.name, 0, tk, rotation(nvar, kt, tn), width)
            src = hbm_ref(st, w.input, w.bmap, _scale(kt, tk), tk, n0, width, w_shape)
            stmts.append(TileInstr("dma_copy", "dma", moving, (("src", src),), f"{w.input} tile"))
            stmts.extend(scaled(st, node.id, moving, kt))
        else:
            moving = tile_ref(res, 0, tk, _scale(kt, n) + n0, width)
        return stmts + matmuls(lambda j: ps_ref(nvar, j, width), moving, kt, first)

    def evac(src: Ref, n0: Expr, width: int, j: Expr, slot: Expr) -> list[Stmt]:
        if group_emit is not None:  # PSUM evacuated by the consumer's own first instruction
            return group_emit(j, (n0, width), {node.id: src})
        if direct:  # the stage rotates with the PSUM tiles: the next evacuation need not wait for this store
            dst = tile_ref(stage.name, 0, tm, slot if ntiles > 1 else 0, width)
        else:
            dst = tile_ref(view.tensor, 0, tm, view.base + j_off(j, view.jstride) + n0, width)
        if st.knobs["evac"] == "scalar":
            ins = TileInstr("activation", "scalar", dst, (("op", "nl.copy"), ("data", src)), "evacuate PSUM")
        else:
            ins = TileInstr("tensor_copy", "vector", dst, (("src", src),), "evacuate PSUM")
        stmts: list[Stmt] = [ins]
        if direct and not wide:
            hdst = hbm_ref(st, name, st.roles.bmap[node.id], rows_expr(st, j), tm, n0, width, g.concrete_shape(node.id))
            stmts.append(TileInstr("dma_copy", "dma", hdst, (("src", dst),), f"store {name}"))
        return stmts

    def n_body(n0: Expr, width: int, nvar: Expr) -> list[Stmt]:
        stmts = k_step(n0, width, Expr.of(0), nvar, True)
        if nk > 1:
            kvar = Expr.of(Affine.of("i_k")) + 1
            stmts.append(TileLoop("i_k", nk - 1, tuple(k_step(n0, width, kvar, nvar, False)), "contraction"))
        return stmts + for_j(st, lambda j: evac(ps_ref(nvar, j, width), n0, width, j, bank(nvar, j, None, tn)))

    # a K-outer group of n tiles of an output leaves in one store per row tile (wider DMA rows)
    wide = direct and group_emit is None and group > 1

    def wide_stores(gn0: Expr, slot: Callable[[Expr], Expr]) -> list[Stmt]:
        def one(j: Expr) -> list[Stmt]:
            src = tile_ref(stage.name, 0, tm, slot(j), group * tn)
            hdst = hbm_ref(
                st, name, st.roles.bmap[node.id], rows_expr(st, j), tm, gn0, group * tn, g.concrete_shape(node.id)
            )
            return [TileInstr("dma_copy", "dma", hdst, (("src", src),), f"store {name}, {group} n tiles")]

        return for_j(st, one)

    def group_body(gvar: Expr) -> list[Stmt]:
        """K outer, n inner: `group` n tiles accumulate at once; one DMA brings the group's moving block."""
        gn0 = _scale(gvar, group * tn)
        gi = Expr.of(Affine.of("i_n"))

        def k_group(kt: Expr, first: bool) -> list[Stmt]:
            stmts: list[Stmt] = []
            if kind == "stream":
                assert wt is not None  # a streamed weight has its rotating tile
                rot = rotation(gvar, kt, group * tn)
                src = hbm_ref(st, w.input, w.bmap, _scale(kt, tk), tk, gn0, group * tn, w_shape)
                block = tile_ref(wt.name, 0, tk, rot, group * tn)
                stmts.append(
                    TileInstr("dma_copy", "dma", block, (("src", src),), f"{w.input} block of {group} n tiles")
                )
                stmts.extend(scaled(st, node.id, block, kt))
                moving = tile_ref(wt.name, 0, tk, rot + _scale(gi, tn), tn)
            else:
                moving = tile_ref(res, 0, tk, _scale(kt, n) + gn0 + _scale(gi, tn), tn)
            inner = matmuls(lambda j: ps_ref(gvar, j, tn, gi), moving, kt, first)
            return stmts + [TileLoop("i_n", group, tuple(inner), "n_in_group")]

        stmts = k_group(Expr.of(0), True)
        if nk > 1:
            stmts.append(TileLoop("i_k", nk - 1, tuple(k_group(Expr.of(Affine.of("i_k")) + 1, False)), "contraction"))
        n0 = gn0 + _scale(gi, tn)
        if wide:  # row tile j's n tiles of the group side by side in the stage, stored by one DMA

            def slot(j: Expr) -> Expr:
                return bank(gvar, Expr.of(0), None, tn) + _scale(j, group * tn)

            ev = for_j(st, lambda j: evac(ps_ref(gvar, j, tn, gi), n0, tn, j, slot(j) + _scale(gi, tn)))
            return stmts + [TileLoop("i_n", group, tuple(ev), "n_in_group")] + wide_stores(gn0, slot)
        ev = for_j(st, lambda j: evac(ps_ref(gvar, j, tn, gi), n0, tn, j, bank(gvar, j, gi, tn)))
        return stmts + [TileLoop("i_n", group, tuple(ev), "n_in_group")]

    if group > 1:
        out.append(TileLoop("i_g", nfull // group, tuple(group_body(Expr.of(Affine.of("i_g")))), "n_group"))
    else:
        nv = Expr.of(Affine.of("i_n"))
        if nfull:
            out.append(TileLoop("i_n", nfull, tuple(n_body(Expr.of(Affine.of("i_n") * tn), tn, nv)), "n_tile"))
        if tail:
            out.extend(n_body(Expr.of(nfull * tn), tail, Expr.of(nfull)))
    if group_emit is not None:
        st.__dict__.setdefault("pool", []).extend(group_emit.borrowed)
    return out


def _scale(e: Expr, k: int) -> Expr:
    out = Expr.of(0)
    for a in e.parts:
        out = out + a * k
    return out
