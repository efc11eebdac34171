"""Tracker against a real local MLflow store (SQLite): runs, nesting, metrics, artifacts, registry."""

from __future__ import annotations

import numpy as np
import pytest

from axon.measure.records import Record
from axon.search.costmodel import CostModel
from axon.track import Tracker


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


def test_registry_moves_champion_only_when_accuracy_holds(tracker, tmp_path):
    import mlflow.xgboost

    rng = np.random.default_rng(0)
    recs = [Record("w", {}, "float32", "trn1", "h", "sim", "v", {}, f"{i:08x}", {"a": float(a)}, 10.0 + a, "ok")
            for i, a in enumerate(rng.uniform(0, 1, 40))]
    model = CostModel(rounds=5)
    model.fit(recs, holdout=0.0)
    path = model.save(tmp_path / "m.json")
    with tracker.run("train") as run:
        v1 = tracker.log_cost_model(run, path, "axon-costmodel-test", accuracy=0.8)
        v2 = tracker.log_cost_model(run, path, "axon-costmodel-test", accuracy=0.7)
        v3 = tracker.log_cost_model(run, path, "axon-costmodel-test", accuracy=0.85)
    assert (v1, v2, v3) == (1, 2, 3)
    champion = tracker.client.get_model_version_by_alias("axon-costmodel-test", "champion")
    assert int(champion.version) == 3
    mlflow.set_tracking_uri(tracker.tracking_uri)
    loaded = mlflow.xgboost.load_model("models:/axon-costmodel-test@champion")
    assert loaded.num_features() == 1
