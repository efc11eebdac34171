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
from axon.target import DEFAULT_HW

# An index expression: sum(coef * loop_var) + const, optionally floor-divided by `div`
# (np.repeat over a batch axis maps output head h to input head h // repeats).
#
# Lowering builds hundreds of these per candidate point, thousands of points per tune, so the hot
# operations below skip the frozen dataclass's `__init__` (one `object.__setattr__` per field) and
# the constants and single variables of `of` are interned: values, equality and hashes are those of
# the dataclasses.

_new = object.__new__
_INTERN_MAX = 1 << 16  # interned `of` values per table: loop offsets and names, a few hundred in practice


@dataclass(frozen=True)
class Affine:
    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0
    div: int = 1
    mod: int = 0  # 0: no modulus; k: the index taken modulo k (rotating multi-buffers)
    mul: int = 1  # applied after div and mod

    @staticmethod
    def of(value: AffineLike) -> Affine:
        if type(value) is Affine:
            return value
        known = _AFFINE_OF.get(value)  # type: ignore[arg-type]
        if known is not None:
            return known
        if isinstance(value, Affine):
            return value
        a = _affine(((value, 1),), 0) if isinstance(value, str) else _affine((), int(value))
        if len(_AFFINE_OF) < _INTERN_MAX:
            _AFFINE_OF[value] = a
        return a

    def __add__(self, other: AffineLike) -> Affine:
        o = other if type(other) is Affine else Affine.of(other)
        if self.div != 1 or self.mod or self.mul != 1 or o.div != 1 or o.mod or o.mul != 1:
            raise ValueError("cannot add to a floor-divided index")
        # terms are kept sorted with no zero coefficient, so a constant on either side merges
        # without re-sorting (lowering adds constants to indices hundreds of thousands of times a tune)
        if not o.terms:
            return self if not o.const else _affine(self.terms, self.const + o.const)
        if not self.terms:
            return _affine(o.terms, self.const + o.const)
        merged: dict[str, int] = dict(self.terms)
        for v, c in o.terms:
            merged[v] = merged.get(v, 0) + c
        return _affine(tuple(sorted((v, c) for v, c in merged.items() if c)), self.const + o.const)

    def __mul__(self, k: int) -> Affine:
        if self.div != 1 or self.mod or self.mul != 1:
            raise ValueError("cannot scale a floor-divided index")
        if not self.terms:
            return _affine((), self.const * k)
        return _affine(tuple((v, c * k) for v, c in self.terms if c * k), self.const * k)

    def floordiv(self, k: int) -> Affine:
        return self if k == 1 else _affine(self.terms, self.const, self.div * k)

    def modulo(self, k: int, then_mul: int = 1) -> Affine:
        return _affine(self.terms, self.const, self.div, k, then_mul)

    @property
    def plain(self) -> bool:
        return self.div == 1 and not self.mod and self.mul == 1

    def value(self, env: Mapping[str, int]) -> int:
        v = (sum(c * env[v] for v, c in self.terms) + self.const) // self.div
        return (v % self.mod if self.mod else v) * self.mul

    def render(self) -> str:
        parts = [v if c == 1 else f"{c} * {v}" for v, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        text = " + ".join(parts)
        if self.div != 1:
            text = f"({text}) // {self.div}"
        if self.mod:
            text = f"({text}) % {self.mod}"
        if self.mul != 1:
            text = f"({text}) * {self.mul}"
        return text


def _affine(terms: tuple[tuple[str, int], ...], const: int, div: int = 1, mod: int = 0, mul: int = 1) -> Affine:
    """`Affine(terms, const, div, mod, mul)`, the fields set straight into the instance dict."""
    a = _new(Affine)
    d = a.__dict__
    d["terms"] = terms
    d["const"] = const
    d["div"] = div
    d["mod"] = mod
    d["mul"] = mul
    return a


AffineLike = Affine | int | str
_AFFINE_OF: dict[int | str, Affine] = {}  # `Affine.of` of ints and names (interned values, not state)


@dataclass(frozen=True)
class Expr:
    """A sum of index terms (a rotating-buffer offset plus an affine offset)."""

    parts: tuple[Affine, ...]

    @staticmethod
    def of(value: ExprLike) -> Expr:
        t = type(value)
        if t is Expr:
            return value  # type: ignore[return-value]
        if t is Affine:
            return _expr((value,))  # type: ignore[arg-type]
        known = _EXPR_OF.get(value)  # type: ignore[arg-type]
        if known is not None:
            return known
        if isinstance(value, Expr):
            return value
        e = _expr((Affine.of(value),))
        if not isinstance(value, Affine) and len(_EXPR_OF) < _INTERN_MAX:
            _EXPR_OF[value] = e
        return e

    def __add__(self, other: ExprLike) -> Expr:
        o = other if type(other) is Expr else Expr.of(other)
        sp, op = self.parts, o.parts
        if len(sp) == 1 and len(op) == 1:  # the common case, as the general one below
            a, b = sp[0], op[0]
            if a.div == 1 and not a.mod and a.mul == 1 and b.div == 1 and not b.mod and b.mul == 1:
                s = a + b
                return self if s is a else _expr((s,))
        plain = [a for a in sp + op if a.plain]
        rest = [a for a in sp + op if not a.plain]
        total = Affine()
        for a in plain:
            total = total + a
        return Expr(tuple(rest) + ((total,) if (total.terms or total.const or not rest) else ()))

    @property
    def is_const(self) -> bool:
        return all(a.plain and not a.terms for a in self.parts)

    @property
    def const(self) -> int:
        return sum(a.const for a in self.parts)

    def value(self, env: Mapping[str, int]) -> int:
        return sum(a.value(env) for a in self.parts)

    def render(self) -> str:
        return " + ".join(a.render() for a in self.parts)


def _expr(parts: tuple[Affine, ...]) -> Expr:
    """`Expr(parts)`, the field set straight into the instance dict."""
    e = _new(Expr)
    e.__dict__["parts"] = parts
    return e


ExprLike = Expr | Affine | int | str
_EXPR_OF: dict[int | str, Expr] = {}  # `Expr.of` of ints and names (interned values, not state)


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
            out.append(replace(s, body=tuple(map_refs(s.body, ref, drop))))
        elif isinstance(s, TileInstr):
            args = tuple((k, ref(v) if isinstance(v, Ref) else v) for k, v in s.args)
            out.append(replace(s, dst=ref(s.dst), args=args))
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
        return r if name is None else replace(r, tensor=name)

    return map_refs(stmts, ref, drop=lambda s: isinstance(s, TileAlloc) and s.tensor.name in rename)
