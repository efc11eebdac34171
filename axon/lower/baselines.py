"""The two baselines Axon's kernels are compared with.

`unfused`: each op its own pass with default tiles and an HBM round trip between ops (what an
op-by-op graph compiler without fusion emits), produced by the same lowering with `fusion="unfused"`.
`expert`: the hand-written NKI kernels in `axon.lower.expert`. Neither is tuned.
"""

from __future__ import annotations

from typing import Any

from axon.lower.emit import emit
from axon.lower.expert import source
from axon.lower.lowering import lower
from axon.lower.program import TileProgram


def unfused(variant: Any, hw: Any) -> TileProgram:
    """The op-by-op lowering of a graph.

    >>> from axon.workloads import get
    >>> from axon.target import load_hw
    >>> len(unfused(get("softmax").graph("small"), load_hw("trn1")).scratch) > 0
    True
    """
    return lower(variant, {"fusion": "unfused"}, hw)


def unfused_source(variant: Any, hw: Any) -> str:
    return emit(unfused(variant, hw))


def expert_source(workload: str) -> str:

    return source(workload)
