"""Row folding: `fold` consecutive rows per partition, for passes that only compute row-wise elementwise values.

A pass whose every value is elementwise over its rows (loads, unary/binary ops, casts, powers,
slices and concats of the free axis; no reduction, matmul, transpose or broadcast vector) does not
care which partition a row sits on. With `fold` = k, partition p of a row tile holds k consecutive
rows instead of one: an on-chip tile [P, F] becomes [P, k, F] and an HBM tensor [..., R, F] is
viewed as [..., R/k, k, F], so one DMA moves k rows per partition (one descriptor per partition
row: k times fewer descriptors for the same bytes) and one instruction covers k rows (its fixed
cost paid once). A free-axis slice becomes a strided access pattern ([P, k, w] at a column offset
of each row), which is how rotate-half reads the two halves of every folded row.

The pass is lowered as if it had R/k rows (`folded_rows`), then `fold_pass` inserts the fold axis
into every reference: the row index expressions are unchanged, since reshaped row r/k of HBM is
partition p of the same row tile.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from axon.ir import Graph
from axon.ir.ops import BINARY, UNARY
from axon.lower.program import Affine, Expr, Ref, Stmt, Tensor, TileAlloc, TileInstr, TileLoop
from axon.lower.roles import LoweringError, NeedCut, Roles, classify

FOLD_CHOICES = (1, 2, 4, 8, 16, 32)
_BLOCKING = frozenset({"matmul", "reduce", "transpose", "repeat", "reshape"})
_ROW_OPS = frozenset({"input", "slice", "concat", "cast", "pow"}) | frozenset(UNARY) | frozenset(BINARY)


def fold_blocker(graph: Graph, roles: Roles | None = None) -> str | None:
    """None if every value of `graph` is elementwise over rows (so rows may be folded); else why not."""
    for node in graph.nodes:
        if node.op in _BLOCKING:
            return f"%{node.id} {node.op} is not elementwise over rows"
    if roles is None:
        try:
            roles = classify(graph)
        except NeedCut as cut:
            return f"%{cut.node} needs a pass of its own"
    for nid, role in roles.role.items():
        if role == "scalar":
            continue
        node = graph.nodes[nid]
        if role != "row":
            return f"%{nid} {node.op} is a {role} operand"
        if node.op not in _ROW_OPS:
            return f"%{nid} {node.op} is not elementwise over rows"
        shape = graph.concrete_shape(nid)
        if len(shape) < 2 or shape[-1] <= 1 or shape[-2] != roles.rows:
            return f"%{nid} {node.op} of shape {shape} is not a full row value"
    return None


def folded_rows(graph: Graph, roles: Roles, fold: int) -> int:
    """Rows of the pass once `fold` rows share a partition; raises LoweringError if it cannot fold."""
    why = fold_blocker(graph, roles)
    if why is not None:
        raise LoweringError(f"fold: {graph.name}: {why}")
    if roles.rows % fold:
        raise LoweringError(f"fold: {roles.rows} rows of {graph.name} are not a multiple of fold={fold}")
    return roles.rows // fold


def fold_pass(
    stmts: list[Stmt], allocs: list[Tensor], fold: int, hbm: dict[str, tuple[int, ...]]
) -> tuple[list[Stmt], list[Tensor]]:
    """The pass `stmts` (with on-chip buffers `allocs`) with `fold` rows per partition.

    `hbm` maps each HBM tensor the pass reads or writes to its shape; it is viewed with its row axis
    split as [R/fold, fold]. An on-chip tile holds row slots of one width F (a rotating buffer or
    m_block row tiles side by side: the widest reference to it is a whole slot): [P, n*F] becomes
    [P, n, fold, F], so the fold rows of one slot are contiguous in each partition (one DMA
    descriptor per partition) and a reference at free offset s*F + c of width w becomes
    [p, s, 0:fold, c:c + w]."""
    widths: dict[str, int] = {}
    _scan(stmts, widths)
    sizes = {t.name: t.shape for t in allocs}
    shapes: dict[str, tuple[int, ...]] = {}
    for t in allocs:
        if t.buffer != "sbuf" or t.tiles or len(t.shape) != 2:
            raise LoweringError(f"fold: cannot fold buffer {t.name} {t.buffer} {t.shape}")
        w = widths.get(t.name, t.shape[1])
        if t.shape[1] % w:
            raise LoweringError(f"fold: {t.name} of {t.shape[1]} elements is not whole slots of {w}")
        shapes[t.name] = (t.shape[0], t.shape[1] // w, fold, w)
    rewrite = _Rewrite(fold, hbm, shapes, widths, sizes)
    return rewrite.stmts(stmts), [dataclasses.replace(t, shape=shapes[t.name]) for t in allocs]


def _scan(stmts: list[Stmt] | tuple[Stmt, ...], widths: dict[str, int]) -> None:
    for s in stmts:
        if isinstance(s, TileLoop):
            _scan(s.body, widths)
        elif isinstance(s, TileInstr):
            for r in (s.dst, *s.reads):
                if len(r.index) == 2 and r.index[1][1] is not None:
                    widths[r.tensor] = max(widths.get(r.tensor, 0), int(r.index[1][1]))


class _Rewrite:
    def __init__(
        self,
        fold: int,
        hbm: dict[str, tuple[int, ...]],
        shapes: dict[str, tuple[int, ...]],
        widths: dict[str, int],
        sizes: dict[str, tuple[int, ...]],
    ) -> None:
        self.fold, self.hbm, self.shapes, self.widths, self.sizes = fold, hbm, shapes, widths, sizes

    def stmts(self, stmts: list[Stmt] | tuple[Stmt, ...]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, TileAlloc):
                out.append(TileAlloc(dataclasses.replace(s.tensor, shape=self.shapes[s.tensor.name])))
            elif isinstance(s, TileLoop):
                out.append(dataclasses.replace(s, body=tuple(self.stmts(s.body))))
            elif isinstance(s, TileInstr):
                args = tuple((k, self.ref(v) if isinstance(v, Ref) else v) for k, v in s.args)
                out.append(dataclasses.replace(s, dst=self.ref(s.dst), args=args))
            else:
                out.append(s)
        return out

    def ref(self, r: Ref) -> Ref:
        axis = (Expr.of(0), self.fold)
        if r.tensor in self.hbm:
            if r.reshape:
                raise LoweringError(f"fold: {r.render()} is already reshaped")
            shape = self.hbm[r.tensor]
            idx = r.index
            return Ref(r.tensor, (*idx[:-1], axis, idx[-1]), (*shape[:-2], shape[-2] // self.fold, self.fold, shape[-1]))
        if r.tensor not in self.shapes or len(r.index) != 2:
            raise LoweringError(f"fold: cannot fold {r.render()}")
        (f0, nf) = r.index[1]
        slot, start = _split(f0, self.widths[r.tensor], r.render())
        if start + int(nf or 1) > self.widths[r.tensor]:
            raise LoweringError(f"fold: {r.render()} crosses a slot of {self.widths[r.tensor]}")
        return Ref(r.tensor, (r.index[0], (slot, None), axis, (Expr.of(start), nf)))


def _split(e: Expr, w: int, what: str) -> tuple[Expr, int]:
    """(slot, start) with e = slot * w + start, 0 <= start < w; LoweringError if e is not of that form."""
    parts: list[Affine] = []
    start = 0
    for a in e.parts:
        if a.plain:
            if any(c % w for _, c in a.terms):
                raise LoweringError(f"fold: offset of {what} is not in whole slots of {w}")
            start += a.const % w
            if a.terms or a.const // w:
                parts.append(Affine(tuple((v, c // w) for v, c in a.terms), a.const // w))
        elif a.mul % w == 0:
            parts.append(dataclasses.replace(a, mul=a.mul // w))
        else:
            raise LoweringError(f"fold: offset of {what} is not in whole slots of {w}")
    return Expr(tuple(parts) or (Affine(),)), start
