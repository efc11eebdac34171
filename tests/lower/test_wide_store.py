"""A matmul output under K-outer order leaves PSUM through a stage holding the group's n tiles of
each row tile side by side, stored by one DMA per row tile (rows of group x tile_n elements)."""

from __future__ import annotations

import pytest

from axon.lower.program import TileInstr, TileLoop
from axon.lower.space import Point, Space
from axon.workloads import get

from .test_lowering import HW, _check


@pytest.mark.parametrize(
    "name,dims,knobs",
    [
        ("matmul", dict(N=1024), {"loop_order": "kn2"}),
        ("matmul", dict(N=2048), {"loop_order": "kn4", "m_block": 2, "tile_n": 256, "transpose": "dma"}),
        ("bmm", {}, {"loop_order": "kn2", "tile_n": 128, "psum_bufs": 2, "tile_k": 64, "weights": "resident"}),
        ("bmm", {}, {"loop_order": "kn2", "tile_n": 128, "m_block": 2, "bufs": 2, "transpose": "dma"}),
    ],
)
def test_group_of_n_tiles_is_stored_by_one_dma_per_row_tile(name, dims, knobs):
    graph = get(name).graph("small", **dims)
    space = Space(graph, HW)
    point = Point.of({**space.default_point().as_dict(), **knobs})
    assert space.validate(point) is None, space.validate(point)
    prog, src = _check(graph, point, "float32")
    group = int(knobs["loop_order"][2:])
    tn = min(knobs.get("tile_n", 512), graph.concrete_shape(graph.outputs[0])[-1])
    stores = [line for line in src.splitlines() if "# store out" in line]
    assert stores and all(f"{group} n tiles" in line for line in stores)
    *batch, rows, n = graph.concrete_shape(graph.outputs[0])
    expected = (batch[0] if batch else 1) * (rows // 128) * (n // (group * tn))
    assert _stores(prog.body) == expected  # one per (row tile, group of n tiles), not one per n tile


def _stores(stmts, mult=1):
    total = 0
    for s in stmts:
        if isinstance(s, TileLoop):
            total += _stores(s.body, mult * s.extent)
        elif isinstance(s, TileInstr) and s.comment.startswith("store out"):
            total += mult
    return total
