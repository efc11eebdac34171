"""`CostModel`: an XGBoost model of normalized throughput, retrained as measurements arrive.

Label of a record = best latency in its task / its latency (1.0 for the best kernel of a task), so
one model learns across tasks and shapes; training uses label-weighted squared error (the fast
kernels are the ones that matter). Features are shape-generic numbers produced by the feature
extractor; the model stores their names and aligns any input to them. It does not choose points:
the sampler does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from axon.errors import StoreError
from axon.lazy import xgboost
from axon.measure.records import Record


@dataclass(frozen=True)
class Accuracy:
    """Ranking quality on held-out records: pairwise accuracy within tasks, and peak@k."""

    pairwise: float
    peak1: float
    peak5: float
    n_records: int
    n_tasks: int

    def as_metrics(self, prefix: str = "cost_model_") -> dict[str, float]:
        return {f"{prefix}pairwise": self.pairwise, f"{prefix}peak1": self.peak1, f"{prefix}peak5": self.peak5}


def normalized_labels(records: Sequence[Record]) -> np.ndarray:
    """best latency of the record's task / its latency."""
    best: dict[str, float] = {}
    for r in records:
        if r.latency_ns is not None:
            best[r.task] = min(best.get(r.task, np.inf), r.latency_ns)
    return np.array([best[r.task] / r.latency_ns if r.latency_ns else np.nan for r in records], dtype=np.float64)


def ranking_accuracy(scores: np.ndarray, labels: np.ndarray, tasks: Sequence[str]) -> Accuracy:
    """Pairwise ordering accuracy and peak@1/@5 (best true label in the top-k predicted, per task)."""
    by_task: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        by_task.setdefault(t, []).append(i)
    agree = pairs = 0
    peaks1, peaks5 = [], []
    for idx in by_task.values():
        s, y = scores[idx], labels[idx]
        ds = s[:, None] - s[None, :]
        dy = y[:, None] - y[None, :]
        mask = np.abs(dy) > 1e-12
        agree += int(np.sum((ds * dy > 0) & mask))
        pairs += int(np.sum(mask))
        order = np.argsort(-s, kind="stable")
        top = y.max()
        peaks1.append(float(y[order[:1]].max() / top))
        peaks5.append(float(y[order[:5]].max() / top))
    return Accuracy(
        pairwise=agree / pairs if pairs else float("nan"),
        peak1=float(np.mean(peaks1)) if peaks1 else float("nan"),
        peak5=float(np.mean(peaks5)) if peaks5 else float("nan"),
        n_records=len(tasks),
        n_tasks=len(by_task),
    )


class CostModel:
    """Predicts normalized throughput (higher is faster) from feature dicts.

    >>> from axon.search.costmodel import CostModel
    >>> m = CostModel(rounds=10)
    >>> m.is_trained
    False
    """

    def __init__(
        self,
        rounds: int = 80,
        max_depth: int = 6,
        eta: float = 0.2,
        seed: int = 0,
        nthread: int = 1,
        replicas: int = 5,
        replica_max_records: int = 512,
    ) -> None:
        self.rounds = rounds
        self.hw: str | None = None  # the hardware file the records it was trained on came from (saved with it)
        self.params: dict[str, Any] = {
            "objective": "reg:squarederror",
            "max_depth": max_depth,
            "eta": eta,
            "subsample": 1.0,
            "min_child_weight": 1e-3,
            "seed": seed,
            "nthread": nthread,
            "verbosity": 0,
        }
        self.feature_names: list[str] = []
        self.booster = None
        self.base_booster = None  # a warm-start model: new training continues from it
        self.last_accuracy: Accuracy | None = None
        self.n_trained = 0
        # bootstrap replicas, refitted with the model while a task has few records: their spread is
        # how unsure the model is about a point (the sampler's exploration bonus)
        self.n_replicas, self.replica_max_records = replicas, replica_max_records
        self.replicas: list = []

    @property
    def is_trained(self) -> bool:
        return self.booster is not None or self.base_booster is not None

    @property
    def pretrained(self) -> bool:
        """Trained on other records before this run (a loaded or frozen model)."""
        return self.base_booster is not None

    def freeze(self) -> CostModel:
        """Make the current model the warm start: later `fit` calls add trees on top of it."""
        if self.booster is not None:
            self.base_booster, self.booster = self.booster, None
        return self

    # features ------------------------------------------------------------------------------------
    def _matrix(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        names = self.feature_names
        # a feature a row lacks is missing to XGBoost (NaN), never a made-up zero
        X = np.full((len(features), len(names)), np.nan, dtype=np.float32)
        index = {n: i for i, n in enumerate(names)}
        for row, f in enumerate(features):
            for k, v in f.items():
                col = index.get(k)
                if col is not None:
                    X[row, col] = v
        return X

    # training ------------------------------------------------------------------------------------
    def fit(self, records: Sequence[Record], holdout: float = 0.2) -> Accuracy | None:
        """Retrain on every ok record; report ranking accuracy on a held-out share (by kernel hash)."""
        xgb = xgboost()
        ok = [r for r in records if r.status == "ok" and r.latency_ns]
        if len(ok) < 2:
            return None
        if not self.feature_names:
            self.feature_names = sorted({k for r in ok for k in r.features})
        machines = sorted({r.hw for r in ok})
        self.hw = (
            machines[0]
            if len(machines) == 1 and self.hw in (None, machines[0])
            else ",".join(sorted(set(machines) | ({self.hw} if self.hw else set())))
        )
        labels = normalized_labels(ok)
        held = np.array(
            [int(r.kernel_hash[:8], 16) % 100 < holdout * 100 if _hexish(r.kernel_hash) else False for r in ok]
        )
        if held.sum() < 4 or (~held).sum() < 2:
            held[:] = False
        train = ~held
        X = self._matrix([r.features for r in ok])
        self.booster = self._train(xgb, X[train], labels[train])
        self.n_trained = int(train.sum())
        self.replicas = []
        if self.n_replicas and self.n_trained <= self.replica_max_records:
            rng = np.random.default_rng(int(self.params["seed"]) + self.n_trained)
            rows = np.flatnonzero(train)
            for _ in range(self.n_replicas):
                pick = rng.choice(rows, size=len(rows), replace=True)
                self.replicas.append(self._train(xgb, X[pick], labels[pick]))
        accuracy = None
        if held.any():
            scores = self.predict([r.features for r, h in zip(ok, held) if h])
            accuracy = ranking_accuracy(scores, labels[held], [r.task for r, h in zip(ok, held) if h])
        self.last_accuracy = accuracy
        return accuracy

    def _train(self, xgb: Any, X: np.ndarray, labels: np.ndarray) -> Any:
        """A booster trained on rows `X`, weighted by their labels, named by `feature_names`.

        From scratch, the names are given to the booster after training: XGBoost checks the data's
        names against the booster's on every round, reading each name back from C both times (about
        a third of a refit of six boosters), and names take no part in the trees (the same model
        bytes, predictions and importances). A warm start trains on named data, as its base model
        is named."""
        weight = np.maximum(labels, 1e-3)
        if self.base_booster is not None:
            d = xgb.DMatrix(X, label=labels, weight=weight, feature_names=self.feature_names)
            return xgb.train(self.params, d, num_boost_round=self.rounds, xgb_model=self.base_booster)
        booster = xgb.train(self.params, xgb.DMatrix(X, label=labels, weight=weight), num_boost_round=self.rounds)
        booster.feature_names = self.feature_names
        return booster

    def predict(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Predicted normalized throughput for each feature dict (zeros when untrained)."""
        xgb = xgboost()
        booster = self.booster or self.base_booster
        if booster is None or not features:
            return np.zeros(len(features))
        return booster.predict(xgb.DMatrix(self._matrix(features), feature_names=self.feature_names))

    def predict_spread(self, features: Sequence[Mapping[str, float]]) -> np.ndarray | None:
        """Standard deviation of the bootstrap replicas' predictions: small where the records pin the
        model down (next to measured kernels), large where it extrapolates. None without replicas."""
        xgb = xgboost()
        if not self.replicas or not features:
            return None
        d = xgb.DMatrix(self._matrix(features), feature_names=self.feature_names)
        return np.std([b.predict(d) for b in self.replicas], axis=0)

    def evaluate(self, records: Sequence[Record]) -> Accuracy:
        ok = [r for r in records if r.status == "ok" and r.latency_ns]
        return ranking_accuracy(self.predict([r.features for r in ok]), normalized_labels(ok), [r.task for r in ok])

    # persistence ---------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        booster = self.booster or self.base_booster
        if booster is None:
            raise StoreError("cost model has not been trained: nothing to save")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        booster.set_attr(
            axon_meta=json.dumps(
                {"rounds": self.rounds, "params": self.params, "n_trained": self.n_trained, "hw": self.hw}
            )
        )
        booster.save_model(str(path))
        return path

    @classmethod
    def load(cls, path: str | Path, warm_start: bool = True) -> CostModel:
        """A saved model; with warm_start, later `fit` calls continue training from it."""
        xgb = xgboost()
        path = Path(path)
        if path.is_dir():  # was "not found", of a directory that is there
            raise StoreError(
                f"cost model {path} is a directory: give a model's JSON file (WORKDIR/models/costmodel-HW.json)"
            )
        if not path.is_file():
            raise StoreError(f"cost model {path} not found")
        booster = xgb.Booster()
        try:
            booster.load_model(str(path))
        except xgb.core.XGBoostError as exc:
            raise StoreError(f"cost model {path} cannot be read: not an XGBoost model: {_xgboost_says(exc)}") from None
        except UnicodeDecodeError:  # XGBoost's own message quotes the bytes it could not parse
            raise StoreError(f"cost model {path} cannot be read: not an XGBoost JSON model (not UTF-8 text)") from None
        if not booster.feature_names:  # features go in by name: without names, fit fails in XGBoost itself
            raise StoreError(f"cost model {path} names none of its features: not a cost model Axon saved")
        meta = json.loads(booster.attr("axon_meta") or "{}")
        model = cls(rounds=meta.get("rounds", 80))
        model.params.update(meta.get("params", {}))
        model.feature_names = list(booster.feature_names or [])
        model.n_trained = meta.get("n_trained", 0)
        model.hw = meta.get("hw")
        if warm_start:
            model.base_booster = booster
        else:
            model.booster = booster
        return model


def _hexish(text: str) -> bool:
    try:
        int(text[:8], 16)
        return True
    except ValueError:
        return False


def _xgboost_says(exc: Exception) -> str:
    """XGBoost's message without its clock and C++ source line ("[23:30:05] /workspace/src/c_api/
    c_api.cc:1532: Check failed: str[0] == '{' (g vs. {) : Invalid model format in: ...")."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    line = re.sub(r"^\[[\d:]+\]\s+\S+:\d+:\s*", "", line)
    return re.sub(r"^Check failed: .* : ", "", line)
