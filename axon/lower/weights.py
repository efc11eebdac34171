"""A matmul's weight before its contraction: the K tiling, a resident or transposed copy per batch,
and a weight scaled by a [K] vector.

W = Y.T with Y [.., N, K] in HBM is built in chunks of <= 128 rows of Y (DMA transpose, or a load
and a TensorE transpose); when N is not whole chunks (N=1000) the last chunk, N mod 128 rows, is
peeled at its true size, as `matmul` peels a last narrower n tile. Streamed tiles are `matmul`'s.
"""

from __future__ import annotations

from typing import cast

from axon.ir import Node
from axon.lower.program import Affine, Expr, Ref, Stmt, TileInstr, TileLoop, tile_ref
from axon.lower.roles import Weight
from axon.lower.state import LoweringState, Rejected, for_c, hbm_ref

_MIN_TILE_K = 16  # the smallest contraction tile taken for a contraction tile_k does not divide


def dims(st: LoweringState, node: Node) -> tuple[int, int, int, int]:
    """(K, N, K tile, K tiles) of matmul `node`."""
    g = st.graph
    k = g.concrete_shape(node.inputs[0])[-1]
    n = g.concrete_shape(node.id)[-1]
    tk = min(int(st.knobs["tile_k"]), k, st.pmax)
    if k % tk:  # a contraction tile_k does not divide (K=200): the largest tile below it that does (100)
        tk = max(d for d in range(1, tk + 1) if k % d == 0)
        if tk < _MIN_TILE_K:  # K=1021 in tiles of 1: correct, and slower than a padded K by far
            raise Rejected(
                f"tile_k: contraction {k} of %{node.id} has no divisor from {_MIN_TILE_K} to "
                f"{min(int(st.knobs['tile_k']), st.pmax)}: pad it to a multiple of 64"
            )
    return k, n, tk, k // tk


def weight_dtype(st: LoweringState, w: Weight) -> str:
    return st.graph.input(w.input).type.dtype


def prepare_weights(st: LoweringState, mm: int) -> list[Stmt]:
    """Per-batch weight preparation (resident or transposed weights); nothing for streamed ones."""
    g = st.graph
    node = g.nodes[mm]
    w = st.roles.weight[mm]
    k, n, tk, nk = dims(st, node)
    plans = st.__dict__.setdefault("wplan", {})
    dt = weight_dtype(st, w)
    src_shape = g.concrete_shape(g.input(w.input).id)
    scale = _scale_column(st, mm, w, k, tk, nk)
    if not w.transposed and st.knobs["weights"] != "resident":
        plans[mm] = ("stream", None)
        return scale
    res = st.tile(f"{w.input}_resident", tk, nk * n, dt)
    plans[mm] = ("resident", res.name)
    if not w.transposed:
        kt = Affine.of("i_k")
        tile = tile_ref(res.name, 0, tk, Expr.of(kt * n), n)
        body: tuple[Stmt, ...] = (
            TileInstr(
                "dma_copy",
                "dma",
                tile,
                (("src", hbm_ref(st, w.input, w.bmap, Expr.of(kt * tk), tk, 0, n, src_shape)),),
                f"{w.input} resident",
            ),
        ) + scaled(st, mm, tile, Expr.of(kt))
        return scale + [TileLoop("i_k", nk, body, "weight_k")]
    # W = Y.T with Y [.., N, K] in HBM: chunks of <= 128 rows of Y become columns of W
    cs = min(st.pmax, n)
    kt = Affine.of("i_k")
    if st.knobs["transpose"] != "dma":
        raw = st.tile(f"{w.input}_chunk", cs, tk, dt)
        pt = st.tile("wT_psum", st.pmax, st.bank, dt, "psum")  # nc_transpose: PSUM in the data's dtype

    def chunk(c0: Expr, rows: int) -> list[Stmt]:
        dst = tile_ref(res.name, 0, tk, Expr.of(kt * n) + c0, rows)
        src = hbm_ref(st, w.input, w.bmap, c0, rows, Expr.of(kt * tk), tk, src_shape)
        if st.knobs["transpose"] == "dma":
            inner: list[Stmt] = [TileInstr("dma_transpose", "dma", dst, (("src", src),), f"{w.input}.T by DMA")]
        else:
            inner = [
                TileInstr("dma_copy", "dma", tile_ref(raw.name, 0, rows, 0, tk), (("src", src),)),
                TileInstr(
                    "nc_transpose",
                    "tensor",
                    tile_ref(pt.name, 0, tk, 0, rows),
                    (("data", tile_ref(raw.name, 0, rows, 0, tk)),),
                    f"{w.input}.T on TensorE",
                ),
                TileInstr("tensor_copy", "vector", dst, (("src", tile_ref(pt.name, 0, tk, 0, rows)),)),
            ]
        return [TileLoop("i_k", nk, tuple(inner), "weight_k")]

    out = scale + for_c(n, cs, chunk, "weight_chunk")
    if w.scale is not None:
        out.append(
            TileLoop(
                "i_k", nk, scaled(st, mm, tile_ref(res.name, 0, tk, Expr.of(kt * n), n), Expr.of(kt)), "weight_scale"
            )
        )
    return out


def _scale_column(st: LoweringState, mm: int, w: Weight, k: int, tk: int, nk: int) -> list[Stmt]:
    """Load the [K] scale of a scaled weight as one column per K tile: g_col[p, t] = g[t * tk + p]."""
    if w.scale is None:
        return []
    col = st.tile(f"{w.scale}_col", tk, nk, st.graph.input(w.scale).type.dtype)
    st.__dict__.setdefault("wscale", {})[mm] = col.name
    kt = Affine.of("i_k")
    src = Ref(w.scale, ((Expr.of(kt * tk), tk), (Expr.of(0), 1)), (k, 1))
    return [
        TileLoop(
            "i_k",
            nk,
            (
                TileInstr(
                    "dma_copy",
                    "dma",
                    tile_ref(col.name, 0, tk, Expr.of(kt), 1),
                    (("src", src),),
                    f"{w.scale} as one column per K tile",
                ),
            ),
            "scale_k",
        )
    ]


def scaled(st: LoweringState, mm: int, tile: Ref, kt: Expr) -> tuple[Stmt, ...]:
    """Row k of a weight K tile times its scale (a per-partition operand), in place; nothing unscaled."""
    col = st.__dict__.get("wscale", {}).get(mm)
    if col is None:
        return ()
    return (
        TileInstr(
            "tensor_scalar",
            "vector",
            tile,
            (
                ("data", tile),
                ("op0", "nl.multiply"),
                ("operand0", tile_ref(col, 0, cast(int, tile.index[0][1]), kt, 1)),
            ),
            "scale the weight's rows",
        ),
    )
