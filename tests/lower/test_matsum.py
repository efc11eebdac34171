"""A sum of two matmuls accumulated in one PSUM bank (`axon.lower.matsum`): x @ w + (x @ a) @ b."""

from __future__ import annotations

import pytest

import axon.spec as ax
from axon.ir import trace
from axon.lower import lower
from axon.lower.matsum import shared_sums, transposed_products
from axon.lower.space import Point, Space
from axon.search.checks import adversarial_check
from axon.search.problem import LoweredProblem
from axon.synth import discover_variants
from axon.workloads import get

from .test_lowering import HW, _check


def _lora(**dims):
    return get("lora").graph("small", **dims)


def _point(graph, **knobs):
    space = Space(graph, HW)
    return Point.of({**space.default_point().as_dict(), **knobs})


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"m_block": 2, "bufs": 2},
        {"psum_bufs": 2, "bufs": 3, "loop_order": "kn2", "tile_n": 256},
        {"transpose": "dma", "loop_order": "kn2", "m_block": 2, "bufs": 2, "tile_n": 128},
        {"weights": "resident", "tile_n": 128, "tile_k": 64},
        {"tile_m": 64, "m_block": 2, "evac": "scalar"},
    ],
)
def test_lora_sum_accumulates_in_one_psum_bank_and_matches(knobs):
    graph = _lora()
    point = _point(graph, accumulate="shared", **knobs)
    prog, src = _check(graph, point, "float32")
    assert "evacuate the sum" in src and "shared accumulation" in src
    # neither product is added on VectorE and no full-width product stays in SBUF
    assert prog.stats().opcodes.get("tensor_tensor", 0) == 0
    n = graph.bindings["N"]
    assert not any(t.buffer == "sbuf" and t.shape[-1] >= n for t in prog.tensors().values() if t.name.startswith("t4"))


def test_separate_accumulation_is_the_other_choice_and_costs_an_add():
    graph = _lora()
    assert ("accumulate", ("shared", "separate")) in {(k.name, k.choices) for k in Space(graph, HW).knobs}
    prog, _ = _check(graph, _point(graph, accumulate="separate"), "float32")
    assert prog.stats().opcodes.get("tensor_tensor", 0) > 0


def test_shared_sum_halves_the_sbuf_of_lora_at_the_default_shape():
    graph = get("lora").graph("default")
    shared = lower(graph, _point(graph, accumulate="shared"), HW)
    separate = lower(graph, _point(graph, accumulate="separate"), HW)
    assert shared.point["_sbuf_peak"] < separate.point["_sbuf_peak"] // 2


def test_sum_of_products_with_different_contractions_and_transposed_weight():
    @ax.spec(x="M K", w="K N", y="M J", v="N J")
    def two_products(x, w, y, v):
        return x @ w + y @ ax.transpose(v)

    graph = trace(two_products, M=256, K=256, N=384, J=64)
    assert len(shared_sums(graph)) == 1
    for knobs in ({}, {"transpose": "dma", "m_block": 2}):
        _, src = _check(graph, _point(graph, accumulate="shared", **knobs), "float32")
        assert "shared accumulation" in src


def test_an_add_inside_a_longer_chain_or_read_twice_is_not_taken():
    @ax.spec(x="M K", w="K N", a="K N")
    def relu_sum(x, w, a):
        return ax.relu(x @ w + x @ a)

    @ax.spec(x="M K", w="K N", a="K N")
    def product_read_twice(x, w, a):
        p = x @ w
        return (p + x @ a) * p

    assert shared_sums(trace(relu_sum, M=128, K=128, N=128)) == {}
    assert shared_sums(trace(product_read_twice, M=128, K=128, N=128)) == {}
    g = trace(relu_sum, M=128, K=128, N=128)
    assert "accumulate" not in {k.name for k in Space(g, HW).knobs}


def test_shared_sum_passes_the_adversarial_check(tmp_path):
    graph = _lora()
    p = LoweredProblem("lora", graph, HW, discover_variants(graph, max_depth=0), "float32")
    point = p.complete(0, {**p.spaces[0].default_point().as_dict(), "accumulate": "shared", "m_block": 2})
    assert adversarial_check(p, point, tmp_path).ok


@pytest.mark.parametrize("knobs", [{}, {"m_block": 4, "tile_m": 64, "weights": "resident"}, {"tile_k": 64}])
def test_low_rank_product_is_made_transposed_for_its_consumer(knobs):
    """(x @ a) @ b: x @ a is produced as (x @ a)^T straight into b's stationary tiles, so nothing
    of it is transposed on TensorE and its PSUM is one bank for the whole row block."""

    @ax.spec(x="M K", a="K R", b="R N")
    def low_rank(x, a, b):
        return (x @ a) @ b

    graph = trace(low_rank, M=256, K=256, R=128, N=384)
    assert transposed_products(graph) == {3: 4}
    prog, src = _check(graph, _point(graph, accumulate="shared", transpose="dma", **knobs), "float32")
    assert "product made transposed" in src and "nc_transpose" not in src
    other = _point(graph, accumulate="separate", transpose="dma", **knobs)
    reason = Space(graph, HW).validate(other)
    if reason is None:
        assert "nc_transpose" in _check(graph, other, "float32")[1]
    else:  # one PSUM bank per row tile for x @ a and one for its transposes: 9 of 8 at m_block=4
        assert reason.startswith("psum:")
