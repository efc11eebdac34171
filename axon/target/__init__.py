"""The machine as data: `HardwareSpec` from YAML (and, with lowering, the ISA table)."""

from axon.target.hardware import ENGINES, HardwareSpec, builtin_hw, load_hw

__all__ = ["ENGINES", "HardwareSpec", "builtin_hw", "load_hw"]
