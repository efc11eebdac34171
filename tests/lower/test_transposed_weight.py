"""x @ transpose(w) with w [N, K] in HBM and N not a multiple of 128 (N=200, 1000): the rows of w
are transposed in chunks of 128 and a last narrower chunk of N mod 128, on TensorE or by DMA, both
where the matmul builds its weight (`axon.lower.weights`) and where the transpose is a row value of
its own pass (fusion=unfused). Every point of the space was rejected: "1000 rows not a multiple of 128"."""

from __future__ import annotations

import pytest

import axon.spec as ax
from axon.ir import trace
from axon.lower.space import Point, Space
from axon.search.checks import adversarial_check, numerics_check
from axon.search.problem import LoweredProblem
from axon.synth import discover_variants

from .test_lowering import HW, _check


@ax.spec(x=ax.tensor("M K"), w=ax.tensor("N K"))
def xwt(x, w):
    return x @ ax.transpose(w)


def _point(graph, **knobs):
    return Point.of({**Space(graph, HW).default_point().as_dict(), **knobs})


@pytest.mark.parametrize("transpose", ["pe", "dma"])
@pytest.mark.parametrize("fusion", ["fused", "unfused"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_weight_whose_rows_are_not_whole_chunks_is_transposed_with_a_narrower_last_chunk(transpose, fusion, dtype):
    graph = trace(xwt, M=128, K=96, N=200, dtype=dtype)
    _, src = _check(graph, _point(graph, transpose=transpose, fusion=fusion), dtype)
    assert "w[128:200, " in src  # the last chunk, 72 rows of w


@pytest.mark.parametrize(
    "knobs",
    [
        {"weights": "resident", "tile_n": 128, "m_block": 2, "bufs": 2},
        {"tile_k": 64, "psum_bufs": 2, "evac": "scalar", "transpose": "dma"},
        {"tile_m": 64, "m_block": 2, "skew": True},
    ],
)
def test_a_contraction_not_of_whole_tiles_with_a_narrower_last_chunk(knobs):
    """K=200 (K tiles of 100) and N=200 at once, over the matmul's other knobs."""
    graph = trace(xwt, M=256, K=200, N=200)
    _check(graph, _point(graph, **knobs), "float32")


@pytest.mark.parametrize("transpose", ["pe", "dma"])
def test_the_narrower_last_chunk_passes_the_numerics_and_adversarial_checks(transpose, tmp_path):
    """The checks `axon tune` runs: large offsets and a dominant element in the last chunk's rows."""
    graph = trace(xwt, M=128, K=96, N=1000)
    p = LoweredProblem("xwt", graph, HW, discover_variants(graph, max_depth=0), "float32")
    point = p.complete(0, {**p.spaces[0].default_point().as_dict(), "transpose": transpose})
    assert p.validate(point) is None
    assert numerics_check(p, point, directory=tmp_path).ok
    report = adversarial_check(p, point, tmp_path)
    assert report.ok, report.failure()
