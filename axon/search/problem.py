"""`LoweredProblem`: a workload's verified variants times their schedule spaces, as one search space.

A point is `{"variant": i, <knob>: value, ...}` over the union of the variants' knobs; knobs a
variant does not have are ignored when it is lowered (two such points are the same kernel, and the
record database recognises it by source hash). Lowering results are cached per point, since the
sampler scores many candidates and validation lowers too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from optuna.distributions import CategoricalDistribution

from axon.errors import AxonError
from axon.ir import Graph, matmul_flops, min_bytes
from axon.lower import lower
from axon.lower.emit import emit
from axon.lower.space import Space
from axon.measure.backend import kernel_hash
from axon.measure.records import task_key
from axon.search.features import program_features
from axon.search.prefetch import Prefetch, verdict_of
from axon.search.roofline import roofline
from axon.search.sampler import point_key
from axon.search.tuner import Candidate
from axon.target import HardwareSpec


class Variant(Protocol):
    """A graph the search may lower: the original or a proved rewrite of it (`axon.synth.Variant`)."""

    graph: Graph
    hash: str
    moves: Sequence[Any]  # the moves applied, each with a `.name`
    proofs: Sequence[Any]


class LoweredProblem:
    """Tune `graph` (bound to its shapes) on `hw` over `variants` (objects with `.graph`, `.hash`)."""

    def __init__(
        self,
        workload: str,
        graph: Graph,
        hw: HardwareSpec,
        variants: Sequence[Variant],
        dtype: str,
        label: str = "",
        workers: int = 1,
    ) -> None:
        if not variants:
            raise AxonError(f"{workload}: no variant to tune")
        self.workload, self.graph, self.hw, self.dtype, self.label = workload, graph, hw, dtype, label
        self.shapes = dict(graph.bindings)
        self.variants, self.spaces, self.skipped = [], [], []
        for v in variants:
            try:
                space = Space(v, hw)
            except AxonError as exc:  # a proved variant the lowering cannot express yet: say so, tune the rest
                self.skipped.append((v.hash, str(exc)))
                continue
            self.variants.append(v)
            self.spaces.append(space)
        if not self.variants:
            raise AxonError(f"{workload}: no variant can be lowered: {self.skipped[0][1]}")
        self._flops = float(matmul_flops(graph))
        self._min_bytes = float(min_bytes(graph))
        self.roofline_ns = roofline(graph, hw).bound_ns
        choices: dict[str, list[Any]] = {}
        for space in self.spaces:
            for knob in space.knobs:
                merged = choices.setdefault(knob.name, [])
                merged.extend(c for c in knob.choices if c not in merged)
        self._dists = {"variant": CategoricalDistribution(tuple(range(len(self.variants))))}
        self._dists.update({k: CategoricalDistribution(tuple(v)) for k, v in sorted(choices.items())})
        self._lowered = lru_cache(maxsize=4096)(self._lower_key)
        self._featured = lru_cache(maxsize=4096)(self._features_key)
        self._costs: dict[int, Any] = {}  # instruction costs across points (`program_features`)
        self._lowered_here: set[str] = set()  # keys this process lowered (to leave to a forked child the others)
        # with workers > 1, pools of candidates are lowered half here, half in a forked child (`prepare`)
        self.prefetch = Prefetch(self._verdict, self._lowered_here.__contains__, workers)

    @property
    def task(self) -> str:
        """The task key of this problem's records."""
        return task_key(self.workload, self.shapes, self.dtype, self.hw.file_hash, self.label)

    # the search space ------------------------------------------------------------------------------
    def distributions(self) -> dict[str, CategoricalDistribution]:
        return dict(self._dists)

    def _split(self, point: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        index = int(point.get("variant", 0))
        names = {k.name for k in self.spaces[index].knobs}
        return index, {k: v for k, v in point.items() if k in names}

    def complete(self, index: int, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """A full point for the study: the variant's knobs, every other knob at its first choice."""
        full = {name: dist.choices[0] for name, dist in self._dists.items()}
        full.update(knobs)
        full["variant"] = index
        return full

    def unfused_point(self, index: int = 0) -> dict[str, Any]:
        """The op-by-op baseline: the default point with every fusable intermediate cut to HBM.

        Where the space offers no `unfused` choice the graph is a single kernel either way, and the
        most split fusion choice it has is the same kernel.
        """
        point = self.spaces[index].default_point().as_dict()
        fusion = next((k for k in self.spaces[index].knobs if k.name == "fusion"), None)
        if fusion is not None:
            point["fusion"] = "unfused" if "unfused" in fusion.choices else fusion.choices[-1]
        return self.complete(index, point)

    def default_point(self, index: int = 0) -> dict[str, Any]:
        return self.complete(index, self.spaces[index].default_point().as_dict())

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        index = int(rng.integers(len(self.variants)))
        space = self.spaces[index]
        knobs = {k.name: k.choices[int(rng.integers(len(k.choices)))] for k in space.knobs}
        return self.complete(index, knobs)

    def mutate(self, point: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        index, knobs = self._split(point)
        if rng.random() < 0.1 and len(self.variants) > 1:
            index = int(rng.integers(len(self.variants)))
            base = self.spaces[index].default_point().as_dict()
            base.update({k: v for k, v in knobs.items() if k in base})
            return self.complete(index, base)
        space = self.spaces[index]
        knob = space.knobs[int(rng.integers(len(space.knobs)))]
        knobs[knob.name] = knob.choices[int(rng.integers(len(knob.choices)))]
        return self.complete(index, knobs)

    def neighbours(self, point: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every point one step from `point`: one knob of its variant set to another choice, or
        another variant with the knobs they share carried over (the rest at that variant's default)."""
        index, knobs = self._split(point)
        out = []
        for knob in self.spaces[index].knobs:
            for choice in knob.choices:
                if choice != knobs.get(knob.name):
                    out.append(self.complete(index, {**knobs, knob.name: choice}))
        for other in range(len(self.variants)):
            if other != index:
                base = self.spaces[other].default_point().as_dict()
                base.update({k: v for k, v in knobs.items() if k in base})
                out.append(self.complete(other, base))
        return out

    # lowering --------------------------------------------------------------------------------------
    def _lower_key(self, key: str) -> Any:
        if len(self._lowered_here) > 50_000:
            self._lowered_here.clear()
        self._lowered_here.add(key)
        point = json.loads(key)
        if not 0 <= int(point.get("variant", 0)) < len(self.spaces):  # a record of the spec before an edit:
            return f"variant {point.get('variant')} is not one of 0..{len(self.spaces) - 1}"  # was an IndexError
        index, knobs = self._split(point)
        space = self.spaces[index]
        for k in space.knobs:
            if knobs.get(k.name) not in k.choices:
                return f"knob {k.name}: {knobs.get(k.name)!r} is not one of {k.choices}"
        try:
            return lower(self.variants[index], knobs, self.hw)
        except AxonError as exc:
            return str(exc)

    def program(self, point: Mapping[str, Any]) -> Any:
        return self._lowered(point_key(point))

    def validate(self, point: Mapping[str, Any]) -> str | None:
        key = point_key(point)
        ahead = self.prefetch.get(key)
        if ahead is not None:
            return ahead[0]
        result = self._lowered(key)
        return result if isinstance(result, str) else None

    def _verdict(self, key: str) -> tuple[str | None, Mapping[str, float]]:
        return verdict_of(self._lowered(key), lambda: self._featured(key))

    def prepare(self, points: Sequence[Mapping[str, Any]]) -> None:
        """About to ask for `points`: keep the verdicts the look-ahead child (two workers, started by
        `prepare_async` at the previous ask) computed, and lower in this process, from the back, the ones
        it has not reached, until the two meet (`axon.search.prefetch`). Points the child was not given
        are lowered here when `validate` or `features` asks (a second child splitting them gained nothing:
        the look-ahead covers most of a pool)."""
        del points  # the look-ahead child was given its points when it started
        self.prefetch.collect()

    def prepare_async(self, points: Sequence[Mapping[str, Any]]) -> None:
        """Start lowering `points` in a forked child (two workers), kept by the next `prepare`."""
        self.prefetch.prepare_async([point_key(p) for p in points])

    def cancel_pending(self) -> None:
        self.prefetch.cancel()

    def features(self, point: Mapping[str, Any]) -> dict[str, float]:
        """The cost model's features of `point` (a copy: the sampler asks again for the same points
        every ask, the best's neighbours and the measured ones, so they are cached like lowering)."""
        return dict(self._featured(point_key(point)))

    def _features_key(self, key: str) -> dict[str, float]:
        ahead = self.prefetch.get(key)
        if ahead is not None:
            return dict(ahead[1])
        point = json.loads(key)
        prog = self.program(point)
        if isinstance(prog, str):
            return {}
        if len(self._costs) > 400_000:  # instructions of programs long evicted: start afresh
            self._costs.clear()
        f = program_features(prog, self.hw, self._flops, self._min_bytes, self.roofline_ns, self._costs)
        index, _ = self._split(point)
        f["variant_moves"] = float(len(self.variants[index].moves))
        return f

    def build(self, point: Mapping[str, Any]) -> Candidate:
        prog = self.program(point)
        if isinstance(prog, str):
            raise AxonError(f"point cannot be lowered: {prog}")
        index, _ = self._split(point)
        source = emit(prog)
        inputs = tuple((n.attr("name"), self.graph.concrete_shape(n.id), n.type.dtype) for n in self.graph.inputs)
        variant = self.variants[index]
        return Candidate(source, prog.name, inputs, self.features(point), variant.hash, kernel_hash(source))

    def describe(self, point: Mapping[str, Any]) -> str:
        index, knobs = self._split(point)
        moves = [m.name for m in self.variants[index].moves]
        return f"variant {index} ({' + '.join(moves) or 'as written'}), " + ", ".join(
            f"{k}={v}" for k, v in sorted(knobs.items())
        )
