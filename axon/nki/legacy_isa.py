"""The legacy `neuronxcc.nki.isa` interface: instructions return new tiles, `mask=` on most calls,
and the tile assignment forms `dst[...] = value` and `psum_tile += nc_matmul(...)`.

Every function here forwards to the destination-passing instruction in `instructions.py` with
`dst=None`; nothing computes here. Assignment of a freshly produced tile redirects the producing
instruction to the destination, as the NKI compiler does, instead of recording a copy.
"""

from __future__ import annotations

from typing import Any

from axon.nki import instructions as I
from axon.nki.context import active, get_nc_version, nc_version  # noqa: F401  (issue 24: emulator side)
from axon.nki.dtypes import as_dtype, stored
from axon.nki.indexing import IndexExpr, Predicate
from axon.nki.instructions import (
    engine,
    gpsimd_engine,
    reduce_cmd,
    scalar_engine,  # noqa: F401
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from axon.nki.memory import View
from axon.nki.view_ops import OPERATORS
from axon.target.trace import Instr


def _fresh(value: View) -> Instr | None:
    """The last instruction, if it produced `value` as a temporary nothing else has seen."""
    m = active()
    if not value.alloc.temp or value.alloc.producer != len(m.instrs) - 1 or value.alloc.producer < 0:
        return None
    if value.shape != value.alloc.shape:
        return None
    return m.instrs[-1]


def _fit(dst: View, value: View) -> View:
    """A masked instruction yields the kept box only; it lands at the origin of the destination
    (masks of ragged tails keep [0, n) of each index variable)."""
    if (
        value.shape == dst.shape
        or len(value.shape) != len(dst.shape)
        or any(v > d for v, d in zip(value.shape, dst.shape))
    ):
        return dst
    return dst.index(tuple(slice(0, v) for v in value.shape))


def _per_partition(value: View, dst: View) -> bool:
    """`value` holds one value per partition of the on-chip tile `dst` ([P, 1] against [P, F]): it
    broadcasts along the free axes, as in nl.add(dst, value), instead of landing in dst's corner."""
    return (
        value.shape != dst.shape
        and len(value.shape) == len(dst.shape) >= 2
        and value.shape[0] == dst.shape[0]
        and all(s == 1 for s in value.shape[1:])
        and "hbm" not in (value.alloc.kind, dst.alloc.kind)
    )


def _check_fits(dst: View, value: View, op: str) -> None:
    """A value tile smaller than `dst` (not one per partition): NumPy refuses the assignment, and so
    does this; it used to land silently in dst's corner, the rest of dst left as it was."""
    if value.shape != dst.shape and _fit(dst, value) is not dst:
        raise active().fail(
            "shape mismatch",
            f"{dst!r} {op} a {list(value.shape)} tile: the shapes differ (slice dst to the value's shape, or "
            "broadcast_to the value)",
        )


def assign(dst: View, value: Any) -> None:
    """`dst[...] = value`."""
    m = active()
    if isinstance(value, View) and _per_partition(value, dst):
        value = OPERATORS["broadcast"](value, dst.shape)
    if isinstance(value, View):
        _check_fits(dst, value, "[...] =")
        dst = _fit(dst, value)
    if not isinstance(value, View):
        I.memset(dst, value)
        return
    if dst.same_region(value):
        return  # `t[i] += x` stores back the view __iadd__ already updated
    if dst.alloc.kind == "hbm" or value.alloc.kind == "hbm":
        I.dma_copy(dst, value)
        return
    ins = _fresh(value)
    # A matmul assigned to a PSUM tile writes it directly (no temporary bank; issue 24).
    if (
        ins is not None
        and (ins.opcode != "nc_matmul" or dst.alloc.kind == "psum")
        and tuple(dst.shape) == tuple(value.shape)
    ):
        box = value.alloc.last_write
        dst = _fit(dst, box)
        m.check_operand(ins.opcode, "dst", dst, ins.engine, (m.file, ins.line))
        if m.execute:
            dst.alloc.data[dst.np_index()] = stored(value.alloc.data[box.np_index()], dst.alloc.dtype)  # type: ignore[index]
        m.retarget_last(value, dst, accumulate=False)
        return
    I.tensor_copy(dst, value)


def accumulate(dst: View, value: Any, fn: str) -> View:
    """`dst += value` (also -=, *=): PSUM accumulation for a fresh matmul, else one VectorE op."""
    m = active()
    if isinstance(value, View) and _per_partition(value, dst):
        I.tensor_scalar(dst, dst, fn, value)
        return dst
    if isinstance(value, View):
        _check_fits(dst, value, {"add": "+=", "subtract": "-="}.get(fn, "*="))
        whole, dst = dst, _fit(dst, value)
        ins = _fresh(value)
        if (
            ins is not None
            and ins.opcode == "nc_matmul"
            and fn == "add"
            and dst.alloc.kind == "psum"
            and tuple(value.shape) == tuple(dst.shape)
        ):
            box = value.alloc.last_write
            dst = _fit(dst, box)
            m.check_readable(dst, "dst", "nc_matmul", (m.file, ins.line))
            if m.execute:
                cur = dst.alloc.data[dst.np_index()]  # type: ignore[index]
                dst.alloc.data[dst.np_index()] = cur + value.alloc.data[box.np_index()]  # type: ignore[index]
            m.retarget_last(value, dst, accumulate=True)
            return whole
        I.tensor_tensor(dst, dst, value, fn)
        return whole
    I.tensor_scalar(dst, dst, fn, value)
    return dst


# ---- value-returning instruction forms ---------------------------------------------------------


def nc_matmul(
    stationary: View,
    moving: View,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    mask: Predicate | None = None,
    **kw: Any,
) -> View:
    return I.nc_matmul(
        None, stationary, moving, is_transpose=is_transpose, accumulate=False, perf_mode=kw.get("perf_mode"), mask=mask
    )


def nc_transpose(data: View, mask: Predicate | None = None, dtype: Any = None, engine: Any = None, **kw: Any) -> View:
    return I.nc_transpose(None, data, engine=engine, mask=mask, dtype=dtype)


def activation(
    op: Any,
    data: View,
    bias: Any = None,
    scale: Any = 1.0,
    reduce_op: Any = None,
    reduce_res: View | None = None,
    reduce_cmd: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    **kw: Any,
) -> View:
    return I.activation(None, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd, mask=mask, dtype=dtype)


def activation_reduce(
    op: Any,
    data: View,
    reduce_op: Any = None,
    reduce_res: View | None = None,
    bias: Any = None,
    scale: Any = 1.0,
    mask: Predicate | None = None,
    dtype: Any = None,
    **kw: Any,
) -> View:
    return I.activation_reduce(None, op, data, reduce_op, reduce_res, bias, scale, mask=mask, dtype=dtype)


def tensor_tensor(
    data1: View, data2: View, op: Any, dtype: Any = None, mask: Predicate | None = None, engine: Any = None, **kw: Any
) -> View:
    return I.tensor_tensor(None, data1, data2, op, engine=engine, mask=mask, dtype=dtype)


def tensor_scalar(
    data: View,
    op0: Any,
    operand0: Any,
    reverse0: bool = False,
    op1: Any = None,
    operand1: Any = None,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Predicate | None = None,
    engine: Any = None,
    **kw: Any,
) -> View:
    return I.tensor_scalar(
        None, data, op0, operand0, reverse0, op1, operand1, reverse1, engine=engine, mask=mask, dtype=dtype
    )


def tensor_scalar_reduce(
    data: View,
    op0: Any,
    operand0: Any,
    reduce_op: Any,
    reduce_res: View,
    reverse0: bool = False,
    dtype: Any = None,
    mask: Predicate | None = None,
    **kw: Any,
) -> View:
    return I.tensor_scalar_reduce(None, data, op0, operand0, reduce_op, reduce_res, reverse0, mask=mask, dtype=dtype)


def scalar_tensor_tensor(
    data: View,
    op0: Any,
    operand0: Any,
    op1: Any,
    operand1: View,
    reverse0: bool = False,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Predicate | None = None,
    **kw: Any,
) -> View:
    return I.scalar_tensor_tensor(None, data, op0, operand0, op1, operand1, reverse0, reverse1, mask=mask, dtype=dtype)


def tensor_reduce(
    op: Any,
    data: View,
    axis: Any,
    mask: Predicate | None = None,
    dtype: Any = None,
    negate: bool = False,
    keepdims: bool = False,
    **kw: Any,
) -> View:
    return I.tensor_reduce(None, op, data, axis, negate, keepdims, mask=mask, dtype=dtype, axes_rule="legacy")


def tensor_copy(src: View, mask: Predicate | None = None, dtype: Any = None, engine: Any = None, **kw: Any) -> View:
    return I.copy_tile(None, src, engine, mask, dtype, legacy=True)


def reciprocal(data: View, dtype: Any = None, mask: Predicate | None = None, **kw: Any) -> View:
    return I.reciprocal(None, data, mask=mask, dtype=dtype)


def memset(shape: Any, value: Any, dtype: Any, mask: Predicate | None = None, engine: Any = None, **kw: Any) -> View:
    t = I._new(active(), tuple(shape), as_dtype(dtype))
    return I.memset(t, value, engine=engine, mask=mask)


def iota(expr: IndexExpr, dtype: Any, mask: Predicate | None = None, **kw: Any) -> View:
    t = I._new(active(), expr.shape if expr.ndim > 1 else (expr.shape[0], 1), as_dtype(dtype))
    return I.iota(t, expr, mask=mask)


def affine_select(
    pred: Predicate,
    on_true_tile: View,
    on_false_value: Any,
    mask: Predicate | None = None,
    dtype: Any = None,
    **kw: Any,
) -> View:
    return I.affine_select(None, pred, on_true_tile, on_false_value, mask=mask, dtype=dtype)


def tensor_tensor_scan(
    data0: View,
    data1: View,
    initial: Any,
    op0: Any,
    op1: Any,
    reverse0: bool = False,
    reverse1: bool = False,
    dtype: Any = None,
    mask: Predicate | None = None,
    **kw: Any,
) -> View:
    return I.tensor_tensor_scan(None, data0, data1, initial, op0, op1, reverse0, reverse1, mask=mask, dtype=dtype)


def bn_stats(data: View, mask: Predicate | None = None, dtype: Any = None, **kw: Any) -> View:
    return I.bn_stats(None, data, mask=mask, dtype=dtype)


def bn_aggr(data: View, mask: Predicate | None = None, dtype: Any = None, **kw: Any) -> View:
    return I.bn_aggr(None, data, mask=mask, dtype=dtype)


def dma_copy(dst: View, src: View, mask: Predicate | None = None, dst_rmw_op: Any = None, **kw: Any) -> View:
    return I.dma_copy(dst, src, mask=mask, isa=True, dst_rmw_op=dst_rmw_op)


def dma_transpose(src: View, axes: Any = None, mask: Predicate | None = None, dtype: Any = None, **kw: Any) -> View:
    t = I._new(active(), src.shape[::-1], as_dtype(dtype) if dtype is not None else src.dtype)
    return I.dma_transpose(t, src, mask=mask, isa=True)


# the operators of views in legacy tile expressions (`t[...] = x`, `t += x`)
OPERATORS.update(assign=assign, accumulate=accumulate)
