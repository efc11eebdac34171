"""Generic questions about a variant's structure (what feeds what), for reports and tests.

These read only the dataflow of a graph: which reductions, exps or sizes lie upstream of a node.
They name no workload and no pattern.
"""

from __future__ import annotations

from axon.ir import Graph


def upstream(graph: Graph, node: int) -> set[int]:
    """Ids of every node `node` depends on (itself included)."""
    seen, stack = {node}, [node]
    while stack:
        for i in graph.nodes[stack.pop()].inputs:
            if i not in seen:
                seen.add(i)
                stack.append(i)
    return seen


def reductions_upstream(graph: Graph, node: int) -> set[str]:
    """Kinds of the `reduce` nodes upstream of `node` (matmul contractions not counted)."""
    return {graph.nodes[i].attr("kind") for i in upstream(graph, node) if graph.nodes[i].op == "reduce"}


def ops_upstream(graph: Graph, node: int) -> set[str]:
    return {graph.nodes[i].op for i in upstream(graph, node)}


def matmuls(graph: Graph) -> list[int]:
    return [n.id for n in graph.nodes if n.op == "matmul"]


def contraction_operands_free_of_reductions(graph: Graph) -> bool:
    """Every matmul operand is computed without any reduction: row statistics are applied after."""
    mms = matmuls(graph)
    return bool(mms) and all(not reductions_upstream(graph, i) for m in mms for i in graph.nodes[m].inputs)


def divides_by_a_sum(graph: Graph) -> bool:
    """Some elementwise division has a sum reduction upstream of its divisor."""
    return any(n.op == "div" and "sum" in reductions_upstream(graph, n.inputs[1]) for n in graph.nodes)


def output_matmul_free_of_sums(graph: Graph) -> bool:
    """A matmul fed by exp has no sum reduction upstream of its operands (normalization after it)."""
    for m in matmuls(graph):
        ins = graph.nodes[m].inputs
        if any("exp" in ops_upstream(graph, i) for i in ins) and not any(
            "sum" in reductions_upstream(graph, i) for i in ins
        ):
            return True
    return False


def size_scale_before_first_contraction(graph: Graph) -> bool:
    """A size-derived scale is applied to an operand of a matmul not fed by exp, or inside an exp's argument."""
    for m in matmuls(graph):
        ins = graph.nodes[m].inputs
        if not any("exp" in ops_upstream(graph, i) for i in ins) and any(
            "dimsize" in ops_upstream(graph, i) for i in ins
        ):
            return True
    for n in graph.nodes:
        if n.op == "exp":
            arg = graph.nodes[n.inputs[0]]
            if arg.op in ("div", "mul") and any(
                graph.nodes[i].op != "matmul" and "dimsize" in ops_upstream(graph, i) and graph.nodes[i].type.rank == 0
                for i in arg.inputs
            ):
                return True
    return False


def has_reduction(graph: Graph, kind: str) -> bool:
    return any(n.op == "reduce" and n.attr("kind") == kind for n in graph.nodes)


def _exp_normalizations(graph: Graph) -> list[int]:
    """Divisions of an exp-derived value by a value computed from a sum of exps."""
    out = []
    for n in graph.nodes:
        if n.op != "div" or "exp" not in ops_upstream(graph, n.inputs[0]):
            continue
        if any(
            graph.nodes[j].op == "reduce"
            and graph.nodes[j].attr("kind") == "sum"
            and "exp" in ops_upstream(graph, graph.nodes[j].inputs[0])
            for j in upstream(graph, n.inputs[1])
        ):
            out.append(n.id)
    return out


def exp_normalization_deferred(graph: Graph) -> bool:
    """No division by a sum of exps precedes a contraction (or, with no contraction after the exp, none at all)."""
    divs = _exp_normalizations(graph)
    exp_fed = [m for m in matmuls(graph) if any("exp" in ops_upstream(graph, i) for i in graph.nodes[m].inputs)]
    if not exp_fed:
        return not divs
    return not any(d in upstream(graph, m) for d in divs for m in exp_fed)
