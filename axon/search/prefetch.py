"""`Prefetch`: the lowering verdicts and features of candidate points, computed ahead in a forked
child (`axon.forked`) while the tuner does something else.

Each ask of the cost-model sampler lowers a pool of about two hundred points and computes the
features of the valid ones: a quarter of an attention tune's CPU, all of it pure. With two workers
the pool is split, half lowered here and half in a child (`prepare`), and the next ask's random
points (known in advance: they are the sampler's next draws) are lowered by a child while this
process measures the current trial (`prepare_async`). What a child computed is kept here by point
key as (verdict, features): the verdict is None for a point that lowers, else the reason it does
not. The values are the ones this process would compute (lowering and features are functions of
the point), so the search decides exactly what it decides with one worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from axon.forked import ChildFailed, Forked, in_parallel

Verdict = tuple[str | None, Mapping[str, float]]

_MIN_SPLIT = 8  # fewer points than this are not worth a child
_MAX_KEPT = 50_000  # verdicts kept; the whole store is dropped past this (they are recomputed on demand)


class Prefetch:
    """Verdicts computed ahead, by point key. `compute(key)` gives a point's verdict in this process;
    `known(key)` says whether this process has it already (cheap to compute again)."""

    def __init__(self, compute: Callable[[str], Verdict], known: Callable[[str], bool], workers: int) -> None:
        self.compute, self.known, self.workers = compute, known, workers
        self.kept: dict[str, Verdict] = {}
        self._pending: Forked[list[tuple[str, Verdict]]] | None = None
        self._pending_keys: frozenset[str] = frozenset()  # what that child computes

    def get(self, key: str) -> Verdict | None:
        return self.kept.get(key)

    def _todo(self, keys: Iterable[str]) -> list[str]:
        return [k for k in dict.fromkeys(keys) if k not in self.kept and not self.known(k)]

    def _keep(self, got: list[tuple[str, Verdict]]) -> None:
        if len(self.kept) + len(got) > _MAX_KEPT:
            self.kept.clear()
        self.kept.update(got)

    def collect(self) -> None:
        """Keep what the child started by `prepare_async` computed (waiting for it)."""
        pending, self._pending, self._pending_keys = self._pending, None, frozenset()
        if pending is not None:
            try:
                self._keep(pending.result(timeout=300))
            except ChildFailed:
                pass  # computed here when asked for

    def cancel(self) -> None:
        pending, self._pending, self._pending_keys = self._pending, None, frozenset()
        if pending is not None:
            pending.cancel()

    def prepare(self, keys: Iterable[str]) -> None:
        """Have every key's verdict ready: those neither done nor being done by the `prepare_async`
        child split between this process and a new child, then both children's kept."""
        if self.workers < 2:
            return
        todo = [k for k in self._todo(keys) if k not in self._pending_keys]
        if len(todo) < _MIN_SPLIT:
            self.collect()
            return
        mine, theirs = todo[::2], todo[1::2]

        def here() -> None:
            for k in mine:
                self.compute(k)
            self.collect()

        _, got = in_parallel(here, lambda: [(k, self.compute(k)) for k in theirs], self.workers)
        self._keep(got)

    def prepare_async(self, keys: Iterable[str]) -> None:
        """Start a child computing these keys' verdicts; `collect` (or the next `prepare`) keeps them."""
        self.cancel()
        if self.workers < 2:
            return
        todo = self._todo(keys)
        if todo:
            self._pending = Forked(lambda: [(k, self.compute(k)) for k in todo])
            self._pending_keys = frozenset(todo)


def verdict_of(program: Any, features: Callable[[], Mapping[str, float]]) -> Verdict:
    """(None, features) for a lowered program, (reason, {}) for a point that does not lower."""
    return (program, {}) if isinstance(program, str) else (None, dict(features()))
