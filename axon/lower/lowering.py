"""`lower(variant, point, hw) -> TileProgram`: each pass as row blocks of <= 128 partitions.

Scheme: batch axes are outer loops; the output rows are cut into blocks of `m_block` tiles of
`tile_m` partitions; inside a block every row-role intermediate stays in SBUF at its full free
extent. A matmul transposes its row operand into stationary tiles [tile_k, tile_m] (TensorE
transpose or DMA transpose, or none when the input is already [K, M] in HBM), streams or keeps
resident moving tiles [tile_k, tile_n] and accumulates over K in one PSUM bank per row tile.
Elementwise groups use the instruction sequences chosen by `axon.synth.isel`. This module does not
emit source (see `emit`) and does not time anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from axon.errors import AxonError
from axon.ir import DTYPE_BYTES, Graph
from axon.lower.passes import LoweringError, Pass, Roles, Weight, classify, materializable, matmul_cuts, split
from axon.lower.program import Affine, Alloc, Comment, Expr, Free, Instr, Loop, Ref, Stmt, Tensor, TileProgram, tile_ref

PMAX = 128
BANK_FP32 = 512


class Rejected(AxonError):
    """A point that cannot run on the hardware (SBUF/PSUM do not fit, tiles do not divide)."""


KNOB_DEFAULTS: dict[str, Any] = dict(
    fusion="fused",
    tile_m=128,
    m_block=1,
    tile_n=512,
    tile_k=128,
    bufs=1,
    transpose="pe",
    weights="stream",
    evac="vector",
    psum_bufs=1,
    loop_order="nk",
)

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
class _State:
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
        return t


def knobs_of(point: Any) -> dict[str, Any]:
    values = dict(point) if isinstance(point, Mapping) else dict(getattr(point, "knobs", None) or {})
    return {**KNOB_DEFAULTS, **values}


def graph_of(variant: Any) -> Graph:
    return variant if isinstance(variant, Graph) else variant.graph


def lower(variant: Any, point: Any, hw: Any) -> TileProgram:
    """Lower a variant (a `Graph` or an object with `.graph`) at a point on a `HardwareSpec`.

    >>> from axon.workloads import get
    >>> from axon.target import load_hw
    >>> prog = lower(get("softmax").graph("small"), {}, load_hw("trn1"))
    >>> prog.stats().instructions["dma"] > 0
    True
    """
    try:
        return _lower(variant, point, hw, reuse="rotating")
    except Rejected as exc:
        if not str(exc).startswith("sbuf:"):
            raise
        return _lower(variant, point, hw, reuse="all")


def _lower(variant: Any, point: Any, hw: Any, reuse: str) -> TileProgram:
    """`lower` with a slot-reuse policy. A value may take over the slot of an operand read for the
    last time; "rotating" allows it only for slots that rotate with the row block (a fixed slot
    taken over stays live until its new value is read, so the next row block's writer of the
    operand waits for that: two pipeline stages become one). "all" reuses any dead slot, which
    `lower` falls back to where the point does not fit SBUF otherwise."""
    from axon.lower.passes import normalize

    original = graph_of(variant)
    graph = original.memo(("normalized",), lambda: normalize(original))  # the same graph objects for every
    graph.check_bound()  # point, so their memos hold
    knobs = knobs_of(point)
    cuts = frozenset(_cuts(graph, knobs["fusion"]))
    passes, cuts = graph.memo(("split", cuts), lambda: split(graph, cuts))
    body: list[Stmt] = []
    scratch: list[Tensor] = []
    sbuf_peak = psum_peak = 0
    kernel_allocs: list[Tensor] = []  # on-chip buffers are shared by passes (allocated once, reused)
    for i, p in enumerate(passes):
        prefix = f"p{i}_" if len(passes) > 1 else ""
        stmts, allocs = _lower_pass(p, knobs, hw, prefix, reuse)
        stmts = _share_buffers(stmts, allocs, kernel_allocs)
        body.append(Comment(f"pass {i}: computes {', '.join(p.writes)}"))
        body.extend(stmts)
    sbuf_peak = sum(t.bytes_per_partition for t in kernel_allocs if t.buffer == "sbuf")
    psum_peak = sum(_banks(t) for t in kernel_allocs if t.buffer == "psum")
    for i, p in enumerate(passes):
        for name, o in zip(p.writes, p.graph.outputs):
            if _is_scratch(name):
                scratch.append(Tensor(name, "hbm", p.graph.concrete_shape(o), "float32", "scratch"))
    if knobs.get("loop_order", "nk") != "nk" and not _has_loop(body, "n_group"):
        raise Rejected(
            f"loop_order: {knobs['loop_order']} applies to no matmul here (no N in whole groups of "
            f"{knobs['loop_order'][2:]} tiles of tile_n)"
        )
    mem = hw.memory
    if sbuf_peak > mem.sbuf_bytes_per_partition:
        raise Rejected(f"sbuf: {sbuf_peak} bytes per partition needed, {mem.sbuf_bytes_per_partition} available")
    if psum_peak > mem.psum_banks:
        raise Rejected(f"psum: {psum_peak} banks needed, {mem.psum_banks} available")
    inputs = tuple(
        Tensor(n.attr("name"), "hbm", graph.concrete_shape(n.id), n.type.dtype, "input") for n in graph.inputs
    )
    from axon.lower.passes import scratch_name

    outputs = tuple(
        Tensor(scratch_name(graph, o), "hbm", graph.concrete_shape(o), graph.nodes[o].type.dtype, "output")
        for o in graph.outputs
    )
    header = (
        f"workload: {graph.name}  shapes: {graph.bindings}",
        f"variant: {_describe(variant)}",
        f"point: {dict(sorted(knobs.items()))}",
        f"passes: {len(passes)}  cuts: {sorted(cuts)}  sbuf/partition: {sbuf_peak} B  psum banks: {psum_peak}",
    )
    prog = TileProgram(
        graph.name,
        inputs,
        outputs,
        tuple(scratch),
        tuple(body),
        header,
        dict(knobs),
        hw.name,
        tuple(graph.output_names),
    )
    object.__setattr__(prog, "point", {**knobs, "_sbuf_peak": sbuf_peak, "_psum_banks": psum_peak})
    return prog


def _has_loop(stmts: Any, name: str) -> bool:
    return any(isinstance(s, Loop) and (s.name == name or _has_loop(s.body, name)) for s in stmts)


def _share_buffers(stmts: list[Stmt], allocs: list[Tensor], kernel: list[Tensor]) -> list[Stmt]:
    """Map a pass's buffers onto buffers of earlier passes with the same buffer/shape/dtype.

    Passes run one after another, so a later pass may reuse an earlier pass's tiles; the kernel then
    holds the union of distinct buffers, which is what the emulator (and the hardware) charges."""
    import dataclasses

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
        return dataclasses.replace(r, tensor=rename.get(r.tensor, r.tensor))

    def walk(ss: Any) -> list[Stmt]:
        out: list[Stmt] = []
        for s in ss:
            if isinstance(s, Alloc):
                if s.tensor.name not in rename:
                    out.append(s)
            elif isinstance(s, Loop):
                out.append(dataclasses.replace(s, body=tuple(walk(s.body))))
            elif isinstance(s, Instr):
                args = tuple((k, ref(v) if isinstance(v, Ref) else v) for k, v in s.args)
                out.append(dataclasses.replace(s, dst=ref(s.dst), args=args))
            else:
                out.append(s)
        return out

    return walk(stmts)


def _describe(variant: Any) -> str:
    if isinstance(variant, Graph):
        return "original graph"
    moves = getattr(variant, "moves", ())
    return "; ".join(getattr(m, "description", str(m)) for m in moves) or "original graph"


def _banks(t: Tensor) -> int:
    return -(-t.bytes_per_partition // 2048)


def _cuts(graph: Graph, fusion: Any) -> set[int]:
    if fusion == "fused":
        return set()
    if fusion == "unfused":
        return set(materializable(graph))
    if fusion == "split_matmuls":
        return set(matmul_cuts(graph))
    if isinstance(fusion, (tuple, frozenset, set, list)):
        return set(fusion)
    raise LoweringError(f"unknown fusion knob {fusion!r}")


# one pass ----------------------------------------------------------------------------------------


def _lower_pass(
    p: Pass, knobs: Mapping[str, Any], hw: Any, prefix: str, reuse: str = "all"
) -> tuple[list[Stmt], list[Tensor]]:
    g = p.graph
    roles = classify(g)
    rows = roles.rows
    tm = min(int(knobs["tile_m"]), rows, PMAX)
    mb = int(knobs["m_block"])
    if rows < tm * mb:
        mb = max(1, rows // tm)  # a pass with fewer rows than a block runs with fewer row tiles
    if rows % (tm * mb) and mb > 1:
        raise Rejected(f"m_block: {rows} rows of {g.name} are not a multiple of tile_m*m_block={tm * mb}")
    st = _State(prefix, knobs, hw, g, roles, tm, mb)
    st.__dict__["reuse"] = reuse
    from axon.lower.fused import plan_groups

    plan_groups(st, p.origin)
    pre: list[Stmt] = []
    for nid, role in sorted(roles.role.items()):
        if role == "bcast":
            pre.extend(_bcast(st, nid))
    batch_prep: list[Stmt] = []
    from axon.lower.matmul import lower_matmul, prepare_weights  # one file per idea

    for nid in sorted(roles.weight):
        batch_prep.extend(prepare_weights(st, nid))
    nblocks, tail = divmod(rows, tm * st.mb)
    st.__dict__["seq"] = []
    block = _row_block(st, p) if nblocks else []
    tail_block: list[Stmt] = []
    if tail:
        seq = st.__dict__.pop("seq")
        for key in ("views", "transposed"):
            getattr(st, key).clear()
        for key in ("pt", "pool", "slots", "stored", "done"):
            st.__dict__.pop(key, None)
        if nblocks:
            st.__dict__["replay"] = iter(seq)
        st.tm, st.__dict__["tail_base"] = tail, nblocks * tm * st.mb
        tail_block = [Comment(f"last row block: {tail} rows")] + _row_block(st, p)
    stmts: list[Stmt] = [Alloc(t) for t in st.allocs] + pre
    inner: list[Stmt] = batch_prep + ([Loop("i_r", nblocks, tuple(block), "row_block")] if nblocks else []) + tail_block
    for i in reversed(range(len(roles.batch))):
        inner = [Loop(f"i_b{i}", roles.batch[i], tuple(inner), f"batch{i}")]
    return stmts + inner, st.allocs


def _row_block(st: _State, p: Pass) -> list[Stmt]:
    from axon.lower.elementwise import lower_node, release
    from axon.lower.matmul import lower_matmul

    block: list[Stmt] = []
    done: set[int] = st.__dict__.setdefault("done", set())  # nodes emitted so far (read by in-place decisions)
    for node in [n for n in p.graph.nodes if st.roles.role.get(n.id) == "row"]:
        block.extend(lower_matmul(st, node) if node.op == "matmul" else lower_node(st, node))
        if node.id in st.__dict__.get("internal", ()):
            continue  # its value is produced with its group's sink
        groups = st.__dict__.get("groups", {})
        done.update(groups[node.id][0].nodes if node.id in groups else (node.id,))
        release(st, done)
    return block + _stores(st, p)


def rows_expr(st: _State, j: Expr) -> Expr:
    if st.__dict__.get("tail_base") is not None:
        return Expr.of(st.__dict__["tail_base"]) + j_off(j, st.tm)
    return Expr.of(Affine.of("i_r") * (st.tm * st.mb)) + j_off(j, st.tm)


def hbm_ref(
    st: _State,
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


def for_j(st: _State, body: Callable[[Expr], list[Stmt]]) -> list[Stmt]:
    if st.mb == 1:
        return body(Expr.of(0))
    return [Loop("i_j", st.mb, tuple(body(Expr.of(Affine.of("i_j")))), "row_tile")]


def _bcast(st: _State, nid: int) -> list[Stmt]:
    """A free-axis vector replicated over partitions on TensorE (ones[1, P].T @ v[1, F])."""
    g = st.graph
    node = g.nodes[nid]
    shape = g.concrete_shape(nid)
    f = shape[-1]
    dt = node.type.dtype
    shared = st.__dict__.setdefault("bcast_shared", {})
    if dt not in shared:  # one staging chunk, ones vector and PSUM bank serve every vector
        shared[dt] = (
            st.tile(f"row_chunk_{dt}", 1, BANK_FP32, dt),
            st.tile(f"ones_{dt}", 1, PMAX, dt),
            st.__dict__.get("bcast_ps") or st.tile("bcast_psum", PMAX, BANK_FP32, "float32", "psum"),
        )
        st.__dict__["bcast_ps"] = shared[dt][2]
    row, ones, ps = shared[dt]
    full = st.tile(f"{node.attr('name')}_bcast", PMAX, f, "float32")
    out: list[Stmt] = [Instr("memset", "vector", tile_ref(ones.name, 0, 1, 0, PMAX), (("value", 1.0),))]
    for c0 in range(0, f, BANK_FP32):
        cs = min(BANK_FP32, f - c0)
        src = Ref(node.attr("name"), ((Expr.of(0), 1), (Expr.of(c0), cs)), (1, f))
        out.append(
            Instr(
                "dma_copy",
                "dma",
                tile_ref(row.name, 0, 1, 0, cs),
                (("src", src),),
                f"{node.attr('name')} chunk as one row",
            )
        )
        out.append(
            Instr(
                "nc_matmul",
                "tensor",
                tile_ref(ps.name, 0, PMAX, 0, cs),
                (
                    ("stationary", tile_ref(ones.name, 0, 1, 0, PMAX)),
                    ("moving", tile_ref(row.name, 0, 1, 0, cs)),
                    # the bank is shared by every broadcast vector: each chunk must overwrite it
                    # (nc_matmul's default accumulates onto a location written before)
                    ("accumulate", False),
                ),
                "broadcast over partitions",
            )
        )
        out.append(
            Instr(
                "tensor_copy",
                "vector",
                tile_ref(full.name, 0, PMAX, c0, cs),
                (("src", tile_ref(ps.name, 0, PMAX, 0, cs)),),
            )
        )
    st.bcast[nid] = View(full.name, 0, Expr.of(0), f, "float32")
    return out


def _stores(st: _State, p: Pass) -> list[Stmt]:
    g = st.graph
    out: list[Stmt] = []
    for name, o in zip(p.writes, g.outputs):
        if o in st.__dict__.get("stored", ()):
            continue  # a matmul output stored tile by tile while leaving PSUM
        view = st.views[o]
        shape = g.concrete_shape(o)
        dt = "float32" if _is_scratch(name) else g.nodes[o].type.dtype

        def body(
            j: Expr, view: View = view, name: str = name, shape: tuple[int, ...] = shape, dt: str = dt
        ) -> list[Stmt]:
            stmts: list[Stmt] = []
            src = view.ref(j, st.tm)
            if view.dtype != dt:
                stage = st.tile(f"{name}_stage", st.tm, shape[-1], dt)
                stmts.append(
                    Instr(
                        "tensor_copy",
                        "vector",
                        tile_ref(stage.name, 0, st.tm, 0, shape[-1]),
                        (("src", src),),
                        f"cast to {dt}",
                    )
                )
                src = tile_ref(stage.name, 0, st.tm, 0, shape[-1])
            dst = hbm_ref(st, name, st.roles.bmap[o], rows_expr(st, j), st.tm, 0, shape[-1], shape)
            stmts.append(Instr("dma_copy", "dma", dst, (("src", src),), f"store {name}"))
            return stmts

        out.extend(for_j(st, body))
    return out


def _is_scratch(name: str) -> bool:
    return name[0] == "t" and name[1:].isdigit()
