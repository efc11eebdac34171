"""The baselines measured by a forked child during the search are the ones the tuner would measure."""

from __future__ import annotations

from axon.measure.backend import SimBackend
from axon.search.api import verified_variants
from axon.search.baselines import baselines_ahead, expert_latency, keep_baselines
from axon.search.problem import LoweredProblem
from axon.target import load_hw
from axon.workloads import get

HW = load_hw("trn1")


def test_baselines_measured_ahead_are_given_by_the_backend_as_measured_here(tmp_path):
    graph = get("rmsnorm").graph("small")
    problem = LoweredProblem("rmsnorm", graph, HW, verified_variants(graph), "float32", workers=2)
    ahead_backend = SimBackend(tmp_path / "a", workers=2)
    early = baselines_ahead(problem, ahead_backend, "rmsnorm", 2)
    assert early is not None and early.child is not None
    keep_baselines(early, ahead_backend, HW)
    cand = problem.build(problem.unfused_point(0))
    here = SimBackend(tmp_path / "b")
    for source, kernel, inputs in [(cand.source, cand.kernel, cand.inputs)]:
        got = ahead_backend.measure(source, kernel, inputs, HW)
        want = here.measure(source, kernel, inputs, HW)
        assert (got.latency_ns, got.engine_busy_ns, got.details) == (want.latency_ns, want.engine_busy_ns, want.details)
    assert expert_latency("rmsnorm", graph, HW, ahead_backend) == expert_latency("rmsnorm", graph, HW, here)
    assert ahead_backend.same_code == 2  # both given from what the child measured, none measured again
    assert baselines_ahead(problem, ahead_backend, "rmsnorm", 1) is None  # one worker: measured at the end, as ever
