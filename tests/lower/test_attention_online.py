"""The flash-style attention loop nest (`axon.lower.attention`): each form it emits computes the
reference, in the NumPy interpretation and as emitted source in the emulator, at small shapes."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import axon.nki
import axon.spec as ax
from axon.ir import max_rel_error, reference_case, trace
from axon.lower import Rejected, lower
from axon.lower.attention import match_attention
from axon.lower.emit import emit
from axon.lower.interpret import interpret
from axon.lower.passes import normalize
from axon.lower.roles import LoweringError
from axon.lower.space import Space
from axon.measure.backend import SimBackend
from axon.search.checks import adversarial_check, numerics_check
from axon.search.problem import LoweredProblem
from axon.search.variants import verified_variants
from axon.target import load_hw
from axon.workloads import get
from axon.workloads.specs import _attention

from .conftest import TOL

HW = load_hw("trn1")


@functools.cache
def _hoisted(name: str, dtype: str, **dims: int):
    """The variant with the softmax divisor after the second matmul (the form the nest lowers).
    Once per worker for each (workload, dtype, shape): the discovery and its floating-point screen
    are pure functions of the bound graph, and a `Variant` is frozen, so the tests that ask for the
    same one share it."""
    g = get(name).graph("default", dtype=dtype, **dims)
    for v in verified_variants(g):
        if match_attention(normalize(v.graph, HW.memory.partitions)) is not None:
            return v
    raise AssertionError(f"{name}: no variant of the attention form")


def _run(variant, point, dtype):
    prog = lower(variant, {"softmax": "online", **point}, HW)
    src = emit(prog)
    x, ref = reference_case(variant.graph)
    out = interpret(prog, x)
    res = axon.nki.run(src, *[x[t.name] for t in prog.inputs], hw=HW)
    res = res if isinstance(res, (tuple, list)) else (res,)
    got = {n: np.asarray(r, dtype=np.float64) for n, r in zip(prog.output_names, res)}
    return prog, src, x, out, got, ref


POINTS = [
    {},  # the defaults: chunk 512, scores through SBUF, P.T on VectorE, pipeline 2, P @ V one step behind
    {"scores_copy": "psum", "attn_pipeline": 1, "pv_lag": 0},
    {"p_evac": "alternate", "attn_store": "block"},
    {"p_evac": "scalar", "attn_pipeline": 3},
]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_chunk_forms_compute_attention(point, dtype):
    v = _hoisted("attention", dtype, H=2, S=512, D=64)
    prog, src, x, out, got, ref = _run(v, point, dtype)
    assert max_rel_error(out, ref) <= TOL[dtype]
    assert max_rel_error(got, ref) <= TOL[dtype]
    assert "nisa.activation(" in src and "reduce_res=" in src  # exp and row sum in one instruction
    # NeuronCore-v2 (trn1) has no ScalarE tensor_copy: a copy on ScalarE is activation(op=nl.copy)
    assert not [line for line in src.splitlines() if "tensor_copy(" in line and "scalar_engine" in line]


@pytest.mark.parametrize("point", [{"kv_chunk": 256}, {"kv_chunk": 256, "scores_copy": "psum", "pv_lag": 0}])
def test_online_softmax_over_key_chunks(point):
    """Several key chunks: running max, correction and the deferred division."""
    v = _hoisted("attention", "float32", H=1, S=768, D=64)
    prog, src, x, out, got, ref = _run(v, point, "float32")
    assert max_rel_error(out, ref) <= TOL["float32"]
    assert max_rel_error(got, ref) <= TOL["float32"]
    assert "correction" in src and "scalar_tensor_tensor" in src


def test_online_softmax_survives_large_offsets_and_a_dominant_score():
    """Scores in the hundreds, the largest key only in the last chunk: an online softmax that
    forgot the running max or its correction overflows exp or loses the dominant key."""
    v = _hoisted("attention", "float32", H=1, S=768, D=64)
    prog = lower(v, {"softmax": "online", "kv_chunk": 256}, HW)
    src = emit(prog)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 768, 64)).astype(np.float32) * 8.0
    k = rng.standard_normal((1, 768, 64)).astype(np.float32) * 8.0
    k[0, 700] = q[0].mean(axis=0) * 40.0  # one key far above the rest for most queries
    val = rng.standard_normal((1, 768, 64)).astype(np.float32)
    x = {"q": q, "k": k, "v": val}
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64)) / 8.0
    assert s.max() > 200.0  # exp of an unshifted score overflows float32 above 88.7
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    ref = {"out": (p / p.sum(axis=-1, keepdims=True)) @ val.astype(np.float64)}
    # scores of ~300 carry float32 rounding of ~2e-5 into the exponent; a lost correction or an
    # overflow is off by O(1)
    assert max_rel_error(interpret(prog, x), ref) <= 1e-4
    res = axon.nki.run(src, q, k, val, hw=HW)
    assert np.all(np.isfinite(res))
    assert max_rel_error({"out": np.asarray(res, np.float64)}, ref) <= 1e-4


def test_grouped_query_heads_read_their_shared_key_head():
    v = _hoisted("gqa_attention", "float32", KV=2, G=2, S=256, D=64)
    prog, src, x, out, got, ref = _run(v, {"kv_chunk": 128}, "float32")
    assert max_rel_error(got, ref) <= TOL["float32"]
    assert "// 2" in src  # query head h reads key/value head h // 2


def test_space_offers_the_nest_only_for_the_attention_form():
    v = _hoisted("attention", "bfloat16", H=1, S=512, D=128)
    names = {k.name for k in Space(v, HW).knobs}
    assert {"softmax", "kv_chunk", "p_evac", "attn_pipeline", "scores_copy"} <= names
    softmax = get("softmax").graph("small")
    assert "softmax" not in {k.name for k in Space(softmax, HW).knobs}
    with pytest.raises(LoweringError, match="attention form"):
        lower(get("softmax").graph("small"), {"softmax": "online"}, HW)


@pytest.mark.parametrize("S", [640, 1152, 1024])
@pytest.mark.parametrize(
    "point",
    [
        {"kv_chunk": 512},
        {"kv_chunk": 256, "scores_copy": "sbuf", "attn_pipeline": 2},
        {"kv_chunk": 256, "p_evac": "alternate", "attn_pipeline": 3, "attn_store": "block"},
        {"kv_chunk": 512, "scores_copy": "psum", "pv_lag": 0, "attn_pipeline": 1},
    ],
    ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()),
)
def test_keys_that_are_not_whole_chunks_end_in_a_narrower_chunk(S, point):
    """S a multiple of 128 but not of the chunk: the last chunk holds the S mod chunk keys left
    (scores, max, exp, transposes of P and P @ V over that many), in every pipelined form."""
    v = _hoisted("attention", "float32", H=1, S=S, D=64)
    prog, src, x, out, got, ref = _run(v, point, "float32")
    assert max_rel_error(out, ref) <= TOL["float32"]
    assert max_rel_error(got, ref) <= TOL["float32"]
    chunk = point["kv_chunk"]
    last = (S - 1) // chunk * chunk
    assert f"scores, keys {last}..{S - 1}" in src  # the last chunk, narrower unless S is whole chunks


@pytest.mark.parametrize("S", [640, 1152])
def test_a_narrower_last_chunk_passes_the_numerics_and_adversarial_checks(S, tmp_path):
    """The checks `axon tune` runs on a chosen kernel, at the ragged shape itself (not reduced): a
    dominant key or large offsets in the narrow last chunk must go through the running max."""
    v = _hoisted("attention", "float32", H=2, S=S, D=64)
    p = LoweredProblem("attention", v.graph, HW, [v], "float32")
    point = p.complete(0, {**p.spaces[0].default_point().as_dict(), "softmax": "online", "kv_chunk": 512})
    assert numerics_check(p, point, directory=tmp_path).ok
    report = adversarial_check(p, point, tmp_path, max_flops=1e9)
    assert report.dims["S"] == S
    assert report.ok, report.failure()


def test_a_ragged_shape_too_big_to_check_is_checked_at_a_shape_with_the_same_narrow_chunk(tmp_path):
    """Over the flops limit the check cuts S=1152 to 640 (512 + 1152 mod 512), not to 512, so the
    narrow last chunk the tuned kernel has is in the kernel the emulator runs."""
    v = _hoisted("attention", "float32", H=2, S=1152, D=64)
    p = LoweredProblem("attention", v.graph, HW, [v], "float32")
    point = p.complete(0, {**p.spaces[0].default_point().as_dict(), "softmax": "online", "kv_chunk": 512})
    check = numerics_check(p, point, max_flops=5e8, directory=tmp_path)
    assert check.dims["S"] == 640 and check.ok


def test_shapes_the_nest_cannot_tile_are_rejected():
    v = _hoisted("attention", "float32", H=1, S=128, D=64)
    with pytest.raises(Rejected, match="kv_chunk"):
        lower(v, {"softmax": "online", "kv_chunk": 256}, HW)  # the same kernel as kv_chunk 512
    with pytest.raises(Rejected, match="kv_chunk"):
        lower(v, {"softmax": "online", "kv_chunk": 192}, HW)  # not whole key tiles
    v = _hoisted("attention", "float32", H=1, S=768, D=64)
    # the nest is one fused kernel: with a fusion cut the point is the row-block lowering's
    cut = {"fusion": "unfused"}
    assert emit(lower(v, {"softmax": "online", **cut}, HW)) == emit(lower(v, {"softmax": "rows", **cut}, HW))


def test_the_nest_is_faster_than_the_row_lowering_at_s512_bf16():
    """Where the flash-style nest pays: one DMA per tensor, transposes on TensorE, pipelined steps."""
    v = _hoisted("attention", "bfloat16", H=1, S=512, D=128)
    inputs = tuple((n.attr("name"), v.graph.concrete_shape(n.id), n.type.dtype) for n in v.graph.inputs)
    be = SimBackend()
    lat = {}
    for form in ("online", "rows"):
        prog = lower(v, {"softmax": form, "weights": "resident", "tile_n": 512}, HW)
        lat[form] = be.measure(emit(prog), prog.name, inputs, HW).latency_ns
    assert lat["online"] < 0.85 * lat["rows"]


def test_the_graph_as_written_divides_after_the_second_matmul():
    """softmax(s) @ V as written, (E / sum(E)) @ V: the nest lowers it with the division deferred."""
    g = get("attention").graph("default", dtype="float32", H=2, S=256, D=64)
    assert match_attention(normalize(g, HW.memory.partitions)) is not None
    prog = lower(g, {"softmax": "online"}, HW)
    src = emit(prog)
    x, ref = reference_case(g)
    res = axon.nki.run(src, *[x[t.name] for t in prog.inputs], hw=HW)
    assert max_rel_error({"out": np.asarray(res, np.float64)}, ref) <= TOL["float32"]
    assert "the deferred division by the row sum" in src


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rmsnorm_of_q_and_k_runs_inside_the_nest(dtype):
    """qknorm: each row of Q and K scaled by 1/sqrt(mean(x^2) + eps) before the transposes, the
    gains applied per partition on the way out of PSUM."""
    g = get("qknorm_attention").graph("default", dtype=dtype, H=2, S=256, D=64)
    form = match_attention(normalize(g, HW.memory.partitions))
    assert form is not None and form.q_norm == ("gq", 1e-6) and form.k_norm == ("gk", 1e-6)
    prog = lower(g, {"softmax": "online"}, HW)
    src = emit(prog)
    x, ref = reference_case(g)
    assert max_rel_error(interpret(prog, x), ref) <= TOL[dtype]
    res = axon.nki.run(src, *[x[t.name] for t in prog.inputs], hw=HW)
    assert max_rel_error({"out": np.asarray(res, np.float64)}, ref) <= TOL[dtype]
    assert "nl.rsqrt" in src and "gq_col" in src


RAGGED_POINTS = [
    {},
    {"kv_chunk": 256, "scores_copy": "psum", "pv_lag": 0, "attn_pipeline": 1},
    {"kv_chunk": 256, "p_evac": "alternate", "attn_pipeline": 3, "attn_store": "block"},
    {"p_evac": "scalar", "attn_store": "block", "scores_copy": "sbuf"},
]


@pytest.mark.parametrize("S", [1100, 200, 1])
@pytest.mark.parametrize("point", RAGGED_POINTS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "default")
def test_sequence_lengths_not_multiples_of_128_end_in_a_partial_tile(S, point):
    """S=1100: rows in order, one DMA per tile, the last tile 76 rows. A partial query tile is
    computed over all partitions (its other rows zero, never stored); a partial key tile ends the
    last chunk's scores, its P.T and P @ V over 76 keys. The nest rejected every such S."""
    if point.get("kv_chunk", 512) > S and point.get("kv_chunk") is not None:
        pytest.skip("the same kernel as kv_chunk 512")
    v = _hoisted("attention", "float32", H=1, S=S, D=64)
    prog, src, x, out, got, ref = _run(v, point, "float32")
    assert max_rel_error(out, ref) <= TOL["float32"]
    assert max_rel_error(got, ref) <= TOL["float32"]
    last = S // 128 * 128
    assert f"q[i_b0, {last}:{S}, 0:64]" in src and f"out[i_b0, {last}:{S}, 0:64]" in src


@pytest.mark.parametrize("Q,S", [(256, 300), (300, 256), (130, 1000)])
def test_queries_and_keys_of_other_lengths_each_end_in_their_own_partial_tile(Q, S):
    """Cross attention: a partial tile on one side only (whole tiles keep the one-DMA layout)."""

    @ax.spec(q="H Q D", k="H S D", v="H S D")
    def cross(q, k, v):
        return _attention(q, k, v)

    g = trace(cross, H=2, Q=Q, S=S, D=64)
    v = next(v for v in verified_variants(g) if match_attention(normalize(v.graph, HW.memory.partitions)) is not None)
    prog, src, x, out, got, ref = _run(v, {"kv_chunk": 256, "attn_store": "block"}, "float32")
    assert max_rel_error(got, ref) <= TOL["float32"]


@pytest.mark.parametrize("name", ["attention", "gqa_attention", "qknorm_attention"])
def test_a_partial_tile_in_bfloat16_and_in_the_other_attention_workloads(name):
    dims = {"KV": 2, "G": 2} if name == "gqa_attention" else {"H": 2}
    g = get(name).graph("default", dtype="bfloat16", S=200, D=64, **dims)
    prog = lower(g, {"softmax": "online"}, HW)
    src = emit(prog)
    assert "attention: online softmax" in src
    x, ref = reference_case(g)
    res = axon.nki.run(src, *[x[t.name] for t in prog.inputs], hw=HW)
    assert max_rel_error({"out": np.asarray(res, np.float64)}, ref) <= TOL["bfloat16"]


def test_a_dominant_key_in_the_partial_last_tile_goes_through_the_running_max():
    """Large scores and the largest key among the 76 of the partial last tile (S=1100)."""
    v = _hoisted("attention", "float32", H=1, S=1100, D=64)
    prog = lower(v, {"softmax": "online", "kv_chunk": 256}, HW)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1100, 64)).astype(np.float32) * 8.0
    k = rng.standard_normal((1, 1100, 64)).astype(np.float32) * 8.0
    k[0, 1090] = q[0].mean(axis=0) * 40.0
    val = rng.standard_normal((1, 1100, 64)).astype(np.float32) + 1e4  # offset values
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64)) / 8.0
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    ref = {"out": (p / p.sum(axis=-1, keepdims=True)) @ val.astype(np.float64)}
    res = axon.nki.run(emit(prog), q, k, val, hw=HW)
    assert max_rel_error({"out": np.asarray(res, np.float64)}, ref) <= 1e-4


@pytest.mark.parametrize("S,chunk", [(200, 512), (300, 256)])
def test_a_partial_tile_passes_the_numerics_and_adversarial_checks(S, chunk, tmp_path):
    """The checks `axon tune` runs, with the partial key tile alone in its chunk or after a whole one."""
    v = _hoisted("attention", "float32", H=2, S=S, D=64)
    p = LoweredProblem("attention", v.graph, HW, [v], "float32")
    point = p.complete(0, {**p.spaces[0].default_point().as_dict(), "softmax": "online", "kv_chunk": chunk})
    assert p.validate(point) is None
    assert numerics_check(p, point, directory=tmp_path).ok
    report = adversarial_check(p, point, tmp_path, max_flops=1e9)
    assert report.ok, report.failure()
