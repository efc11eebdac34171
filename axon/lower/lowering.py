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

import dataclasses
from collections.abc import Mapping
from typing import Any

from axon.ir import Graph
from axon.lower.attention import lower_attention, match_attention
from axon.lower.elementwise import broadcast_rows, lower_node, release
from axon.lower.engines import offload_tensor_scalars
from axon.lower.fold import fold_pass, folded_rows, split_graph, split_refs
from axon.lower.fused import lower_group, plan_groups
from axon.lower.knobmemo import remembered, tree_of
from axon.lower.matmul import lower_matmul
from axon.lower.matsum import (
    is_sum,
    is_term,
    is_transposed_product,
    lower_sum,
    lower_term,
    lower_transposed_product,
    plan_sums,
)
from axon.lower.moments import lower_moment, plan_moments
from axon.lower.passes import Pass, materializable, matmul_cuts, normalize, scratch_name, split
from axon.lower.program import (
    Comment,
    Expr,
    Stmt,
    Tensor,
    TileAlloc,
    TileInstr,
    TileLoop,
    TileProgram,
    share_buffers,
    tile_ref,
)
from axon.lower.roles import LoweringError, classify
from axon.lower.skew import skew
from axon.lower.state import LoweringState, Rejected, View, for_j, hbm_ref, is_scratch, psum_banks, rows_expr
from axon.lower.weights import prepare_weights

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
    prog = _lower_any(variant, point, hw)
    # a spec's input or output named like one of the kernel's own variables (`i_r`, `t3`, `x_sb`) is
    # shadowed by it: every such kernel failed in the emulator with a message about the kernel's code
    clash = sorted({t.name for t in prog.inputs + prog.outputs} & prog.own_names())
    if clash:
        raise LoweringError(
            f"{prog.name}: the spec's input or output {clash[0]!r} has the name of one of the kernel's own "
            "variables: rename it in the spec"
        )
    return prog


def _lower_any(variant: Any, point: Any, hw: Any) -> TileProgram:
    knobs = knobs_of(point)
    if knobs.get("softmax") == "online":
        if knobs["fusion"] == "fused":
            return _lower_online(variant, point, hw)
        point = {**knobs, "softmax": "rows"}  # the nest is one fused kernel; with a cut: row blocks
    for temps in (True, False):  # step results of fused groups rotate like the loads, where SBUF allows
        try:
            return _lower(variant, point, hw, reuse="rotating", rotate_temps=temps)
        except Rejected as exc:
            if not str(exc).startswith("sbuf:"):
                raise
    return _lower(variant, point, hw, reuse="all")


def _lower(variant: Any, point: Any, hw: Any, reuse: str, rotate_temps: bool = False) -> TileProgram:
    """`lower` with a slot-reuse policy. A value may take over the slot of an operand read for the
    last time; "rotating" allows it only for slots that rotate with the row block (a fixed slot
    taken over stays live until its new value is read, so the next row block's writer of the
    operand waits for that: two pipeline stages become one). "all" reuses any dead slot, which
    `lower` falls back to where the point does not fit SBUF otherwise."""
    original = graph_of(variant)
    graph = normalize(original, hw.memory.partitions)  # the same graph object for every point
    graph.check_bound()
    knobs = knobs_of(point)
    cuts = frozenset(_cuts(graph, knobs["fusion"]))
    passes, cuts = graph.memo(("split", cuts), lambda: split(graph, cuts))
    body: list[Stmt] = []
    scratch: list[Tensor] = []
    sbuf_peak = psum_peak = 0
    kernel_allocs: list[Tensor] = []  # on-chip buffers are shared by passes (allocated once, reused)
    for i, p in enumerate(passes):
        prefix = f"p{i}_" if len(passes) > 1 else ""
        stmts, allocs = _lower_pass(p, knobs, hw, prefix, reuse, rotate_temps)
        stmts = share_buffers(stmts, allocs, kernel_allocs)
        body.append(Comment(f"pass {i}: computes {', '.join(p.writes)}"))
        body.extend(stmts)
    sbuf_peak = sum(t.bytes_per_partition for t in kernel_allocs if t.buffer == "sbuf")
    psum_peak = sum(psum_banks(t, hw.memory.psum_bank_bytes) for t in kernel_allocs if t.buffer == "psum")
    for p in passes:
        for name, o in zip(p.writes, p.graph.outputs):
            if is_scratch(name):
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
        _views(original, inputs, outputs),
    )
    object.__setattr__(prog, "point", {**knobs, "_sbuf_peak": sbuf_peak, "_psum_banks": psum_peak})
    return prog


def _views(spec: Graph, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> tuple[tuple[str, tuple], ...]:
    """The arguments and results whose shape in the spec (`spec`, before `normalize`) is not the
    body's: short rows merged with the axis before them (`axon.lower.rowaxis`)."""
    given = {n.attr("name"): spec.concrete_shape(n.id) for n in spec.inputs}
    given.update((t.name, spec.concrete_shape(o)) for t, o in zip(outputs, spec.outputs))
    return tuple((t.name, given[t.name]) for t in inputs + outputs if given[t.name] != t.shape)


def _lower_online(variant: Any, point: Any, hw: Any) -> TileProgram:
    """The flash-style attention loop nest (`axon.lower.attention`) of a graph of that form."""
    original = graph_of(variant)
    graph = normalize(original, hw.memory.partitions)
    graph.check_bound()
    form = graph.memo(("attention",), lambda: match_attention(graph))
    if form is None:
        raise LoweringError(f"softmax: {graph.name} is not of the attention form the online softmax lowers")
    knobs = knobs_of(point)
    header = (
        f"workload: {graph.name}  shapes: {graph.bindings}",
        f"variant: {_describe(variant)}",
        f"point: {dict(sorted(knobs.items()))}",
    )
    return lower_attention(graph, form, knobs, hw, header)


def _has_loop(stmts: Any, name: str) -> bool:
    return any(isinstance(s, TileLoop) and (s.name == name or _has_loop(s.body, name)) for s in stmts)


def _describe(variant: Any) -> str:
    if isinstance(variant, Graph):
        return "original graph"
    moves = getattr(variant, "moves", ())
    return "; ".join(getattr(m, "description", str(m)) for m in moves) or "original graph"


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
    p: Pass, knobs: Mapping[str, Any], hw: Any, prefix: str, reuse: str = "all", rotate_temps: bool = False
) -> tuple[list[Stmt], list[Tensor]]:
    """One pass lowered, remembered by the knobs it read (`axon.lower.knobmemo`): a pure function
    of the pass, the hardware file, the prefix, the reuse policy and whether temps rotate, which
    only a pass without matmuls uses (keyed as the pass sees it, so `lower`'s retry with temps fixed
    finds its matmul passes)."""
    rotate = rotate_temps and not p.graph.memo(("has_matmul",), lambda: any(n.op == "matmul" for n in p.graph.nodes))
    tree = tree_of(p.graph, "pass", (p, hw), (prefix, reuse, rotate))
    stmts, allocs = remembered(tree, knobs, lambda k: _lower_pass_now(p, k, hw, prefix, reuse, rotate))
    return list(stmts), list(allocs)  # the remembered lists stay as they are


def _lower_pass_now(
    p: Pass, knobs: Mapping[str, Any], hw: Any, prefix: str, reuse: str = "all", rotate_temps: bool = False
) -> tuple[list[Stmt], list[Tensor]]:
    g = p.graph
    split = int(knobs.get("split", 1))
    if split > 1:  # each row as `split` rows of F/split columns: the pass lowered on the rebound graph
        if int(knobs.get("fold", 1)) > 1:
            raise LoweringError("split: rows cannot be split and folded at once")
        g2 = split_graph(g, split)
        lowered, allocs = _lower_pass(
            dataclasses.replace(p, graph=g2), {**knobs, "split": 1}, hw, prefix, reuse, rotate_temps
        )
        shapes = {n.attr("name"): g2.concrete_shape(n.id) for n in g2.inputs}
        shapes.update({name: g2.concrete_shape(o) for name, o in zip(p.writes, g2.outputs)})
        return split_refs(lowered, shapes), allocs
    roles = classify(g)
    fold = int(knobs.get("fold", 1))
    rows = folded_rows(g, roles, fold) if fold > 1 else roles.rows
    tm = min(int(knobs["tile_m"]), rows, int(hw.memory.partitions))
    mb = int(knobs["m_block"])
    if rows < tm * mb:
        mb = max(1, rows // tm)  # a pass with fewer rows than a block runs with fewer row tiles
    if rows % (tm * mb) and mb > 1:
        raise Rejected(f"m_block: {rows} rows of {g.name} are not a multiple of tile_m*m_block={tm * mb}")
    st = LoweringState(prefix, knobs, hw, g, roles, tm, mb, budget=fold == 1)  # fold_pass reshapes the tiles
    st.__dict__["reuse"] = reuse
    # only in passes without matmuls: elementwise chains, which otherwise serialize row blocks on their temps
    st.__dict__["rotate_temps"] = rotate_temps and not any(n.op == "matmul" for n in g.nodes)
    plan_groups(st, p.origin)
    plan_moments(st)
    plan_sums(st)
    pre: list[Stmt] = []
    for nid, role in sorted(roles.role.items()):
        if role == "bcast":
            pre.extend(broadcast_rows(st, nid))
    batch_prep: list[Stmt] = []
    for nid in sorted(roles.weight):
        batch_prep.extend(prepare_weights(st, nid))
    nblocks, tail = divmod(rows, tm * st.mb)
    st.__dict__["single_block"] = nblocks == 1 and not tail and bool(roles.batch)
    st.__dict__["nblocks"] = nblocks
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
    stmts: list[Stmt] = [TileAlloc(t) for t in st.allocs] + pre + st.__dict__.get("hoisted", [])
    skewed = _skewed(st, block) if knobs.get("skew") and nblocks > 1 and not tail else None
    loop = skewed if skewed is not None else [TileLoop("i_r", nblocks, tuple(block), "row_block")]
    inner: list[Stmt] = batch_prep + (loop if nblocks else []) + tail_block
    for i in reversed(range(len(roles.batch))):
        inner = [TileLoop(f"i_b{i}", roles.batch[i], tuple(inner), f"batch{i}")]
    body = offload_tensor_scalars(stmts + inner, str(knobs.get("offload", "none")))
    if fold > 1:
        hbm = {n.attr("name"): g.concrete_shape(n.id) for n in g.inputs}
        hbm.update({name: g.concrete_shape(o) for name, o in zip(p.writes, g.outputs)})
        return fold_pass(body, st.allocs, fold, hbm)
    return body, st.allocs


def _skewed(st: LoweringState, block: list[Stmt]) -> list[Stmt] | None:
    """The row-block loop software-pipelined by one block (`axon.lower.skew`), for a pass whose one
    matmul is a plain one (`lower_matmul`) with a stationary operand rotating over `bufs` slots; None
    otherwise."""
    prepared = st.__dict__.get("prepared", [])
    if len(prepared) != 1 or sum(n.op == "matmul" for n in st.graph.nodes) != 1:
        return None
    rotated = {name for a, name in st.transposed.items() if not st.__dict__["tbase"][a].is_const}
    return skew(block, prepared[0], "i_r", st.__dict__["nblocks"], "row_block", rotated)


def _row_block(st: LoweringState, p: Pass) -> list[Stmt]:
    block: list[Stmt] = []
    done: set[int] = st.__dict__.setdefault("done", set())  # nodes emitted so far (read by in-place decisions)
    for node in [n for n in p.graph.nodes if st.roles.role.get(n.id) == "row"]:
        if node.id in st.__dict__.get("moments", {}):  # mean and variance from bn_stats/bn_aggr
            block.extend(lower_moment(st, node.id))
        elif is_term(st, node.id):  # a product of a sum accumulated in one PSUM bank
            block.extend(lower_term(st, node))
        elif is_sum(st, node.id):
            block.extend(lower_sum(st, node))
        elif is_transposed_product(st, node.id):
            block.extend(lower_transposed_product(st, node))
        elif node.op == "matmul":
            at = len(block)
            block.extend(lower_matmul(st, node))
            st.__dict__.setdefault("prepared", []).append(at + st.__dict__.pop("stationary_len"))
        elif node.id in st.__dict__.get("groups", {}) and node.id not in st.__dict__.get("internal", ()):
            block.extend(lower_group(st, node))  # a fused group, emitted at its sink
        else:
            block.extend(lower_node(st, node))
        if node.id in st.__dict__.get("internal", ()):
            continue  # its value is produced with its group's sink
        groups = st.__dict__.get("groups", {})
        done.update(groups[node.id][0].nodes if node.id in groups else (node.id,))
        release(st, done)
    return block + _stores(st, p)


def _stores(st: LoweringState, p: Pass) -> list[Stmt]:
    g = st.graph
    out: list[Stmt] = []
    for name, o in zip(p.writes, g.outputs):
        if o in st.__dict__.get("stored", ()):
            continue  # a matmul output stored tile by tile while leaving PSUM
        view = st.views[o]
        shape = g.concrete_shape(o)
        dt = "float32" if is_scratch(name) else g.nodes[o].type.dtype

        def body(
            j: Expr, view: View = view, name: str = name, shape: tuple[int, ...] = shape, dt: str = dt, o: int = o
        ) -> list[Stmt]:
            stmts: list[Stmt] = []
            src = view.ref(j, st.tm)
            if view.dtype != dt:
                stage = st.tile(f"{name}_stage", st.tm, shape[-1], dt)
                stmts.append(
                    TileInstr(
                        "tensor_copy",
                        "vector",
                        tile_ref(stage.name, 0, st.tm, 0, shape[-1]),
                        (("src", src),),
                        f"cast to {dt}",
                    )
                )
                src = tile_ref(stage.name, 0, st.tm, 0, shape[-1])
            dst = hbm_ref(st, name, st.roles.bmap[o], rows_expr(st, j), st.tm, 0, shape[-1], shape)
            stmts.append(TileInstr("dma_copy", "dma", dst, (("src", src),), f"store {name}"))
            return stmts

        out.extend(for_j(st, body))
    return out
