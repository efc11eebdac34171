"""The ISA table: every NKI instruction Axon knows, once, with its meaning.

Each `Instruction` row names the engines that may run it, where each operand may live and which
size limits apply (as paths into `HardwareSpec`, so trn1 and trn2 can differ), and its semantics as
a function over a math namespace `m` (`axon.target.semantics`, re-exported here): NumPy
(`NUMPY_FP32`, used by the emulator) and Z3 (passed by `axon.verify`) read the same definition.
Costs are not here: `Instruction.cost` looks up `axon.target.costs.CYCLES`, the single home of cost
formulas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from axon.target.costs import CYCLES
from axon.target.semantics import (
    ACTIVATION,
    ALU,
    BITVEC,
    NUMPY_FP32,
    REDUCE_ALIASES,
    REDUCE_KINDS,
    Fp32Math,
    sem_activation,
    sem_bn_aggr,
    sem_bn_stats,
    sem_copy,
    sem_nc_matmul,
    sem_reciprocal,
    sem_reduce,
    sem_scalar_tensor_tensor,
    sem_scan,
    sem_tensor_scalar,
    sem_tensor_tensor,
    sem_transpose,
)

# ---- the table ---------------------------------------------------------------------------------

SBUF, PSUM, HBM = "sbuf", "psum", "hbm"
ON_CHIP = frozenset({SBUF, PSUM})


@dataclass(frozen=True)
class Operand:
    """Where one operand may live and the size limits it obeys.

    `max_partitions` / `max_free` are dotted paths into `HardwareSpec` (e.g.
    "tensor_engine.moving_fmax"), so limits follow the hardware file.
    """

    name: str
    buffers: frozenset[str]
    max_partitions: str | None = "memory.partitions"
    max_free: str | None = None
    rule: str = ""  # name of the size rule in error messages ("moving free size > 512")


@dataclass(frozen=True)
class Instruction:
    """One NKI instruction.

    >>> from axon.target import ISA
    >>> ISA["nc_matmul"].engines, sorted(ISA["nc_matmul"].inputs[0].buffers)
    (('tensor',), ['sbuf'])
    """

    name: str
    engines: tuple[str, ...]  # allowed engines; the first is the default
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    semantics: Callable[..., Any]
    summary: str = ""
    attrs: tuple[str, ...] = field(default=())

    @property
    def cost(self) -> Callable[..., float]:
        """The cycle formula `f(instr, hw)` from `axon.target.costs.CYCLES`."""
        return CYCLES[self.name]

    def __post_init__(self) -> None:
        # name -> Operand, looked up once per operand of every emulated instruction
        object.__setattr__(self, "_by_name", {o.name: o for o in self.inputs + self.outputs})

    def operand(self, name: str) -> Operand:
        return self._by_name[name]  # type: ignore[attr-defined]


def _o(name: str, buffers: frozenset[str] = ON_CHIP, **kw: Any) -> Operand:
    return Operand(name, buffers, **kw)


_VEC = ("vector", "gpsimd")
_ANY = ("vector", "scalar", "gpsimd")
_SB = frozenset({SBUF})
_PS = frozenset({PSUM})
_ALLMEM = frozenset({SBUF, PSUM, HBM})

ISA: dict[str, Instruction] = {
    i.name: i
    for i in (
        Instruction(
            "nc_matmul",
            ("tensor",),
            (
                _o("stationary", _SB, max_free="tensor_engine.stationary_fmax", rule="stationary free size"),
                _o("moving", _SB, max_free="tensor_engine.moving_fmax", rule="moving free size"),
            ),
            (_o("dst", _PS),),
            sem_nc_matmul,
            "dst[M,N] (+)= stationary[K,M].T @ moving[K,N], fp32 accumulate in PSUM",
        ),
        Instruction(
            "nc_transpose",
            ("tensor", "vector"),
            (_o("data"),),
            (_o("dst"),),
            sem_transpose,
            "swap partition and free axis (TensorE <= 128x128 into PSUM, VectorE <= 32x32)",
        ),
        Instruction(
            "activation",
            ("scalar",),
            (_o("data"), _o("bias"), _o("scale")),
            (_o("dst"),),
            sem_activation,
            "dst = op(data * scale + bias), optional free-axis add-reduction",
            ("op",),
        ),
        Instruction(
            "activation_reduce",
            ("scalar",),
            (_o("data"), _o("bias"), _o("scale")),
            (_o("dst"), _o("reduce_res")),
            sem_activation,
            "activation plus free-axis reduction",
        ),
        Instruction(
            "tensor_tensor",
            _VEC,
            (_o("data1"), _o("data2")),
            (_o("dst"),),
            sem_tensor_tensor,
            "dst = data1 op data2, elementwise",
        ),
        Instruction(
            "tensor_scalar",
            ("vector", "scalar", "gpsimd"),
            (_o("data"), _o("operand0"), _o("operand1")),
            (_o("dst"),),
            sem_tensor_scalar,
            "dst = (data op0 operand0) op1 operand1",
        ),
        Instruction(
            "tensor_scalar_reduce",
            ("vector",),
            (_o("data"), _o("operand0")),
            (_o("dst"), _o("reduce_res")),
            sem_tensor_scalar,
            "tensor_scalar with one op plus a free-axis reduction",
        ),
        Instruction(
            "scalar_tensor_tensor",
            ("vector", "gpsimd"),
            (_o("data"), _o("operand0"), _o("operand1")),
            (_o("dst"),),
            sem_scalar_tensor_tensor,
            "dst = (data op0 operand0) op1 operand1[tile]",
        ),
        Instruction("tensor_reduce", _VEC, (_o("data"),), (_o("dst"),), sem_reduce, "reduce along free axes"),
        Instruction("tensor_copy", _ANY, (_o("src"),), (_o("dst"),), sem_copy, "copy with dtype cast"),
        Instruction(
            "tensor_tensor_scan",
            ("vector",),
            (_o("data0"), _o("data1"), _o("initial")),
            (_o("dst"),),
            sem_scan,
            "running r[i] = (data0[i] op0 r[i-1]) op1 data1[i] along the free axis",
        ),
        Instruction("reciprocal", _VEC, (_o("data"),), (_o("dst"),), sem_reciprocal, "dst = 1 / data"),
        Instruction("memset", _ANY, (), (_o("dst"),), sem_copy, "fill with a constant"),
        Instruction("iota", ("gpsimd",), (), (_o("dst", _SB),), sem_copy, "fill with an affine index expression"),
        Instruction(
            "affine_select",
            ("gpsimd",),
            (_o("on_true_tile", _SB),),
            (_o("dst", _SB),),
            sem_copy,
            "dst = pred(index) ? on_true : on_false_value",
        ),
        Instruction(
            "bn_stats",
            ("vector",),
            (_o("data", max_free="bn_stats_fmax"),),
            (_o("dst"),),
            sem_bn_stats,
            "per-partition count/mean/M2 of <= 512 free elements",
        ),
        Instruction(
            "bn_aggr",
            ("vector",),
            (_o("data"),),
            (_o("dst"),),
            sem_bn_aggr,
            "aggregate bn_stats groups into mean and variance",
        ),
        Instruction(
            "dma_copy",
            ("dma",),
            (_o("src", _ALLMEM),),
            (_o("dst", _ALLMEM),),
            sem_copy,
            "DMA copy between HBM and SBUF (or within one)",
        ),
        Instruction(
            "dma_transpose",
            ("dma",),
            (_o("src", _ALLMEM),),
            (_o("dst", _ALLMEM),),
            sem_transpose,
            "DMA copy that swaps the two axes of a 2-D access",
        ),
    )
}

# Size limits that are not HardwareSpec fields (fixed by the ISA itself).
ISA_LIMITS = {"bn_stats_fmax": 512, "vector_transpose_max": 32}

__all__ = [
    "ISA",
    "ISA_LIMITS",
    "Instruction",
    "Operand",
    "HBM",
    "ON_CHIP",
    "PSUM",
    "SBUF",
    "ACTIVATION",
    "ALU",
    "BITVEC",
    "Fp32Math",
    "NUMPY_FP32",
    "REDUCE_ALIASES",
    "REDUCE_KINDS",
    "sem_activation",
    "sem_bn_aggr",
    "sem_bn_stats",
    "sem_copy",
    "sem_nc_matmul",
    "sem_reciprocal",
    "sem_reduce",
    "sem_scalar_tensor_tensor",
    "sem_scan",
    "sem_tensor_scalar",
    "sem_tensor_tensor",
    "sem_transpose",
]
