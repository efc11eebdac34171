"""Property: every discovered variant computes what its source computes, at any sizes and inputs."""

from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.ir import Graph, evaluate
from axon.synth import discover_variants
from axon.workloads import all_workloads


@cache
def _cases():
    # every workload with at least one non-trivial variant that avoids tile-size constraints
    out = []
    for w in all_workloads():
        vs = discover_variants(w.symbolic(), max_depth=2, max_variants=12, exclude={"split-tiles"})
        if len(vs) > 1:
            out.append((w.symbolic(), tuple(vs)))
    return tuple(out)


@settings(max_examples=25, deadline=None)
@given(
    which=st.integers(0, 10_000), sizes=st.lists(st.integers(1, 5), min_size=8, max_size=8), seed=st.integers(0, 2**16)
)
def test_variants_agree_with_their_source(which, sizes, seed):
    graph, variants = _cases()[which % len(_cases())]
    syms = sorted(graph.symbols)
    dims = tuple(sorted((s, n * (2 if s == "D" else 1)) for s, n in zip(syms, sizes)))
    bound = Graph(graph.name, graph.nodes, graph.outputs, dims, graph.output_names)
    rng = np.random.default_rng(seed)
    inputs = {n.attr("name"): rng.uniform(-2, 2, n.type.concrete(bound.bindings)) for n in bound.inputs}
    expected = evaluate(bound, inputs)
    for v in variants:
        got = evaluate(Graph(v.graph.name, v.graph.nodes, v.graph.outputs, dims, v.graph.output_names), inputs)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-8, atol=1e-10)
