"""One attention kernel: `lower_attention(graph, form, knobs, hw, header)` allocates the tiles,
loads a head's Q, K and V (one DMA each; one per tile when the rows are not whole tiles),
normalizes and transposes Q and K, runs the pipelined steps (`axon.lower.attention.steps`) and
stores the head, inside a loop over heads. It checks the SBUF and PSUM budgets; it emits no
source and times nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from axon.ir import Graph
from axon.lower.attention.form import AttentionForm
from axon.lower.attention.instr import bank, on, ref2
from axon.lower.attention.plan import Plan, plan_of
from axon.lower.attention.rows import rms_rows, transpose_all
from axon.lower.attention.steps import Steps
from axon.lower.knobmemo import remembered, tree_of
from axon.lower.program import Comment, Expr, Ref, Stmt, Tensor, TileAlloc, TileInstr, TileLoop, TileProgram
from axon.lower.state import Rejected


class _Nest:
    """Builds the statement tree of one kernel (allocations first, then the body of a head)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.allocs: list[Tensor] = []
        self.pre: list[Stmt] = []  # before the head loop
        self.loaded: set[str] = set()

    def tile(self, name: str, shape: tuple[int, ...], dtype: str, buffer: str = "sbuf", tiles: int = 0) -> str:
        self.allocs.append(Tensor(name, buffer, shape, dtype, tiles=tiles))
        return name

    def build(self) -> list[Stmt]:
        pl = self.plan
        f, P, tq, tk = pl.form, pl.pmax, pl.tq, pl.tk
        dt = f.in_dtype
        q_nat = self.tile("q_rows", (P, tq * f.d), dt)
        k_nat = self.tile("k_rows", (P, tk * f.d), dt)
        v_nat = self.tile("v_rows", (P, tk * f.dv), dt)
        q_t = self.tile("q_t", (f.d, tq * P), dt)
        k_t = self.tile("k_t", (f.d, tk * P), dt)
        # a TensorE transpose writes PSUM in its input's dtype (nki.isa.nc_transpose)
        tp = self.tile("transpose_psum", (2, P, 512), dt, "psum", tiles=2)
        s_ps = self.tile("scores_psum", (pl.skew + 1, P, 512), "float32", "psum", tiles=pl.skew + 1)
        o_ps = self.tile("out_psum", (2, P, 512), "float32", "psum", tiles=2)
        if pl.natural(f.skv):  # P.T of a partial key tile leaves rows of its bank unwritten, copied out unread
            self.pre += [on("memset", "vector", bank(tp, i, P, 0, 512), (("value", 0.0),)) for i in range(2)]
        whole = (
            []
            if pl.natural(f.sq) and pl.natural(f.skv)
            else [Comment("one DMA per tensor: partition p holds rows p*T .. p*T+T-1 of the head")]
        )
        body: list[Stmt] = [
            *whole,
            *self._load(q_nat, f.q, f.sq, f.d, zero=True),
            *self._load(k_nat, f.k, f.skv, f.d, zero=True),
            *self._load(v_nat, f.v, f.skv, f.dv, zero=False),  # P @ V reads a partial tile's rows only
        ]
        for rows, tiles, norm, what in ((q_nat, tq, f.q_norm, "Q"), (k_nat, tk, f.k_norm, "K")):
            gain = None
            if norm is not None:
                body += rms_rows(self.tile, P, rows, tiles, f.d, norm[1], what)
                gain = self._gain(norm[0], f.d)
            body += transpose_all(P, rows, q_t if what == "Q" else k_t, tiles, f.d, what, gain)
        o_sb = self.tile("out_rows", (P, tq * f.dv), f.out_dtype)
        names = dict(q_t=q_t, k_t=k_t, v_nat=v_nat, tp=tp, s_ps=s_ps, o_ps=o_ps, o_sb=o_sb)
        body += Steps(pl, names, self.tile).loop()
        if pl.store == "head" and pl.natural(f.sq):
            for t in range(tq):
                n = pl.tile_rows(f.sq, t)
                src = ref2(o_sb, 0, n, t * f.dv, f.dv)
                body.append(TileInstr("dma_copy", "dma", pl.hbm_tile(f.out, t * P, n, f.dv), (("src", src),)))
        elif pl.store == "head":
            body.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    pl.hbm(f.out, f.sq, f.dv),
                    (("src", ref2(o_sb, 0, P, 0, tq * f.dv)),),
                    "store the head (rows permuted as loaded)",
                )
            )
        return body

    def _load(self, dst: str, name: str, rows: int, cols: int, zero: bool) -> list[Stmt]:
        """A head's rows of `name`: one DMA when they are whole tiles, else one per tile in natural
        order, the partial last tile's other rows zeroed once before the head loop when `zero`."""
        pl = self.plan
        if not pl.natural(rows):
            return [
                TileInstr(
                    "dma_copy",
                    "dma",
                    ref2(dst, 0, pl.pmax, 0, rows // pl.pmax * cols),
                    (("src", pl.hbm(name, rows, cols)),),
                )
            ]
        last = rows // pl.pmax
        if zero:
            self.pre.append(on("memset", "vector", ref2(dst, 0, pl.pmax, last * cols, cols), (("value", 0.0),)))
        out: list[Stmt] = [Comment(f"{name}: one DMA per tile, rows in order ({rows} rows: a partial last tile)")]
        for t in range(-(-rows // pl.pmax)):
            n = pl.tile_rows(rows, t)
            out.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    ref2(dst, 0, n, t * cols, cols),
                    (("src", pl.hbm_tile(name, t * pl.pmax, n, cols)),),
                )
            )
        return out

    def _gain(self, name: str, width: int) -> Ref:
        """A [width] gain as a per-partition column, loaded once before the head loop."""
        col = self.tile(f"{name}_col", (width, 1), "float32")
        if name not in self.loaded:
            self.loaded.add(name)
            self.pre.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    ref2(col, 0, width, 0, 1),
                    (("src", Ref(name, ((Expr.of(0), width), (Expr.of(0), 1)), (width, 1))),),
                    f"{name} one value per partition",
                )
            )
        return ref2(col, 0, width, 0, 1)


def lower_attention(
    graph: Graph, form: AttentionForm, knobs: Mapping[str, Any], hw: Any, header: tuple[str, ...]
) -> TileProgram:
    """The flash-style kernel of `form` (see `axon.lower.attention`); its statements remembered by
    the knobs the nest read (`axon.lower.knobmemo`), the header and point are this point's."""
    tree = tree_of(graph, "attention_nest", (form, hw))
    stmts, sbuf, banks = remembered(tree, knobs, lambda k: _statements(form, k, hw))
    inputs = tuple(
        Tensor(n.attr("name"), "hbm", graph.concrete_shape(n.id), n.type.dtype, "input") for n in graph.inputs
    )
    o = graph.outputs[0]
    outputs = (Tensor(form.out, "hbm", graph.concrete_shape(o), form.out_dtype, "output"),)
    prog = TileProgram(
        graph.name,
        inputs,
        outputs,
        (),
        stmts,
        header + (f"attention: online softmax, sbuf/partition: {sbuf} B  psum banks: {banks}",),
        dict(knobs),
        hw.name,
        tuple(graph.output_names),
    )
    object.__setattr__(prog, "point", {**knobs, "_sbuf_peak": sbuf, "_psum_banks": banks})
    return prog


def _statements(form: AttentionForm, knobs: Mapping[str, Any], hw: Any) -> tuple[tuple[Stmt, ...], int, int]:
    """The kernel's statements, its SBUF bytes per partition and PSUM banks (Rejected over budget)."""
    nest = _Nest(plan_of(form, knobs, hw))
    body = nest.build()
    stmts: list[Stmt] = [TileAlloc(t) for t in nest.allocs] + nest.pre
    stmts.append(TileLoop("i_b0", form.batch[0], tuple(body), "batch0"))
    sbuf = sum(t.bytes_per_partition for t in nest.allocs if t.buffer == "sbuf")
    bank = hw.memory.psum_bank_bytes
    banks = sum(max(t.tiles, -(-t.bytes_per_partition // bank)) for t in nest.allocs if t.buffer == "psum")
    if sbuf > hw.memory.sbuf_bytes_per_partition:
        raise Rejected(f"sbuf: {sbuf} bytes per partition needed, {hw.memory.sbuf_bytes_per_partition} available")
    if banks > hw.memory.psum_banks:
        raise Rejected(f"psum: {banks} banks needed, {hw.memory.psum_banks} available")
    return tuple(stmts), sbuf, banks
