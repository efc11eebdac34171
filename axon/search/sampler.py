"""`CostModelSampler`: an Optuna sampler that proposes the point the cost model likes best.

Each ask builds a pool of candidates (random points of the space, mutations of the best measured
ones, and every one-step neighbour of the best measured point where the space can list them),
drops invalid and already-measured points, scores the rest with the cost model and proposes the
best predicted, with a bonus where the model's bootstrap replicas disagree (it is unsure there);
a small share of asks is random so the model keeps learning where it is wrong.
While a task has few measurements the scores lean on an analytic prior (the program's estimated
lower bound, a feature), so the first proposals are not random. The space is any object
implementing `CandidateSpace`; the sampler knows nothing of NKI.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import FrozenTrial, TrialState

from axon.gcpause import gc_paused
from axon.search.costmodel import CostModel

Point = dict[str, Any]


class CandidateSpace(Protocol):
    def distributions(self) -> dict[str, CategoricalDistribution]: ...

    def sample(self, rng: np.random.Generator) -> Point: ...

    def mutate(self, point: Point, rng: np.random.Generator) -> Point: ...

    def validate(self, point: Point) -> str | None: ...


def _quantiles(x: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Each value's rank in `x` scaled to [0, 1]. Equal values share their mean rank, or with `rng`
    are put in a random order (so that among points a score cannot tell apart, the pick is random)."""
    if len(x) < 2:
        return np.zeros(len(x))
    if rng is not None:
        order = np.lexsort((rng.random(len(x)), x))
        ranks = np.empty(len(x))
        ranks[order] = np.arange(len(x), dtype=float)
        return ranks / (len(x) - 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    mean_rank = np.cumsum(counts) - 1 - (counts - 1) / 2.0
    return mean_rank[inverse.ravel()] / (len(x) - 1)


def point_key(point: Mapping[str, Any]) -> str:
    return json.dumps(point, sort_keys=True, default=str)


def _novelty(feats: Sequence[Mapping[str, float]], known: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Each candidate's distance to the nearest measured point, features scaled by their spread."""
    names = sorted(set().union(*feats, *known))
    X = np.array([[f.get(n, 0.0) for n in names] for f in feats])
    K = np.array([[f.get(n, 0.0) for n in names] for f in known])
    scale = np.vstack([X, K]).std(axis=0)
    scale[scale == 0] = 1.0
    X, K = X / scale, K / scale
    # differences taken directly (not |x|^2 + |k|^2 - 2x.k), so a copy of a measured point is exactly 0
    # away and equal distances stay equal; in blocks of candidates to bound the memory
    step = max(1, 2**20 // max(1, K.size))
    return np.concatenate(
        [
            np.sqrt(((X[i : i + step, None, :] - K[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
            for i in range(0, len(X), step)
        ]
    )


class CostModelSampler(BaseSampler):
    """Propose the best-predicted valid, unmeasured point of `space` (random share `epsilon`).

    `features(point) -> dict` turns a point into the cost model's features; `model` is retrained by
    the tuner after each measurement (the sampler only reads it).
    """

    def __init__(
        self,
        space: CandidateSpace,
        model: CostModel,
        features: Callable[[Point], Mapping[str, float]],
        pool_size: int = 128,
        n_mutations: int = 64,
        epsilon: float = 0.05,
        n_startup: int = 4,
        seed: int = 0,
        measured: Callable[[Point], bool] | None = None,
        prior: str | None = "overlap_bound_log",
        prior_records: float = 8.0,
        neighbourhoods: int = 1,
        spread_weight: float = 1.0,
        novelty: float = 0.6,
    ) -> None:
        self.space, self.model, self.features = space, model, features
        self.pool_size, self.n_mutations, self.epsilon, self.n_startup = pool_size, n_mutations, epsilon, n_startup
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._fallback = RandomSampler(seed=seed)
        self._measured_hook = measured
        self.prior, self.prior_records = prior, prior_records
        self.neighbourhoods = neighbourhoods
        self.spread_weight = spread_weight
        self.novelty = novelty
        self.last_prediction: float | None = None

    def settings(self) -> dict[str, Any]:
        return {
            "sampler": "costmodel",
            "pool_size": self.pool_size,
            "n_mutations": self.n_mutations,
            "epsilon": self.epsilon,
            "n_startup": self.n_startup,
            "seed": self.seed,
            "prior": self.prior or "",
            "prior_records": self.prior_records,
            "neighbourhoods": self.neighbourhoods,
            "spread_weight": self.spread_weight,
            "novelty": self.novelty,
        }

    def reseed_rng(self) -> None:  # called by Optuna for n_jobs > 1
        self._rng = np.random.default_rng(self._rng.integers(2**32))

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self.space.distributions())

    def _seen(self, study: optuna.Study) -> tuple[set[str], list[tuple[float, Point]]]:
        seen, done = set(), []
        for t in study.get_trials(deepcopy=False):
            if t.params:
                seen.add(point_key(t.params))
            if t.state == TrialState.COMPLETE and t.value is not None:
                done.append((t.value, dict(t.params)))
        done.sort(key=lambda x: x[0])
        return seen, done

    def _random_valid(self, seen: set[str], tries: int = 200) -> Point | None:
        for _ in range(tries):
            p = self.space.sample(self._rng)
            if self.space.validate(p) is None and point_key(p) not in seen and not self._was_measured(p):
                return p
        return None

    def _was_measured(self, point: Point) -> bool:
        return bool(self._measured_hook and self._measured_hook(point))

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        seen, done = self._seen(study)
        seen.discard(point_key(trial.params)) if trial.params else None
        self.last_prediction = None
        startup = len(done) < self.n_startup and not self.model.pretrained  # a pretrained model needs no warm-up
        use_model = self.model.is_trained and not startup
        explore = self._rng.random() < self.epsilon or not (use_model or self.prior)
        best = None
        if not explore:
            with gc_paused():  # lowering the pool makes hundreds of thousands of objects (`axon.gcpause`)
                best = self._best(seen, done, use_model)
        if best is None:
            best = self._random_valid(seen) or {}
        self._look_ahead()
        return best

    def _look_ahead(self) -> None:
        """Let a space that can (`prepare_async`) lower the next ask's random points while this trial
        is measured: they are the next draws of this sampler's generator after its first (the
        `epsilon` draw), so a copy of the generator names them now."""
        ahead = getattr(self.space, "prepare_async", None)
        if ahead is None:
            return
        rng = copy.deepcopy(self._rng)
        rng.random()
        ahead([self.space.sample(rng) for _ in range(self.pool_size)])

    def _best(self, seen: set[str], done: list[tuple[float, Point]], use_model: bool) -> Point | None:
        """The best-scored candidate of a new pool (None when no candidate is left)."""
        pool: dict[str, Point] = {}
        for _ in range(self.pool_size):
            p = self.space.sample(self._rng)
            pool.setdefault(point_key(p), p)
        elite = [p for _, p in done[:8]]
        for i in range(self.n_mutations if elite else 0):
            p = self.space.mutate(elite[i % len(elite)], self._rng)
            pool.setdefault(point_key(p), p)
        if hasattr(self.space, "neighbours"):  # every one-step move from the best few measured points
            for p in (q for e in elite[: self.neighbourhoods] for q in self.space.neighbours(e)):
                pool.setdefault(point_key(p), p)
        prepare = getattr(self.space, "prepare", None)
        if prepare is not None:  # the pool lowered at once (a space may split it across processes)
            prepare([p for k, p in pool.items() if k not in seen])
        cands = [
            p for k, p in pool.items() if k not in seen and self.space.validate(p) is None and not self._was_measured(p)
        ]
        if cands:
            feats = [self.features(p) for p in cands]
            known = [self.features(p) for _, p in done] if self.novelty else []
            scores = self._scores(feats, len(done), use_model, known)
            best = int(np.argmax(scores))
            self.last_prediction = float(scores[best])
            return cands[best]
        return None

    def _scores(
        self, feats: list[Mapping[str, float]], n_done: int, use_model: bool, known: Sequence[Mapping[str, float]] = ()
    ) -> np.ndarray:
        """The model's scores, blended with the analytic prior while the task has few measurements.

        The prior ranks by the bound the features estimate from the program (`overlap_bound_log`:
        the busiest engine or the DMA time, or their sum where loaded tiles have a single buffer,
        since then the next load waits for the tile's last reader, and at least TensorE's time plus
        the PSUM evacuations where accumulators have a single buffer). The model's score is its
        prediction plus `spread_weight` times the spread of its bootstrap replicas (an upper
        confidence bound): once the model has seen the best kernel, its copies that only flip an
        instruction choice are predicted as good as the best with no spread, and without the bonus
        they took most of a 24-measurement budget (layernorm_matmul: 15 of 24 measurements within
        0.5% of each other). Model and prior are blended by rank within the pool
        (quantiles in [0, 1]), so neither can drown the other with a few extreme values, with the
        prior's weight prior_records / (prior_records + n) for a model trained from scratch on n
        records of this task, and everything before any model. A pretrained model counts as
        prior_records records of evidence of its own: prior_records / (2 prior_records + n).

        The bound often ties: every point whose TensorE time is the bound has the same one, a fifth
        of rmsnorm_matmul's valid points. Its ties are broken at random, so while the prior weighs
        much the asks spread over the points it cannot tell apart instead of crowding where the
        model, fitted to a handful of records, last saw the best (rmsnorm_matmul at its default
        shape, 24 measurements: within 5% of the best on 2 of 4 seeds with averaged ties, on 4 of
        5 with random ones).

        Once the model is in use, `novelty` times the rank of each candidate's distance (in feature
        space, `known` being the measured points' features) to its nearest measured point is added.
        The replicas' spread does not shrink enough near a measured point: the points that differ
        from the best only in instruction choices have features within a few hundredths of it, and
        with the spread bonus alone they still took about 20 of 24 measurements of one
        layernorm_matmul run, all within 0.7% of each other. With the novelty bonus the asks move
        on to kernels of another structure sooner (layernorm_matmul, 5 seeds of 24 measurements:
        final median 10,419 -> 8,695 us, a point four knobs from where seed 4 used to stay).
        `features` should be cheap to call again on the same point (`LoweredProblem` caches it)."""
        have_prior = bool(self.prior) and all(self.prior in f for f in feats)
        prior = -np.array([f[self.prior] for f in feats]) if have_prior else None  # type: ignore[index]
        if not use_model:
            return prior if prior is not None else np.zeros(len(feats))
        model = np.asarray(self.model.predict(feats), dtype=float)
        spread = (
            self.model.predict_spread(feats) if self.spread_weight and hasattr(self.model, "predict_spread") else None
        )
        if spread is not None:  # optimism where the model is unsure: mean + weight * replica spread
            model = model + self.spread_weight * spread
        if prior is None:
            score = _quantiles(model)
        else:
            evidence = self.prior_records if self.model.pretrained else 0.0
            w = self.prior_records / (self.prior_records + evidence + n_done)
            score = (1 - w) * _quantiles(model) + w * _quantiles(prior, self._rng)
        if self.novelty and known:
            score = score + self.novelty * _quantiles(_novelty(feats, known))
        return score

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)
