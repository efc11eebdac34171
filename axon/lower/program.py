"""`TileProgram`: a lowered kernel as structured data (loops, allocations, instructions).

The tuner's feature extractor reads engine instruction counts, DMA bytes and transfer sizes, SBUF and
PSUM footprints and loop extents straight from this structure, without tracing; `emit` turns it into
NKI source and `interpret` runs it on NumPy. It deliberately holds no array data and no timing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from axon.ir import DTYPE_BYTES
from axon.lower.index import Affine, AffineLike, Expr, ExprLike  # noqa: F401  (re-exported: the program's index types)
from axon.target import DEFAULT_HW


@dataclass(frozen=True)
class Tensor:
    """A named tensor: an HBM kernel argument/output/scratch, or an on-chip buffer (2-D [P, F])."""

    name: str
    buffer: str  # "hbm" | "sbuf" | "psum"
    shape: tuple[int, ...]
    dtype: str
    role: str = "tile"  # "input" | "output" | "scratch" | "tile"
    tiles: int = 0  # > 0: shape is (tiles, partitions, free), one PSUM bank per tile (`nl.par_dim`)

    @property
    def partitions(self) -> int:
        if self.buffer == "hbm":
            return 1
        return self.shape[1] if self.tiles else self.shape[0]

    @property
    def bytes_per_partition(self) -> int:

        n = 1
        for s in self.shape[1:] if self.buffer != "hbm" else self.shape:
            n *= s
        if self.tiles:
            n = self.tiles
            for s in self.shape[2:]:
                n *= s
        return n * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Ref:
    """A rectangular view of a tensor: per axis an integer index (`size` None) or a slice."""

    tensor: str
    index: tuple[tuple[Expr, int | None], ...]
    reshape: tuple[int, ...] = ()  # view an HBM tensor with another shape first (`t.reshape(...)`)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.index if size is not None)

    def render(self) -> str:
        parts = []
        for start, size in self.index:
            s = start.render()
            if size is None:
                parts.append(s)
            elif not start.is_const:
                parts.append(f"{s}:{s} + {size}")
            else:
                parts.append(f"{start.const}:{start.const + size}")
        base = f"{self.tensor}.reshape({self.reshape})" if self.reshape else self.tensor
        return f"{base}[{', '.join(parts)}]"


def tile_ref(tensor: str, p0: ExprLike, p: int, f0: ExprLike, f: int) -> Ref:
    return Ref(tensor, ((Expr.of(p0), p), (Expr.of(f0), f)))


@dataclass(frozen=True)
class TileInstr:
    """One NKI instruction: `opcode` is the nki.isa name, operands are views or immediates.

    `args` holds the keyword arguments in emission order; a value is a `Ref`, a float, a string
    naming an `nl` constant (e.g. "nl.exp") or a bool.
    """

    opcode: str
    engine: str  # "tensor" | "vector" | "scalar" | "gpsimd" | "dma"
    dst: Ref
    args: tuple[tuple[str, Any], ...] = ()
    comment: str = ""

    def arg(self, name: str, default: Any = None) -> Any:
        for k, v in self.args:
            if k == name:
                return v
        return default

    @property
    def reads(self) -> tuple[Ref, ...]:
        return tuple(v for _, v in self.args if isinstance(v, Ref))

    @property
    def partitions(self) -> int:
        src = self.arg("data") or self.arg("src") or self.arg("moving") or self.dst
        return src.shape[0] if len(src.shape) >= 1 else 1

    @property
    def free_size(self) -> int:
        src = self.arg("data") or self.arg("src") or self.arg("moving") or self.dst
        n = 1
        for s in src.shape[1:]:
            n *= s
        return n


@dataclass(frozen=True)
class TileLoop:
    """A data-parallel loop `for var in nl.affine_range(extent)` named by its role (e.g. "row_block")."""

    var: str
    extent: int
    body: tuple[Stmt, ...]
    name: str = ""


@dataclass(frozen=True)
class TileAlloc:
    """An on-chip tensor allocated where the pass begins (`Tile*`: not the emulator's trace records
    `axon.target.trace.Alloc`/`Instr`/`Loop`)."""

    tensor: Tensor


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Free:
    """The end of a pass: its on-chip buffers are released (`del` in the emitted source)."""

    names: tuple[str, ...]


Stmt = TileLoop | TileAlloc | TileInstr | Comment | Free


@dataclass(frozen=True)
class ProgramStats:
    """Static totals over all loop iterations (what the feature extractor reads)."""

    instructions: Mapping[str, int]  # per engine
    opcodes: Mapping[str, int]
    dma_bytes: int
    dma_transfers: int
    sbuf_bytes_per_partition: int
    psum_bytes_per_partition: int
    loop_extents: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class TileProgram:
    """A lowered kernel: HBM arguments, outputs, scratch tensors and the statement tree."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    scratch: tuple[Tensor, ...]
    body: tuple[Stmt, ...]
    header: tuple[str, ...] = ()
    point: Mapping[str, Any] = field(default_factory=dict)
    hw: str = DEFAULT_HW
    output_names: tuple[str, ...] = ()  # the graph's output names, in `outputs` order
    # HBM arguments and results the body reads in another shape than the spec's: (name, the spec's
    # shape); `inputs`/`outputs` have the body's (`axon.lower.rowaxis`), the kernel reshapes between
    views: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def own_names(self) -> set[str]:
        """The names the kernel gives its own variables: on-chip tensors, HBM scratch, loop variables."""
        names = {t.name for t in self.scratch} | {f"{name}_hbm" for name, _ in self.views}  # `emit`'s results

        def walk(stmts: tuple[Stmt, ...]) -> None:
            for s in stmts:
                if isinstance(s, TileAlloc):
                    names.add(s.tensor.name)
                elif isinstance(s, TileLoop):
                    names.add(s.var)
                    walk(s.body)

        walk(self.body)
        return names

    def tensors(self) -> dict[str, Tensor]:
        out = {t.name: t for t in self.inputs + self.outputs + self.scratch}

        def walk(stmts: tuple[Stmt, ...]) -> None:
            for s in stmts:
                if isinstance(s, TileAlloc):
                    out[s.tensor.name] = s.tensor
                elif isinstance(s, TileLoop):
                    walk(s.body)

        walk(self.body)
        return out

    def stats(self) -> ProgramStats:

        tensors = self.tensors()
        engines: dict[str, int] = {}
        opcodes: dict[str, int] = {}
        dma = [0, 0]
        loops: list[tuple[str, int]] = []

        def walk(stmts: tuple[Stmt, ...], mult: int) -> None:
            for s in stmts:
                if isinstance(s, TileLoop):
                    loops.append((s.name or s.var, s.extent))
                    walk(s.body, mult * s.extent)
                elif isinstance(s, TileInstr):
                    engines[s.engine] = engines.get(s.engine, 0) + mult
                    opcodes[s.opcode] = opcodes.get(s.opcode, 0) + mult
                    if s.engine == "dma":
                        n = 1
                        for d in s.dst.shape:
                            n *= d
                        dma[0] += mult * n * DTYPE_BYTES[tensors[s.dst.tensor].dtype]
                        dma[1] += mult

        walk(self.body, 1)
        sbuf = sum(t.bytes_per_partition for t in tensors.values() if t.buffer == "sbuf")
        psum = sum(t.bytes_per_partition for t in tensors.values() if t.buffer == "psum")
        return ProgramStats(engines, opcodes, dma[0], dma[1], sbuf, psum, tuple(loops))


def map_refs(stmts: Any, ref: Callable[[Ref], Ref], drop: Callable[[Stmt], bool] = lambda s: False) -> list[Stmt]:
    """`stmts` with every Ref an instruction names (its dst and its Ref arguments, in loops too)
    replaced by `ref(r)`, and the statements `drop` selects left out."""
    out: list[Stmt] = []
    for s in stmts:
        if drop(s):
            continue
        if isinstance(s, TileLoop):
            body = map_refs(s.body, ref, drop)
            same = len(body) == len(s.body) and all(a is b for a, b in zip(body, s.body))
            out.append(s if same else replace(s, body=tuple(body)))
        elif isinstance(s, TileInstr):
            args = tuple((k, ref(v) if isinstance(v, Ref) else v) for k, v in s.args)
            dst = ref(s.dst)
            same = dst is s.dst and all(a[1] is b[1] for a, b in zip(args, s.args))
            # untouched statements stay shared; a changed one built field by field (`replace` takes
            # longer than the rest of a pass's buffer sharing, tens of thousands of times a tune)
            out.append(s if same else TileInstr(s.opcode, s.engine, dst, args, s.comment))
        else:
            out.append(s)
    return out


def share_buffers(stmts: list[Stmt], allocs: list[Tensor], kernel: list[Tensor]) -> list[Stmt]:
    """Map a pass's buffers onto buffers of earlier passes with the same buffer/shape/dtype.

    Passes run one after another, so a later pass may reuse an earlier pass's tiles; the kernel then
    holds the union of distinct buffers, which is what the emulator (and the hardware) charges."""

    free = list(kernel)
    rename: dict[str, str] = {}
    for t in allocs:
        match = next(
            (k for k in free if (k.buffer, k.shape, k.dtype, k.tiles) == (t.buffer, t.shape, t.dtype, t.tiles)), None
        )
        if match is not None:
            free.remove(match)
            rename[t.name] = match.name
        else:
            kernel.append(t)
    if not rename:
        return stmts

    def ref(r: Ref) -> Ref:
        name = rename.get(r.tensor)
        return r if name is None else Ref(name, r.index, r.reshape)

    return map_refs(stmts, ref, drop=lambda s: isinstance(s, TileAlloc) and s.tensor.name in rename)
