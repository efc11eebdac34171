"""Attention as one flash-style loop nest: `lower_attention(graph, knobs, hw)` for the graph forms
`(E @ V) / sum(E)` and `(E / sum(E)) @ V` with `E = exp(s - max(s))`, `s = (Q @ K.T) * c` (the
division by the row sum is applied after the second matmul in both, as an online softmax must).
Q and K may each be an rmsnorm of an input (`x / sqrt(mean(x^2) + eps) * gain`): the rows are
scaled in place before the transposes and the gain, one value per partition once transposed, is
applied on the way out of PSUM.

What it does that the row-block lowering cannot:
- Q, K and V of a head come in one DMA each (partition p holds rows p*T .. p*T+T-1: one descriptor
  per partition), Q and K are transposed on TensorE, four tiles per PSUM bank, one evacuation per
  bank; K^T and V stay resident for every query block of the head.
- Scores go to PSUM one chunk of <= 512 keys at a time (PSUM banks rotate); the row max is read
  from PSUM; one ScalarE `activation` computes exp(c*s - c*max) from PSUM with the row sum
  accumulated on the way (bias, scale and reduce of the same instruction).
- Several key chunks run as an online softmax: a running max, the correction exp(c*(m_old -
  m_new)) and a rescale of the running sum and output with one `scalar_tensor_tensor` each; the
  division by the row sum is deferred to the end of the row block.
- P is transposed on TensorE (four tiles into one bank, one evacuation on the engine of the knob
  `p_evac`) and multiplied by V tile by tile, accumulating in PSUM.
Query rows and key rows are permuted the same way for every tensor (row p*T + t is tile t,
partition p), which attention is invariant to; the output is written back with that permutation.
It emits no source and times nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from axon.ir import Graph, Node
from axon.lower.passes import scratch_name
from axon.lower.program import Affine, Comment, Expr, Ref, Stmt, Tensor, TileAlloc, TileInstr, TileLoop, TileProgram
from axon.lower.roles import scalar_value
from axon.lower.state import Rejected
from axon.target.isa import ISA

# knob name -> choices, offered by the space only for graphs `match_attention` recognises
ATTENTION_KNOBS: dict[str, tuple[Any, ...]] = {
    "softmax": ("online", "rows"),  # rows: the row-block lowering of `axon.lower.lowering`
    "kv_chunk": (512, 256),  # keys per scores tile (one PSUM bank of fp32 at 512)
    "scores_copy": ("sbuf", "psum"),  # where ScalarE's exp reads the scores
    "p_evac": ("vector", "scalar", "alternate"),  # the engine moving P.T out of PSUM
    "attn_pipeline": (2, 3, 1),  # steps whose scores and exp run ahead of the transposes of P
    "attn_store": ("head", "block"),  # one output DMA per head, or one per query block
}


@dataclass(frozen=True)
class AttentionForm:
    """The nodes of a recognised attention graph and what the loop nest needs from them."""

    q: str
    k: str
    v: str
    k_group: int  # query heads per key/value head (repeat along the batch axis), 1 without
    scale: float  # s = scale * (Q @ K.T)
    batch: tuple[int, ...]
    sq: int
    skv: int
    d: int
    dv: int
    in_dtype: str
    out_dtype: str
    out: str
    q_norm: tuple[str, float] | None = None  # (gain input, eps): Q is rmsnorm(q) * gain
    k_norm: tuple[str, float] | None = None


def _input_of(g: Graph, nid: int) -> tuple[str, int] | None:
    """(input name, repeat factor along axis 0) of a graph input, possibly repeated over heads."""
    node = g.nodes[nid]
    if node.op == "input":
        return str(node.attr("name")), 1
    if node.op == "repeat" and node.attr("axis") == 0 and node.type.rank == 3:
        src = g.nodes[node.inputs[0]]
        if src.op == "input":
            return str(src.attr("name")), int(node.attr("repeats").evaluate(g.bindings))
    return None


def _rms_of(g: Graph, nid: int) -> tuple[int, str, float] | None:
    """(input node, gain input name, eps) of `x / sqrt(sum(x*x) / D + eps) * gain`, or None."""
    node = g.nodes[nid]
    if node.op != "mul":
        return None
    a, b = (g.nodes[i] for i in node.inputs)
    if b.op != "input" or b.type.rank != 1:
        return None
    if a.op != "div":
        return None
    x, root = (g.nodes[i] for i in a.inputs)
    if x.op != "input" or root.op != "sqrt":
        return None
    add = g.nodes[root.inputs[0]]
    if add.op != "add":
        return None
    mean, eps_node = (g.nodes[i] for i in add.inputs)
    eps = scalar_value(g, eps_node)
    if eps is None or mean.op != "div" or scalar_value(g, g.nodes[mean.inputs[1]]) != g.concrete_shape(x.id)[-1]:
        return None
    ss = g.nodes[mean.inputs[0]]
    if not _reduce(ss, "sum"):
        return None
    sq = g.nodes[ss.inputs[0]]
    if sq.op != "mul" or tuple(sq.inputs) != (x.id, x.id):
        return None
    return x.id, str(b.attr("name")), float(eps)


def _operand(g: Graph, nid: int) -> tuple[tuple[str, int] | None, tuple[str, float] | None]:
    """A matmul operand: an input (maybe repeated over heads), or an rmsnorm of an input."""
    plain = _input_of(g, nid)
    if plain is not None:
        return plain, None
    rms = _rms_of(g, nid)
    if rms is None:
        return None, None
    return _input_of(g, rms[0]), (rms[1], rms[2])


def _one_user(g: Graph, nid: int) -> bool:
    return sum(nid in n.inputs for n in g.nodes) + (nid in g.outputs) == 1


def _reduce(node: Node, kind: str) -> bool:
    return (
        node.op == "reduce"
        and node.attr("kind") == kind
        and node.attr("keepdims") is True
        and node.attr("axis") == node.type.rank - 1
    )


def match_attention(g: Graph) -> AttentionForm | None:
    """The attention form of a normalized graph with one output, or None."""
    if len(g.outputs) != 1:
        return None
    out = g.nodes[g.outputs[0]]
    if out.op == "div" and g.nodes[out.inputs[0]].op == "matmul":  # (E @ V) / sum(E)
        pv, den = (g.nodes[i] for i in out.inputs)
        e = g.nodes[pv.inputs[0]]
    elif out.op == "matmul" and g.nodes[out.inputs[0]].op == "div":  # (E / sum(E)) @ V
        # the division by a per-row scalar commutes with the matmul (the hoist-factor move proves
        # it): the nest divides once at the end of the row block, as an online softmax must
        pv = out
        p = g.nodes[out.inputs[0]]
        e, den = (g.nodes[i] for i in p.inputs)
        if not _one_user(g, p.id):
            return None
    else:
        return None
    if not _reduce(den, "sum") or den.inputs[0] != e.id or e.op != "exp":
        return None
    sub = g.nodes[e.inputs[0]]
    if sub.op != "sub":
        return None
    x, mx = (g.nodes[i] for i in sub.inputs)
    if not _reduce(mx, "max") or mx.inputs[0] != x.id:
        return None
    scale = 1.0
    a = x
    if x.op in ("div", "mul"):
        c = scalar_value(g, g.nodes[x.inputs[1]])
        if c is None or c <= 0:
            return None
        scale = 1.0 / c if x.op == "div" else c
        a = g.nodes[x.inputs[0]]
    if a.op != "matmul":
        return None
    for nid in (a.id, x.id, sub.id):
        if not _one_user(g, nid) and nid != x.id:
            return None
    kt = g.nodes[a.inputs[1]]
    if kt.op != "transpose" or tuple(kt.attr("axes")) != (0, 2, 1):
        return None
    (q, q_norm), (k, k_norm) = _operand(g, a.inputs[0]), _operand(g, kt.inputs[0])
    v = _input_of(g, pv.inputs[1])
    if q is None or k is None or v is None or q[1] != 1 or k[1] != v[1]:
        return None
    qs, ks, vs = (g.concrete_shape(i) for i in (a.inputs[0], kt.inputs[0], pv.inputs[1]))
    if len(qs) != 3 or ks[1:] != (vs[1], qs[2]):
        return None
    return AttentionForm(
        q[0],
        k[0],
        v[0],
        k[1],
        scale,
        (qs[0],),
        qs[1],
        ks[1],
        qs[2],
        vs[2],
        g.nodes[a.inputs[0]].type.dtype,
        out.type.dtype,
        scratch_name(g, out.id),
        q_norm,
        k_norm,
    )


def check_form(f: AttentionForm, knobs: Mapping[str, Any], hw: Any) -> None:
    """Reject a point the loop nest cannot run (Rejected names the knob or the shape)."""
    pmax = hw.memory.partitions
    chunk = int(knobs.get("kv_chunk", 512))
    if f.sq % pmax or f.skv % pmax:
        raise Rejected(f"softmax: online form needs sequence lengths in multiples of {pmax} ({f.sq}, {f.skv})")
    if f.d > pmax or f.dv > pmax:
        raise Rejected(f"softmax: online form needs head dims <= {pmax} ({f.d}, {f.dv})")
    if chunk > hw.tensor_engine.moving_fmax or f.skv % min(chunk, f.skv):
        raise Rejected(f"kv_chunk: {f.skv} keys are not whole chunks of {chunk}")
    if chunk > f.skv and chunk != 512:
        raise Rejected(f"kv_chunk: {chunk} exceeds the {f.skv} keys")


def _ref2(t: str, p0: Any, p: int, f0: Any, f: int) -> Ref:
    return Ref(t, ((Expr.of(p0), p), (Expr.of(f0), f)))


def _bank(t: str, slot: Any, p: int, f0: Any, f: int) -> Ref:
    return Ref(t, ((Expr.of(slot), None), (Expr.of(0), p), (Expr.of(f0), f)))


class _Nest:
    """Builds the statement tree of one kernel (allocations first, then the batch loop)."""

    def __init__(self, f: AttentionForm, knobs: Mapping[str, Any], hw: Any) -> None:
        self.f, self.hw = f, hw
        self.pmax = hw.memory.partitions
        self.chunk = min(int(knobs.get("kv_chunk", 512)), f.skv)
        self.p_evac = str(knobs.get("p_evac", "scalar"))
        self.store = str(knobs.get("attn_store", "head"))
        # "sbuf": VectorE moves the scores out of PSUM (scaled, row max on the way) and ScalarE's exp
        # reads SBUF, which frees the PSUM port VectorE and ScalarE share on NC-v2
        self.copy = str(knobs.get("scores_copy", "psum"))
        self.skew = int(knobs.get("attn_pipeline", 1))  # steps whose scores run ahead of P @ V
        self.lag = int(knobs.get("pv_lag", 1))  # steps P @ V runs behind the transposes of P
        self.bufs = max(self.skew + 1 + self.lag, int(knobs.get("bufs", 2)))
        self.tq, self.tk = f.sq // self.pmax, f.skv // self.pmax
        self.allocs: list[Tensor] = []
        self.pre: list[Stmt] = []  # before the head loop
        self.loaded: set[str] = set()

    def tile(self, name: str, shape: tuple[int, ...], dtype: str, buffer: str = "sbuf", tiles: int = 0) -> str:
        self.allocs.append(Tensor(name, buffer, shape, dtype, tiles=tiles))
        return name

    def build(self) -> list[Stmt]:
        f, P = self.f, self.pmax
        dt = f.in_dtype
        q_nat = self.tile("q_rows", (P, self.tq * f.d), dt)
        k_nat = self.tile("k_rows", (P, self.tk * f.d), dt)
        v_nat = self.tile("v_rows", (P, self.tk * f.dv), dt)
        q_t = self.tile("q_t", (f.d, f.sq), dt)
        k_t = self.tile("k_t", (f.d, f.skv), dt)
        # a TensorE transpose writes PSUM in its input's dtype (nki.isa.nc_transpose)
        tp = self.tile("transpose_psum", (2, P, 512), dt, "psum", tiles=2)
        s_ps = self.tile("scores_psum", (self.skew + 1, P, 512), "float32", "psum", tiles=self.skew + 1)
        o_ps = self.tile("out_psum", (2, P, 512), "float32", "psum", tiles=2)
        body: list[Stmt] = [
            Comment("one DMA per tensor: partition p holds rows p*T .. p*T+T-1 of the head"),
            TileInstr("dma_copy", "dma", _ref2(q_nat, 0, P, 0, self.tq * f.d), (("src", self._hbm(f.q, f.sq, f.d)),)),
            TileInstr("dma_copy", "dma", _ref2(k_nat, 0, P, 0, self.tk * f.d), (("src", self._hbm(f.k, f.skv, f.d)),)),
            TileInstr(
                "dma_copy", "dma", _ref2(v_nat, 0, P, 0, self.tk * f.dv), (("src", self._hbm(f.v, f.skv, f.dv)),)
            ),
        ]
        for rows, tiles, norm, what in ((q_nat, self.tq, f.q_norm, "Q"), (k_nat, self.tk, f.k_norm, "K")):
            gain = None
            if norm is not None:
                body += self._rms_rows(rows, tiles, f.d, norm[1], what)
                gain = self._gain(norm[0], f.d)
            body += self._transpose_all(rows, q_t if what == "Q" else k_t, tiles, f.d, what, gain)
        o_sb = self.tile("out_rows", (P, self.tq * f.dv), f.out_dtype)
        body += self._block(q_t, k_t, v_nat, tp, s_ps, o_ps, o_sb)
        if self.store == "head":
            body.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    self._hbm(f.out, f.sq, f.dv),
                    (("src", _ref2(o_sb, 0, P, 0, self.tq * f.dv)),),
                    "store the head (rows permuted as loaded)",
                )
            )
        return body

    def _hbm(self, name: str, rows: int, cols: int, f0: Any = 0, nf: int | None = None) -> Ref:
        t = rows // self.pmax
        head: Expr = Expr.of("i_b0")
        if name in (self.f.k, self.f.v) and self.f.k_group > 1:
            head = Expr.of(Affine.of("i_b0").floordiv(self.f.k_group))
        heads = self.f.batch[0] // (self.f.k_group if name in (self.f.k, self.f.v) else 1)
        idx = ((head, None), (Expr.of(0), self.pmax), (Expr.of(f0), nf if nf is not None else t * cols))
        return Ref(name, idx, (heads, self.pmax, t * cols))

    def _gain(self, name: str, width: int) -> Ref:
        """A [width] gain as a per-partition column, loaded once before the head loop."""
        col = self.tile(f"{name}_col", (width, 1), "float32")
        if name not in self.loaded:
            self.loaded.add(name)
            self.pre.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    _ref2(col, 0, width, 0, 1),
                    (("src", Ref(name, ((Expr.of(0), width), (Expr.of(0), 1)), (width, 1))),),
                    f"{name} one value per partition",
                )
            )
        return _ref2(col, 0, width, 0, 1)

    def _rms_rows(self, rows: str, tiles: int, width: int, eps: float, what: str) -> list[Stmt]:
        """Each row of the [P, tiles*width] row tiles times 1/sqrt(mean(x^2) + eps), in place (the
        gain is applied per partition once transposed)."""
        P = self.pmax
        ss = self.tile(f"{what.lower()}_sumsq", (P, tiles), "float32")
        junk = self.tile(f"{what.lower()}_sq", (P, width), "float32")
        out: list[Stmt] = [Comment(f"rmsnorm of the {what} rows: sum of squares and scale per row")]
        for t in range(tiles):
            out.append(
                _on(
                    "activation",
                    "scalar",
                    _ref2(junk, 0, P, 0, width),
                    (
                        ("op", "nl.square"),
                        ("data", _ref2(rows, 0, P, t * width, width)),
                        ("reduce_op", "nl.add"),
                        ("reduce_res", _ref2(ss, 0, P, t, 1)),
                    ),
                )
            )
        out.append(
            _on(
                "tensor_scalar",
                "vector",
                _ref2(ss, 0, P, 0, tiles),
                (
                    ("data", _ref2(ss, 0, P, 0, tiles)),
                    ("op0", "nl.multiply"),
                    ("operand0", 1.0 / width),
                    ("op1", "nl.add"),
                    ("operand1", eps),
                ),
            )
        )
        out.append(
            _on(
                "activation",
                "scalar",
                _ref2(ss, 0, P, 0, tiles),
                (("op", "nl.rsqrt"), ("data", _ref2(ss, 0, P, 0, tiles))),
            )
        )
        for t in range(tiles):
            tile = _ref2(rows, 0, P, t * width, width)
            out.append(
                _on(
                    "tensor_scalar",
                    "vector" if t % 2 == 0 else "gpsimd",
                    tile,
                    (("data", tile), ("op0", "nl.multiply"), ("operand0", _ref2(ss, 0, P, t, 1))),
                )
            )
        return out

    def _transpose_all(
        self, src: str, dst: str, tiles: int, width: int, what: str, gain: Ref | None = None
    ) -> list[Stmt]:
        """[P, tiles*width] row tiles -> [width, tiles*P]: four TensorE transposes per PSUM bank."""
        P = self.pmax
        per = 512 // P
        out: list[Stmt] = [Comment(f"{what}.T on TensorE, {per} tiles per PSUM bank")]
        for g0 in range(0, tiles, per):
            n = min(per, tiles - g0)
            slot = (g0 // per) % 2
            for j in range(n):
                t = g0 + j
                out.append(
                    _on(
                        "nc_transpose",
                        "tensor",
                        _bank("transpose_psum", slot, width, j * P, P),
                        (("data", _ref2(src, 0, P, t * width, width)),),
                    )
                )
            eng = "vector" if (g0 // per) % 2 == 0 else "scalar"
            psum = _bank("transpose_psum", slot, width, 0, n * P)
            if gain is None:
                out.append(_on("tensor_copy", eng, _ref2(dst, 0, width, g0 * P, n * P), (("src", psum),)))
            else:  # the gain, one value per partition now, applied on the way out of PSUM
                out.append(
                    _on(
                        "tensor_scalar",
                        eng,
                        _ref2(dst, 0, width, g0 * P, n * P),
                        (("data", psum), ("op0", "nl.multiply"), ("operand0", gain)),
                    )
                )
        return out

    def _block(self, q_t: str, k_t: str, v_nat: str, tp: str, s_ps: str, o_ps: str, o_sb: str) -> list[Stmt]:
        """The query-block loop, software-pipelined by one step: step (j, c) is query block j
        against key chunk c; its first half (scores, max, exp) is issued before the second half
        (P.T, P @ V, rescale) of the step before, so no in-order engine waits on the chain of
        the previous step."""
        f, P = self.f, self.pmax
        R = self.bufs
        self.nch = f.skv // self.chunk
        self.names = dict(q_t=q_t, k_t=k_t, v_nat=v_nat, tp=tp, s_ps=s_ps, o_ps=o_ps, o_sb=o_sb)
        for name, cols in (("row_max", 1), ("row_max_new", 1), ("neg_bias", 1), ("row_sum", 1), ("chunk_sum", 1)):
            self.tile(name, (P, R * cols), "float32")
        # per step, not per block: the next step's correction is computed before this step's rescale
        self.tile("correction", (P, self.skew + 1 + self.lag), "float32")
        if self.nch > 1:
            self.tile("out_acc", (P, R * f.dv), "float32")
        self.tile("probs", (P, R * self.chunk), f.in_dtype)
        if self.copy == "sbuf":
            self.tile("scores", (P, R * self.chunk), "float32")
        self.tile("probs_t", (P, R * self.chunk), f.in_dtype)
        k, lag = self.skew, self.lag
        steps = self.tq * self.nch

        def at(j: Affine, c: int, shift: int) -> tuple[Affine, int] | None:
            """Block and chunk of the step `shift` steps from (j, c); None outside 0..steps-1."""
            dj, c2 = divmod(c + shift, self.nch)
            if not j.terms and not 0 <= (j.const + dj) * self.nch + c2 < steps:
                return None
            return j + dj, c2

        def block(j: Affine) -> list[Stmt]:
            out: list[Stmt] = []
            for c in range(self.nch):
                ahead, behind = at(j, c, k), at(j, c, -lag)
                if ahead is not None:
                    out += self._first_half(*ahead)
                out += self._transpose_half(j, c)
                if lag == 0:
                    out += self._pv_half(j, c)
                elif behind is not None:
                    out += self._pv_half(*behind)
            return out

        stmts: list[Stmt] = [Comment(f"software pipeline: the first {k} steps' scores and exp")]
        for s0 in range(min(k, steps)):
            j0, c0 = divmod(s0, self.nch)
            stmts += self._first_half(Affine.of(j0), c0)
        # blocks whose every step has its step k ahead and its step lag behind: the loop
        first = -(-lag // self.nch)
        last = self.tq - -(-k // self.nch)  # exclusive
        unroll = 2 if self.p_evac == "alternate" else 1  # two blocks per iteration: evacuation engines alternate
        n_loop = max(0, last - first) // unroll
        if n_loop < 2:
            first, n_loop = self.tq, 0
        for j in range(0, first):
            stmts += block(Affine.of(j))
        if n_loop:
            i = Affine.of("i_q") * unroll + first
            body = [st for u in range(unroll) for st in block(i + u)]
            stmts.append(TileLoop("i_q", n_loop, tuple(body), "query_block"))
        stmts.append(Comment("the last query blocks: the pipeline drains"))
        for j in range(first + n_loop * unroll, self.tq):
            stmts += block(Affine.of(j))
        for s0 in range(steps - lag, steps):
            j0, c0 = divmod(s0, self.nch)
            stmts += self._pv_half(Affine.of(j0), c0)
        return stmts

    def _col(self, t: str, j: Affine) -> Ref:
        return Ref(t, ((Expr.of(0), self.pmax), (Expr.of(_mod(j, self.bufs, 1)), 1)))

    def _step_col(self, j: Affine, c: int) -> Ref:
        return Ref(
            "correction", ((Expr.of(0), self.pmax), (Expr.of(_mod(j * self.nch + c, self.skew + 1 + self.lag, 1)), 1))
        )

    def _first_half(self, j: Affine, c: int) -> list[Stmt]:
        f, P, C, n = self.f, self.pmax, self.chunk, self.names
        col = self._col
        first = c == 0
        sbank = Expr.of(_mod(j * self.nch + c, self.skew + 1, 1))
        m, m2, nb = "row_max", "row_max_new", "neg_bias"
        out: list[Stmt] = [
            TileInstr(
                "nc_matmul",
                "tensor",
                _bank(n["s_ps"], sbank, P, 0, C),
                (
                    ("stationary", _ref2(n["q_t"], 0, f.d, j * P, P)),
                    ("moving", _ref2(n["k_t"], 0, f.d, c * C, C)),
                    ("accumulate", False),
                ),
                f"scores, keys {c * C}..{c * C + C - 1}",
            )
        ]
        red = m if first else m2
        if self.copy == "sbuf":
            # the scores leave PSUM negated and scaled, their row minimum (= -max) on the way: the
            # running max is kept negated and is the exp's bias as it is (no instruction for it)
            scores = _ref2("scores", 0, P, _mod(j * self.nch + c, self.bufs, C), C)
            out.append(
                _on(
                    "tensor_scalar_reduce",
                    "vector",
                    scores,
                    (
                        ("data", _bank(n["s_ps"], sbank, P, 0, C)),
                        ("op0", "nl.multiply"),
                        ("operand0", -f.scale),
                        ("reduce_op", "nl.minimum"),
                        ("reduce_res", col(red, j)),
                    ),
                    "-c*scores to SBUF, their row min (-max) on the way",
                )
            )
            if not first:
                out.append(
                    _on(
                        "tensor_tensor",
                        "vector",
                        col(m2, j),
                        (("data1", col(m, j)), ("data2", col(m2, j)), ("op", "nl.minimum")),
                    )
                )
            sc, bias = -1.0, col(red, j)
            corr = (("op", "nl.exp"), ("data", col(m, j)), ("bias", col(m2, j)), ("scale", -1.0))
        else:
            scores = _bank(n["s_ps"], sbank, P, 0, C)
            out.append(
                _on(
                    "tensor_reduce",
                    "vector",
                    col(red, j),
                    (("op", "nl.maximum"), ("data", scores), ("axis", 1), ("keepdims", True)),
                    "row max from PSUM",
                )
            )
            if not first:
                out.append(
                    _on(
                        "tensor_tensor",
                        "vector",
                        col(m2, j),
                        (("data1", col(m, j)), ("data2", col(m2, j)), ("op", "nl.maximum")),
                    )
                )
            out.append(
                _on(
                    "tensor_scalar",
                    "vector",
                    col(nb, j),
                    (("data", col(red, j)), ("op0", "nl.multiply"), ("operand0", -f.scale)),
                )
            )
            sc, bias = f.scale, col(nb, j)
            corr = (("op", "nl.exp"), ("data", col(m, j)), ("bias", col(nb, j)), ("scale", f.scale))
        if not first:
            out.append(_on("activation", "scalar", self._step_col(j, c), corr, "correction exp(c*(m_old - m_new))"))
        out.append(
            _on(
                "activation",
                "scalar",
                _ref2("probs", 0, P, _mod(j * self.nch + c, self.bufs, C), C),
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
                _on(
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
            out.append(_on("tensor_copy", "vector", col(m, j), (("src", col(m2, j)),)))
        return out

    def _transpose_half(self, j: Affine, c: int) -> list[Stmt]:
        P, C, n = self.pmax, self.chunk, self.names
        per = C // P
        pslot = Expr.of(_mod(j * self.nch + c, self.bufs, C))
        step = Expr.of(_mod(j * self.nch + c, 2, 1))
        out: list[Stmt] = []
        for u in range(per):
            out.append(
                _on(
                    "nc_transpose",
                    "tensor",
                    _bank(n["tp"], step, P, u * P, P),
                    (("data", _ref2("probs", 0, P, pslot + u * P, P)),),
                )
            )
        evac = [
            _on(
                "tensor_copy",
                eng,
                _ref2("probs_t", 0, P, pslot, C),
                (("src", _bank(n["tp"], step, P, 0, C)),),
                "P.T to SBUF",
            )
            for eng in (("vector", "scalar") if self.p_evac == "alternate" else (self.p_evac,))
        ]
        if len(evac) == 1:
            out += evac
        else:  # even steps on VectorE, odd ones on ScalarE
            step_no = j * self.nch + c
            assert all(coef % 2 == 0 for _, coef in step_no.terms)  # the loop is unrolled by two
            out.append(evac[step_no.const % 2])
        return out

    def _pv_half(self, j: Affine, c: int) -> list[Stmt]:
        f, P, C, n = self.f, self.pmax, self.chunk, self.names
        col = self._col
        per = C // P
        pslot = Expr.of(_mod(j * self.nch + c, self.bufs, C))
        step = Expr.of(_mod(j * self.nch + c, 2, 1))
        out: list[Stmt] = []
        for u in range(per):
            t = c * per + u
            out.append(
                TileInstr(
                    "nc_matmul",
                    "tensor",
                    _bank(n["o_ps"], step, P, 0, f.dv),
                    (
                        ("stationary", _ref2("probs_t", 0, P, pslot + u * P, P)),
                        ("moving", _ref2(n["v_nat"], 0, P, t * f.dv, f.dv)),
                        ("accumulate", u > 0),
                    ),
                )
            )
        aslot = Expr.of(_mod(j, self.bufs, f.dv))
        if self.nch > 1:
            if c == 0:
                out.append(
                    _on(
                        "tensor_copy",
                        "vector",
                        _ref2("out_acc", 0, P, aslot, f.dv),
                        (("src", _bank(n["o_ps"], step, P, 0, f.dv)),),
                    )
                )
            else:
                out.append(
                    _on(
                        "scalar_tensor_tensor",
                        "vector",
                        _ref2("out_acc", 0, P, aslot, f.dv),
                        (
                            ("data", _ref2("out_acc", 0, P, aslot, f.dv)),
                            ("op0", "nl.multiply"),
                            ("operand0", self._step_col(j, c)),
                            ("op1", "nl.add"),
                            ("operand1", _bank(n["o_ps"], step, P, 0, f.dv)),
                        ),
                        "rescale the running output, add this chunk's",
                    )
                )
        if c + 1 < self.nch:
            return out
        final_src = _ref2("out_acc", 0, P, aslot, f.dv) if self.nch > 1 else _bank(n["o_ps"], step, P, 0, f.dv)
        o_dst = _ref2(n["o_sb"], 0, P, j * f.dv, f.dv)
        out.append(
            _on(
                "tensor_scalar",
                "vector",
                o_dst,
                (("data", final_src), ("op0", "nl.divide"), ("operand0", col("row_sum", j))),
                "the deferred division by the row sum",
            )
        )
        if self.store == "block":
            out.append(
                TileInstr(
                    "dma_copy",
                    "dma",
                    self._hbm(f.out, f.sq, f.dv, j * f.dv, f.dv),
                    (("src", o_dst),),
                    "store the row block",
                )
            )
        return out


_ENGINE_ARG = {
    "tensor": "nisa.tensor_engine",
    "vector": "nisa.vector_engine",
    "scalar": "nisa.scalar_engine",
    "gpsimd": "nisa.gpsimd_engine",
}


def _on(opcode: str, engine: str, dst: Ref, args: tuple[tuple[str, Any], ...], comment: str = "") -> TileInstr:
    """An instruction bound to `engine` in the emitted source (not left to the compiler) where the
    instruction can run on several engines; a one-engine instruction takes no `engine` argument."""
    if len(ISA[opcode].engines) > 1:
        args = args + (("engine", _ENGINE_ARG[engine]),)
    return TileInstr(opcode, engine, dst, args, comment)


def _mod(j: Affine, n: int, mul: int) -> Affine:
    """(j % n) * mul; a constant for a constant j."""
    if not j.terms:
        return Affine((), (j.const % n) * mul)
    return j.modulo(n, mul)


def lower_attention(
    graph: Graph, form: AttentionForm, knobs: Mapping[str, Any], hw: Any, header: tuple[str, ...]
) -> TileProgram:
    """The flash-style kernel of `form` (see the module docstring)."""
    check_form(form, knobs, hw)
    nest = _Nest(form, knobs, hw)
    body = nest.build()
    stmts: list[Stmt] = [TileAlloc(t) for t in nest.allocs] + nest.pre
    stmts.append(TileLoop("i_b0", form.batch[0], tuple(body), "batch0"))
    sbuf = sum(t.bytes_per_partition for t in nest.allocs if t.buffer == "sbuf")
    banks = sum(max(t.tiles, -(-t.bytes_per_partition // 2048)) for t in nest.allocs if t.buffer == "psum")
    if sbuf > hw.memory.sbuf_bytes_per_partition:
        raise Rejected(f"sbuf: {sbuf} bytes per partition needed, {hw.memory.sbuf_bytes_per_partition} available")
    if banks > hw.memory.psum_banks:
        raise Rejected(f"psum: {banks} banks needed, {hw.memory.psum_banks} available")
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
        tuple(stmts),
        header + (f"attention: online softmax, sbuf/partition: {sbuf} B  psum banks: {banks}",),
        dict(knobs),
        hw.name,
        tuple(graph.output_names),
    )
    object.__setattr__(prog, "point", {**knobs, "_sbuf_peak": sbuf, "_psum_banks": banks})
    return prog
