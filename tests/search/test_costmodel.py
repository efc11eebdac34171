"""CostModel: learns a ranking from records, reports held-out accuracy, saves and warm-starts."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from axon.errors import StoreError
from axon.lazy import xgboost
from axon.measure.records import Record
from axon.search.costmodel import CostModel, normalized_labels, ranking_accuracy


def _records(task_m: int, n: int, seed: int) -> list[Record]:
    """Synthetic kernels whose latency is a smooth function of two features (plus noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tile, depth = rng.uniform(0, 1, 2)
        latency = 1000 * task_m * (1.5 - tile) * (1 + 0.3 * (depth - 0.5) ** 2) * rng.uniform(0.98, 1.02)
        kh = hashlib.sha256(f"{task_m}-{seed}-{i}".encode()).hexdigest()
        feats = {"tile": tile, "depth": depth, "log_m": np.log2(task_m)}
        out.append(
            Record(
                workload="w",
                shapes={"M": task_m},
                dtype="float32",
                hw="trn1",
                hw_hash="h",
                backend="sim",
                variant_hash="v",
                point={"i": i},
                kernel_hash=kh,
                features=feats,
                latency_ns=latency,
                status="ok",
            )
        )
    return out


def test_labels_are_normalized_within_tasks():
    recs = _records(128, 5, 0) + _records(256, 5, 1)
    labels = normalized_labels(recs)
    assert labels[:5].max() == pytest.approx(1.0) and labels[5:].max() == pytest.approx(1.0)
    assert np.all(labels > 0) and np.all(labels <= 1.0)


def test_ranking_accuracy_of_perfect_and_reversed_scores():
    labels = np.array([0.2, 0.5, 1.0, 0.7])
    tasks = ["t"] * 4
    assert ranking_accuracy(labels, labels, tasks).pairwise == 1.0
    assert ranking_accuracy(-labels, labels, tasks).pairwise == 0.0
    assert ranking_accuracy(labels, labels, tasks).peak1 == 1.0


def test_fit_ranks_held_out_kernels_and_roundtrips(tmp_path):
    recs = _records(128, 120, 0) + _records(512, 120, 1)
    model = CostModel(rounds=40)
    acc = model.fit(recs)
    assert acc is not None and acc.n_records > 10
    assert acc.pairwise > 0.8 and acc.peak5 > 0.9
    path = model.save(tmp_path / "model.json")
    loaded = CostModel.load(path, warm_start=False)
    feats = [r.features for r in recs[:10]]
    assert np.allclose(loaded.predict(feats), model.predict(feats))


def test_warm_start_transfers_to_a_new_shape(tmp_path):
    model = CostModel(rounds=40)
    model.fit(_records(128, 150, 0) + _records(512, 150, 1))
    model.save(tmp_path / "m.json")
    warm = CostModel.load(tmp_path / "m.json")
    new_task = _records(1024, 60, 7)
    # before any record of the new shape, the shipped model already ranks it
    assert warm.evaluate(new_task).pairwise > 0.8
    warm.fit(new_task[:8])
    assert warm.evaluate(new_task).pairwise > 0.8


def test_untrained_and_bad_files():
    assert CostModel().predict([{"a": 1.0}]).tolist() == [0.0]
    with pytest.raises(StoreError, match="not been trained"):
        CostModel().save("/tmp/never.json")
    with pytest.raises(StoreError, match="not found"):
        CostModel.load("/nonexistent/model.json")


def test_a_directory_given_as_the_cost_model_is_named_as_one(tmp_path):
    with pytest.raises(StoreError, match="is a directory: give a model's JSON file"):
        CostModel.load(tmp_path)


def test_freeze_makes_the_model_a_warm_start():
    model = CostModel(rounds=20)
    assert not model.pretrained
    model.fit(_records(128, 60, 0), holdout=0.0)
    before = model.predict([r.features for r in _records(128, 5, 3)])
    model.freeze()
    assert model.pretrained and model.is_trained
    assert np.allclose(model.predict([r.features for r in _records(128, 5, 3)]), before)


def test_replica_spread_is_small_on_the_records_and_off_without_replicas():
    recs = _records(128, 40, 0)
    model = CostModel(rounds=30, replicas=5)
    assert model.predict_spread([recs[0].features]) is None  # untrained
    model.fit(recs, holdout=0.0)
    seen = model.predict_spread([r.features for r in recs])
    far = model.predict_spread([{"tile": 3.0 + i, "depth": -2.0, "log_m": 7.0} for i in range(5)])
    assert seen is not None and len(seen) == 40 and np.all(seen >= 0)
    assert far.mean() > seen.mean()  # unsure away from what it was trained on
    bare = CostModel(rounds=30, replicas=0)
    bare.fit(recs, holdout=0.0)
    assert bare.predict_spread([recs[0].features]) is None


def test_boosters_named_after_training_are_the_boosters_trained_on_named_data():
    """`fit` gives the names to its boosters after training (faster): the model bytes, the
    replicas, predictions and importances are those of training on named data."""
    xgb = xgboost()
    recs = _records(128, 30, 0)
    model = CostModel(rounds=20)
    model.fit(recs, holdout=0.0)
    X = model._matrix([r.features for r in recs])
    labels = normalized_labels(recs)
    named = xgb.DMatrix(X, label=labels, weight=np.maximum(labels, 1e-3), feature_names=model.feature_names)
    reference = xgb.train(model.params, named, num_boost_round=model.rounds)
    assert model.booster.feature_names == model.feature_names
    assert model.booster.save_raw("json") == reference.save_raw("json")
    assert model.booster.get_score(importance_type="gain") == reference.get_score(importance_type="gain")
    d = xgb.DMatrix(X, feature_names=model.feature_names)
    assert np.array_equal(model.predict([r.features for r in recs]), reference.predict(d))
    assert len(model.replicas) == 5 and all(b.feature_names == model.feature_names for b in model.replicas)


def test_a_cost_model_file_that_is_not_utf8_is_refused(tmp_path):
    # XGBoost's error about the file quoted its bytes and failed to decode them: UnicodeDecodeError, a traceback
    path = tmp_path / "model.json"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(StoreError, match="model.json cannot be read"):
        CostModel.load(path)


@pytest.mark.parametrize("text", ['{"not": "a model"}', "garbage"])
def test_a_cost_model_file_xgboost_cannot_parse_is_one_line_without_xgboosts_source_line(tmp_path, text):
    """It said '[23:30:06] /workspace/src/c_api/c_api.cc:1532: Check failed: str[0] == '{' (g vs. {) : ...'."""
    path = tmp_path / "model.json"
    path.write_text(text)
    with pytest.raises(StoreError) as caught:
        CostModel.load(path)
    message = str(caught.value)
    assert message.startswith(f"cost model {path} cannot be read: not an XGBoost model: "), message
    assert ".cc:" not in message and "Check failed" not in message and "\n" not in message, message


def test_an_xgboost_model_without_feature_names_is_refused(tmp_path):
    # a model XGBoost trained elsewhere on 3 unnamed columns loaded, then its first fit on Axon's 75
    # features failed inside XGBoost: "Number of columns does not match", a traceback
    xgb = xgboost()
    rng = np.random.default_rng(0)
    booster = xgb.train({"nthread": 1}, xgb.DMatrix(rng.random((20, 3)), label=rng.random(20)), 2)
    path = tmp_path / "other.json"
    booster.save_model(str(path))
    with pytest.raises(StoreError, match="other.json names none of its features: not a cost model Axon saved"):
        CostModel.load(path)
