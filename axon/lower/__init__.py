"""Lowering a variant to NKI: the schedule space, `TileProgram`, and NKI source emission.

>>> from axon.workloads import get
>>> from axon.target import load_hw
>>> from axon.lower import Space, lower, emit
>>> hw = load_hw("trn1")
>>> space = Space(get("rmsnorm_matmul").graph("small"), hw, isel={})
>>> "nisa.nc_matmul" in emit(lower(space.graph, space.default_point(), hw))
True
"""

from axon.lower.baselines import expert_source, unfused, unfused_source
from axon.lower.emit import emit
from axon.lower.interpret import interpret
from axon.lower.lowering import KNOB_DEFAULTS, Rejected, lower
from axon.lower.program import TileProgram
from axon.lower.roles import LoweringError
from axon.lower.space import Knob, Point, Space

__all__ = [
    "KNOB_DEFAULTS",
    "Knob",
    "LoweringError",
    "Point",
    "Rejected",
    "Space",
    "TileProgram",
    "emit",
    "expert_source",
    "interpret",
    "lower",
    "unfused",
    "unfused_source",
]
