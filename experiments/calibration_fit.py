"""The fitting half of experiments/calibration.py: hardware constants by dotted name, a cache of
traces (the trace does not depend on timing constants, so each kernel is traced once and simulated
many times), and a deterministic coordinate search in log space with every evaluation memoised,
so the leave-one-kernel-out refits reuse the full fit's simulations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (this repository's axon ahead of an installed one)

from axon.sim.residency import Residency, replay
from axon.target.hardware import HardwareSpec

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "experiments" / "results" / "work" / "calibration"


def with_constants(hw: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    """`hw` with constants replaced by dotted name (`"dma.chunk_overhead_ns"`); ints stay ints."""
    groups: dict[str, dict[str, Any]] = {}
    for path, v in values.items():
        group, name = path.split(".")
        old = getattr(getattr(hw, group), name)
        groups.setdefault(group, {})[name] = type(old)(round(v) if isinstance(old, int) else v)
    return dataclasses.replace(hw, **{g: dataclasses.replace(getattr(hw, g), **kv) for g, kv in groups.items()})


def source_key(*folders: str) -> str:
    """A hash of the Python sources under `folders` (relative to the repository)."""
    h = hashlib.sha256()
    for folder in folders:
        for p in sorted((REPO / folder).rglob("*.py")):
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def cached_trace(key_parts: Sequence[Any], make: Callable[[], Any]) -> Any:
    """The trace `make()` returns, pickled under WORK by a hash of `key_parts` and the emulator's source."""
    h = hashlib.sha256()
    for p in sorted((REPO / "axon" / "nki").glob("*.py")) + [REPO / "axon" / "target" / "trace.py"]:
        h.update(p.read_bytes())
    h.update(repr(key_parts).encode())
    path = WORK / f"{h.hexdigest()[:20]}.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    trace = make()
    WORK.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(trace))
    return trace


class ResidencyCache:
    """`replay(trace, hw)` depends on the trace and `compiler_sbuf_fraction` only: computed once per pair."""

    def __init__(self) -> None:
        self._done: dict[tuple[int, float], Residency] = {}

    def get(self, trace: Any, hw: HardwareSpec) -> Residency:
        key = (id(trace), hw.memory.compiler_sbuf_fraction)
        if key not in self._done:
            self._done[key] = replay(trace, hw)
        return self._done[key]


@dataclass(frozen=True)
class Constant:
    """A fitted constant: dotted name, bounds, and the value it had before any fit (`prior`: the
    published figure or the first estimate, which the fit's prior term is centred on)."""

    path: str
    lo: float
    hi: float
    prior: float


class CoordinateSearch:
    """Minimise `loss(results, exclude)` over constants, where `results = evaluate(values)`.

    Each constant moves by a factor (x2, then x1.41, x1.19, ...) while the loss falls; a round
    visits every constant; the search stops when the factor is below `min_step`. Values are
    rounded to 3 significant digits so that different searches land on the same memoised points.
    """

    def __init__(
        self, constants: Sequence[Constant], evaluate: Callable[[dict[str, float]], Any], store: Path | None = None
    ):
        self.constants = list(constants)
        self._evaluate = evaluate
        self.store = store  # evaluations kept on disk across runs (keyed by the simulator's source)
        self.memo: dict[tuple[float, ...], Any] = pickle.loads(store.read_bytes()) if store and store.exists() else {}

    def results(self, values: dict[str, float]) -> Any:
        key = tuple(values[c.path] for c in self.constants)
        if key not in self.memo:
            t0 = time.perf_counter()
            self.memo[key] = self._evaluate(values)
            print(f"  evaluation {len(self.memo)}: {key} ({time.perf_counter() - t0:.1f} s)", flush=True)
            if self.store:
                self.store.write_bytes(pickle.dumps(self.memo))
        return self.memo[key]

    def fit(
        self,
        start: dict[str, float],
        loss: Callable[[Any, dict[str, float]], float],
        step: float = 2.0,
        min_step: float = 1.09,
        rounds: int = 8,
    ) -> tuple[dict[str, float], float]:
        best = {k: _round3(v) for k, v in start.items()}
        best_loss = loss(self.results(best), best)
        while step >= min_step:
            for _ in range(rounds):
                moved = False
                for c in self.constants:
                    for direction in (step, 1 / step):
                        while True:
                            v = _round3(min(max(best[c.path] * direction, c.lo), c.hi))
                            if v == best[c.path]:
                                break
                            trial = {**best, c.path: v}
                            trial_loss = loss(self.results(trial), trial)
                            if trial_loss >= best_loss - 1e-9:
                                break
                            best, best_loss, moved = trial, trial_loss, True
                if not moved:
                    break
            step = math.sqrt(step)
        return best, best_loss


def _round3(v: float) -> float:
    return float(f"{v:.3g}")
