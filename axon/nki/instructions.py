"""The nki.isa instructions, in the current destination-passing form (`dst` first).

Each function checks shapes, hands operands to `Machine.issue` (rules + trace record) and, in
execute mode, computes through the ISA table's semantics (`axon.target.isa`) in fp32, rounding on
the write to `dst`'s dtype. `dst=None` allocates the result (used by the legacy, value-returning
API in `legacy_isa.py`). Legacy `mask=` predicates shrink every operand to the masked box.

This module is the namespace (`current_isa`, `legacy_isa` and `language` use `instructions.X`); the
instructions live in `isa_base` (shared pieces), `isa_tensor`, `isa_vector` and `isa_misc`.
"""

from __future__ import annotations

from axon.nki.isa_base import (
    _NUMPY_NAMES,
    M,
    _accumulation_groups,
    _empty,
    _engine,
    _masked,
    _new,
    _open_group,
    _same_count,
    _set_groups,
    _simple,
    _transposed_box,
    _val,
    _write,
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    op_name,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from axon.nki.isa_misc import (
    _pattern_values,
    affine_select,
    bn_aggr,
    bn_stats,
    copy_tile,
    iota,
    memset,
    nc_matmul_mx,
    quantize_mx,
    reciprocal,
    tensor_copy,
    tensor_tensor_scan,
)
from axon.nki.isa_tensor import dma_copy, dma_transpose, nc_matmul, nc_transpose
from axon.nki.isa_vector import (
    _activation,
    _axes,
    _reduce_cmd,
    _scalar_reduce_regs,
    _vec,
    activation,
    activation_reduce,
    scalar_tensor_tensor,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_reduce,
    tensor_tensor,
)
