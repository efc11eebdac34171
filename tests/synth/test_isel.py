"""Instruction synthesis: alternatives are proved equal to their group, and the known fusions are found."""

from __future__ import annotations

import numpy as np
import pytest

from axon.ir.ops import NumpyMath
from axon.lower.groups import fused_groups
from axon.lower.passes import normalize, split
from axon.synth import discover_variants
from axon.synth.groups import _node_value
from axon.synth.isel import Step, _Checker, _tree_pieces, step_value, synthesize_instructions
from axon.workloads import get


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
        g = split(normalize(v.graph), set())[0][-1].graph
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
