"""`MemoryState` searches long HBM tables through an index by first byte: it finds the same records,
in the same order, as scanning the whole table, and so the same dependencies."""

from __future__ import annotations

import numpy as np
import pytest

from axon.sim import memory as M
from axon.sim.memory import MemoryState
from axon.target.trace import Access


def _access(rng: np.random.Generator, alloc: int, buffer: str) -> Access:
    if buffer == "hbm":
        lo = int(rng.integers(0, 4096)) * 4
        return Access(alloc, "hbm", 0, 1, lo, lo + int(rng.integers(1, 700)) * 4, 64)
    p0 = int(rng.integers(0, 128))
    lo = int(rng.integers(0, 512)) * 4
    return Access(alloc, buffer, p0, p0 + int(rng.integers(1, 129 - p0)), lo, lo + int(rng.integers(1, 64)) * 4, 64)


def _run(seed: int) -> list:
    """The producers of a random instruction stream over HBM and SBUF tensors, and the final tables."""
    rng = np.random.default_rng(seed)
    mem = MemoryState({0: 0, 1: 1, 2: 2})
    buffers = {0: "hbm", 1: "hbm", 2: "sbuf"}
    out = []
    for i in range(1500):
        reads = tuple(_access(rng, int(a), buffers[int(a)]) for a in rng.integers(0, 3, int(rng.integers(0, 3))))
        writes = tuple(_access(rng, int(a), buffers[int(a)]) for a in rng.integers(0, 3, int(rng.integers(0, 2))))
        out.append(mem.producers(reads, writes))
        mem.record(reads, writes, float(rng.integers(0, 50) + i), float(rng.integers(0, 50) + i), "vector", i)
    out.append((mem.writers, mem.readers))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_indexed_search_finds_what_scanning_finds_in_order(monkeypatch, seed):
    scanned = _run(seed)
    with monkeypatch.context() as m:
        m.setattr(M, "_SCAN", 0)  # every HBM table through its index
        indexed = _run(seed)
    assert indexed == scanned
    assert sum(len(p) for p in scanned[:-1]) > 1000  # the stream has dependencies to find
