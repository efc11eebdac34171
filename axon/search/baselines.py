"""What a tuned kernel is compared with: the op-by-op default kernel and the hand-written expert one."""

from __future__ import annotations

import time
from typing import Any

from axon.forked import Ahead
from axon.ir import Graph
from axon.lower import expert
from axon.measure.backend import Backend
from axon.measure.stores import Records
from axon.search.problem import LoweredProblem
from axon.search.tuner import measured_fields, new_record
from axon.target import HardwareSpec

Kernel = tuple[str, str, tuple[tuple[str, tuple[int, ...], str], ...]]  # source, kernel name, inputs

_CLAIM_WAIT_S = 600.0  # the longest a worker waits for another's baseline record (a whole simulation: minutes)


def baseline_latency(
    problem: LoweredProblem, backend: Backend, db: Records, point: dict[str, Any], label: str
) -> float | None:
    """Latency of a baseline kernel of `problem` at `point`, measured once per kernel source and
    recorded as kind `baseline` with its `label`; None when the point cannot be lowered."""
    if problem.validate(point) is not None:
        return None
    cand = problem.build(point)
    known = db.lookup(cand.kernel_hash, backend.name, problem.hw.file_hash, backend.version)
    # workers sharing the records finish together and want the same baseline: one measures it (its
    # claim, as a trial's), the others wait for its record; not forever: a live worker whose measurement
    # failed keeps its claim (a sweep worker goes on to its next task), so past the wait it is measured here
    give_up = time.monotonic() + _CLAIM_WAIT_S
    while known is None and not db.claim(cand.kernel_hash, backend.name, problem.hw.file_hash):
        if time.monotonic() > give_up:
            break
        time.sleep(0.2)
        known = db.lookup(cand.kernel_hash, backend.name, problem.hw.file_hash, backend.version)
    if known is None:
        m = backend.measure(cand.source, cand.kernel, cand.inputs, problem.hw)
        known = db.add(
            new_record(problem, backend.name, kind="baseline", label=label, **measured_fields(cand, point, m))
        )
    return known.latency_ns


EXPERT_DTYPES = ("float32", "bfloat16", "float16")


def expert_kernel(workload: str, graph: Graph) -> Kernel | None:
    """The hand-written expert kernel of this workload, if there is one: (source, name, inputs).

    Expert kernels take the workload's own input order in float32, bfloat16 or float16 (tiles of the
    inputs' dtype; tests/lower checks their numbers in each); a workload without one, or another
    dtype, has no expert figure.
    """
    if workload not in expert.KERNELS or graph.inputs[0].type.dtype not in EXPERT_DTYPES:
        return None
    inputs = tuple((n.attr("name"), graph.concrete_shape(n.id), n.type.dtype) for n in graph.inputs)
    return expert.source(workload), workload, inputs


def expert_latency(workload: str, graph: Graph, hw: HardwareSpec, backend: Backend) -> float | None:
    """The expert kernel's latency (`expert_kernel`) on the same backend, or None."""
    kernel = expert_kernel(workload, graph)
    return None if kernel is None else backend.measure(*kernel, hw).latency_ns


def baselines_ahead(problem: LoweredProblem, backend: Any, workload: str, n_workers: int) -> Ahead[list] | None:
    """The unfused and expert baselines measured by a forked child during the search (two workers and
    a backend that can `remember`), so that `baseline_latency`/`expert_latency` find them done when
    the search ends (`keep_baselines`); None otherwise."""
    if n_workers < 2 or not hasattr(backend, "remember"):
        return None
    point = problem.unfused_point(0)
    kernels: list[Kernel] = []
    if problem.validate(point) is None:
        cand = problem.build(point)
        kernels.append((cand.source, cand.kernel, cand.inputs))
    own = expert_kernel(workload, problem.graph)
    kernels += [own] if own is not None else []

    def measure() -> list:
        backend.workers = 1  # this child's own copy: no grandchild
        return [(k, backend.measure(*k, problem.hw)) for k in kernels]

    return Ahead(measure, n_workers)


def keep_baselines(ahead: Ahead[list] | None, backend: Any, hw: HardwareSpec) -> None:
    """Give the backend what `baselines_ahead` measured (nothing if the child failed: measured then)."""
    if ahead is None:
        return
    for (source, kernel, inputs), m in ahead.from_child() or []:
        backend.remember(source, kernel, inputs, hw, m)
