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

from axon.ir import Dim, Graph
from axon.ir.ops import BINARY, UNARY
from axon.lower.program import Affine, Expr, Ref, Stmt, Tensor, TileAlloc, TileInstr, TileLoop, map_refs
from axon.lower.roles import LoweringError, NeedCut, Roles, classify

FOLD_CHOICES = (1, 2, 4, 8, 16, 32)
# Folding pays where a partition's row is short next to a DMA descriptor's fixed cost; past this many
# bytes per partition a transfer is already mostly bandwidth, so larger folds only cost SBUF
FOLD_MAX_BYTES = 16384
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


def fold_choices(graph: Graph) -> tuple[int, ...]:
    """The folds worth offering for `graph` (() if it cannot fold): those keeping a partition's
    folded row (its widest value, as fp32) within FOLD_MAX_BYTES, 1 included."""
    if fold_blocker(graph) is not None:
        return ()
    widest = max(graph.concrete_shape(n.id)[-1] for n in graph.nodes if len(graph.concrete_shape(n.id)) >= 2)
    return tuple(k for k in FOLD_CHOICES if k == 1 or k * widest * 4 <= FOLD_MAX_BYTES)


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
            return Ref(
                r.tensor, (*idx[:-1], axis, idx[-1]), (*shape[:-2], shape[-2] // self.fold, self.fold, shape[-1])
            )
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


# column split: the opposite layout -------------------------------------------------------------------

SPLIT_CHOICES = (1, 2, 4)


def split_blocker(graph: Graph) -> str | None:
    """None if `graph` may be lowered with each row cut into `split` rows of F/split columns: every
    value elementwise over rows, no slice or concat (columns are independent), and every row value
    [..., R, F] with the same two plain dimension symbols R and F (so rebinding them reshapes all)."""
    why = fold_blocker(graph)
    if why is not None:
        return why
    roles = classify(graph)
    axes = set()
    for nid, role in roles.role.items():
        node = graph.nodes[nid]
        if role == "scalar":
            continue
        if node.op in ("slice", "concat"):
            return f"%{nid} {node.op} mixes columns"
        axes.add(tuple(_symbol(d) for d in node.shape[-2:]))
    if len(axes) != 1 or None in next(iter(axes)):
        return "row values do not share plain row and column dimensions"
    return None


def _symbol(d: Any) -> str | None:
    names: frozenset[str] = getattr(d, "symbols", frozenset())
    if len(names) != 1:
        return None
    name = next(iter(names))
    return name if d == Dim.sym(name) else None


def split_graph(graph: Graph, split: int) -> Graph:
    """`graph` rebound so that each row of F columns is `split` rows of F/split (LoweringError if it
    cannot be); the HBM tensors are the same bytes, viewed [..., R*split, F/split] (`split_refs`)."""
    why = split_blocker(graph)
    if why is not None:
        raise LoweringError(f"split: {graph.name}: {why}")
    node = next(n for n in graph.nodes if n.op == "input" and len(n.shape) >= 2)
    rows, cols = (_symbol(d) for d in node.shape[-2:])
    b = graph.bindings
    assert rows is not None and cols is not None  # split_blocker checked
    if b[cols] % split:
        raise LoweringError(f"split: {b[cols]} columns of {graph.name} are not a multiple of split={split}")
    return graph.memo(("split", split), lambda: graph.bind(**{rows: b[rows] * split, cols: b[cols] // split}))


def split_refs(stmts: list[Stmt], shapes: dict[str, tuple[int, ...]]) -> list[Stmt]:
    """View every HBM tensor named in `shapes` with that (split) shape: `t.reshape(shape)[...]`."""

    def ref(r: Ref) -> Ref:
        if r.tensor not in shapes:
            return r
        if r.reshape:
            raise LoweringError(f"split: {r.render()} is already reshaped")
        return Ref(r.tensor, r.index, shapes[r.tensor])

    return map_refs(stmts, ref)
