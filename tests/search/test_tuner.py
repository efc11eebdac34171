"""The tuner end to end on the sim backend: report, resume after kill -9, two workers, bad stores."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError
from axon.measure.records import RecordDB
from tests.conftest import REPO, axon_in_process


def _measured(db: RecordDB) -> list[str]:
    """Kernel hashes of records that were really measured (not copies of an earlier measurement)."""
    return [r.kernel_hash for r in db.records() if "copied_from" not in r.measurement and "#" not in r.workload]


def test_tune_reports_a_checked_kernel_and_tracks_it(tmp_path):
    from axon.search.api import TuneRequest, tune
    from axon.track import Tracker

    report = tune(TuneRequest.make("rmsnorm_matmul", preset="small", trials=6, workdir=tmp_path, seed=1))
    assert report.best_latency_ns and report.best_latency_ns > 0
    assert report.numerics is not None and report.numerics.ok
    assert report.unfused_ns and report.roofline_ns < report.best_latency_ns
    source = open(report.kernel_path).read()
    assert "@nki.jit" in source and "def " in source
    # the kernel delivered runs on the shapes it was tuned for and refuses others (it computed the
    # first rows of a larger input and returned them as the answer)
    kernel, rng = axon.nki.load_kernel(f"{report.kernel_path}:rmsnorm_matmul"), np.random.default_rng(0)
    shapes = {"x": (report.shapes["M"], report.shapes["K"]), "g": (report.shapes["K"],)}
    shapes["w"] = (report.shapes["K"], report.shapes["N"])
    axon.nki.run(kernel, *(rng.standard_normal(s, dtype=np.float32) for s in shapes.values()))
    shapes["x"] = (2 * report.shapes["M"], report.shapes["K"])
    with pytest.raises(NKIError, match=r"generated for x \[.*; got x \[" + str(2 * report.shapes["M"])):
        axon.nki.run(kernel, *(rng.standard_normal(s, dtype=np.float32) for s in shapes.values()))
    run = Tracker.for_workdir(tmp_path).client.get_run(report.run_id)
    assert run.data.params["workload"] == "rmsnorm_matmul"
    assert run.data.metrics["best_latency_us"] == pytest.approx(report.best_latency_ns / 1e3)
    history = Tracker.for_workdir(tmp_path).client.get_metric_history(report.run_id, "best_latency_us")
    assert history and history[-1].step == 6  # the summary step after the 6 trials


def test_a_resumed_runs_summary_comes_after_its_trials_in_mlflow(tmp_path):
    # the summary was logged at step len(trials of this run): a resumed study numbers its trials on
    # from its earlier ones, so the last trial's best-so-far (a later step) hid the run's summary
    from axon.search.api import TuneRequest, tune
    from axon.track import Tracker

    tune(TuneRequest.make("rmsnorm", preset="small", trials=1, workdir=tmp_path, check=False))
    report = tune(TuneRequest.make("rmsnorm", preset="small", trials=2, workdir=tmp_path, check=False))
    assert report.resumed == 1 and report.measured == 1
    history = Tracker.for_workdir(tmp_path).client.get_metric_history(report.run_id, "best_latency_us")
    last = max(history, key=lambda m: m.step)
    assert last.step == 2 and last.value == pytest.approx(report.best_latency_ns / 1e3)


def _tune_cmd(workdir, trials, *extra):
    return [
        sys.executable,
        "-m",
        "axon.cli",
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        str(trials),
        "--workdir",
        str(workdir),
        "--quiet",
        "--no-track",
        *extra,
    ]


@pytest.mark.slow
def test_resumed_run_loses_no_measurement_and_repeats_none(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        _tune_cmd(tmp_path, 14, "--sampler", "random"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    db_path = tmp_path / "records.db"
    while time.time() < deadline:
        if db_path.exists() and len(RecordDB(db_path)) >= 4:
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [r.id for r in RecordDB(db_path).records()]
    assert len(before) >= 4
    result = subprocess.run(
        _tune_cmd(tmp_path, 14, "--sampler", "random", "--json"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    db = RecordDB(db_path)
    after = [r.id for r in db.records()]
    assert after[: len(before)] == before  # nothing lost
    counts = collections.Counter(_measured(db))
    assert max(counts.values()) == 1  # nothing measured twice


@pytest.mark.slow
def test_two_workers_share_one_study_without_duplicate_measurements(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = _tune_cmd(tmp_path, 12, "--study", "shared", "--sampler", "random", "--json")
    workers = [
        subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[1][-500:] for o in outs]
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="shared", storage=JournalStorage(JournalFileBackend(str(tmp_path / "optuna.log")))
    )
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) >= 12
    counts = collections.Counter(_measured(RecordDB(tmp_path / "records.db")))
    assert counts and max(counts.values()) == 1


def test_corrupt_record_database_is_one_clear_line(tmp_path):
    (tmp_path / "records.db").write_bytes(b"garbage" * 500)
    result = axon_in_process(
        "tune", "softmax", "--preset", "small", "--trials", "2", "--workdir", str(tmp_path), "--quiet", "--no-track"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "records.db is corrupt" in result.stderr


def test_neuron_backend_exits_2_here(tmp_path):
    result = axon_in_process(
        "tune", "softmax", "--preset", "small", "--backend", "neuron", "--workdir", str(tmp_path), "--quiet"
    )
    assert result.returncode == 2 and "backend 'neuron' cannot run here" in result.stderr


def test_records_of_an_earlier_lowering_are_neither_reused_nor_reported(tmp_path):
    """After an upgrade the same point can emit another kernel: a record whose kernel is not what the
    current code emits for its point must not count as measured, nor be reported as the best."""
    import dataclasses

    from axon.measure.backend import SimBackend
    from axon.search.api import verified_variants
    from axon.search.problem import LoweredProblem
    from axon.search.tuner import TuneConfig, Tuner
    from axon.target import load_hw
    from axon.workloads import get

    graph = get("rmsnorm").graph("small")
    problem = LoweredProblem("rmsnorm", graph, load_hw("trn1"), verified_variants(graph), "float32")
    db = RecordDB(tmp_path / "records.db")
    tuner = Tuner(problem, SimBackend(), db, TuneConfig(trials=1, sampler="random", seed=0))
    point = problem.default_point()
    fresh, how = tuner._measure(point)
    assert how == "measured" and fresh.status == "ok"
    # the same point, as an older lowering emitted it: another kernel, implausibly fast
    db.add(dataclasses.replace(fresh, id=None, created=None, kernel_hash="0" * 24, latency_ns=1.0))
    again = Tuner(problem, SimBackend(), db, TuneConfig(trials=1, sampler="random", seed=0))
    result = again.run()
    assert result.best is not None and result.best.kernel_hash != "0" * 24
    assert result.best.latency_ns == fresh.latency_ns


def test_records_of_another_simulator_version_are_measured_again_and_not_reported(tmp_path):
    """A simulated latency depends on the simulator's code: after an upgrade of it, a kernel measured
    by the old one is measured again, and the old figure is never the best."""
    import dataclasses

    from axon.measure.backend import SimBackend
    from axon.search.api import verified_variants
    from axon.search.problem import LoweredProblem
    from axon.search.tuner import TuneConfig, Tuner
    from axon.target import load_hw
    from axon.workloads import get

    graph = get("rmsnorm").graph("small")
    problem = LoweredProblem("rmsnorm", graph, load_hw("trn1"), verified_variants(graph), "float32")
    db = RecordDB(tmp_path / "records.db")
    backend = SimBackend()
    point = problem.default_point()
    fresh, how = Tuner(problem, backend, db, TuneConfig(trials=1, seed=0))._measure(point)
    assert how == "measured" and fresh.measured_by == backend.version != ""
    # the same kernel as an older simulator timed it, implausibly fast, and nothing else recorded
    old = {**fresh.measurement, "version": "an-older-simulator"}
    db.add(dataclasses.replace(fresh, id=None, created=None, latency_ns=1.0, measurement=old))
    tuner = Tuner(problem, backend, db, TuneConfig(trials=1, sampler="random", seed=0))
    record, how = tuner._measure(point)
    assert how == "measured" and record.latency_ns == fresh.latency_ns
    assert tuner.best() is None  # the old record only: not this simulator's
    db.add(record)
    assert tuner.best().latency_ns == fresh.latency_ns


def test_numerics_check_exercises_every_output_element_of_adamw(monkeypatch):
    """[-1, 1] inputs make adamw's reference NaN (sqrt of a negative v): the check must not pass on NaNs."""
    import math

    import numpy as np

    import axon.nki
    from axon.search.api import numerics_check, verified_variants
    from axon.search.problem import LoweredProblem
    from axon.target import load_hw
    from axon.workloads import get

    graph = get("adamw").graph("small")
    problem = LoweredProblem("adamw", graph, load_hw("trn1"), verified_variants(graph), "float32")
    check = numerics_check(problem, problem.default_point())
    assert math.isfinite(check.max_rel_err) and check.ok

    real_run = axon.nki.run

    def nan_theta(*args, **kwargs):  # the kernel as it ran, with its theta output lost to NaNs
        theta, *rest = real_run(*args, **kwargs)
        return (np.full_like(theta, np.nan), *rest)

    monkeypatch.setattr(axon.nki, "run", nan_theta)
    assert not numerics_check(problem, problem.default_point()).ok


def test_a_worker_counts_the_trials_another_finished_while_it_started(tmp_path):
    """Two `axon tune` of one study started together: the second read the records, then (after its cost
    model's first fit) the study, where the first had finished trials since; their records unknown to it,
    it took them for points measured before an upgrade ('3 earlier points not counted ... their records
    lost') and measured them again."""
    from axon.measure.backend import SimBackend
    from axon.search.api import Callback, journal_storage, verified_variants
    from axon.search.problem import LoweredProblem
    from axon.search.tuner import TuneConfig, Tuner
    from axon.target import DEFAULT_HW, load_hw
    from axon.workdir import Workdir
    from axon.workloads import get

    graph = get("softmax").graph("small")
    problem = LoweredProblem("softmax", graph, load_hw(DEFAULT_HW), verified_variants(graph), "float32")
    db, storage = RecordDB(tmp_path / "records.db"), journal_storage(Workdir.resolve(tmp_path), None)
    config = TuneConfig(trials=3, sampler="random", seed=0, study_name="shared")

    class FirstWorker(Callback):  # runs the other worker to its end between this one's records and its study
        def on_start(self, context):
            Tuner(problem, SimBackend(), db, config, storage).run()

    result = Tuner(problem, SimBackend(), db, config, storage, callbacks=[FirstWorker()]).run()
    assert result.resumed == 3 and result.outdated == 0 and not result.trials
