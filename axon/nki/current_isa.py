"""The current `nki.isa` interface (Neuron SDK 2.28+): destination passing, `dst` first.

The instructions themselves live in `instructions.py`; this module is the namespace a kernel sees
as `import nki.isa as nisa`. A documented instruction the emulator does not implement raises an
`NKIError` naming it when the kernel looks it up, never an opaque AttributeError.
"""

from typing import Any

from axon.errors import NKIError
from axon.nki import instructions as I
from axon.nki.context import active, get_nc_version, kernel_site, nc_version  # noqa: F401  (issue 24: emulator side)
from axon.nki.instructions import (
    activation,
    activation_reduce,
    bn_aggr,
    bn_stats,  # noqa: F401
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    memset,
    nc_matmul,
    nc_matmul_mx,
    quantize_mx,
    reciprocal,
    reduce_cmd,
    scalar_engine,
    scalar_tensor_tensor,
    tensor_copy,
    tensor_engine,
    tensor_scalar,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_scan,
    unknown_engine,
    vector_engine,
)

# The nki.isa instructions of the Neuron 2.28-2.30 API reference that are not emulated.
NOT_EMULATED = (
    "tensor_partition_reduce",
    "tensor_scalar_cumulative",
    "tensor_copy_predicated",
    "exponential",
    "dropout",
    "range_select",
    "select_reduce",
    "sequence_bounds",
    "local_gather",
    "nc_n_gather",
    "dma_compute",
    "max8",
    "nc_find_index8",
    "nc_match_replace8",
    "nc_stream_shuffle",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "core_barrier",
    "sendrecv",
    "rng",
    "rand2",
    "rand_set_state",
    "rand_get_state",
    "set_rng_seed",
    "nonzero_with_count",
    "activate2",
    "tensor_copy_dynamic_src",
    "tensor_copy_dynamic_dst",
)


def dma_copy(
    dst: Any,
    src: Any,
    priority: Any = None,
    oob_mode: Any = None,
    dge_mode: Any = None,
    engine: Any = None,
    name: Any = None,
    dst_rmw_op: Any = None,
) -> Any:
    """`nisa.dma_copy(dst, src, ...)`: dst = src between SBUF and HBM, bit for bit when the dtypes
    match, else casting through float32 (Neuron 2.30). The current API has no `mask=`; its
    descriptor and priority options do not change the data. The 2.28 page's `dst_rmw_op=nl.add`
    adds src into dst."""
    return I.dma_copy(dst, src, isa=True, dst_rmw_op=dst_rmw_op)


def dma_transpose(
    dst: Any,
    src: Any,
    axes: Any = None,
    priority: Any = None,
    dge_mode: Any = None,
    oob_mode: Any = None,
    name: Any = None,
) -> Any:
    """`nisa.dma_transpose(dst, src, axes=(1, 0))` of a 2-D access (Neuron 2.30)."""
    if axes is not None and tuple(axes) != (1, 0):
        raise active().fail("dma_transpose axes", f"axes={tuple(axes)} (3-D/4-D DMA transposes) are not emulated")
    return I.dma_transpose(dst, src, isa=True)


def nc_transpose(dst: Any, data: Any, engine: Any = None, name: Any = None, **kw: Any) -> Any:
    """`nisa.nc_transpose(dst, data, engine=...)`: "The output dst tile must have the same data type
    as that of data" (page nki.isa.nc_transpose of the current API, Data types; the paragraph names
    no engine, so TensorE and VectorE alike): no cast on the way, unlike the legacy API's `dtype=`
    (neuronxcc.nki.isa.nc_transpose, 2.26) or nl.transpose's."""
    if dst is not None and data is not None and dst.dtype != data.dtype:
        raise active().fail(
            "nc_transpose dst dtype",
            f"nc_transpose writes dst in data's dtype: data is {data.dtype.name}, dst is {dst.dtype.name}",
            kernel_site(),
        )
    return I.nc_transpose(dst, data, engine=engine, name=name, **kw)


def iota(dst: Any, pattern: Any, offset: int = 0, channel_multiplier: int = 0, name: Any = None) -> Any:
    """`nisa.iota(dst, pattern, offset, channel_multiplier)`: offset + partition * channel_multiplier + the
    pattern's affine index (Neuron 2.30); an `nl.arange` expression in `pattern` keeps the older form."""
    if isinstance(pattern, (list, tuple)):
        return I.iota(dst, None, offset, channel_multiplier=channel_multiplier, pattern=pattern)
    return I.iota(dst, pattern, offset)


def tensor_reduce(
    dst: Any, op: Any, data: Any, axis: Any, negate: bool = False, keepdims: bool = False, name: Any = None, **kw: Any
) -> Any:
    """`nisa.tensor_reduce(dst, op, data, axis, negate=False, keepdims=False)`: the reduction axes
    must be the last contiguous free axes, ending at the final one (Neuron 2.31)."""
    return I.tensor_reduce(dst, op, data, axis, negate, keepdims, axes_rule="current", **kw)


def affine_select(
    dst: Any,
    pattern: Any,
    offset: Any = 0,
    channel_multiplier: Any = 0,
    on_true_tile: Any = None,
    on_false_value: Any = None,
    cmp_op: Any = None,
    name: Any = None,
) -> Any:
    """`nisa.affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value,
    cmp_op=nl.equal)` (the documented order); `affine_select(dst, pred, on_true_tile, on_false_value)`
    with an `nl.arange` predicate keeps the older form."""
    if not isinstance(pattern, (list, tuple)):
        if on_true_tile is None and not isinstance(offset, (int, float)):
            # older positional form: (dst, pred, on_true_tile, on_false_value)
            on_true_tile, on_false_value = offset, channel_multiplier
        return I.affine_select(dst, pattern, on_true_tile, on_false_value)
    return I.affine_select(
        dst,
        None,
        on_true_tile,
        on_false_value,
        pattern=pattern,
        offset=offset,
        channel_multiplier=channel_multiplier,
        cmp_op=cmp_op,
    )


def __getattr__(name: str) -> Any:
    if name in NOT_EMULATED:
        raise NKIError(f"nki.isa.{name} is not emulated by Axon's NKI emulator")
    raise AttributeError(f"module 'nki.isa' has no attribute {name!r}")
