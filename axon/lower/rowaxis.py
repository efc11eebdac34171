"""Short rows: a graph whose rows axis is shorter than a partition tile (a decode step's [B, 1, D], a few
tokens' [B, 4, D]) lowered with the axis before it merged into its rows.

The lowering puts a value's second-to-last axis on the partitions and loops over the axes before it
(`roles`): [B, 1, D] was B row blocks of one partition each, 1/128 of every engine's lanes and one
DMA per row (10x the latency of the same values as [B, D]). A row-major [B, S, D] is byte for byte
[1, B*S, D], so such a graph is lowered as that: `merge_rows` gives that graph, and the kernel views
its HBM arguments and results that way (`TileProgram.views`: a whole-tensor reshape, the one NKI
allows) while its signature keeps the spec's shapes.

It applies when every value of the output's rank spans both axes as the output does, or neither
(size 1 on both: it broadcasts the same either way), lower-rank values broadcast alike (their axes
before the last are 1, or they are a matmul's weight), and no op names an axis other than the last:
a reduction over the rows axis, a transpose, reshape, slice, concat or repeat off the last axis
leave the graph as it is. Rows of a partition tile or more are left as they are (nothing to gain).
"""

from __future__ import annotations

from axon.errors import SpecError
from axon.ir import Dim, Graph, GraphBuilder, TensorType

_AXIS_OPS = frozenset({"reduce", "slice", "concat", "repeat"})  # ops with an axis: applies if it is the last


def merge_rows(graph: Graph, partitions: int) -> Graph | None:
    """`graph` with axes -3 and -2 of every value of the output's rank merged into its rows ([.., B, S, F]
    as [.., 1, B*S, F]), or None where that is not the same computation (see the module's docstring)
    or the rows already fill `partitions`.

    >>> import axon.spec as ax
    >>> from axon.ir import trace
    >>> @ax.spec(x="B S D", g="D")
    ... def norm(x, g):
    ...     return x / ax.sqrt(ax.mean(x * x) + 1e-6) * g
    >>> merge_rows(trace(norm, B=64, S=1, D=512), 128).concrete_shape(0)
    (1, 64, 512)
    >>> merge_rows(trace(norm, B=64, S=4, D=512), 128).concrete_shape(0)
    (1, 256, 512)
    >>> merge_rows(trace(norm, B=64, S=128, D=512), 128) is None
    True
    """
    out = graph.concrete_shape(graph.outputs[0])
    rank = len(out)
    if rank < 3 or out[-2] >= partitions or out[-3] == 1:
        return None
    for node in graph.nodes:
        shape = graph.concrete_shape(node.id)
        if node.op in ("transpose", "reshape"):
            return None
        if node.op == "matmul" and _batched_weight(graph, node.inputs[1], rank):
            return None
        if node.op in _AXIS_OPS and node.attr("axis") % max(node.type.rank, 1) != node.type.rank - 1:
            return None
        if len(shape) > rank or len(shape) == rank and shape[-3:-1] not in (out[-3:-1], (1, 1)):
            return None
        if 2 <= len(shape) < rank and any(s != 1 for s in shape[:-1]) and not _weight_only(graph, node.id):
            return None
    for ones in (False, True):  # as written first: a graph that merged before this fallback merges the same
        try:
            return _merged(graph, rank, ones)
        except SpecError:  # "S D" at S=1 typed as S over [1, B*S, D]: "B*S vs S"
            continue
    return None  # the merged graph does not type: lowered as written (merging is only faster)


def _merged(graph: Graph, rank: int, ones: bool) -> Graph:
    """The graph with its inputs of the output's rank merged; with `ones`, also each other input's axes
    before the last that are 1 at the bound sizes but named (`S` at S=1) typed as the constant 1, so
    they broadcast over the merged rows as they do over the spec's."""
    builder = GraphBuilder(graph.name, graph.bindings)
    remap: dict[int, int] = {}
    for node in graph.nodes:
        shape = graph.concrete_shape(node.id)
        if node.op == "input" and node.type.rank == rank and shape[-3:-1] != (1, 1):
            dims = node.type.shape
            merged = TensorType((*dims[:-3], Dim.const(1), dims[-3] * dims[-2], dims[-1]), node.type.dtype)
            remap[node.id] = builder.input(node.attr("name"), merged, node.where, node.attr("range"))
        elif (
            ones
            and node.op == "input"
            and (named := _symbolic_ones(node.type, shape))
            and not _weight_only(graph, node.id)
        ):
            typed = TensorType(named, node.type.dtype)
            remap[node.id] = builder.input(node.attr("name"), typed, node.where, node.attr("range"))
        else:
            remap[node.id] = builder.copy_node(node, [remap[i] for i in node.inputs])
    return builder.build([remap[o] for o in graph.outputs], graph.output_names)


def _symbolic_ones(ttype: TensorType, shape: tuple[int, ...]) -> tuple[Dim, ...]:
    """`ttype`'s dims with each axis before the last that is 1 at the bound sizes but named (`S` at S=1)
    made the constant 1, or () when there is none."""
    dims = tuple(
        Dim.const(1) if i < len(shape) - 1 and s == 1 else d for i, (d, s) in enumerate(zip(ttype.shape, shape))
    )
    return dims if dims != tuple(ttype.shape) else ()


def _batched_weight(graph: Graph, nid: int, rank: int) -> bool:
    """`nid`, a matmul's right operand, has a weight per batch: its rows are K, so merging its batch axis
    into them would contract over every batch's K at once (it passes the shape test when K equals S)."""
    shape = graph.concrete_shape(nid)
    return len(shape) == rank and shape[-3] != 1


def _weight_only(graph: Graph, nid: int) -> bool:
    """`nid` is read only as a matmul's right operand (its rows are K, not the graph's rows)."""
    readers = [n for n in graph.nodes if nid in n.inputs]
    return bool(readers) and all(n.op == "matmul" and n.inputs[1] == nid and n.inputs[0] != nid for n in readers)
