"""Variant discovery on the workload graphs: selected by structure, never by name.

Each property says: wherever the graph has a certain dataflow shape, discovery finds and proves the
variant that dependence allows. Workloads are picked by inspecting their graphs.
"""

from functools import cache

import numpy as np
import pytest

from axon.ir import Graph, evaluate
from axon.synth import discover, discover_variants
from axon.synth import inspect as q
from axon.verify import Proof
from axon.workloads import all_workloads, get

ELEMENTWISE = {"add", "sub", "mul", "div", "exp", "sqrt", "rsqrt", "square", "neg", "const", "dimsize", "input"}


@cache
def found(name: str):
    return discover(get(name).symbolic())


def _where(predicate):
    return [w.name for w in all_workloads() if predicate(w.symbolic())]


def _reductions_reach_matmuls_elementwise(g: Graph) -> bool:
    """Some matmul operand depends on a reduction, only through elementwise ops (no layout change)."""
    mms = q.matmuls(g)
    if not any(q.reductions_upstream(g, i) for m in mms for i in g.nodes[m].inputs):
        return False
    for m in mms:
        for i in g.nodes[m].inputs:
            for j in q.upstream(g, i):
                n = g.nodes[j]
                if n.op not in ELEMENTWISE and n.op != "reduce" and q.reductions_upstream(g, j):
                    return False
                if (
                    n.op == "reduce"
                    and any(g.nodes[k].op == "matmul" for k in q.upstream(g, n.inputs[0]))
                    and m in q.upstream(g, j)
                ):
                    return False
    return True


def _divides_exp_by_its_sum(g: Graph) -> bool:
    return any(
        n.op == "div" and g.nodes[n.inputs[0]].op == "exp" and "sum" in q.reductions_upstream(g, n.inputs[1])
        for n in g.nodes
    )


def _subtracts_a_max_before_exp(g: Graph) -> bool:
    return any(n.op == "exp" and "max" in q.reductions_upstream(g, n.inputs[0]) for n in g.nodes)


def _scales_a_contraction_by_a_size(g: Graph) -> bool:
    return any(
        n.op == "div" and g.nodes[n.inputs[0]].op == "matmul" and "dimsize" in q.ops_upstream(g, n.inputs[1])
        for n in g.nodes
    )


def test_the_selections_are_not_empty():
    assert len(_where(_reductions_reach_matmuls_elementwise)) >= 3
    assert len(_where(_divides_exp_by_its_sum)) >= 3
    assert _where(_subtracts_a_max_before_exp) and _where(_scales_a_contraction_by_a_size)


@pytest.mark.parametrize("name", _where(_reductions_reach_matmuls_elementwise))
def test_row_statistics_are_moved_past_every_contraction(name):
    # rmsnorm/layernorm row scale and mean subtraction, softmax's row sum: applied after the matmul
    hits = [v for v in found(name).variants if q.contraction_operands_free_of_reductions(v.graph)]
    assert hits, f"{name}: no variant with reduction-free matmul operands"
    assert all(isinstance(p, Proof) for p in hits[0].proofs)


@pytest.mark.parametrize("name", _where(_divides_exp_by_its_sum))
def test_division_by_the_row_sum_is_deferred(name):
    vs = found(name).variants
    assert not q.exp_normalization_deferred(vs[0].graph)
    assert any(q.exp_normalization_deferred(v.graph) for v in vs)


@pytest.mark.parametrize("name", _where(_subtracts_a_max_before_exp))
def test_safe_softmax_equals_plain_softmax(name):
    assert any(not q.has_reduction(v.graph, "max") for v in found(name).variants)


@pytest.mark.parametrize("name", _where(_scales_a_contraction_by_a_size))
def test_size_scale_moves_before_the_contraction_or_into_the_exponent(name):
    assert any(q.size_scale_before_first_contraction(v.graph) for v in found(name).variants)


def test_variant_list_starts_with_the_original_and_hashes_are_unique():
    d = found(_where(_reductions_reach_matmuls_elementwise)[0])
    assert d.variants[0].moves == () and d.variants[0].proofs == ()
    hashes = [v.hash for v in d.variants]
    assert len(set(hashes)) == len(hashes)
    assert all(v.hash == v.graph.canonical_hash() for v in d.variants)
    assert all(len(v.moves) == len(v.proofs) <= 4 for v in d.variants)
    assert all(m.name and m.description and m.nodes for v in d.variants for m in v.moves)


@pytest.mark.parametrize(
    "name", _where(_divides_exp_by_its_sum)[:2] + _where(_reductions_reach_matmuls_elementwise)[:2]
)
def test_every_variant_computes_what_the_original_computes(name):
    small = get(name).graph("small")
    shrink = {k: min(v, 128 if k in ("K", "N", "S") else 4) for k, v in small.bindings.items()}
    ref_graph = small.bind(**shrink)
    rng = np.random.default_rng(1)
    inputs = {n.attr("name"): rng.uniform(-1, 1, n.type.concrete(ref_graph.bindings)) for n in ref_graph.inputs}
    expected = evaluate(ref_graph, inputs)["out"]
    for v in found(name).variants[:60]:
        g = Graph(v.graph.name, v.graph.nodes, v.graph.outputs, ref_graph.dims, v.graph.output_names)
        np.testing.assert_allclose(evaluate(g, inputs)["out"], expected, rtol=1e-9, atol=1e-12)


def test_bound_graph_keeps_its_bindings_and_is_proved_for_all_sizes():
    name = _where(_reductions_reach_matmuls_elementwise)[0]
    g = get(name).graph("small")
    vs = discover_variants(g, max_depth=2)
    assert len(vs) > 1
    assert all(v.graph.bindings == g.bindings for v in vs)
    assert all(isinstance(p, Proof) for v in vs for p in v.proofs)


def test_excluded_moves_are_never_used():
    name = _where(_reductions_reach_matmuls_elementwise)[0]
    vs = discover_variants(get(name).symbolic(), max_depth=2, exclude={"split-tiles"})
    assert len(vs) > 1 and all(m.name != "split-tiles" for v in vs for m in v.moves)
