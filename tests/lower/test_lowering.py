"""Every workload's default point lowers, emits NKI source and computes its reference."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import axon.nki
from axon.ir import max_rel_error, reference_case
from axon.lower import Rejected, lower
from axon.lower.emit import emit
from axon.lower.interpret import interpret
from axon.lower.space import Point, Space
from axon.synth import Variant, discover_variants
from axon.target import load_hw
from axon.workloads import all_workloads, get, names

from .conftest import TOL

HW = load_hw("trn1")


def _check(variant, point, dtype):
    prog = lower(variant, point, HW)
    graph = getattr(variant, "graph", variant)
    src = emit(prog)
    compile(src, f"{graph.name}.py", "exec")
    x, ref = reference_case(graph)
    out = interpret(prog, x)
    assert max_rel_error(out, ref) <= TOL[dtype], (graph.name, point)
    args = [x[t.name] for t in prog.inputs]
    res = axon.nki.run(src, *args, hw=HW)  # the emitted source itself, in the emulator
    res = res if isinstance(res, (tuple, list)) else (res,)
    got = {name: np.asarray(r, dtype=np.float64) for name, r in zip(prog.output_names, res)}
    assert max_rel_error(got, ref) <= TOL[dtype], (graph.name, "emitted source", point)
    return prog, src


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", names())
def test_default_point_matches_reference(name, dtype):
    graph = get(name).graph("small", dtype=dtype)
    space = Space(graph, HW)
    _check(graph, space.default_point(), dtype)


@pytest.mark.parametrize("name", names())
def test_default_point_fits_at_default_shapes(name):
    space = Space(get(name).graph("default"), HW)
    assert space.validate(space.default_point()) is None
    prog = lower(space.graph, space.default_point(), HW)
    stats = prog.stats()
    assert stats.instructions.get("dma", 0) > 0 and prog.point["_sbuf_peak"] <= HW.memory.sbuf_bytes_per_partition


@pytest.mark.parametrize("name", ["softmax", "rmsnorm_matmul", "attention"])
def test_unfused_goes_through_hbm_and_still_matches(name):
    graph = get(name).graph("small")
    fused, unfused = lower(graph, {}, HW), lower(graph, {"fusion": "unfused"}, HW)
    assert len(unfused.scratch) > 0 and not fused.scratch
    assert unfused.stats().dma_bytes > fused.stats().dma_bytes
    _check(graph, {"fusion": "unfused"}, "float32")


def test_oversized_point_is_rejected_with_the_reason():
    space = Space(get("matmul").graph("default"), HW)
    p = Point.of({**space.default_point().as_dict(), "weights": "resident"})
    reason = space.validate(p)
    assert reason is not None and reason.startswith("sbuf:")
    with pytest.raises(Rejected):
        lower(space.graph, p, HW)


def test_ragged_moving_axis_is_sliced():
    graph = get("transpose_matmul").graph("small", N=448)  # 448 = 512-tile? no: 256 + 192 with tile_n=256
    prog, src = _check(graph, {"tile_n": 256}, "float32")
    assert "256:448" in src


def test_emitted_source_names_loops_and_point():
    prog = lower(get("rmsnorm_matmul").graph("small"), {"m_block": 2, "tile_m": 64}, HW)
    src = emit(prog)
    assert "# row_block" in src and "# contraction" in src and "'m_block': 2" in src
    assert "nisa.nc_matmul(" in src and "accumulate=True" in src


def _sampled(seed: int):
    rng = random.Random(seed)
    w = rng.choice(all_workloads())
    graph = w.graph("small")
    return graph, Space(graph, HW).sample(rng)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6))
def test_random_valid_points_match_reference_fast(seed):
    graph, point = _sampled(seed)
    _check(graph, point, "float32")


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6))
def test_200_random_valid_points_match_reference(seed):
    graph, point = _sampled(seed)
    _check(graph, point, "float32")


@pytest.mark.parametrize(
    "name,dims", [("adamw", dict(M=200)), ("rmsnorm_matmul", dict(M=200)), ("softmax", dict(M=136))]
)
def test_ragged_rows_get_a_last_partial_block(name, dims):
    graph = get(name).graph("small", **dims)
    for point in ({}, {"bufs": 2, "tile_m": 64}):
        prog, src = _check(graph, point, "float32")
        assert "last row block" in src


@pytest.mark.parametrize("shape", ["1 1", "1"])
def test_a_single_value_input_scales_every_element(shape):
    """x * s and s - x with s one value ([1, 1] or [1]: a temperature, a learned scale): s is broadcast
    to one value per partition; every trial failed with 'tensor_tensor: [128, 512] vs [128, 1]'."""
    import axon.spec as ax
    from axon.ir import trace

    @ax.spec(x="M N", s=shape)
    def scaled(x, s):
        return ax.exp(x * s) + (s - x)

    graph = trace(scaled).bind(M=256, N=2048)
    for point in ({}, {"tile_m": 64, "bufs": 2}, {"interleave": True, "m_block": 1}):
        _check(graph, point, "float32")


_HEAVY_TRACES = {
    "matmul",
    "transpose_matmul",
    "rope",
    "layernorm_matmul",
    "lora",
    "attention",
    "gqa_attention",
    "qknorm_attention",
    "bmm",
    "bmm_softmax",
    "swiglu",
}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in _HEAVY_TRACES else n for n in names()]
)
def test_default_point_traces_at_default_preset(name):
    graph = get(name).graph("default")
    prog = lower(graph, Space(graph, HW, isel={}).default_point(), HW)
    trace = axon.nki.trace(emit(prog), *[(t.shape, t.dtype) for t in prog.inputs], hw=HW)
    counts = trace.count()
    stats = prog.stats()
    # what the TileProgram says statically is what the emulator issues
    assert sum(counts.values()) == sum(stats.instructions.values())
    assert counts.get("dma_copy", 0) + counts.get("dma_transpose", 0) == stats.instructions["dma"]


BF16_SAMPLE = 2  # bfloat16 variants checked besides the variant as written
BF16_DEPTH = 2  # ... drawn from the variants at most this many moves away


@functools.cache
def _variants(name: str, dtype: str, max_depth: int = 4) -> tuple[Variant, ...]:
    """The discovered variants of a workload's small graph, once per worker: every param and test
    asking for the same (workload, dtype, depth) shares one discovery."""
    return tuple(discover_variants(get(name).graph("small", dtype=dtype), max_depth=max_depth))


def _spread(variants: tuple[Variant, ...], k: int) -> tuple[Variant, ...]:
    """The first variant (as written) and `k` others evenly spread over the rest, always the same ones."""
    n = len(variants)
    if n <= k + 1:
        return variants
    return variants[:1] + tuple(variants[round((i + 1) * (n - 1) / (k + 1))] for i in range(k))


def _one_per_move_set(variants: tuple[Variant, ...]) -> tuple[Variant, ...]:
    """The first variant of each distinct set of moves (the variant as written among them): the
    others apply the same rewrites at other places of the graph and lower through the same paths.
    qknorm_attention: 61 of 200; every variant is checked by experiments/variant_numerics.py."""
    seen: set[frozenset[str]] = set()
    out = []
    for v in variants:
        key = frozenset(m.name for m in v.moves)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return tuple(out)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", names())
def test_default_point_of_each_kind_of_variant_matches_reference(name, dtype):
    """float32: one variant per set of moves. bfloat16 (the same moves, so the same lowering paths):
    the variant as written and BF16_SAMPLE others spread over those within BF16_DEPTH moves (a
    shallower discovery: the full one is what float32 pays for)."""
    if dtype == "float32":
        variants = _one_per_move_set(_variants(name, dtype))
    else:
        variants = _spread(_variants(name, dtype, BF16_DEPTH), BF16_SAMPLE)
    assert variants
    for v in variants:
        _check(v, Space(v, HW, isel={}).default_point(), dtype)


@pytest.mark.parametrize(
    "name,dims,extra,order",
    [
        ("rmsnorm_matmul", dict(N=2048), {}, "kn2"),
        ("rmsnorm_matmul", dict(N=2048), {}, "kn4"),
        ("matmul", dict(N=2048), {"weights": "resident"}, "kn2"),
        ("matmul", dict(N=2048), {"weights": "resident"}, "kn4"),
        # two matmuls of a group share the 8 PSUM banks: kn4 does not fit swiglu
        ("swiglu", dict(F=1024), {"bufs": 1, "psum_bufs": 1, "tile_n": 128}, "kn2"),
    ],
)
def test_k_outer_loop_order_matches_reference(name, dims, extra, order):
    """K outer over a group of n tiles: one PSUM bank per n tile, one DMA per K tile for the group."""
    graph = get(name).graph("small", **dims)
    space = Space(graph, HW)
    point = Point.of({**space.default_point().as_dict(), **extra, "loop_order": order})
    assert space.validate(point) is None, space.validate(point)
    prog, src = _check(graph, point, "float32")
    assert "n_group" in src and "n_in_group" in src


def test_loop_order_that_applies_to_no_matmul_is_rejected():
    graph = get("attention").graph("small")
    space = Space(graph, HW)
    reason = space.validate({**space.default_point().as_dict(), "softmax": "rows", "loop_order": "kn4"})
    assert reason is not None and reason.startswith("loop_order:")


def _variant(name, moves, **dims):
    from axon.search.api import verified_variants

    graph = get(name).graph("small", **dims)
    return next(v for v in verified_variants(graph) if [m.name for m in v.moves] == moves)


@pytest.mark.parametrize(
    "extra",
    [{"weights": "resident"}, {"weights": "stream"}, {"weights": "resident", "bufs": 2, "psum_bufs": 2, "m_block": 2}],
)
def test_gain_folded_into_the_weights_is_scaled_on_chip(extra):
    """g moved onto w (g[:, None] * w): one pass, w's K tiles scaled by g per partition, no HBM scratch."""
    v = _variant("rmsnorm_matmul", ["move-factor-across", "hoist-factor"])
    point = {**Space(v, HW, isel={}).default_point().as_dict(), **extra}
    prog, src = _check(v, point, "float32")
    assert not prog.scratch and "scale the weight's rows" in src and "g.reshape" in src


def test_dead_slots_are_reused_so_double_buffered_layernorm_fits():
    """At N=8192 fp32 a row is 32 KB per partition: the centred row, the discarded squares and the
    output take over dead slots (the output the rotating load's), so bufs=2 fits in SBUF."""
    v = _variant("layernorm", ["fold-scale"], N=8192)
    point = {**Space(v, HW, isel={}).default_point().as_dict(), "bufs": 2}
    prog, src = _check(v, point, "float32")
    sbuf = prog.point["_sbuf_peak"]
    assert sbuf <= HW.memory.sbuf_bytes_per_partition
    assert sbuf < 6 * 8192 * 4  # two broadcast vectors, two load slots and one scratch row (plus small tiles)
    store = next(line for line in src.splitlines() if "# store out" in line)
    assert "% 2" in store  # the output lives in the rotating slot of the load


def test_stationary_tiles_and_store_stage_rotate():
    graph = get("matmul").graph("small")
    point = {**Space(graph, HW).default_point().as_dict(), "bufs": 2, "psum_bufs": 2, "transpose": "pe"}
    prog, src = _check(graph, point, "float32")
    transposes = [line for line in src.splitlines() if "nisa.tensor_copy" in line and "transpose_psum" in line]
    assert transposes and all("(i_r) % 2" in line for line in transposes)
    # software-pipelined (`axon.lower.skew`): block 0's A^T before the loop, iteration r prepares block
    # r+1 in the other slot while block r's matmuls read slot r % 2
    _, src = _check(graph, {**point, "skew": True}, "float32")
    transposes = [line for line in src.splitlines() if "nisa.tensor_copy" in line and "transpose_psum" in line]
    assert len(transposes) == 2 and "(i_r + 1) % 2" in transposes[1] and "i_r" not in transposes[0]
    matmuls = [line for line in src.splitlines() if "nisa.nc_matmul" in line]
    assert any("(i_r) % 2" in line for line in matmuls)


@pytest.mark.parametrize("name", ["matmul", "rmsnorm_matmul", "layernorm_matmul"])
@pytest.mark.parametrize("tile_k", [128, 64])
def test_contraction_that_tile_k_does_not_divide_is_tiled_by_a_divisor(name, tile_k):
    # K=200 was rejected at every tile_k ("not a multiple of tile_k"), so every trial of a tune failed
    graph = get(name).graph("small", K=200)
    prog, src = _check(graph, {"tile_k": tile_k}, "float32")
    tk = 100 if tile_k == 128 else 50  # the largest divisor of 200 up to tile_k
    assert f"[0:{tk}, " in src, src[:2000]


def test_contraction_with_no_useful_divisor_is_rejected_with_the_way_out():
    graph = get("matmul").graph("small", K=251)
    with pytest.raises(Rejected, match="contraction 251 .* no divisor from 16 to 128: pad it to a multiple of 64"):
        lower(graph, {"tile_k": 128}, HW)
