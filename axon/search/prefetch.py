"""`Prefetch`: the lowering verdicts and features of candidate points, computed ahead in a forked
child (`axon.forked`) while the tuner does something else.

Each ask of the cost-model sampler lowers a pool of about two hundred points and computes the
features of the valid ones: a quarter of an attention tune's CPU, all of it pure. With two workers
the next ask's random points (known in advance: they are the sampler's next draws) are lowered by a
child while this process measures the current trial (`prepare_async`), and the ask takes what it
did (`prepare`), finishing what it did not reach. What a child computed is kept here by point
key as (verdict, features): the verdict is None for a point that lowers, else the reason it does
not. The values are the ones this process would compute (lowering and features are functions of
the point), so the search decides exactly what it decides with one worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from axon.forked import Stream

Verdict = tuple[str | None, Mapping[str, float]]

_MAX_KEPT = 50_000  # verdicts kept; the whole store is dropped past this (they are recomputed on demand)


class Prefetch:
    """Verdicts computed ahead, by point key. `compute(key)` gives a point's verdict in this process;
    `known(key)` says whether this process has it already (cheap to compute again)."""

    def __init__(self, compute: Callable[[str], Verdict], known: Callable[[str], bool], workers: int) -> None:
        self.compute, self.known, self.workers = compute, known, workers
        self.kept: dict[str, Verdict] = {}
        self._pending: Stream[tuple[str, Verdict]] | None = None
        self._pending_keys: list[str] = []  # what that child computes, in its order
        self.look_ahead = True  # False for the last ask of a run: there is no next ask to lower for

    def get(self, key: str) -> Verdict | None:
        return self.kept.get(key)

    def _keep(self, got: list[tuple[str, Verdict]]) -> None:
        if len(self.kept) + len(got) > _MAX_KEPT:
            self.kept.clear()
        self.kept.update(got)

    def collect(self) -> None:
        """Keep what the `prepare_async` child computed; the keys it has not reached yet are computed
        here, from the last one back, while it goes on from the front, until the two meet (so this
        process never waits for the child, and a child that died or hangs costs nothing but itself)."""
        pending, keys = self._pending, self._pending_keys
        self._pending, self._pending_keys = None, []
        if pending is None:
            return
        done: set[str] = set()

        def take() -> None:
            got = pending.poll()
            self._keep(got)
            done.update(k for k, _ in got)

        take()
        while keys and not pending.ended:
            if keys[-1] not in done:
                self.compute(keys[-1])  # kept in this process's own caches
            done.add(keys.pop())
            take()
            while keys and keys[-1] in done:
                keys.pop()
        pending.cancel()

    def cancel(self) -> None:
        pending, self._pending, self._pending_keys = self._pending, None, []
        if pending is not None:
            pending.cancel()

    def prepare_async(self, keys: Iterable[str]) -> None:
        """Start a child computing these keys' verdicts, each sent as it is done; `collect` keeps them."""
        self.cancel()
        if self.workers < 2 or not self.look_ahead:
            return
        todo = [k for k in dict.fromkeys(keys) if k not in self.kept and not self.known(k)]
        if todo:
            self._pending = Stream(lambda: ((k, self.compute(k)) for k in todo))
            self._pending_keys = list(todo)


def verdict_of(program: Any, features: Callable[[], Mapping[str, float]]) -> Verdict:
    """(None, features) for a lowered program, (reason, {}) for a point that does not lower."""
    return (program, {}) if isinstance(program, str) else (None, dict(features()))
