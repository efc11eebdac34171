"""An emulator of the NKI programming interface (current `nki` and legacy `neuronxcc.nki`).

It runs unmodified kernel files on NumPy (`run`), enforces the NeuronCore's rules as `NKIError`s
naming the kernel line, and records the instruction `Trace` the timing simulator consumes
(`trace`, shapes only). It models no timing itself.
"""

from axon.nki.runner import (
    Kernel,
    jit,
    load_kernel,
    load_source,
    run,
    run_with_trace,
    run_with_unwritten,
    simulate_kernel,
    trace,
)
from axon.nki.runner import install_shim as install_import_shim
from axon.target.trace import Access, Alloc, Instr, Loop, Trace

__all__ = [
    "Access",
    "Alloc",
    "Instr",
    "Kernel",
    "Loop",
    "Trace",
    "install_import_shim",
    "jit",
    "load_kernel",
    "load_source",
    "run",
    "run_with_trace",
    "run_with_unwritten",
    "simulate_kernel",
    "trace",
]
