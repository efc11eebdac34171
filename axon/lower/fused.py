"""Fused elementwise groups lowered as the instruction sequence chosen among verified alternatives.

`axon.synth.isel` proves the alternatives; here each `Step` becomes an `TileInstr` on row tiles: a step
over full tiles writes a [P, F] tile, one over per-row vectors a [P, 1] tile, reductions write their
[P, 1] result through `reduce_res` (activation_reduce, tensor_scalar_reduce) or `tensor_reduce`.
Which alternative a point uses is its `isel.g<sink>` knob (default 0: fewest instructions).
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from typing import Any

from axon.ir import Graph
from axon.lower.elementwise import concat_slot, iteration, new_view, operand, out_dtype, own, slot_dies
from axon.lower.groups import fused_groups
from axon.lower.moments import moment_nodes
from axon.lower.program import Affine, Expr, Ref, Stmt, TileInstr, TileLoop, tile_ref
from axon.lower.state import LoweringState, for_j, j_off
from axon.synth.isel import synthesize_instructions

_ENGINE_ARG = {"scalar": "nisa.scalar_engine", "gpsimd": "nisa.gpsimd_engine"}
# interleave=True with m_block=1: a fused group over column windows (see `column_chunks`)
MAX_WINDOWS, WINDOW_MIN = 8, 512
_RED = {"add": "nl.add", "max": "nl.maximum", "min": "nl.minimum", "multiply": "nl.multiply"}


def alternatives(graph: Graph, sink: int, dropped: frozenset[int] = frozenset()) -> tuple[Any, ...]:
    """The verified alternatives of the group ending at `sink`.

    Memoized on the group's structure (ops, attributes, leaf kinds and constants, with node ids made
    local), so variants and presets that share a group search once: the search is a pure function;
    and per graph, since the sampler lowers the same variant for every candidate point."""
    return graph.memo(("isel-alternatives", sink, dropped), lambda: _alternatives(graph, sink, dropped))


def _alternatives(graph: Graph, sink: int, dropped: frozenset[int]) -> tuple[Any, ...]:
    for grp in fused_groups(graph, dropped=dropped):
        if grp.sink == sink:
            local = {n: i for i, n in enumerate(list(grp.nodes) + [l.node for l in grp.leaves])}
            sig = (
                tuple(
                    (
                        graph.nodes[n].op,
                        graph.nodes[n].attrs,
                        tuple(local.get(i, -1) for i in graph.nodes[n].inputs),
                        graph.concrete_shape(n)[-1] == 1,
                    )
                    for n in grp.nodes
                ),
                tuple((l.kind, l.value, graph.nodes[l.node].op == "matmul") for l in grp.leaves),
            )
            back = {i: n for n, i in local.items()}
            return tuple(_relabel(a, back) for a in _search(sig, grp))
    return ()


# A pure search, memoized by group structure and bounded (a long sweep meets many structures): any
# group of one structure gives the same result once relabelled, so the group is not in the key.
_SEARCHED: OrderedDict[Any, tuple[Any, ...]] = OrderedDict()
_SEARCH_CACHE = 1024


def _search(sig: Any, grp: Any) -> tuple[Any, ...]:
    if sig in _SEARCHED:
        _SEARCHED.move_to_end(sig)
        return _SEARCHED[sig]
    local = {n: i for i, n in enumerate(list(grp.nodes) + [l.node for l in grp.leaves])}
    found = tuple(_relabel(a, local) for a in synthesize_instructions(grp))
    _SEARCHED[sig] = found
    if len(_SEARCHED) > _SEARCH_CACHE:
        _SEARCHED.popitem(last=False)
    return found


def _relabel(alt: Any, mapping: dict[int, int]) -> Any:

    def arg(v: Any) -> Any:
        return ("in", mapping[v[1]]) if isinstance(v, tuple) and v[0] == "in" else v

    steps = tuple(dataclasses.replace(s, args=tuple((k, arg(v)) for k, v in s.args)) for s in alt.steps)
    return dataclasses.replace(alt, steps=steps)


def groups_of(graph: Graph, dropped: frozenset[int] = frozenset()) -> list[Any]:
    """Groups worth synthesizing: several ops, a reduction, or an op reading a matmul result
    (`dropped`: nodes computed otherwise, see `axon.lower.groups.fused_groups`)."""

    def reads_matmul(g: Any) -> bool:
        return any(graph.nodes[l.node].op == "matmul" for l in g.leaves)

    return [
        g
        for g in fused_groups(graph, dropped=dropped)
        if len(g.nodes) > 1 or graph.nodes[g.nodes[0]].op == "reduce" or reads_matmul(g)
    ]


def plan_groups(st: LoweringState, origin: tuple[int, ...]) -> None:
    """Record, per group sink, the chosen alternative; internal nodes are then skipped."""
    chosen: dict[int, tuple[Any, Any]] = {}
    internal: set[int] = set()
    if st.knobs.get("fusion") == "unfused":
        st.__dict__["groups"], st.__dict__["internal"] = chosen, internal
        return
    dropped = moment_nodes(st)  # computed by bn_stats/bn_aggr at this point: no group computes them
    for grp in groups_of(st.graph, dropped):
        alts = alternatives(st.graph, grp.sink, dropped)
        if not alts:
            continue
        k = int(st.knobs.get(f"isel.g{origin[grp.sink]}", 0))
        chosen[grp.sink] = (grp, alts[min(k, len(alts) - 1)])
        internal |= set(grp.nodes) - {grp.sink}
    st.__dict__["groups"], st.__dict__["internal"] = chosen, internal


def _arg(
    st: LoweringState, v: Any, j: Expr, results: list[Ref], window: tuple[Expr, int] | None, override: dict[int, Ref]
) -> Any:
    if isinstance(v, tuple) and v[0] == "in":
        if v[1] in override:
            return override[v[1]]
        if window is not None and st.roles.role.get(v[1]) == "bcast":
            if st.bcast[v[1]].width > 1:  # a row over the partitions: its window (one value: all of it)
                return st.bcast[v[1]].ref(Expr.of(0), st.tm, window[0], window[1])
        elif window is not None and st.views[v[1]].width > 1:
            return st.views[v[1]].ref(j, st.tm, window[0], window[1])
        return operand(st, v[1], j)[1]
    if isinstance(v, tuple) and v[0] == "step":
        return results[v[1]]
    if isinstance(v, tuple) and v[0] == "imm":
        return float(v[1])
    if isinstance(v, tuple) and v[0] == "sqrt":
        return math.sqrt(v[1])
    return v


def _is_full(st: LoweringState, step: Any, kinds: dict[Any, str]) -> bool:
    for _, v in step.args:
        if isinstance(v, tuple) and v[0] == "in" and kinds.get(v[1]) in ("full", "bcast"):
            return True
        if isinstance(v, tuple) and v[0] == "step" and kinds.get(("step", v[1])) == "full":
            return True
    return False


def fusable_evacuation(st: LoweringState, mm: int) -> Any | None:
    """The group that may consume matmul `mm` straight from PSUM, tile by tile (None if none).

    Allowed when the matmul has one reader, a chosen group whose every value is elementwise over
    the matmul's columns (no reductions, no free-axis vectors read at other columns)."""
    g = st.graph
    users = [u for u in g.nodes if mm in u.inputs]
    groups = st.__dict__.get("groups", {})
    if len(users) != 1 or sum(users[0].inputs.count(mm) for _ in [0]) != 1:
        return None
    for sink, (grp, alt) in groups.items():
        if (
            users[0].id in grp.nodes
            and grp.reduce is None
            and all(g.concrete_shape(n)[-1] == g.concrete_shape(mm)[-1] for n in grp.nodes)
        ):
            ready = all(
                l.node == mm or l.kind == "scalar" or l.node in st.views or l.node in st.bcast for l in grp.leaves
            )  # every other operand is computed before this matmul
            psum_ok = all(s.engine != "gpsimd" for s in alt.steps)  # GpSimd cannot read PSUM
            if ready and psum_ok and all(not s.opcode.endswith("reduce") for s in alt.steps):
                return g.nodes[sink]
    return None


def prepare_group(st: LoweringState, sink_node: Any) -> Any:
    """Allocate the group's tiles; returns `emit(j, window=None, override={})` giving its instructions.

    Every value a step writes goes into a slot that is dead by then: a full-width operand of the
    group read for the last time (elementwise instructions may write over their own operands), a
    step result already consumed, or a new tile. The sink takes over a dying operand's slot when it
    can (so the result rotates with a multi-buffered load), and the discarded elementwise output of
    a fused reduction lands in a dead slot or in the sink's tile before the sink is written."""
    grp, alt = st.__dict__["groups"][sink_node.id]
    g = st.graph
    f = max(g.concrete_shape(i)[-1] for i in list(grp.nodes) + [l.node for l in grp.leaves] if g.concrete_shape(i))
    kinds: dict[Any, str] = {l.node: l.kind for l in grp.leaves}
    for i, step in enumerate(alt.steps):
        red = step.opcode in ("activation_reduce", "tensor_scalar_reduce", "tensor_reduce")
        kinds[("step", i)] = "full" if _is_full(st, step, kinds) and not red else "vec"
    last_read: dict[Any, int] = {}
    for i, step in enumerate(alt.steps):
        for _, v in step.args:
            if isinstance(v, tuple) and v[0] in ("in", "step"):
                last_read[v] = i
    n = len(alt.steps)
    dying = _dying_leaves(st, grp, f)
    placed = concat_slot(st, sink_node) if kinds[("step", n - 1)] == "full" else None
    sink_leaf = (
        None
        if placed is not None
        else next(
            (
                leaf
                for leaf, v in dying.items()
                if kinds[("step", n - 1)] == "full"
                and v.dtype == out_dtype(st, sink_node)
                and v.width == g.concrete_shape(sink_node.id)[-1]
            ),
            None,
        )
    )
    if placed is not None:
        sink_view = placed
    elif sink_leaf is not None:
        sink_view = st.views[sink_node.id] = dying.pop(sink_leaf)
    else:
        sink_view = new_view(st, sink_node)
    borrowed: list = []
    pending = {("in", leaf): ((v.tensor, v.base, f), f) for leaf, v in dying.items() if v.dtype == "float32"}
    avail: dict[int, list] = {f: [], 1: []}
    place: dict[int, tuple[str, Expr, int]] = {}  # step -> (tile, base, row-tile stride) of its result
    junk: dict[int, tuple[str, Expr, int]] = {}
    for i, step in enumerate(alt.steps):
        for key, (slot, width) in list(pending.items()):  # values read for the last time by step i are dead
            if last_read.get(key, -1) <= i:  # for its writes
                avail[width].append(slot)
                del pending[key]
        if step.opcode in ("activation_reduce", "tensor_scalar_reduce"):
            if avail[f]:
                junk[i] = avail[f].pop(0)
            elif sink_leaf is None and kinds[("step", n - 1)] == "full" and i < n - 1:
                junk[i] = (sink_view.tensor, sink_view.base, f)  # the sink's tile holds nothing yet
            else:
                junk[i] = _borrow(st, f"t{sink_node.id}_discard", f, borrowed, stride=0)
            pending[("junk", i)] = (junk[i], f)
        if i == n - 1:
            break
        width = f if kinds[("step", i)] == "full" else 1
        place[i] = (
            avail[width].pop(0)
            if avail[width]
            else _borrow(st, f"t{sink_node.id}_s{i}", st.mb * width, borrowed, stride=width)
        )
        pending[("step", i)] = (place[i], width)
    comment = f"group %{', %'.join(map(str, grp.nodes))}: {alt.describe()}"

    def emit(
        j: Expr, window: tuple[Expr, int] | None = None, override: dict[int, Ref] | None = None, again: bool = False
    ) -> list[Stmt]:
        """The group's instructions for row tile j (over the columns of `window`); `again`: the
        [P, 1] steps were emitted with an earlier window, only their results are referred to."""
        results: list[Ref] = []
        out: list[Stmt] = []
        for i, step in enumerate(alt.steps):
            full = kinds[("step", i)] == "full"
            width = f if full else 1
            start, size = window if (window and full) else (Expr.of(0), width)
            if i == n - 1:
                dst = sink_view.ref(j, st.tm, start, size)
            else:
                name, base, stride = place[i]
                dst = tile_ref(name, 0, st.tm, base + j_off(j, stride) + start, size)
            args = [(k, _named(k, _arg(st, v, j, results, window, override or {}), step.opcode)) for k, v in step.args]
            if step.opcode in ("activation_reduce", "tensor_scalar_reduce"):
                red = dict(step.args).get("reduce_op", "add")
                args = [(k, v) for k, v in args if k != "reduce_op"] + [("reduce_op", _RED[red]), ("reduce_res", dst)]
                name, base, stride = junk[i]
                dst = tile_ref(name, 0, st.tm, base + j_off(j, stride), f)
            if step.opcode == "tensor_scalar" and step.engine in _ENGINE_ARG:
                args.append(("engine", _ENGINE_ARG[step.engine]))
            if step.opcode == "tensor_reduce":
                args += [("axis", 1), ("keepdims", True)]
            if not (again and not full):
                out.append(TileInstr(step.opcode, step.engine, dst, tuple(args), comment if i == 0 else ""))
            results.append(dict(args)["reduce_res"] if "reduce_res" in dict(args) else dst)
        return out

    emit.borrowed = borrowed  # type: ignore[attr-defined]
    return emit


def _dying_leaves(st: LoweringState, grp: Any, f: int) -> dict[int, Any]:
    """Full-width operands of the group whose slot nothing outside the group reads again."""
    readers = set(grp.nodes)
    out: dict[int, Any] = {}
    for leaf in dict.fromkeys(l.node for l in grp.leaves):
        v = st.views.get(leaf)
        if v is not None and st.roles.role.get(leaf) == "row" and v.width == f and slot_dies(st, v, readers):
            out[leaf] = v
    return out


def column_chunks(st: LoweringState, grp: Any, f: int) -> int:
    """How many column windows of at least `WINDOW_MIN` columns (at most `MAX_WINDOWS`) the group is
    emitted in: with knob interleave=True and one row tile per block (where step-major order over the
    block's row tiles has nothing to interleave), else 1; 1 for a reduction."""
    if st.mb > 1 or not st.knobs.get("interleave", False) or grp.reduce is not None:
        return 1
    kinds: dict[Any, str] = {l.node: l.kind for l in grp.leaves}
    for i, step in enumerate(st.__dict__["groups"][grp.sink][1].steps):
        kinds[("step", i)] = "full" if _is_full(st, step, kinds) else "vec"
    if sum(1 for k, v in kinds.items() if isinstance(k, tuple) and v == "full") < 2:
        return 1  # one full-width step: no other engine's step to overlap with
    chunks = min(MAX_WINDOWS, f // WINDOW_MIN)
    return chunks if chunks > 1 and f % chunks == 0 else 1


def lower_group(st: LoweringState, sink_node: Any) -> list[Stmt]:
    if sink_node.id in st.__dict__.get("evacuated", ()):
        return []  # already computed while its matmul's PSUM tiles were evacuated
    emit = prepare_group(st, sink_node)
    grp = st.__dict__["groups"][sink_node.id][0]
    f = max(
        st.graph.concrete_shape(i)[-1]
        for i in list(grp.nodes) + [l.node for l in grp.leaves]
        if st.graph.concrete_shape(i)
    )
    chunks = column_chunks(st, grp, f)
    stmts: list[Stmt]
    if chunks > 1:
        # window-major: every step over the first F/chunks columns, then the next window, so a step on
        # one engine runs while the next step's engine works on the window before (an in-order engine
        # otherwise waits for the whole row at each change of engine); [P, 1] steps only once
        w = f // chunks
        stmts = for_j(st, lambda j: [s for c in range(chunks) for s in emit(j, (Expr.of(c * w), w), None, c > 0)])
    elif st.mb > 1 and st.knobs.get("interleave", False):
        # step-major: each step for every row tile of the block before the next step, so an engine
        # has the other tiles' work queued while it waits for another engine on this one (each row
        # tile's values have their own slots; a reduction's discarded output is the only shared one)
        j = Expr.of(Affine.of("i_j"))
        stmts = [TileLoop("i_j", st.mb, (ins,), "row_tile") for ins in emit(j)]
    else:
        stmts = for_j(st, emit)
    st.__dict__.setdefault("pool", []).extend(emit.borrowed)  # step results are dead once the sink is written
    return stmts


def _borrow(st: LoweringState, stem: str, free: int, borrowed: list, stride: int) -> tuple[str, Expr, int]:
    """A float32 [tm, free] slot: a dead one from the pool when one fits, else a new tile.

    Returns (tile, base, stride): row tile j of the slot starts at base + j * stride."""
    pool = st.__dict__.setdefault("pool", [])
    for entry in pool:
        if entry[1] == (free, "float32"):
            pool.remove(entry)
            borrowed.append(entry)
            return entry[0], entry[2], stride
    bufs = max(1, int(st.knobs.get("bufs", 1))) if st.__dict__.get("rotate_temps") else 1
    t = st.tile(stem, st.tm, bufs * free, "float32")
    # rotating like the loads (not in the ragged last block, which replays these tiles unrotated): the
    # next row block's steps need not wait for this one's readers of the slot
    base = (
        Expr.of(iteration(st).modulo(bufs, free)) if bufs > 1 and st.__dict__.get("tail_base") is None else Expr.of(0)
    )
    own(st, t.name, free, "float32", base, rotates=bufs > 1)
    borrowed.append((t.name, (free, "float32"), base))
    return t.name, base, stride


def _named(key: str, v: Any, opcode: str) -> Any:
    if key in ("op", "op0", "op1") and isinstance(v, str):
        if opcode == "tensor_reduce":
            return _RED[v]
        return f"nl.{v}"
    return v
