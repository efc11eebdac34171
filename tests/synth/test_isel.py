"""Instruction synthesis: alternatives are proved equal to their group, and the known fusions are found."""

from __future__ import annotations

import numpy as np
import pytest
import z3

import axon.spec as ax
from axon.ir import trace
from axon.ir.ops import NumpyMath
from axon.lower.groups import fused_groups
from axon.lower.moments import match_moments
from axon.lower.passes import normalize, split
from axon.synth import discover_variants
from axon.synth.groups import _node_value
from axon.synth.isel import Step, _Checker, _tree_pieces, balance_cost, step_value, synthesize_instructions
from axon.target import load_hw
from axon.verify import Z3Math
from axon.workloads import get

PARTITIONS = load_hw("trn1").memory.partitions  # the lowering's graph (`normalize`) on trn1


def _output_group(name):
    g = get(name).graph("small")
    return [grp for grp in fused_groups(g) if grp.sink == g.outputs[0]][0]


def _run(group, alt, env):
    m = NumpyMath()
    local = {("in", k): v for k, v in env.items()}
    out = None
    for i, s in enumerate(alt.steps):
        out = step_value(m, s, local)
        local[("step", i)] = out
    return out


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm", "softmax"])
def test_normalization_groups_have_two_verified_alternatives(name):
    group = _output_group(name)
    alts = synthesize_instructions(group)
    assert len(alts) >= 2
    rng = np.random.default_rng(1)
    env = {l.node: (l.value if l.kind == "scalar" else rng.uniform(0.5, 2.0, 7)) for l in group.leaves}
    want = _node_value(NumpyMath(), group.graph, group.sink, env)
    for alt in alts:  # every alternative computes the group on fresh values (not the search's samples)
        assert np.allclose(_run(group, alt, env), want, rtol=1e-9)
        assert 1 <= len(alt.steps) <= 3


def test_sum_of_squares_is_folded_into_one_activation_reduce():
    g = get("rmsnorm").graph("small")
    grp = [x for x in fused_groups(g) if x.reduce == "sum"][0]
    best = synthesize_instructions(grp)[0]
    assert [s.opcode for s in best.steps] == ["activation_reduce"] and best.steps[0].arg("op") == "square"


def test_per_row_scale_applied_by_activation_scale_while_evacuating_psum():
    found = False
    for v in discover_variants(get("rmsnorm_matmul").graph("small")):
        g = split(normalize(v.graph, PARTITIONS), set())[0][-1].graph
        for grp in fused_groups(g):
            if any(g.nodes[l.node].op == "matmul" for l in grp.leaves):
                for alt in synthesize_instructions(grp):
                    last = alt.steps[-1]
                    if last.opcode == "activation" and last.arg("op") == "copy" and last.arg("scale") is not None:
                        found = True
    assert found


def test_a_wrong_sequence_is_not_proved():
    group = _output_group("rmsnorm")  # x / s * g
    checker = _Checker(group)
    piece = _tree_pieces(group, frozenset())[0]
    x, s, gain = (l.node for l in group.leaves)
    wrong = Step(
        "scalar_tensor_tensor",
        "vector",
        (
            ("data", ("in", x)),
            ("op0", "multiply"),
            ("operand0", ("in", s)),
            ("op1", "multiply"),
            ("operand1", ("in", gain)),
        ),
    )
    right = Step(
        "scalar_tensor_tensor",
        "vector",
        (
            ("data", ("in", x)),
            ("op0", "divide"),
            ("operand0", ("in", s)),
            ("op1", "multiply"),
            ("operand1", ("in", gain)),
        ),
    )
    assert checker.prove(piece, [right]) and not checker.prove(piece, [wrong])


def test_a_constant_times_a_square_is_one_scaled_square_activation_proved_with_the_root():
    g = normalize(get("gelu").graph("small"), PARTITIONS)  # 0.5 x (1 + tanh(c (x + 0.044715 x x x)))
    grp = [x for x in fused_groups(g) if len(x.nodes) > 1][0]
    checker = _Checker(grp)
    sq = next(n for n in grp.nodes if g.nodes[n].op == "mul" and g.nodes[g.nodes[n].inputs[0]].op == "mul")
    piece = next(p for p in _tree_pieces(grp, frozenset({sq})) if p.root == sq)  # 0.044715 * x * x
    x = next(l.node for l in grp.leaves if l.kind == "full")
    step = Step("activation", "scalar", (("op", "square"), ("data", ("in", x)), ("scale", ("sqrt", 0.044715))))
    assert checker.prove(piece, [step])
    off = Step("activation", "scalar", (("op", "square"), ("data", ("in", x)), ("scale", ("sqrt", 0.04472))))
    assert not checker.prove(piece, [off])
    best = synthesize_instructions(grp)[0]
    assert any(s.arg("scale") == ("sqrt", 0.044715) for s in best.steps)
    assert balance_cost(best.steps) < 6  # three stt on VectorE (6 cycles an element) before


def test_balanced_alternatives_follow_the_shortest_ones():
    g = normalize(get("gelu").graph("small"), PARTITIONS)
    grp = [x for x in fused_groups(g) if len(x.nodes) > 1][0]
    shortest = synthesize_instructions(grp, max_alternatives=2, extra_balanced=0)
    more = synthesize_instructions(grp, max_alternatives=2, extra_balanced=2)
    assert more[:2] == shortest and len(more) <= 4
    assert all(balance_cost(a.steps) < balance_cost(shortest[0].steps) for a in more[2:])


def _moments_output_group():
    """layernorm's output group when bn_stats gives the mean: (x - mean) / std * g + b."""
    g = normalize(get("layernorm").graph("small"), PARTITIONS)
    (m,) = match_moments(g)
    dropped = frozenset((m.total, m.mean, m.square, m.sumsq))
    return [grp for grp in fused_groups(g, dropped=dropped) if grp.sink == g.outputs[0]][0]


def test_a_two_op_tensor_scalar_is_also_offered_on_scalare_after_the_others():
    group = _moments_output_group()
    alts = synthesize_instructions(group)
    twin = alts[-1]  # appended: the alternatives before it keep their index (and the points their kernel)
    assert [(s.opcode, s.engine) for s in twin.steps] == [
        ("tensor_scalar", "scalar"),
        ("tensor_tensor", "vector"),
        ("tensor_tensor", "vector"),
    ]
    assert (twin.steps[0].arg("op0"), twin.steps[0].arg("op1")) == ("subtract", "divide")
    # VectorE runs two tensor_tensors, not a scalar_tensor_tensor and a tensor_tensor as in the others
    assert all("scalar_tensor_tensor" in [s.opcode for s in a.steps] for a in alts[:-1])
    assert balance_cost(twin.steps) <= min(balance_cost(a.steps) for a in alts[:-1])
    rng = np.random.default_rng(2)
    env = {l.node: (l.value if l.kind == "scalar" else rng.uniform(0.5, 2.0, 7)) for l in group.leaves}
    want = _node_value(NumpyMath(), group.graph, group.sink, env)
    assert np.allclose(_run(group, twin, env), want, rtol=1e-9)


def test_no_twin_where_scalare_already_runs_that_instruction_mix():
    group = _output_group("softmax")
    alts = synthesize_instructions(group)
    on_scalar = [a for a in alts if any(s.engine == "scalar" and s.arg("op1") for s in a.steps)]
    assert not on_scalar  # softmax's alternatives already put the full-tile step on ScalarE


def test_a_logistic_form_is_one_silu_activation():
    group = _output_group("silu")  # x / (1 + exp(-x))
    best = synthesize_instructions(group)[0]
    assert [(s.opcode, s.arg("op")) for s in best.steps] == [("activation", "silu")]
    rmsnorm = [x for x in fused_groups(get("rmsnorm").graph("small")) if len(x.nodes) > 1]
    for grp in rmsnorm:  # no exp: no logistic activation is tried
        assert all(s.arg("op") not in ("silu", "sigmoid") for a in synthesize_instructions(grp) for s in a.steps)


def test_a_shifted_exp_is_one_activation_with_a_negated_row_vector_as_bias():
    g = get("softmax").graph("small")
    grp = [x for x in fused_groups(g) if x.sink == 3][0]  # exp(x - max(x))
    alts = synthesize_instructions(grp)
    descs = [a.describe() for a in alts]
    want = "tensor_scalar[vector](data=%1, op0=multiply, operand0=-1); activation[scalar](op=exp, data=%0, bias=s0)"
    assert want in descs  # one full-tile ScalarE instruction after a [P, 1] negation
    env = {0: np.linspace(-2, 2, 7), 1: np.full(7, 0.7)}
    alt = alts[descs.index(want)]
    assert np.allclose(_run(grp, alt, env), np.exp(env[0] - env[1]))


def test_exp_of_equal_sums_written_differently_is_proved_equal():
    m, x, y = Z3Math(), z3.Real("x"), z3.Real("y")
    s = z3.Solver()
    s.add(m.facts() + [m.exp(x - y) != m.exp(x * 1 + (-1) * y)])
    assert s.check() == z3.unsat


def test_a_root_of_a_difference_that_can_go_negative_synthesizes_without_warnings(recwarn):
    """The one-pass variance (mean of squares minus square of mean) under rsqrt: the search's random
    values make some of its candidates NaN, which the checks compare; nothing reaches the user's terminal."""

    @ax.spec(x="M K")
    def zscore(x):
        m = ax.mean(x)
        return (x - m) * ax.rsqrt(ax.mean(x * x) - m * m + 1e-5)

    g = trace(zscore, M=256, K=256)
    for grp in fused_groups(g):
        synthesize_instructions(grp)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_ctrl_c_during_an_instruction_proof_interrupts_it(monkeypatch):
    """As a variant's proof: Z3 took the SIGINT, the sequence went unproved (not offered) and the
    tune ran on with a smaller space."""
    from tests.conftest import ctrl_c_during_every_z3_check

    group = _output_group("softmax")
    with ctrl_c_during_every_z3_check(monkeypatch), pytest.raises(KeyboardInterrupt):
        synthesize_instructions(group)
