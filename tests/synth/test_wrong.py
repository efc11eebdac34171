"""Plausible but wrong rewrites of the workload graphs are refuted with NumPy-confirmed counterexamples."""

from collections import Counter

import numpy as np

from axon.ir import Graph, evaluate
from axon.synth.wrong import wrong_proposals
from axon.verify import Counterexample, prove
from axon.workloads import all_workloads


def test_at_least_fifteen_wrong_rewrites_all_refuted_and_confirmed():
    kinds, refuted, total = Counter(), 0, 0
    for w in all_workloads():
        g = w.symbolic()
        for move, candidate in wrong_proposals(g):
            result = prove(g, candidate)
            if result.status == "proved":
                continue  # equal in its context (e.g. any row shift under a softmax): not a wrong rewrite
            total += 1
            assert isinstance(result, Counterexample), f"{w.name}: {move.description}: {result.status}"
            dims = tuple(sorted(result.sizes.items()))
            a = evaluate(Graph(g.name, g.nodes, g.outputs, dims, g.output_names), result.inputs)
            b = evaluate(
                Graph(candidate.name, candidate.nodes, candidate.outputs, dims, candidate.output_names), result.inputs
            )
            assert any(
                not np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True) for x, y in zip(a.values(), b.values())
            )
            refuted += 1
            kinds[move.name] += 1
    assert total >= 15 and refuted == total
    assert len(kinds) >= 8
