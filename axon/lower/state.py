"""The state one pass's lowering shares across its modules (elementwise, fused groups, matmuls):
`LoweringState` (the tiles allocated so far, where each row value lives) and the helpers that read it.

It holds no lowering decisions itself; `lowering` drives a pass, `elementwise`, `fused` and `matmul`
emit its nodes, each importing this module rather than one another's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from axon.errors import AxonError
from axon.ir import Graph
from axon.lower.program import Affine, Expr, Ref, Stmt, Tensor, TileLoop, tile_ref
from axon.lower.roles import Roles


class Rejected(AxonError):
    """A point that cannot run on the hardware (SBUF/PSUM do not fit, tiles do not divide)."""


ALU = {
    "add": "nl.add",
    "sub": "nl.subtract",
    "mul": "nl.multiply",
    "div": "nl.divide",
    "maximum": "nl.maximum",
    "minimum": "nl.minimum",
}
ACT = {
    "exp": "nl.exp",
    "log": "nl.log",
    "sqrt": "nl.sqrt",
    "rsqrt": "nl.rsqrt",
    "tanh": "nl.tanh",
    "sigmoid": "nl.sigmoid",
    "silu": "nl.silu",
    "gelu": "nl.gelu_apprx_tanh",
    "relu": "nl.relu",
    "square": "nl.square",
    "abs": "nl.abs",
    "reciprocal": "nl.reciprocal",
}
REDUCE = {"sum": "nl.add", "max": "nl.maximum", "min": "nl.minimum"}


def j_off(j: Expr, stride: int) -> Expr:
    """The offset of row tile `j` in a buffer whose tiles are `stride` apart."""
    out = Expr.of(0)
    for a in j.parts:
        out = out + (a * stride if a.plain else a)
    return out


@dataclass(frozen=True)
class View:
    """Where a row value lives: row tile j of `tensor` starts at free offset base + j*jstride."""

    tensor: str
    jstride: int
    base: Expr
    width: int
    dtype: str

    def ref(self, j: Expr, rows: int, start: int | Expr = 0, width: int | None = None) -> Ref:
        return tile_ref(
            self.tensor, 0, rows, self.base + j_off(j, self.jstride) + start, self.width if width is None else width
        )


@dataclass
class LoweringState:
    prefix: str
    knobs: Mapping[str, Any]
    hw: Any
    graph: Graph
    roles: Roles
    tm: int
    mb: int
    allocs: list[Tensor] = field(default_factory=list)
    views: dict[int, View] = field(default_factory=dict)
    bcast: dict[int, View] = field(default_factory=dict)
    transposed: dict[int, str] = field(default_factory=dict)  # row node id -> stationary buffer name
    counter: int = 0
    budget: bool = False  # refuse the point once this pass's tiles outgrow SBUF or PSUM (`charge`)
    used: dict[str, int] = field(default_factory=dict)  # SBUF bytes per partition, PSUM banks, so far

    @property
    def pmax(self) -> int:
        """Partitions of a tile: the hardware file's SBUF partitions."""
        return int(self.hw.memory.partitions)

    @property
    def bank(self) -> int:
        """float32 elements of one PSUM bank per partition (the hardware file's bank size / 4)."""
        return int(self.hw.memory.psum_bank_bytes) // 4

    def tile(self, stem: str, partitions: int, free: int, dtype: str, buffer: str = "sbuf", tiles: int = 0) -> Tensor:
        replay = self.__dict__.get("replay")
        if replay is not None:  # the ragged last row block reuses the main block's buffers, in order
            return next(replay)
        t = self._new_tile(stem, partitions, free, dtype, buffer, tiles)
        self.__dict__.setdefault("seq", []).append(t)
        return t

    def _new_tile(self, stem: str, partitions: int, free: int, dtype: str, buffer: str, tiles: int) -> Tensor:
        self.counter += 1
        shape = (tiles, partitions, free) if tiles else (partitions, free)
        t = Tensor(f"{self.prefix}{stem}", buffer, shape, dtype, tiles=tiles)
        if any(a.name == t.name for a in self.allocs):
            t = Tensor(f"{self.prefix}{stem}_{self.counter}", buffer, shape, dtype, tiles=tiles)
        self.allocs.append(t)
        if self.budget:
            self.charge(t)
        return t

    def charge(self, t: Tensor) -> None:
        """Count `t` against the hardware's SBUF and PSUM; past either, the point is refused here. A
        pass's tiles are all live at once and the kernel holds at least them (`share_buffers` maps each
        onto one of its own), so the point `lower` would refuse once every pass is lowered is refused as
        soon as a pass outgrows the memory, with the same verdict (and no tile allocated after it): of a
        24-trial rmsnorm_matmul tune's 3,128 candidates, 1,397 were refused, at more than half of the
        candidates' lowering time. The figure is then a lower bound ("at least")."""
        mem = self.hw.memory
        if t.buffer == "sbuf":
            used = self.used["sbuf"] = self.used.get("sbuf", 0) + t.bytes_per_partition
            if used > mem.sbuf_bytes_per_partition:
                raise Rejected(
                    f"sbuf: at least {used} bytes per partition needed, {mem.sbuf_bytes_per_partition} available"
                )
        elif t.buffer == "psum":
            used = self.used["psum"] = self.used.get("psum", 0) + psum_banks(t, mem.psum_bank_bytes)
            if used > mem.psum_banks:
                raise Rejected(f"psum: at least {used} banks needed, {mem.psum_banks} available")


def psum_banks(t: Tensor, bank_bytes: int) -> int:
    """PSUM banks a tile takes, of `bank_bytes` per partition each (the hardware file's bank size)."""
    return -(-t.bytes_per_partition // bank_bytes)


def rows_expr(st: LoweringState, j: Expr) -> Expr:
    if st.__dict__.get("tail_base") is not None:
        return Expr.of(st.__dict__["tail_base"]) + j_off(j, st.tm)
    return Expr.of(Affine.of("i_r") * (st.tm * st.mb)) + j_off(j, st.tm)


def hbm_ref(
    st: LoweringState,
    name: str,
    bmap: tuple[Affine, ...],
    row0: Expr | None,
    nrows: int,
    f0: Expr | int,
    nf: int,
    shape: tuple[int, ...],
    transposed: bool = False,
) -> Ref:
    """View of an HBM tensor: batch indices, then [rows, free] (or [free, rows] when transposed)."""
    nb = len(shape) - 2
    idx: list[tuple[Expr, int | None]] = [(Expr.of(a), None) for a in bmap[len(bmap) - nb :]] if nb else []
    r = (row0 if row0 is not None else Expr.of(0), nrows)
    f = (Expr.of(f0), nf)
    idx += [f, r] if transposed else [r, f]
    return Ref(name, tuple(idx))


def for_j(st: LoweringState, body: Callable[[Expr], list[Stmt]]) -> list[Stmt]:
    if st.mb == 1:
        return body(Expr.of(0))
    return [TileLoop("i_j", st.mb, tuple(body(Expr.of(Affine.of("i_j")))), "row_tile")]


def is_scratch(name: str) -> bool:
    return name[0] == "t" and name[1:].isdigit()


def for_c(n: int, cs: int, body: Callable[[Expr, int], list[Stmt]], label: str) -> list[Stmt]:
    """`body(start, size)` over `n` rows in chunks of `cs` (loop `i_c`), and a last narrower chunk of
    the n mod cs rows left (N=1000: 7 of 128, then 104), peeled at its true size."""
    full, tail = divmod(n, cs)
    out: list[Stmt] = [TileLoop("i_c", full, tuple(body(Expr.of(Affine.of("i_c") * cs), cs)), label)]
    return out + body(Expr.of(full * cs), tail) if tail else out
