"""Row-role nodes other than matmul: loads, elementwise ops, free-axis reductions, slices, concat.

Each op maps to one ScalarE/VectorE instruction by operand kinds (full tile, per-row [P, 1] vector,
broadcast free-axis vector, immediate). Fused groups replaced by a synthesized instruction sequence
are handled by `axon.lower.fused`; this file is the one-op-one-instruction default.
"""

from __future__ import annotations

from typing import Any

from axon.ir import Node
from axon.ir.ops import BINARY, UNARY
from axon.lower.program import Affine, Expr, Ref, Stmt, TileInstr, TileLoop, tile_ref
from axon.lower.roles import LoweringError
from axon.lower.state import ACT, ALU, REDUCE, LoweringState, View, for_c, for_j, hbm_ref, is_scratch, j_off, rows_expr


def out_dtype(st: LoweringState, node: Node) -> str:
    g = st.graph
    if node.id in g.outputs:
        name = g.output_names[g.outputs.index(node.id)]
        return "float32" if is_scratch(name) else node.type.dtype
    return "float32"


def new_view(st: LoweringState, node: Node, stem: str = "") -> View:
    f = st.graph.concrete_shape(node.id)[-1]
    key = (st.mb * f, out_dtype(st, node))
    pool = st.__dict__.setdefault("pool", [])
    for entry in pool:
        if entry[1] == key:  # a dead slot of the same size: reuse its SBUF
            pool.remove(entry)
            v = View(entry[0], f, entry[2], f, key[1])
            st.views[node.id] = v
            return v
    t = st.tile(stem or f"t{node.id}", st.tm, st.mb * f, out_dtype(st, node))
    v = View(t.name, f, Expr.of(0), f, t.dtype)
    st.views[node.id] = v
    own(st, t.name, st.mb * f, t.dtype, Expr.of(0))
    return v


def own(st: LoweringState, name: str, size: int, dtype: str, base: Expr, rotates: bool = False) -> None:
    """Record `name` as a slot this block may recycle: `size` elements per partition at `base`.

    A rotating multi-buffered load is one slot whose base moves with the row block, so a value that
    takes it over once the load is dead (an in-place result, the output) rotates with it. `rotates`
    says so also in the ragged last block, which does not rotate but must reuse slots as the main
    block does (it replays the main block's allocations)."""
    st.__dict__.setdefault("slots", {})[name] = (size, dtype, base)
    if rotates:
        st.__dict__.setdefault("rotating", set()).add(name)


def owned(st: LoweringState) -> dict[str, tuple[int, str, Expr]]:
    return st.__dict__.setdefault("slots", {})


def whole_slot(st: LoweringState, v: View) -> bool:
    """Whether view `v` covers the whole of an owned slot (not a slice of one)."""
    slot = owned(st).get(v.tensor)
    return slot is not None and v.base == slot[2] and v.width == v.jstride and st.mb * v.width == slot[0]


def operand(st: LoweringState, nid: int, j: Expr) -> tuple[str, Any]:
    """("full"|"vec", Ref), ("bcast", Ref) or ("scalar", float)."""
    role = st.roles.role[nid]
    if role == "scalar":
        return "scalar", st.roles.scalar[nid]
    if role == "bcast":  # one row broadcast over the partitions; one value ([1, 1], [1]): one per partition
        v = st.bcast[nid]
        return ("vec" if v.width == 1 else "bcast"), v.ref(Expr.of(0), st.tm)
    v = st.views[nid]
    return ("vec" if v.width == 1 else "full"), v.ref(j, st.tm)


def load_input(st: LoweringState, node: Node) -> list[Stmt]:
    g = st.graph
    shape = g.concrete_shape(node.id)
    f = shape[-1]
    if loop_invariant(st, node):
        return hoist_load(st, node)
    bufs = max(1, int(st.knobs["bufs"]))
    t = st.tile(f"{node.attr('name')}_sb", st.tm, bufs * st.mb * f, node.type.dtype)
    rotate = bufs > 1 and st.__dict__.get("tail_base") is None
    base = Expr.of(iteration(st).modulo(bufs, st.mb * f)) if rotate else Expr.of(0)
    v = View(t.name, f, base, f, t.dtype)
    st.views[node.id] = v
    own(st, t.name, st.mb * f, t.dtype, base, rotates=bufs > 1)

    def body(j: Expr) -> list[Stmt]:
        src = hbm_ref(st, node.attr("name"), st.roles.bmap[node.id], rows_expr(st, j), st.tm, 0, f, shape)
        return [TileInstr("dma_copy", "dma", v.ref(j, st.tm), (("src", src),), f"load {node.attr('name')}")]

    return for_j(st, body)


def iteration(st: LoweringState) -> Affine:
    """The row block's index counted over the batch loops too (i_r when there are none), so a
    rotating load alternates buffers from one batch iteration to the next even when a batch's rows
    are one block."""
    nblocks = int(st.__dict__.get("nblocks", 1))
    if not st.roles.batch or nblocks % max(1, int(st.knobs["bufs"])) == 0:
        return Affine.of("i_r")  # the same buffer sequence: i_b * nblocks adds whole turns
    terms, scale = [("i_r", 1)], nblocks
    for i in reversed(range(len(st.roles.batch))):
        terms.append((f"i_b{i}", scale))
        scale *= st.roles.batch[i]
    return Affine(tuple(sorted(terms)))


def loop_invariant(st: LoweringState, node: Node) -> bool:
    """Whether input `node` is the same tile in every iteration of the pass's loops: it has no batch
    axis while the pass has some, and one row block covers a batch's rows (`single_block`)."""
    return bool(st.__dict__.get("single_block")) and len(st.graph.concrete_shape(node.id)) == 2


def hoist_load(st: LoweringState, node: Node) -> list[Stmt]:
    """Load a loop-invariant input once, before the batch loops (collected in `hoisted`), into a
    tile of its own that no other value takes over (it is not an owned slot)."""
    shape = st.graph.concrete_shape(node.id)
    f = shape[-1]
    t = st.tile(f"{node.attr('name')}_sb", st.tm, st.mb * f, node.type.dtype)
    v = View(t.name, f, Expr.of(0), f, t.dtype)
    st.views[node.id] = v

    def body(j: Expr) -> list[Stmt]:
        src = hbm_ref(st, node.attr("name"), (), j_off(j, st.tm), st.tm, 0, f, shape)
        return [TileInstr("dma_copy", "dma", v.ref(j, st.tm), (("src", src),), f"load {node.attr('name')} once")]

    st.__dict__.setdefault("hoisted", []).extend(for_j(st, body))
    return []


def load_transposed(st: LoweringState, node: Node) -> list[Stmt]:
    """transpose(X) of an HBM input as a row tile: DMA transpose, or load + TensorE transpose."""
    g = st.graph
    x = g.nodes[node.inputs[0]]
    xshape = g.concrete_shape(x.id)
    f = g.concrete_shape(node.id)[-1]  # = rows of X
    cs = min(st.pmax, f)  # X's rows in chunks of cs, a last narrower chunk peeled (`for_c`)
    v = new_view(st, node)
    bmap = st.roles.bmap[x.id]
    use_dma = st.knobs["transpose"] == "dma"
    if not use_dma:
        raw = st.tile(f"{x.attr('name')}_raw", cs, st.tm, x.type.dtype)
        pt = st.tile("transpose_psum", st.pmax, st.bank, x.type.dtype, "psum")  # nc_transpose: dst dtype = data's

    def chunk(j: Expr, c0: Expr, rows: int) -> list[Stmt]:
        src = hbm_ref(st, x.attr("name"), bmap, c0, rows, rows_expr(st, j), st.tm, xshape)
        dst = tile_ref(v.tensor, 0, st.tm, v.base + j_off(j, f) + c0, rows)
        if use_dma:
            return [TileInstr("dma_transpose", "dma", dst, (("src", src),), f"{x.attr('name')} transposed by DMA")]
        return [
            TileInstr("dma_copy", "dma", tile_ref(raw.name, 0, rows, 0, st.tm), (("src", src),)),
            TileInstr(
                "nc_transpose",
                "tensor",
                tile_ref(pt.name, 0, st.tm, 0, rows),
                (("data", tile_ref(raw.name, 0, rows, 0, st.tm)),),
            ),
            TileInstr("tensor_copy", "vector", dst, (("src", tile_ref(pt.name, 0, st.tm, 0, rows)),)),
        ]

    def body(j: Expr) -> list[Stmt]:
        return for_c(f, cs, lambda c0, rows: chunk(j, c0, rows), "transpose_chunk")

    return for_j(st, body)


def lower_node(st: LoweringState, node: Node) -> list[Stmt]:
    g = st.graph
    op = node.op
    if node.id in st.__dict__.get("internal", ()):
        return []  # computed inside its fused group's instruction sequence
    if op == "input":
        if _only_matmul_left(st, node) and st.knobs["transpose"] == "dma":
            return []  # the matmul reads it with a DMA transpose
        return load_input(st, node)
    if op == "transpose":
        return load_transposed(st, node)
    if op == "slice":
        src = st.views[node.inputs[0]]
        start = node.attr("start").evaluate(g.bindings)
        size = g.concrete_shape(node.id)[-1]
        st.views[node.id] = View(src.tensor, src.jstride, src.base + start, size, src.dtype)
        return []
    if op == "repeat":
        st.views[node.id] = st.views[node.inputs[0]]
        return []
    if op == "concat":
        v = st.views.get(node.id) or new_view(st, node)  # allocated early if an input was placed in it

        def cbody(j: Expr) -> list[Stmt]:
            out: list[Stmt] = []
            at = 0
            for i in node.inputs:
                w = g.concrete_shape(i)[-1]
                src = st.views[i]
                if (src.tensor, src.base, src.jstride) != (v.tensor, v.base + at, v.jstride):
                    out.append(
                        TileInstr(
                            "tensor_copy", "vector", v.ref(j, st.tm, at, w), (("src", src.ref(j, st.tm)),), "concat"
                        )
                    )
                at += w
            return out

        return [s for s in for_j(st, cbody) if not (isinstance(s, TileLoop) and not s.body)]
    v = concat_slot(st, node) or reuse_operand_tile(st, node) or new_view(st, node)
    return for_j(st, lambda j: [single_instruction(st, node, v.ref(j, st.tm), j)])


def concat_slot(st: LoweringState, node: Node) -> View | None:
    """The slice of its concat's tile that `node` may be written into, so that the concat copies nothing.

    Only for a value read by nothing but one concat (once), not a graph output, of the concat's
    dtype; the concat's tile is allocated when its first such input is placed."""
    g = st.graph
    users = [u for u in g.nodes if node.id in u.inputs]
    if len(users) != 1 or users[0].op != "concat" or users[0].inputs.count(node.id) != 1 or node.id in g.outputs:
        return None
    cat = users[0]
    if st.roles.role.get(cat.id) != "row" or out_dtype(st, cat) != out_dtype(st, node):
        return None
    at = 0
    for i in cat.inputs[: cat.inputs.index(node.id)]:
        at += g.concrete_shape(i)[-1]
    cv = st.views.get(cat.id) or new_view(st, cat)
    v = View(cv.tensor, cv.jstride, cv.base + at, g.concrete_shape(node.id)[-1], cv.dtype)
    st.views[node.id] = v
    return v


def reuse_operand_tile(st: LoweringState, node: Node) -> View | None:
    """Write in place over an operand slot that nothing else reads again (keeps big rows within SBUF)."""
    f = st.graph.concrete_shape(node.id)[-1]
    for i in node.inputs:
        v = st.views.get(i)
        if v is not None and v.width == f and v.dtype == out_dtype(st, node) and slot_dies(st, v, {node.id}):
            st.views[node.id] = v
            return v
    return None


def slot_dies(st: LoweringState, v: View, readers: set[int]) -> bool:
    """Whether the whole owned slot under view `v` is dead once `readers` have read it: no value
    in it is an output or has a reader other than `readers` that is not emitted yet."""
    if not whole_slot(st, v):
        return False
    if st.__dict__.get("reuse") == "rotating" and v.tensor not in st.__dict__.get("rotating", ()):
        return False  # a fixed slot taken over would live until its new value is read: the next
    g = st.graph  # row block's writer would wait for that (see `lower`)
    done = st.__dict__.get("done", set())
    sharing = [nid for nid, w in st.views.items() if w.tensor == v.tensor]
    return all(
        nid not in g.outputs and all(u.id in done or u.id in readers for u in g.nodes if nid in u.inputs)
        for nid in sharing
    )


def _only_matmul_left(st: LoweringState, node: Node) -> bool:
    users = [u for u in st.graph.nodes if node.id in u.inputs]
    return bool(users) and all(u.op == "matmul" and u.inputs[0] == node.id and u.inputs[1] != node.id for u in users)


def single_instruction(st: LoweringState, node: Node, dst: Ref, j: Expr) -> TileInstr:
    """The one-instruction lowering of an elementwise op or a reduction."""
    op = node.op
    ops = [operand(st, i, j) for i in node.inputs]
    if op == "reduce":
        kind, ref = ops[0]
        return TileInstr(
            "tensor_reduce",
            "vector",
            dst,
            (("op", REDUCE[node.attr("kind")]), ("data", ref), ("axis", 1), ("keepdims", True)),
            f"%{node.id} {node.attr('kind')}",
        )
    if op in ("cast",):
        return TileInstr("tensor_copy", "vector", dst, (("src", ops[0][1]),), f"%{node.id} cast")
    if op == "pow":
        return TileInstr(
            "tensor_scalar",
            "vector",
            dst,
            (("data", ops[0][1]), ("op0", "nl.power"), ("operand0", float(node.attr("exponent")))),
            f"%{node.id} pow",
        )
    if op in UNARY:
        ref = ops[0][1]
        if op == "neg":
            return TileInstr(
                "activation", "scalar", dst, (("op", "nl.copy"), ("data", ref), ("scale", -1.0)), f"%{node.id} neg"
            )
        return TileInstr("activation", "scalar", dst, (("op", ACT[op]), ("data", ref)), f"%{node.id} {op}")
    if op in BINARY:
        (ka, a), (kb, b) = ops
        alu = ALU[op]
        wide = {"full", "bcast"}
        if ka in wide and kb in wide or ka == kb == "vec":
            return TileInstr(
                "tensor_tensor", "vector", dst, (("data1", a), ("data2", b), ("op", alu)), f"%{node.id} {op}"
            )
        if ka in wide or (ka == "vec" and kb == "scalar"):
            return TileInstr(
                "tensor_scalar", "vector", dst, (("data", a), ("op0", alu), ("operand0", b)), f"%{node.id} {op}"
            )
        if kb in wide or (kb == "vec" and ka == "scalar"):
            return TileInstr(
                "tensor_scalar",
                "vector",
                dst,
                (("data", b), ("op0", alu), ("operand0", a), ("reverse0", True)),
                f"%{node.id} {op}",
            )
    raise LoweringError(f"{st.graph.name}: no instruction for %{node.id} {op} on {[k for k, _ in ops]}")


def release(st: LoweringState, done: set[int]) -> None:
    """Return owned tiles whose every reader has been emitted to the pool (`done`: emitted nodes)."""
    g = st.graph
    slots = owned(st)
    pool = st.__dict__.setdefault("pool", [])
    live: set[str] = set()
    for nid, v in st.views.items():
        users = [u.id for u in g.nodes if nid in u.inputs]
        if nid in g.outputs or nid not in done or any(u not in done for u in users):
            live.add(v.tensor)
    for v in list(st.views.values()):
        if v.tensor in slots and v.tensor not in live and all(e[0] != v.tensor for e in pool):
            size, dtype, base = slots[v.tensor]
            pool.append((v.tensor, (size, dtype), base))


def broadcast_rows(st: LoweringState, nid: int) -> list[Stmt]:
    """A free-axis vector replicated over partitions on TensorE (ones[1, P].T @ v[1, F])."""
    g = st.graph
    node = g.nodes[nid]
    shape = g.concrete_shape(nid)
    f = shape[-1]
    dt = node.type.dtype
    shared = st.__dict__.setdefault("bcast_shared", {})
    if dt not in shared:  # one staging chunk, ones vector and PSUM bank serve every vector
        shared[dt] = (
            st.tile(f"row_chunk_{dt}", 1, st.bank, dt),
            st.tile(f"ones_{dt}", 1, st.pmax, dt),
            st.__dict__.get("bcast_ps") or st.tile("bcast_psum", st.pmax, st.bank, "float32", "psum"),
        )
        st.__dict__["bcast_ps"] = shared[dt][2]
    row, ones, ps = shared[dt]
    full = st.tile(f"{node.attr('name')}_bcast", st.pmax, f, "float32")
    out: list[Stmt] = [TileInstr("memset", "vector", tile_ref(ones.name, 0, 1, 0, st.pmax), (("value", 1.0),))]
    for c0 in range(0, f, st.bank):
        cs = min(st.bank, f - c0)
        src = Ref(node.attr("name"), ((Expr.of(0), 1), (Expr.of(c0), cs)), (1, f))
        out.append(
            TileInstr(
                "dma_copy",
                "dma",
                tile_ref(row.name, 0, 1, 0, cs),
                (("src", src),),
                f"{node.attr('name')} chunk as one row",
            )
        )
        out.append(
            TileInstr(
                "nc_matmul",
                "tensor",
                tile_ref(ps.name, 0, st.pmax, 0, cs),
                (
                    ("stationary", tile_ref(ones.name, 0, 1, 0, st.pmax)),
                    ("moving", tile_ref(row.name, 0, 1, 0, cs)),
                    # the bank is shared by every broadcast vector: each chunk must overwrite it
                    # (nc_matmul's default accumulates onto a location written before)
                    ("accumulate", False),
                ),
                "broadcast over partitions",
            )
        )
        out.append(
            TileInstr(
                "tensor_copy",
                "vector",
                tile_ref(full.name, 0, st.pmax, c0, cs),
                (("src", tile_ref(ps.name, 0, st.pmax, 0, cs)),),
            )
        )
    st.bcast[nid] = View(full.name, 0, Expr.of(0), f, "float32")
    return out
