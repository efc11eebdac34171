"""The steps of one head's query-block loop, software-pipelined: step (j, c) is query block j
against key chunk c, in three parts (`first_half`: scores, row max, exp and the online-softmax
correction; `transpose_half`: P.T on TensorE; `pv_half`: P @ V, the rescale of the running output
and, after the last chunk, the deferred division). It allocates its own tiles and loads nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from axon.lower.attention.instr import bank, mod, on, ref2
from axon.lower.attention.plan import Plan
from axon.lower.program import Affine, Comment, Expr, Ref, Stmt, TileInstr, TileLoop


class Steps:
    """Emits the steps of `plan` on the head's tiles `names` (q_t, k_t, v_nat, tp, s_ps, o_ps,
    o_sb); its own tiles are allocated on construction with `tile` (name, shape, dtype) -> name."""

    def __init__(self, plan: Plan, names: dict[str, str], tile: Callable[[str, tuple[int, ...], str], str]) -> None:
        self.plan, self.names = plan, names
        f, P, R = plan.form, plan.pmax, plan.bufs
        for name in ("row_max", "row_max_new", "neg_bias", "row_sum", "chunk_sum"):
            tile(name, (P, R), "float32")
        # per step, not per block: the next step's correction is computed before this step's rescale
        tile("correction", (P, plan.skew + 1 + plan.lag), "float32")
        if plan.nch > 1:
            tile("out_acc", (P, R * f.dv), "float32")
        tile("probs", (P, R * plan.chunk), f.in_dtype)
        if plan.copy == "sbuf":
            tile("scores", (P, R * plan.chunk), "float32")
        tile("probs_t", (P, R * plan.chunk), f.in_dtype)

    def loop(self) -> list[Stmt]:
        """The query-block loop, software-pipelined: the first half (scores, max, exp) of the step
        `skew` steps ahead is issued before the transposes of P of this step, and P @ V runs `lag`
        steps behind, so no in-order engine waits on the chain of the previous step."""
        pl = self.plan
        k, lag, steps = pl.skew, pl.lag, pl.tq * pl.nch
        stmts: list[Stmt] = [Comment(f"software pipeline: the first {k} steps' scores and exp")]
        for s0 in range(min(k, steps)):
            stmts += self._first_half(Affine.of(s0 // pl.nch), s0 % pl.nch)
        # blocks whose every step has its step k ahead and its step lag behind: the loop
        first = -(-lag // pl.nch)
        last = pl.tq - -(-k // pl.nch)  # exclusive
        unroll = 2 if pl.p_evac == "alternate" else 1  # two blocks per iteration: evacuation engines alternate
        n_loop = max(0, last - first) // unroll
        if n_loop < 2:
            first, n_loop = pl.tq, 0
        for j in range(0, first):
            stmts += self._block(Affine.of(j))
        if n_loop:
            i = Affine.of("i_q") * unroll + first
            body = [st for u in range(unroll) for st in self._block(i + u)]
            stmts.append(TileLoop("i_q", n_loop, tuple(body), "query_block"))
        stmts.append(Comment("the last query blocks: the pipeline drains"))
        for j in range(first + n_loop * unroll, pl.tq):
            stmts += self._block(Affine.of(j))
        for s0 in range(steps - lag, steps):
            stmts += self._pv_half(Affine.of(s0 // pl.nch), s0 % pl.nch)
        return stmts

    def _block(self, j: Affine) -> list[Stmt]:
        """Query block j: per key chunk, the first half of the step `skew` ahead, this step's
        transposes of P, and P @ V of the step `lag` behind."""
        out: list[Stmt] = []
        for c in range(self.plan.nch):
            ahead, behind = self._at(j, c, self.plan.skew), self._at(j, c, -self.plan.lag)
            if ahead is not None:
                out += self._first_half(*ahead)
            out += self._transpose_half(j, c)
            if self.plan.lag == 0:
                out += self._pv_half(j, c)
            elif behind is not None:
                out += self._pv_half(*behind)
        return out

    def _at(self, j: Affine, c: int, shift: int) -> tuple[Affine, int] | None:
        """Block and chunk of the step `shift` steps from (j, c); None outside the steps."""
        nch = self.plan.nch
        dj, c2 = divmod(c + shift, nch)
        if not j.terms and not 0 <= (j.const + dj) * nch + c2 < self.plan.tq * nch:
            return None
        return j + dj, c2

    def _slot(self, j: Affine, c: int, n: int, mul: int) -> Expr:
        """(step % n) * mul: the step's slot of a tile rotating over n steps."""
        return Expr.of(mod(self.plan.step(j, c), n, mul))

    def _col(self, t: str, j: Affine) -> Ref:
        """Block j's column of a per-row value (max, sum), rotating over `bufs` blocks."""
        return Ref(t, ((Expr.of(0), self.plan.pmax), (Expr.of(mod(j, self.plan.bufs, 1)), 1)))

    def _step_col(self, j: Affine, c: int) -> Ref:
        """Step (j, c)'s column of the correction, rotating over the steps in flight."""
        pl = self.plan
        return Ref("correction", ((Expr.of(0), pl.pmax), (self._slot(j, c, pl.skew + pl.lag + 1, 1), 1)))

    def _first_half(self, j: Affine, c: int) -> list[Stmt]:
        f, P, C, n = self.plan.form, self.plan.pmax, self.plan.chunk, self.names
        w = self.plan.width(c)  # the last chunk may be narrower
        col = self._col
        first = c == 0
        sbank = self._slot(j, c, self.plan.skew + 1, 1)
        m, m2, nb = "row_max", "row_max_new", "neg_bias"
        out: list[Stmt] = [
            TileInstr(
                "nc_matmul",
                "tensor",
                bank(n["s_ps"], sbank, P, 0, w),
                (
                    ("stationary", ref2(n["q_t"], 0, f.d, j * P, P)),
                    ("moving", ref2(n["k_t"], 0, f.d, c * C, w)),
                    ("accumulate", False),
                ),
                f"scores, keys {c * C}..{c * C + w - 1}",
            )
        ]
        red = m if first else m2

        def running(op: str) -> TileInstr:  # the running extreme merged with this chunk's, into m2
            return on("tensor_tensor", "vector", col(m2, j), (("data1", col(m, j)), ("data2", col(m2, j)), ("op", op)))

        if self.plan.copy == "sbuf":
            # the scores leave PSUM negated and scaled, their row minimum (= -max) on the way: the
            # running max is kept negated and is the exp's bias as it is (no instruction for it)
            scores = ref2("scores", 0, P, self._slot(j, c, self.plan.bufs, C), w)
            out.append(
                on(
                    "tensor_scalar_reduce",
                    "vector",
                    scores,
                    (
                        ("data", bank(n["s_ps"], sbank, P, 0, w)),
                        ("op0", "nl.multiply"),
                        ("operand0", -f.scale),
                        ("reduce_op", "nl.minimum"),
                        ("reduce_res", col(red, j)),
                    ),
                    "-c*scores to SBUF, their row min (-max) on the way",
                )
            )
            if not first:
                out.append(running("nl.minimum"))
            sc, bias = -1.0, col(red, j)
            corr = (("op", "nl.exp"), ("data", col(m, j)), ("bias", col(m2, j)), ("scale", -1.0))
        else:
            scores = bank(n["s_ps"], sbank, P, 0, w)
            out.append(
                on(
                    "tensor_reduce",
                    "vector",
                    col(red, j),
                    (("op", "nl.maximum"), ("data", scores), ("axis", 1), ("keepdims", True)),
                    "row max from PSUM",
                )
            )
            if not first:
                out.append(running("nl.maximum"))
            out.append(
                on(
                    "tensor_scalar",
                    "vector",
                    col(nb, j),
                    (("data", col(red, j)), ("op0", "nl.multiply"), ("operand0", -f.scale)),
                )
            )
            sc, bias = f.scale, col(nb, j)
            corr = (("op", "nl.exp"), ("data", col(m, j)), ("bias", col(nb, j)), ("scale", f.scale))
        if not first:
            out.append(on("activation", "scalar", self._step_col(j, c), corr, "correction exp(c*(m_old - m_new))"))
        out.append(
            on(
                "activation",
                "scalar",
                ref2("probs", 0, P, self._slot(j, c, self.plan.bufs, C), w),
                (
                    ("op", "nl.exp"),
                    ("data", scores),
                    ("bias", bias),
                    ("scale", sc),
                    ("reduce_op", "nl.add"),
                    ("reduce_res", col("row_sum" if first else "chunk_sum", j)),
                ),
                "exp(c*s - c*max) from PSUM, row sum on the way",
            )
        )
        if not first:
            out.append(
                on(
                    "scalar_tensor_tensor",
                    "vector",
                    col("row_sum", j),
                    (
                        ("data", col("row_sum", j)),
                        ("op0", "nl.multiply"),
                        ("operand0", self._step_col(j, c)),
                        ("op1", "nl.add"),
                        ("operand1", col("chunk_sum", j)),
                    ),
                    "rescale the running row sum",
                )
            )
            out.append(on("tensor_copy", "vector", col(m, j), (("src", col(m2, j)),)))
        return out

    def _transpose_half(self, j: Affine, c: int) -> list[Stmt]:
        P, C, n = self.plan.pmax, self.plan.chunk, self.names
        w = self.plan.width(c)
        per = -(-w // P)
        pslot = self._slot(j, c, self.plan.bufs, C)
        step = self._slot(j, c, 2, 1)
        out: list[Stmt] = []
        for u in range(per):
            keys = min(P, w - u * P)  # a partial last key tile: that many rows of P.T
            out.append(
                on(
                    "nc_transpose",
                    "tensor",
                    bank(n["tp"], step, keys, u * P, P),
                    (("data", ref2("probs", 0, P, pslot + u * P, keys)),),
                )
            )
        # the rows of a partial key tile past its keys are copied (zeros or stale) and never read (P @ V)
        evac = [
            on(
                "tensor_copy",
                eng,
                ref2("probs_t", 0, P, pslot, per * P),
                (("src", bank(n["tp"], step, P, 0, per * P)),),
                "P.T to SBUF",
            )
            for eng in (("vector", "scalar") if self.plan.p_evac == "alternate" else (self.plan.p_evac,))
        ]
        if len(evac) == 1:
            out += evac
        else:  # even steps on VectorE, odd ones on ScalarE
            step_no = self.plan.step(j, c)
            assert all(coef % 2 == 0 for _, coef in step_no.terms)  # the loop is unrolled by two
            out.append(evac[step_no.const % 2])
        return out

    def _pv_half(self, j: Affine, c: int) -> list[Stmt]:
        f, P, C, n = self.plan.form, self.plan.pmax, self.plan.chunk, self.names
        col = self._col
        w = self.plan.width(c)
        pslot = self._slot(j, c, self.plan.bufs, C)
        step = self._slot(j, c, 2, 1)
        out: list[Stmt] = []
        for u in range(-(-w // P)):
            t = c * C // P + u  # the key tile
            keys = min(P, w - u * P)
            out.append(
                TileInstr(
                    "nc_matmul",
                    "tensor",
                    bank(n["o_ps"], step, P, 0, f.dv),
                    (
                        ("stationary", ref2("probs_t", 0, keys, pslot + u * P, P)),
                        ("moving", ref2(n["v_nat"], 0, keys, t * f.dv, f.dv)),
                        ("accumulate", u > 0),
                    ),
                )
            )
        aslot = Expr.of(mod(j, self.plan.bufs, f.dv))
        if self.plan.nch > 1:
            if c == 0:
                out.append(
                    on(
                        "tensor_copy",
                        "vector",
                        ref2("out_acc", 0, P, aslot, f.dv),
                        (("src", bank(n["o_ps"], step, P, 0, f.dv)),),
                    )
                )
            else:
                out.append(
                    on(
                        "scalar_tensor_tensor",
                        "vector",
                        ref2("out_acc", 0, P, aslot, f.dv),
                        (
                            ("data", ref2("out_acc", 0, P, aslot, f.dv)),
                            ("op0", "nl.multiply"),
                            ("operand0", self._step_col(j, c)),
                            ("op1", "nl.add"),
                            ("operand1", bank(n["o_ps"], step, P, 0, f.dv)),
                        ),
                        "rescale the running output, add this chunk's",
                    )
                )
        if c + 1 < self.plan.nch:
            return out
        final_src = ref2("out_acc", 0, P, aslot, f.dv) if self.plan.nch > 1 else bank(n["o_ps"], step, P, 0, f.dv)
        o_dst = ref2(n["o_sb"], 0, P, j * f.dv, f.dv)
        out.append(
            on(
                "tensor_scalar",
                "vector",
                o_dst,
                (("data", final_src), ("op0", "nl.divide"), ("operand0", col("row_sum", j))),
                "the deferred division by the row sum",
            )
        )
        if self.plan.store == "block":
            if self.plan.natural(f.sq):  # rows in order; a partial last block is never inside the loop
                rows = P if j.terms else self.plan.tile_rows(f.sq, j.const)
                dst = self.plan.hbm_tile(f.out, j * P, rows, f.dv)
                out.append(TileInstr("dma_copy", "dma", dst, (("src", ref2(n["o_sb"], 0, rows, j * f.dv, f.dv)),)))
                return out
            out.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    self.plan.hbm(f.out, f.sq, f.dv, j * f.dv, f.dv),
                    (("src", o_dst),),
                    "store the row block",
                )
            )
        return out
