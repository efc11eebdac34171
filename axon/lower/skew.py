"""The row-block loop of a matmul pass, software-pipelined by one block.

An engine runs its instructions in program order. In `for r: [A^T(r)] [matmuls(r), evacuations(r)]`,
block r+1's transposes reach TensorE only after block r's last matmul, and their copies out of PSUM
queue behind block r's last evacuations: TensorE idles for a few evacuations at every block boundary.
Skewed, iteration r prepares block r+1 before it multiplies block r:

    A^T(0); for r in range(n - 1): [A^T(r + 1)] [matmuls(r) ...]; matmuls(n - 1) ...

"Prepare" is everything the block emits before its matmul's first product (the loads and fused
operations that compute the stationary operand, and its transposes). The program means the same as
long as no tile the preparation writes is read by the rest of the block, except the rotating A^T
tile (block r+1's slot is not block r's), and no tile the rest writes is read by the preparation;
`skew` checks both and returns None when either fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from axon.lower.index import Affine, Expr
from axon.lower.program import Ref, Stmt, TileInstr, TileLoop, map_refs


def skew(block: list[Stmt], split: int, var: str, extent: int, name: str, rotated: set[str]) -> list[Stmt] | None:
    """`for var in range(extent): block`, with `block[:split]` moved one iteration ahead (see the
    module), or None if that would change what the program computes."""
    if extent < 2 or not 0 < split < len(block):
        return None
    pre, rest = block[:split], block[split:]
    pre_w, pre_r = _touched(pre)
    rest_w, rest_r = _touched(rest)
    if (pre_w & rest_r) - rotated or rest_w & pre_r:
        return None
    return (
        substitute(pre, var, lambda a: a.fixed(var, 0))
        + [TileLoop(var, extent - 1, tuple(substitute(pre, var, lambda a: a.shifted(var, 1)) + rest), name)]
        + substitute(rest, var, lambda a: a.fixed(var, extent - 1))
    )


def substitute(stmts: list[Stmt], var: str, change: Callable[[Affine], Affine]) -> list[Stmt]:
    """`stmts` with every index part that names `var` replaced by `change(part)`."""

    def expr(e: Expr) -> Expr:
        if not any(var == v for a in e.parts for v, _ in a.terms):
            return e
        total = Expr.of(0)
        for a in e.parts:
            total = total + (change(a) if any(var == v for v, _ in a.terms) else a)
        return total

    def ref(r: Ref) -> Ref:
        return Ref(r.tensor, tuple((expr(start), size) for start, size in r.index), r.reshape)

    return map_refs(stmts, ref)


def _touched(stmts: Iterable[Stmt]) -> tuple[set[str], set[str]]:
    """Names of the tensors `stmts` write and read."""
    writes: set[str] = set()
    reads: set[str] = set()
    for s in stmts:
        if isinstance(s, TileLoop):
            w, r = _touched(s.body)
            writes |= w
            reads |= r
        elif isinstance(s, TileInstr):
            writes.add(s.dst.tensor)
            reads.update(r.tensor for r in s.reads)
            if s.arg("accumulate"):  # an accumulating matmul reads its PSUM tile too
                reads.add(s.dst.tensor)
    return writes, reads
