"""What a tuned kernel is compared with: the op-by-op default kernel and the hand-written expert one."""

from __future__ import annotations

from typing import Any

from axon.ir import Graph
from axon.lower import expert
from axon.measure.backend import Backend
from axon.measure.stores import Records
from axon.search.problem import LoweredProblem
from axon.search.tuner import measured_fields, new_record
from axon.target import HardwareSpec


def baseline_latency(
    problem: LoweredProblem, backend: Backend, db: Records, point: dict[str, Any], label: str
) -> float | None:
    """Latency of a baseline kernel of `problem` at `point`, measured once per kernel source and
    recorded as kind `baseline` with its `label`; None when the point cannot be lowered."""
    if problem.validate(point) is not None:
        return None
    cand = problem.build(point)
    known = db.lookup(cand.kernel_hash, backend.name, problem.hw.file_hash)
    if known is None:
        m = backend.measure(cand.source, cand.kernel, cand.inputs, problem.hw)
        known = db.add(
            new_record(problem, backend.name, kind="baseline", label=label, **measured_fields(cand, point, m))
        )
    return known.latency_ns


def expert_latency(workload: str, graph: Graph, hw: HardwareSpec, backend: Backend) -> float | None:
    """The hand-written expert kernel of this workload, if there is one, on the same backend.

    Expert kernels are written in float32 for the workload's own input order (tests/lower checks
    their numbers); a workload without one, or a dtype they do not take, has no expert figure.
    """
    if workload not in expert.KERNELS or graph.inputs[0].type.dtype != "float32":
        return None
    inputs = tuple((n.attr("name"), graph.concrete_shape(n.id), n.type.dtype) for n in graph.inputs)
    return backend.measure(expert.source(workload), workload, inputs, hw).latency_ns
