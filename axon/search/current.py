"""The one answer to "is this record of the current code?": lowering the record's point again with
the code running now emits the same kernel (the same source hash), measured by the backend's
current version (`Backend.version`: the simulator's sources).

The tuner asks it before reusing a measurement or reporting a best kernel, the sweeps before
comparing with a previous sweep, and the results table before keeping a row: a refactor that
changes no emitted kernel keeps every record current, one that changes a kernel retires exactly
the records of that kernel.

>>> # CurrentCode(problem)(record) -> bool; see tests/search/test_current.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from axon.errors import AxonError
from axon.measure.records import Record
from axon.search.sampler import point_key


class Builds(Protocol):
    """What can say which kernel a point emits (a `LoweredProblem`)."""

    def build(self, point: dict[str, Any]) -> Any: ...


class CurrentCode:
    """`current(record)`: whether `problem` emits `record.kernel_hash` at `record.point` (cached)
    and, given the measuring backend's `version`, whether that version measured it (a simulator
    changed since may time the kernel otherwise)."""

    def __init__(self, problem: Builds, version: str | None = None) -> None:
        self.problem, self.version = problem, version
        self._seen: dict[tuple[str, str], bool] = {}

    def __call__(self, record: Record) -> bool:
        if self.version is not None and record.measured_by != self.version:
            return False
        key = (record.kernel_hash, point_key(record.point))
        if key not in self._seen:
            try:
                self._seen[key] = self.problem.build(dict(record.point)).kernel_hash == record.kernel_hash
            except AxonError:
                self._seen[key] = False
        return self._seen[key]

    def ranked(self, records: list[Record]) -> Iterator[Record]:
        """The ok records that are current, fastest first, one per kernel (points that emit the same
        kernel are one candidate)."""
        ok = sorted(
            ((r.latency_ns, r.id or 0, r) for r in records if r.status == "ok" and r.latency_ns is not None),
            key=lambda t: (t[0], t[1]),
        )
        kernels: set[str] = set()
        for _, _, r in ok:
            if r.kernel_hash not in kernels and self(r):
                kernels.add(r.kernel_hash)
                yield r

    def best(self, records: list[Record]) -> Record | None:
        """The fastest ok record that is current."""
        return next(self.ranked(records), None)
