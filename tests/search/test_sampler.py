"""CostModelSampler on a real Optuna study and a real XGBoost model, over a small synthetic space."""

from __future__ import annotations

import hashlib

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from axon.measure.records import Record
from axon.search.costmodel import CostModel
from axon.search.sampler import CostModelSampler, point_key

optuna.logging.set_verbosity(optuna.logging.WARNING)

CHOICES = {"tile": [32, 64, 128, 256, 512], "depth": [1, 2, 3, 4], "order": ["mn", "nm"], "unroll": [1, 2, 4, 8]}


class ToySpace:
    def distributions(self):
        return {k: CategoricalDistribution(v) for k, v in CHOICES.items()}

    def sample(self, rng):
        return {k: v[int(rng.integers(len(v)))] for k, v in CHOICES.items()}

    def mutate(self, point, rng):
        p = dict(point)
        k = list(CHOICES)[int(rng.integers(len(CHOICES)))]
        p[k] = CHOICES[k][int(rng.integers(len(CHOICES[k])))]
        return p

    def validate(self, point):
        return "too big" if point["tile"] == 512 and point["depth"] == 4 else None


def latency(p):
    return (
        1000.0
        / p["tile"] ** 0.5
        * (1 + 0.2 * abs(p["depth"] - 2))
        * (1.1 if p["order"] == "nm" else 1)
        * (1 + 0.05 * abs(np.log2(p["unroll"]) - 2))
    )


def features(p):
    return {
        "log_tile": float(np.log2(p["tile"])),
        "depth": float(p["depth"]),
        "nm": float(p["order"] == "nm"),
        "log_unroll": float(np.log2(p["unroll"])),
    }


def _tune(sampler_name: str, trials: int, seed: int) -> list[float]:
    space, model = ToySpace(), CostModel(rounds=30)
    sampler = (
        CostModelSampler(space, model, features, seed=seed)
        if sampler_name == "costmodel"
        else optuna.samplers.RandomSampler(seed=seed)
    )
    study = optuna.create_study(sampler=sampler, direction="minimize")
    records, best = [], []
    for _ in range(trials):
        trial = study.ask(space.distributions())
        p = dict(trial.params)
        assert space.validate(p) is None or sampler_name == "random"
        lat = latency(p)
        study.tell(trial, lat)
        kh = hashlib.sha256(point_key(p).encode()).hexdigest()
        records.append(
            Record(
                workload="toy",
                shapes={},
                dtype="float32",
                hw="trn1",
                hw_hash="h",
                backend="sim",
                variant_hash="v",
                point=p,
                kernel_hash=kh,
                features=features(p),
                latency_ns=lat,
                status="ok",
            )
        )
        if sampler_name == "costmodel":
            model.fit(records, holdout=0.0)
        best.append(min(best[-1] if best else np.inf, lat))
    return best


def test_costmodel_sampler_never_repeats_and_finds_the_optimum_faster_than_random():
    optimum = min(
        latency(p)
        for p in (
            {"tile": t, "depth": d, "order": o, "unroll": u}
            for t in CHOICES["tile"]
            for d in CHOICES["depth"]
            for o in CHOICES["order"]
            for u in CHOICES["unroll"]
            if not (t == 512 and d == 4)
        )
    )
    hits_cm, hits_rand = [], []
    for seed in range(3):
        cm = _tune("costmodel", 24, seed)
        rnd = _tune("random", 24, seed)
        hits_cm.append(next((i for i, b in enumerate(cm) if b <= optimum * 1.0001), 99))
        hits_rand.append(next((i for i, b in enumerate(rnd) if b <= optimum * 1.0001), 99))
    assert np.median(hits_cm) < np.median(hits_rand)
    assert max(hits_cm) < 24


def test_costmodel_sampler_proposes_distinct_valid_points():
    space, model = ToySpace(), CostModel(rounds=10)
    sampler = CostModelSampler(space, model, features, seed=1, n_startup=2)
    study = optuna.create_study(sampler=sampler)
    seen, records = set(), []
    for _ in range(30):
        t = study.ask(space.distributions())
        key = point_key(t.params)
        assert key not in seen and space.validate(dict(t.params)) is None
        seen.add(key)
        lat = latency(dict(t.params))
        records.append(
            Record(
                workload="toy",
                shapes={},
                dtype="float32",
                hw="trn1",
                hw_hash="h",
                backend="sim",
                variant_hash="v",
                point=dict(t.params),
                kernel_hash=hashlib.sha256(key.encode()).hexdigest(),
                features=features(dict(t.params)),
                latency_ns=lat,
                status="ok",
            )
        )
        model.fit(records, holdout=0.0)
        study.tell(t, lat)


def test_pretrained_model_skips_the_random_start():
    """With a model trained before the run, the first ask is already the model's choice."""
    space = ToySpace()
    records = []
    for i, p in enumerate(space.sample(np.random.default_rng(s)) for s in range(40)):
        if space.validate(p) is None:
            records.append(
                Record(
                    workload="toy",
                    shapes={},
                    dtype="float32",
                    hw="trn1",
                    hw_hash="h",
                    backend="sim",
                    variant_hash="v",
                    point=p,
                    kernel_hash=f"{i:08x}",
                    features=features(p),
                    latency_ns=latency(p),
                    status="ok",
                )
            )
    model = CostModel(rounds=30)
    model.fit(records, holdout=0.0)
    model.freeze()
    sampler = CostModelSampler(space, model, features, seed=0, epsilon=0.0)
    study = optuna.create_study(sampler=sampler)
    study.ask(space.distributions())
    assert sampler.last_prediction is not None  # scored by the model, not a random warm-up point


def test_blend_is_by_rank_so_one_extreme_prediction_cannot_outvote_the_prior():
    from axon.search.sampler import _quantiles

    assert list(_quantiles(np.array([3.0, 1.0, 2.0, 2.0, 5.0]))) == [0.75, 0.0, 0.375, 0.375, 1.0]

    class Model:
        pretrained, is_trained = False, True

        @staticmethod
        def predict(feats):  # candidate 0 an outlier, the others in the prior's order
            return np.array([100.0, 0.3, 0.2, 0.1])

    sampler = CostModelSampler(ToySpace(), Model(), features, prior="bound_log", prior_records=8.0)
    feats = [{"bound_log": b} for b in (9.0, 1.0, 2.0, 3.0)]  # candidate 0 has by far the worst bound
    early = sampler._scores(feats, n_done=2, use_model=True)  # prior weight 0.8
    assert int(np.argmax(early)) == 1
    late = sampler._scores(feats, n_done=200, use_model=True)  # prior weight 0.04: the model decides
    assert int(np.argmax(late)) == 0
    Model.pretrained = True  # a pretrained model has half the say on a new task's first asks
    first = sampler._scores(feats, n_done=0, use_model=True)
    assert first[0] == pytest.approx(0.5) and first[1] == pytest.approx(0.5 * 2 / 3 + 0.5)


def test_novelty_is_the_scaled_distance_to_the_nearest_measured_point():
    from axon.search.sampler import _novelty

    known = [{"a": 0.0, "b": 0.0}, {"a": 10.0, "b": 1000.0}]
    cands = [{"a": 0.0, "b": 0.0}, {"a": 10.0, "b": 1000.0}, {"a": 5.0, "b": 0.0}, {"a": 0.0, "b": 500.0}]
    d = _novelty(cands, known)
    assert d[0] == 0.0 and d[1] == 0.0  # copies of measured points
    assert d[2] == pytest.approx(d[3])  # half the spread of `a` counts as much as half the spread of `b`
    assert d[2] > 0


def test_novelty_moves_the_ask_off_near_copies_of_the_best_measured_point():
    class Model:
        pretrained, is_trained = False, True

        @staticmethod
        def predict(feats):  # the near-copy of the best predicted a little better than the new structure
            return np.array([1.0, 0.95] + [0.1 * i for i in range(1, 9)])

    known = [{"bound_log": 0.0, "x": 0.0}]
    # candidate 0 differs from the measured point by 0.01 in one feature, candidate 1 by 5; the
    # others are near-copies the model likes less; the prior agrees with the model
    xs = [0.01, 5.0] + [0.01 * i for i in range(2, 10)]
    feats = [{"bound_log": float(i), "x": x} for i, x in enumerate(xs)]
    plain = CostModelSampler(ToySpace(), Model(), features, prior="bound_log", novelty=0.0)
    assert int(np.argmax(plain._scores(feats, n_done=40, use_model=True, known=known))) == 0
    novel = CostModelSampler(ToySpace(), Model(), features, prior="bound_log", novelty=0.6)
    assert int(np.argmax(novel._scores(feats, n_done=40, use_model=True, known=known))) == 1
    assert int(np.argmax(novel._scores(feats, n_done=40, use_model=True))) == 0  # nothing measured: no bonus
