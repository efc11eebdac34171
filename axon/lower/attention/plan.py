"""The knobs of the attention loop nest and the plan they make for one form: which points it can
run (`plan_of` raises Rejected naming the knob or the shape), how the keys split into chunks, how
far the steps are pipelined, and the HBM view of a head's rows. It emits no instruction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from axon.lower.attention.form import AttentionForm
from axon.lower.program import Affine, Expr, Ref
from axon.lower.state import Rejected

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
class Plan:
    """The tiling of one form at one point. Step (j, c) is query block j (`pmax` rows) against key
    chunk c: `chunk` keys, the last chunk the rest when the keys are not whole chunks. A sequence
    length that is not a multiple of `pmax` (S=1100) ends in a partial tile: its rows are loaded
    tile by tile (`natural`), a partial query tile is computed over all partitions (the rows past
    its end zero, never stored) and a partial key tile is left out of the last chunk's scores."""

    form: AttentionForm
    pmax: int
    chunk: int
    # "sbuf": VectorE moves the scores out of PSUM (scaled, row max on the way) and ScalarE's exp
    # reads SBUF, which frees the PSUM port VectorE and ScalarE share on NC-v2
    copy: str
    p_evac: str
    store: str
    skew: int  # steps whose scores run ahead of P @ V
    lag: int  # steps P @ V runs behind the transposes of P
    bufs: int

    @property
    def tq(self) -> int:
        return -(-self.form.sq // self.pmax)

    @property
    def tk(self) -> int:
        return -(-self.form.skv // self.pmax)

    def natural(self, rows: int) -> bool:
        """Whether a tensor of `rows` rows is held in natural order (row t*P + p is tile t, partition
        p, one DMA per tile): a reshape to [P, rows/P * cols] needs whole tiles."""
        return rows % self.pmax != 0

    def tile_rows(self, rows: int, t: int) -> int:
        """Rows of tile t of a tensor of `rows` rows: `pmax`, or the rest in the last tile."""
        return min(self.pmax, rows - t * self.pmax)

    @property
    def nch(self) -> int:
        return -(-self.form.skv // self.chunk)

    def width(self, c: int) -> int:
        """Keys in chunk c: `chunk`, or what is left for the last one."""
        return min(self.chunk, self.form.skv - c * self.chunk)

    def step(self, j: Affine, c: int) -> Affine:
        return j * self.nch + c

    def _head(self, name: str) -> Expr:
        """The head of `name` in iteration i_b0: a key/value head is shared by `k_group` query heads."""
        f = self.form
        if name in (f.k, f.v) and f.k_group > 1:
            return Expr.of(Affine.of("i_b0").floordiv(f.k_group))
        return Expr.of("i_b0")

    def hbm(self, name: str, rows: int, cols: int, f0: Any = 0, nf: int | None = None) -> Ref:
        """A head of `name` in HBM as [pmax, rows/pmax * cols]: partition p holds rows p*T .. p*T+T-1
        (one descriptor per partition); a key/value head is shared by `k_group` query heads."""
        f = self.form
        t = rows // self.pmax
        heads = f.batch[0] // (f.k_group if name in (f.k, f.v) else 1)
        idx = ((self._head(name), None), (Expr.of(0), self.pmax), (Expr.of(f0), nf if nf is not None else t * cols))
        return Ref(name, idx, (heads, self.pmax, t * cols))

    def hbm_tile(self, name: str, row0: Any, rows: int, cols: int) -> Ref:
        """Rows row0 .. row0+rows-1 of a head of `name` in HBM, in natural order."""
        return Ref(name, ((self._head(name), None), (Expr.of(row0), rows), (Expr.of(0), cols)))


def plan_of(f: AttentionForm, knobs: Mapping[str, Any], hw: Any) -> Plan:
    """The plan of `f` at `knobs`, or Rejected naming the knob or the shape the nest cannot run."""
    pmax = hw.memory.partitions
    chunk = int(knobs.get("kv_chunk", 512))
    if f.d > pmax or f.dv > pmax:
        raise Rejected(f"softmax: online form needs head dims <= {pmax} ({f.d}, {f.dv})")
    if chunk > hw.tensor_engine.moving_fmax or chunk % pmax:
        raise Rejected(f"kv_chunk: {chunk} keys per chunk is not a multiple of {pmax} up to one matmul's")
    if chunk > f.skv and chunk != 512:  # the same kernel as kv_chunk 512: one chunk of every key
        raise Rejected(f"kv_chunk: {chunk} exceeds the {f.skv} keys")
    skew = int(knobs.get("attn_pipeline", 1))
    lag = int(knobs.get("pv_lag", 1))
    return Plan(
        f,
        pmax,
        min(chunk, -(-f.skv // pmax) * pmax),  # whole key tiles: the last chunk's width says where the keys end
        str(knobs.get("scores_copy", "psum")),
        str(knobs.get("p_evac", "scalar")),
        str(knobs.get("attn_store", "head")),
        skew,
        lag,
        max(skew + 1 + lag, int(knobs.get("bufs", 2))),
    )
