"""The floating-point gate on variants: range analysis and the adversarial measurement, each on its own.

Proved equal over the reals is not enough: dropping softmax's max shift overflows exp, a one-pass
variance cancels. These run at the `small` presets and check what a user would notice: which moves
are offered, and the reason a rejected one gives.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import axon.spec as ax
from axon.errors import SpecError
from axon.ir import evaluate, trace
from axon.synth import discover_variants
from axon.synth.discover import discover
from axon.verify.adversarial import (
    ALL,
    RANGE_CLASSES,
    AdversarialCheck,
    class_error,
    class_inputs,
    evaluate_in,
    finite_ranges,
    input_ranges,
    quantize,
    reduced,
)
from axon.verify.floating import screen
from axon.verify.ranges import analyze, new_hazards
from axon.workloads import get

EXCLUDE = frozenset({"split-tiles"})


@functools.cache
def _variants(graph, depth=1):
    """Once per worker for each (graph, depth): the graphs and variants are frozen values, and
    several tests ask for the same discovery."""
    return tuple(discover_variants(graph, max_depth=depth, exclude=EXCLUDE))


def _moves(v) -> str:
    return " + ".join(m.name for m in v.moves)


def _only(variants, moves: str):
    found = [v for v in variants if _moves(v) == moves]
    if not found:  # say what discovery did instead (a proof once timed out after the suite's other Z3 queries)
        graph = variants[0].graph
        attempts = discover(graph, max_depth=max(len(v.moves) for v in variants) or 1, exclude=EXCLUDE).attempts
        tried = [(a.move.name, a.result.status, round(a.result.time_s, 3), str(a.result)[:300]) for a in attempts]
        raise AssertionError(f"no variant {moves!r}: {[_moves(v) for v in variants]}; discovery again: {tried}")
    return found[0]


@ax.spec(x=ax.tensor("M N", range=(-10, 10)))
def small_logits_softmax(x):
    e = ax.exp(x - ax.max(x))
    return e / ax.sum(e)


@ax.spec(x=ax.tensor("M N", range=(990, 1010)), r=ax.tensor("M N", range=(-1, 1)), g="N", b="N")
def add_layernorm_near_1000(x, r, g, b, eps=1e-5):
    h = x + r
    return (h - ax.mean(h)) / ax.sqrt(ax.var(h) + eps) * g + b


# declarations -------------------------------------------------------------------------------------
def test_a_declared_range_travels_with_the_graph_and_its_variants():
    g = trace(small_logits_softmax, M=4, N=8)
    assert g.input("x").attr("range") == (-10.0, 10.0)
    assert all(v.graph.input("x").attr("range") == (-10.0, 10.0) for v in _variants(g))
    assert input_ranges(g, "float32") == {"x": (-10.0, 10.0)}


@pytest.mark.parametrize("bad", [(10, -10), (1, 1), (0, float("inf")), (1,), "wide"])
def test_a_malformed_range_is_a_spec_error(bad):
    with pytest.raises(SpecError, match="range must be two finite numbers"):
        ax.tensor("M N", range=bad)


@ax.spec(x=ax.tensor("M N", range=(-1e5, 1e5)))
def wide_softmax(x):
    e = ax.exp(x - ax.max(x))
    return e / ax.sum(e)


@pytest.mark.parametrize("dtype, limit", [("float16", 65504.0), ("float32", 1e5)])
def test_a_declared_range_past_the_dtypes_largest_value_is_held_to_it(dtype, limit):
    """float16 inputs declared in (-1e5, 1e5) were drawn as inf past 65,504: every row's reference was
    NaN, so the magnitude, dominant and limit classes passed any kernel (max rel err 0.0)."""
    g = trace(wide_softmax, M=4, N=8, dtype=dtype)
    assert input_ranges(g, dtype) == {"x": (-limit, limit)}
    for cls in RANGE_CLASSES:
        x = class_inputs(g, input_ranges(g, dtype), cls, "x", dtype)["x"]
        assert np.isfinite(x).all() and np.isfinite(evaluate(g, {"x": x})["out"]).all(), cls


@pytest.mark.parametrize("to", ["float8_e4m3", "float8_e5m2"])
def test_the_spec_as_written_rounds_at_its_cast_to_float8(to):
    """ax.cast(..., "float8_e4m3") was computed in float32: the spec as written looked 20x more accurate
    than any kernel that casts as it asks, so `axon tune` turned every kernel down ("the best kernel does
    not match the reference (max rel err 4.76e-02, allowed 0.02)")."""

    @ax.spec(x="M N")
    def to_float8(x):
        return ax.cast(ax.exp(x), to)

    g = trace(to_float8, M=4, N=64)
    x = np.linspace(-1, 1, 256).reshape(4, 64)
    got = evaluate_in(g, {"x": x}, "bfloat16")["out"]
    assert np.array_equal(got, got.astype(getattr(ml_dtypes, to)).astype(np.float64))  # each a float8 value
    assert not np.array_equal(got, quantize(np.exp(x), "bfloat16"))


def test_an_undeclared_range_is_where_the_spec_as_written_stays_accurate():
    # softmax as written is exact for any float32 magnitude: the bound goes up to the headroom below
    # the dtype's limit; layernorm's centring loses digits for offsets far above the spread
    softmax = input_ranges(get("softmax").graph("small"), "float32")["x"][1]
    layernorm = input_ranges(get("layernorm").graph("small"), "float32")["x"][1]
    assert softmax > 1e30
    assert 1 <= layernorm < 1e3


# range analysis -----------------------------------------------------------------------------------
def test_range_analysis_sees_the_max_shift_keep_exp_at_most_one():
    g = get("softmax").graph("small")
    vals, hazards = analyze(g, {"x": (-1e6, 1e6)})
    exp = next(n.id for n in g.nodes if n.op == "exp")
    assert vals[exp].hi == 1.0 and not hazards


@pytest.mark.slow
def test_unshift_exp_overflows_in_the_range_analysis_for_softmax_and_attention():
    for name in ("softmax", "attention"):
        g = get(name).graph("small")
        v = _only(_variants(g), "unshift-exp")
        hazards = new_hazards(g, v.graph, input_ranges(g, "float32"), "float32")
        assert (
            hazards
            and hazards[0].kind == "overflow"
            and "exp overflows for arguments > 88.7 in float32" in hazards[0].text
        )


def test_fuse_reductions_takes_a_square_root_of_a_possibly_negative_variance():
    g = get("layernorm").graph("small")
    v = _only(_variants(g), "fuse-reductions")
    hazards = new_hazards(g, v.graph, input_ranges(g, "float32"), "float32")
    assert hazards and hazards[0].kind == "domain" and "sqrt of a value that can be negative" in hazards[0].text


# adversarial measurement -------------------------------------------------------------------------
def test_the_dtype_evaluator_computes_in_float32_and_rounds_outputs_to_the_dtype():
    g = get("softmax").graph("small", dtype="bfloat16")
    x = np.random.default_rng(0).uniform(-3, 3, (256, 512))
    out = evaluate_in(g, {"x": x}, "bfloat16")["out"]
    assert np.array_equal(out, quantize(out, "bfloat16"))  # representable in bfloat16
    assert not np.array_equal(out, evaluate_in(g, {"x": x}, "float32")["out"])


@ax.spec(x="M K", w="K N")
def _centred_matmul(x, w):
    return (x - ax.mean(x)) @ w


def test_the_dtype_evaluator_reads_a_computed_matmul_operand_in_the_dtype_as_tensore_does():
    """A bfloat16 kernel keeps the centred rows it feeds TensorE in bfloat16 (`lower/matmul.py`: the
    stationary tiles take the weights' dtype), so the spec as written is evaluated that way too."""
    g = trace(_centred_matmul, M=128, K=128, N=64, dtype="bfloat16")
    rng = np.random.default_rng(0)
    x, w = quantize(rng.uniform(-1, 1, (128, 128)), "bfloat16"), quantize(rng.uniform(-1, 1, (128, 64)), "bfloat16")
    centred = x.astype(np.float32) - x.astype(np.float32).mean(axis=-1, keepdims=True)
    as_tensore = quantize(quantize(centred, "bfloat16") @ w, "bfloat16")
    np.testing.assert_allclose(evaluate_in(g, {"x": x, "w": w}, "bfloat16")["out"], as_tensore, rtol=1e-6)
    g32 = trace(_centred_matmul, M=128, K=128, N=64)
    assert not np.allclose(evaluate_in(g32, {"x": x, "w": w}, "float32")["out"], as_tensore, rtol=1e-6, atol=0)


def test_adversarial_check_measures_what_the_issue_reported():
    g = get("softmax").graph("small")
    check = AdversarialCheck(g, "float32")
    results = {r.label: r for r in check.check(_only(_variants(g), "unshift-exp").graph)}
    assert not np.isfinite(results["offset(x)"].variant_error)
    assert results["offset(x)"].spec_error < 1e-6
    assert check.reason(g) == ""


def test_adversarial_check_alone_rejects_the_one_pass_variance_near_1000():
    g = trace(add_layernorm_near_1000, M=64, N=256)
    check = AdversarialCheck(g, "float32")
    fused = _only(_variants(g), "fuse-reductions").graph
    reason = check.reason(fused)
    assert "float32" in reason and "the spec as written" in reason
    worst = max(r.variant_error for r in check.check(fused))
    spec = max(r.spec_error for r in check.check(g))
    assert worst > 100 * spec


# the gate -----------------------------------------------------------------------------------------
# float16: its ranges were derived 2^16 below its limit of 65,504, so [-1, 1]; unshift-exp was offered,
# chosen, and its kernel returned inf on logits of 1e4 that the spec as written computes
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_gate_rejects_unshift_exp_for_softmax_with_its_reason(dtype):
    g = get("softmax").graph("small", dtype=dtype)
    kept, rejected = screen(g, _variants(g, 2))
    assert "unshift-exp" not in {m.name for v in kept for m in v.moves}
    first = next(r for r in rejected if _moves(r.variant) == "unshift-exp")
    assert first.describe().startswith("unshift-exp: exp overflows for arguments > 88.7 in float32")
    assert any(_moves(v) == "fold-divisor-into-exp" for v in kept)


def test_gate_rejects_unshift_exp_for_attention():
    g = get("attention").graph("small")
    kept, rejected = screen(g, _variants(g, 1))
    assert not any("unshift-exp" in _moves(v) for v in kept)
    assert any(_moves(r.variant) == "unshift-exp" and "exp overflows" in r.reason for r in rejected)
    assert any(_moves(v) == "hoist-factor" for v in kept)


@ax.spec(x="M N")
def _temperature_softmax(x):
    z = x / 0.7
    e = ax.exp(z - ax.max(z))
    return e / ax.sum(e)


def test_gate_rejects_unshift_exp_where_the_spec_as_written_is_inaccurate_before_it_overflows():
    """x / 0.7 takes the spec as written past the float32 tolerance below |x| = 256, so the accuracy-
    derived range is [-16, 16], where exp(x / 0.7) does not overflow; on logits of +-100 it does (NaN
    in every row) while the spec as written stays finite. The overflow is looked for where the spec as
    written stays finite."""
    g = trace(_temperature_softmax, M=128, N=256)
    accurate, finite = input_ranges(g, "float32"), finite_ranges(g, "float32")
    assert accurate["x"][1] < 100 and finite["x"][1] > 1e30
    kept, rejected = screen(g, _variants(g))
    assert not any("unshift-exp" in _moves(v) for v in kept)
    assert any(_moves(r.variant) == "unshift-exp" and "exp overflows" in r.reason for r in rejected)


@pytest.mark.parametrize("name", ["layernorm", pytest.param("layernorm_matmul", marks=pytest.mark.slow)])
def test_gate_rejects_fuse_reductions_for_layernorm_with_a_reason(name):
    g = get(name).graph("small")
    kept, rejected = screen(g, _variants(g, 1))
    assert not any("fuse-reductions" in _moves(v) for v in kept)
    r = next(r for r in rejected if _moves(r.variant) == "fuse-reductions")
    assert "sqrt" in r.reason and "negative" in r.reason


def test_a_declared_small_range_lets_unshift_exp_back_in():
    g = trace(small_logits_softmax, M=256, N=512)
    kept, rejected = screen(g, _variants(g))
    assert any(_moves(v) == "unshift-exp" for v in kept), [r.describe() for r in rejected]


def test_safe_moves_are_still_offered():
    g = get("rmsnorm_matmul").graph("small")
    kept, rejected = screen(g, _variants(g, 2))
    assert any(_moves(v) == "move-factor-across + hoist-factor" for v in kept), [r.describe() for r in rejected]
    assert not rejected


@pytest.mark.parametrize("name", ["matmul", "rmsnorm_matmul", "swiglu"])
def test_classes_on_every_input_at_once_are_ones_the_spec_as_written_survives(name):
    """Each input's range is derived with the others typical; all of them at their ends together
    overflow the spec as written (a case that holds a kernel to nothing). The `ALL` cases draw from
    ranges scaled down together until the spec as written is finite there."""
    g = get(name).graph("small")
    spec = reduced(g)
    own = input_ranges(g, "float32")
    with np.errstate(all="ignore"):
        at_own = max(
            class_error(spec, x, evaluate(spec, x), "float32")
            for x in (class_inputs(spec, own, c, ALL, "float32") for c in RANGE_CLASSES)
        )
    assert not at_own < 0.5  # what the joint ranges exist for
    joint = [err for _, target, _, _, err in AdversarialCheck(g, "float32").cases if target == ALL]
    assert joint and max(joint) < 0.5


@ax.spec(x="M N")
def min_max_scale(x):
    return (x - ax.min(x)) / (ax.max(x) - ax.min(x) + 1e-6)


@ax.spec(x="M N")
def min_max_scale_eps_first(x):  # equal over the reals; what instruction selection emitted as one tensor_scalar
    return (x - ax.min(x)) / ((ax.max(x) + 1e-6) - ax.min(x))


def test_near_constant_rows_include_unit_magnitudes_where_a_small_constant_counts():
    """x's derived range is +-3.2e32: near-constant rows drawn uniformly over it all sat above 1e30, where
    1e-6 vanishes, so a kernel computing (max + 1e-6) - min passed the check and was reported; on rows
    near 3 with a 1e-3 spread it was 2.4e-5 off (the spec as written 3e-8), on rows near 3 +- 3e-4, 2.4e-4."""
    spec = trace(min_max_scale, M=64, N=128, dtype="float32")
    x = class_inputs(spec, input_ranges(spec, "float32"), "near-constant", "x", "float32")["x"]
    bases = np.abs(x[:, 0])
    assert (bases < 100).sum() >= 8 and (bases > 1e20).sum() >= 16  # unit-scale rows, and rows over the range
    variant = trace(min_max_scale_eps_first, M=64, N=128, dtype="float32")
    assert "near-constant(x)" in AdversarialCheck(spec, "float32").reason(variant)


@ax.spec(x="M K", g=ax.tensor("K", range=(-1000, 1000)), w=ax.tensor("K N", range=(-100, 100)))
def gained_matmul(x, g, w, eps=1e-6):
    return (x / ax.sqrt(ax.mean(x * x) + eps) * g) @ w


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_gain_moved_onto_float16_weights_past_65504_is_not_offered(dtype):
    # move-factor-across makes g[:, None] * w, which TensorE reads in the kernel's dtype: up to 1e5 here,
    # inf in float16. It was offered and chosen at K=1024 M=4096 N=2048: every output inf, on inputs in
    # the declared ranges where the spec as written returns numbers up to 27,557
    g = trace(gained_matmul, M=128, K=128, N=128, dtype=dtype)
    kept, rejected = screen(g, discover_variants(g, max_depth=1, exclude=frozenset({"split-tiles"})))
    moved = [r.reason for r in rejected if [m.name for m in r.variant.moves] == ["move-factor-across"]]
    if dtype == "float16":
        assert moved and "reads an operand" in moved[0] and "65504" in moved[0]
    else:
        assert not moved and any([m.name for m in v.moves] == ["move-factor-across"] for v in kept)
