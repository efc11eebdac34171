"""The machine as data: `HardwareSpec` from YAML and the ISA table (`ISA`, `Instruction`)."""

from axon.target.hardware import DEFAULT_HW, ENGINES, HardwareSpec, builtin_hw, load_hw
from axon.target.isa import ACTIVATION, ALU, ISA, NUMPY_FP32, Instruction, Operand

__all__ = [
    "DEFAULT_HW",
    "ACTIVATION",
    "ALU",
    "ENGINES",
    "HardwareSpec",
    "ISA",
    "Instruction",
    "NUMPY_FP32",
    "Operand",
    "builtin_hw",
    "load_hw",
]
