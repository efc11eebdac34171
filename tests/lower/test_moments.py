"""Row mean and variance from bn_stats/bn_aggr (knob `moments`) and fused groups over column
windows (knob `interleave` with one row tile per block): the pattern is found by structure, the
kernels match the float64 reference on random rows and on rows where a one-pass E[x^2] - E[x]^2
would fail (large offset, near-constant)."""

from __future__ import annotations

import numpy as np
import pytest

import axon.nki
import axon.spec as ax
from axon.ir import evaluate, max_rel_error, reference_case, trace
from axon.ir.ops import NumpyMath
from axon.lower import emit, interpret, lower
from axon.lower.moments import match_moments
from axon.lower.program import TileInstr, TileLoop
from axon.lower.space import Space
from axon.target import isa, load_hw
from axon.workloads import get

from .conftest import TOL

HW = load_hw("trn1")


def _instrs(stmts):
    for s in stmts:
        if isinstance(s, TileLoop):
            yield from _instrs(s.body)
        elif isinstance(s, TileInstr):
            yield s


def _run(prog, src, inputs):
    res = axon.nki.run(src, *[inputs[t.name] for t in prog.inputs], hw=HW)
    res = res if isinstance(res, (tuple, list)) else (res,)
    return {name: np.asarray(r, dtype=np.float64) for name, r in zip(prog.output_names, res)}


@pytest.mark.parametrize("name,found", [("layernorm", 1), ("rmsnorm", 0), ("softmax", 0)])
def test_the_mean_and_centred_sum_of_squares_pattern_is_found_by_structure(name, found):
    graph = get(name).graph("small")
    assert len(match_moments(graph)) == found
    knobs = [k.name for k in Space(graph, HW, isel={}).knobs]
    assert ("moments" in knobs) == bool(found)


def test_bn_aggr_of_chunk_statistics_is_the_two_pass_mean_and_variance_on_offset_rows():
    rng = np.random.default_rng(1)
    x = (1e4 + rng.normal(size=(4, 1536))).astype(np.float32)  # 3 chunks of 512 (bn_stats_fmax)
    stats = np.concatenate([isa.sem_bn_stats(NumpyMath(), x[:, c : c + 512]) for c in range(0, 1536, 512)], axis=1)
    mv = isa.sem_bn_aggr(NumpyMath(), stats)
    x64 = x.astype(np.float64)
    var = ((x64 - x64.mean(1, keepdims=True)) ** 2).mean(1)
    assert np.allclose(mv[:, 0], x64.mean(1), rtol=1e-6)
    assert np.allclose(mv[:, 1], var, rtol=1e-4)  # E[x^2] - E[x]^2 in float32 would lose every digit here


@pytest.mark.parametrize(
    "point", [{"moments": "bn_stats"}, {"moments": "bn_stats", "bufs": 2, "interleave": True, "offload": "all"}]
)
@pytest.mark.parametrize("rows", ["random", "offset", "near-constant"])
def test_layernorm_with_bn_stats_matches_the_reference(point, rows):
    graph = get("layernorm").graph("small", N=1280)  # a last bn_stats chunk of 256 columns
    prog = lower(graph, point, HW)
    ops = [i.opcode for i in _instrs(prog.body)]
    assert ops.count("bn_stats") == 3 and ops.count("bn_aggr") == 1
    assert "tensor_reduce" not in ops and "activation_reduce" not in ops  # one read of x for both statistics
    inputs, ref = reference_case(graph)
    if rows == "offset":
        inputs["x"] = (inputs["x"] + 1e4).astype(np.float32)
    elif rows == "near-constant":
        inputs["x"] = (3.0 + 1e-3 * inputs["x"]).astype(np.float32)
    ref = evaluate(graph, inputs)
    two_pass = lower(graph, {k: v for k, v in point.items() if k != "moments"}, HW)
    # the error of the float32 two-pass kernel on the same rows (the input's own rounding dominates
    # on offset rows): bn_stats must do no worse than it, and meet the tolerance on random rows
    bar = max(TOL["float32"], 1.5 * max_rel_error(_run(two_pass, emit(two_pass), inputs), ref))
    assert max_rel_error(interpret(prog, inputs), ref) <= bar
    assert max_rel_error(_run(prog, emit(prog), inputs), ref) <= bar, "emitted source"


@pytest.mark.parametrize("rows", ["random", "offset", "near-constant"])
def test_layernorm_normalized_on_scalare_over_windows_matches_the_reference(rows):
    """The last alternative of the output group with bn_stats: (x - mean) / std in one ScalarE
    tensor_scalar, then * g and + b on VectorE, over column windows with two buffers."""
    graph = get("layernorm").graph("small", N=2048)
    space = Space(graph, HW)
    knob = next(k for k in space.knobs if k.name.startswith("isel.") and len(k.choices) == 9)
    point = {"moments": "bn_stats", "bufs": 2, "interleave": True, knob.name: knob.choices[-1]}
    prog = lower(graph, point, HW)
    ops = list(_instrs(prog.body))
    norm = [i for i in ops if i.opcode == "tensor_scalar" and i.engine == "scalar" and i.arg("op1") == "nl.divide"]
    assert norm and all(i.free_size == 512 for i in norm)  # on ScalarE, over windows of a quarter row
    assert not any(i.opcode == "scalar_tensor_tensor" for i in ops)
    inputs, _ = reference_case(graph)
    if rows == "offset":
        inputs["x"] = (inputs["x"] + 1e4).astype(np.float32)
    elif rows == "near-constant":
        inputs["x"] = (3.0 + 1e-3 * inputs["x"]).astype(np.float32)
    ref = evaluate(graph, inputs)
    two_pass = lower(graph, {"moments": "two_pass"}, HW)
    bar = max(TOL["float32"], 1.5 * max_rel_error(_run(two_pass, emit(two_pass), inputs), ref))
    assert max_rel_error(interpret(prog, inputs), ref) <= bar
    assert max_rel_error(_run(prog, emit(prog), inputs), ref) <= bar, "emitted source"


@pytest.mark.parametrize("name,isel", [("softmax", {"isel.g3": 1}), ("gelu", {}), ("layernorm", {})])
def test_interleave_with_one_row_tile_issues_groups_over_column_windows(name, isel):
    graph = get(name).graph("small", N=2048)  # softmax's isel.g3=1: x - max on VectorE, then exp on ScalarE
    plain = list(_instrs(lower(graph, isel, HW).body))
    prog = lower(graph, {**isel, "interleave": True}, HW)
    ops = list(_instrs(prog.body))
    assert any(i.free_size == 512 for i in ops)  # steps over windows of a quarter row
    assert sum(i.free_size == 1 for i in ops) == sum(i.free_size == 1 for i in plain)  # [P, 1] steps once
    x, ref = reference_case(graph)
    assert max_rel_error(interpret(prog, x), ref) <= TOL["float32"]
    assert max_rel_error(_run(prog, emit(prog), x), ref) <= TOL["float32"], "emitted source"


def test_a_group_of_one_full_width_step_is_not_cut_into_windows():
    graph = get("softmax").graph("small", N=2048)  # default isel: [P, 1] negation, then one exp
    plain = [(i.opcode, i.free_size) for i in _instrs(lower(graph, {}, HW).body)]
    assert [(i.opcode, i.free_size) for i in _instrs(lower(graph, {"interleave": True}, HW).body)] == plain


@ax.spec(x="M K", w="K N", b="N")
def _linear_layernorm(x, w, b):
    h = x @ w + b
    return (h - ax.mean(h)) * ax.rsqrt(ax.var(h) + 1e-5)


@ax.spec(x="M N", b="N")
def _bias_layernorm(x, b):
    h = x + b
    return (h - ax.mean(h)) * ax.rsqrt(ax.var(h) + 1e-5)


@pytest.mark.parametrize(
    "spec,dims,fusion",
    [
        (_linear_layernorm, {"M": 128, "K": 128, "N": 640}, "fused"),
        (_linear_layernorm, {"M": 128, "K": 128, "N": 640}, "split_matmuls"),
        (_bias_layernorm, {"M": 128, "N": 640}, "fused"),
    ],
)
def test_a_row_computed_in_the_pass_gets_its_statistics_after_it_is_computed(spec, dims, fusion):
    """The row of a layer norm that is not an input (a bias add: `x @ w + b`, `x + b`) was fused into
    the group of `h - mean`, emitted at that group's sink, after the bn_stats that read it: lowering
    the default point was a KeyError traceback out of `axon tune`."""
    graph = trace(spec).bind(**dims)
    assert len(match_moments(graph)) == 1
    prog = lower(graph, {"moments": "bn_stats", "fusion": fusion}, HW)
    ops = [i.opcode for i in _instrs(prog.body)]
    assert ops.count("bn_stats") == 2 and ops.count("bn_aggr") == 1
    inputs, ref = reference_case(graph)
    assert max_rel_error(_run(prog, emit(prog), inputs), ref) <= TOL["float32"]
