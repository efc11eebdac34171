"""Tracker against a real local MLflow store (SQLite): runs, nesting, metrics, artifacts, registry,
the UI view on new experiments, and several processes creating one store at once."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from axon.measure.records import Record
from axon.search.costmodel import CostModel
from axon.track import Tracker
from axon.track import tracker as tracker_module
from axon.track.storefile import seed_sqlite_store
from axon.track.tracker import load_registered_booster
from axon.track.view import VIEW_TAG, column_id, view_state, view_tags
from axon.workdir import Workdir
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    return Tracker.for_workdir(tmp_path_factory.mktemp("store"))


def test_nested_runs_metrics_and_artifacts(tracker, tmp_path):
    with tracker.run("sweep", params={"config": "nightly"}) as parent:
        with tracker.run("matmul", params={"workload": "matmul", "shape": {"M": 128}}, parent=parent) as child:
            child.log_metric_history("latency_us", [5.0, 4.0, 4.5])
            child.log_metrics({"best_latency_us": 4.0}, step=2)
            child.log_text("kernel source", "kernel.py")
    kids = tracker.children(parent.run_id)
    assert [k.info.run_id for k in kids] == [child.run_id]
    history = tracker.client.get_metric_history(child.run_id, "latency_us")
    assert [(m.step, m.value) for m in history] == [(0, 5.0), (1, 4.0), (2, 4.5)]
    assert kids[0].data.params["shape"] == '{"M": 128}'
    assert [a.path for a in tracker.client.list_artifacts(child.run_id)] == ["kernel.py"]
    assert tracker.client.get_run(parent.run_id).info.status == "FINISHED"


def test_interrupted_run_is_marked_killed(tracker):
    with pytest.raises(KeyboardInterrupt):
        with tracker.run("interrupted") as run:
            raise KeyboardInterrupt
    assert tracker.client.get_run(run.run_id).info.status == "KILLED"


def test_registry_moves_champion_only_when_accuracy_holds(tracker, tmp_path, capfd):
    import mlflow.xgboost

    rng = np.random.default_rng(0)
    recs = [
        Record(
            workload="w",
            shapes={},
            dtype="float32",
            hw="trn1",
            hw_hash="h",
            backend="sim",
            variant_hash="v",
            point={},
            kernel_hash=f"{i:08x}",
            features={"a": float(a)},
            latency_ns=10.0 + a,
            status="ok",
        )
        for i, a in enumerate(rng.uniform(0, 1, 40))
    ]
    model = CostModel(rounds=5)
    model.fit(recs, holdout=0.0)
    path = model.save(tmp_path / "m.json")
    with tracker.run("train") as run:
        v1 = tracker.log_cost_model(run, path, "axon-costmodel-test", accuracy=0.8)
        v2 = tracker.log_cost_model(run, path, "axon-costmodel-test", accuracy=0.7)
        v3 = tracker.log_cost_model(run, path, "axon-costmodel-test", accuracy=0.85)
    assert (v1, v2, v3) == (1, 2, 3)
    # MLflow's "Successfully registered model ..." / "Created version ..." lines, printed under --quiet too
    assert "registered model" not in capfd.readouterr().err.lower()
    champion = tracker.client.get_model_version_by_alias("axon-costmodel-test", "champion")
    assert int(champion.version) == 3
    # loaded through the tracking URI alone, and MLflow's global URIs are left as they were
    before = (mlflow.get_tracking_uri(), mlflow.get_registry_uri())
    saved = load_registered_booster("models:/axon-costmodel-test@champion", tracker.tracking_uri, tmp_path / "b.json")
    assert CostModel.load(saved).feature_names == ["a"]
    assert (mlflow.get_tracking_uri(), mlflow.get_registry_uri()) == before


def test_a_new_experiment_carries_axons_runs_view(tracker):
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    state = json.loads(json.loads(tags[VIEW_TAG])["state"])
    assert state["selectedColumns"][:4] == [
        column_id("metrics", m)
        for m in ("best_latency_us", "speedup_vs_unfused", "speedup_vs_expert", "roofline_fraction")
    ]
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    assert view_tags(tags, 0) == {}  # nothing left to set


def test_ensure_ui_view_fills_in_an_old_experiment_and_keeps_a_chosen_kind(tmp_path):
    from mlflow.tracking import MlflowClient

    uri, root = Workdir.resolve(tmp_path).tracking_uri, Workdir.resolve(tmp_path).artifact_root
    client = MlflowClient(uri)
    old = client.create_experiment("axon", artifact_location=root, tags={"mlflow.experimentKind": "genai_development"})
    client.set_experiment_tag(old, VIEW_TAG, json.dumps({"name": "old", "createdAt": 1, "state": "{}"}))
    tracker = Tracker.for_workdir(tmp_path)
    assert tracker.experiment_id == old
    tracker.ensure_ui_view()
    tags = client.get_experiment(old).tags
    assert json.loads(json.loads(tags[VIEW_TAG])["state"]) == view_state()
    assert tags["mlflow.experimentKind"] == "genai_development"


_RACER = """
import sys, time
from pathlib import Path
import mlflow.tracking  # the 2 s import happens before the start line
from axon.track import Tracker
from axon.track.tracker import load_registered_booster
ready, go = Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.005)
print(Tracker.for_workdir(sys.argv[1]).experiment_id)
"""


@pytest.mark.slow
def test_two_processes_opening_a_fresh_store_at_once_both_succeed(tmp_path):
    """Before the store lock, one of two always failed here ("table experiments already exists",
    "duplicate column name: step"): both ran MLflow's schema migrations on the same new file. One
    round is enough to catch that (each round is two MLflow imports)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for round_ in range(1):
        workdir, go = tmp_path / f"w{round_}", tmp_path / f"go{round_}"
        ready = [tmp_path / f"ready{round_}.{i}" for i in range(2)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _RACER, str(workdir), str(r), str(go)],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for r in ready
        ]
        deadline = time.time() + 60
        while not all(r.exists() for r in ready) and time.time() < deadline:
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err[-600:] for _, err in outs]
        assert len({out.strip() for out, _ in outs}) == 1  # one experiment, found by both


@pytest.mark.slow
def test_two_tune_workers_on_a_fresh_workdir_both_succeed(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "axon.cli",
        "tune",
        "rmsnorm",
        "--preset",
        "small",
        "--trials",
        "2",
        "--workdir",
        str(tmp_path / "work"),
        "--quiet",
        "--json",
    ]
    workers = [
        subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=600) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err[-800:] for _, err in outs]
    runs = Tracker.for_workdir(tmp_path / "work").recent_runs(10)
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)


def _store_contents(db) -> tuple[list, list]:
    with sqlite3.connect(db) as con:
        # a table's columns and constraints, as a set: MLflow's batch migrations do not keep their order
        schema = sorted(
            (t, n, tuple(sorted((sql or "").split(", \n"))))
            for t, n, sql in con.execute("SELECT type, name, sql FROM sqlite_master")
        )
        experiments = con.execute(  # Default's artifact location is MLflow's (./mlruns), axon's the workdir's
            "SELECT experiment_id, name, lifecycle_stage, iif(experiment_id = 0, artifact_location, '') "
            "FROM experiments ORDER BY 1"
        ).fetchall()
    con.close()
    return schema, experiments


def test_a_new_store_copied_from_the_migrated_template_is_the_store_mlflow_builds(tmp_path, monkeypatch):
    """A new SQLite store starts as a copy of the migrated empty one: the same tables, indexes and
    experiments as a store MLflow migrated itself; an existing store is never overwritten."""
    cache = tmp_path / "cache"
    monkeypatch.setattr(tracker_module, "seed_sqlite_store", lambda db: seed_sqlite_store(db, cache))
    seeded = Tracker.for_workdir(tmp_path / "seeded")
    assert list(cache.glob("mlflow-*-empty.db"))  # the template, built on first use
    monkeypatch.setattr(tracker_module, "seed_sqlite_store", lambda db: False)
    migrated = Tracker.for_workdir(tmp_path / "migrated")
    for t in (seeded, migrated):
        with t.run("tune", params={"workload": "softmax"}) as run:
            run.log_metrics({"latency_us": 3.0}, step=0)
    assert _store_contents(tmp_path / "seeded" / "mlflow.db") == _store_contents(tmp_path / "migrated" / "mlflow.db")
    assert [e[1] for e in _store_contents(tmp_path / "seeded" / "mlflow.db")[1]] == ["Default", "axon"]
    assert not seed_sqlite_store(tmp_path / "seeded" / "mlflow.db", cache)  # holds runs: left alone


def test_a_run_whose_process_died_is_ended_killed_by_the_next_run(tmp_path):
    # kill -9 leaves an MLflow run RUNNING for ever; the next run on this host ends it, at its last metric
    import socket

    t = Tracker.for_workdir(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    def running(host: str, pid: int) -> str:
        r = t.client.create_run(t.experiment_id, tags={"axon.host": host, "axon.pid": str(pid)})
        t.client.log_metric(r.info.run_id, "best_us", 3.0, timestamp=r.info.start_time + 5000)
        return r.info.run_id

    orphan = running(socket.gethostname(), dead.pid)
    elsewhere = running("another-host", dead.pid)  # a fleet worker's on another machine: not ours to judge
    alive = running(socket.gethostname(), os.getpid())
    with t.run("next") as run:
        run.log_metrics({"x": 1.0})
    status = {i: t.client.get_run(i).info for i in (orphan, elsewhere, alive)}
    assert status[orphan].status == "KILLED" and status[orphan].end_time == status[orphan].start_time + 5000
    assert t.client.get_run(orphan).data.tags["axon.ended"].startswith("its process was gone")
    assert status[elsewhere].status == "RUNNING" and status[alive].status == "RUNNING"
    assert t.client.get_run(run.run_id).data.tags["axon.pid"] == str(os.getpid())


def test_workers_restarted_together_close_the_same_orphans_without_failing(tmp_path):
    # two fleet workers restarted on one host both close a killed worker's run; MLflow's set_tag
    # failed one of them with a UNIQUE constraint on the tag and that worker exited
    import socket
    import threading

    t = Tracker.for_workdir(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tags = {"axon.host": socket.gethostname(), "axon.pid": str(dead.pid)}
    orphans = [t.client.create_run(t.experiment_id, tags=tags).info.run_id for _ in range(16)]
    trackers = [Tracker.for_workdir(tmp_path) for _ in range(4)]
    start = threading.Barrier(len(trackers))
    errors: list[BaseException] = []

    def close(tracker: Tracker) -> None:
        start.wait()
        try:
            tracker.close_orphans()
        except Exception as exc:  # noqa: BLE001 - the test reports whatever a worker would have died of
            errors.append(exc)

    threads = [threading.Thread(target=close, args=(tr,)) for tr in trackers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert {t.client.get_run(i).info.status for i in orphans} == {"KILLED"}
