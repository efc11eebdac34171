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


def test_a_baseline_claimed_by_a_live_worker_that_never_records_it_is_measured_after_the_wait(tmp_path, monkeypatch):
    import subprocess
    import sys

    from axon.measure.records import RecordDB
    from axon.search import baselines

    graph = get("rmsnorm").graph("small")
    problem = LoweredProblem("rmsnorm", graph, HW, verified_variants(graph), "float32")
    backend = SimBackend(tmp_path / "sim")
    point = problem.unfused_point(0)
    cand = problem.build(point)
    db_path = tmp_path / "records.db"
    db = RecordDB(db_path)
    # another live process holds the claim and never records the kernel (its measurement failed)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from axon.measure.records import RecordDB; "
         f"print(RecordDB({str(db_path)!r}).claim(*sys.argv[1:]), flush=True); time.sleep(60)",
         cand.kernel_hash, backend.name, HW.file_hash],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        assert not db.claim(cand.kernel_hash, backend.name, HW.file_hash)
        monkeypatch.setattr(baselines, "_CLAIM_WAIT_S", 1.0)
        latency = baselines.baseline_latency(problem, backend, db, point, "unfused")
        assert holder.poll() is None  # measured while the claim was still held, not once its holder died
    finally:
        holder.kill()
        holder.wait()
    assert latency is not None and latency > 0
    assert db.lookup(cand.kernel_hash, backend.name, HW.file_hash, backend.version) is not None
