"""Copies, reciprocals, fills (`memset`, `iota`, `affine_select`), scans, batch-norm statistics,
and the documented instructions not emulated."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from axon.nki.context import active, kernel_site
from axon.nki.dtypes import float32
from axon.nki.indexing import IndexExpr, Predicate
from axon.nki.isa_base import (
    M,
    _copied,
    _empty,
    _engine,
    _masked,
    _new,
    _not_both_psum,
    _same_count,
    _simple,
    _val,
    op_name,
)
from axon.nki.isa_vector import _vec
from axon.nki.machine import Machine
from axon.nki.memory import View
from axon.target import isa as T


def tensor_copy(
    dst: View | None,
    src: View,
    engine: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    name: Any = None,
    **_: Any,
) -> View:
    """Copy (and cast) a tile on Vector, Scalar (NeuronCore-v3 and later) or GpSimd."""
    return copy_tile(dst, src, engine, mask, dtype, legacy=False)


def copy_tile(dst: View | None, src: View, engine: Any, mask: Predicate | None, dtype: Any, legacy: bool) -> View:
    """tensor_copy of either API. The pages differ on ScalarE of NeuronCore-v2 (trn1, inf2): the
    current nki.isa.tensor_copy page (2.28 on) lists only Vector and GpSimd for v2 and points to
    activation(op=nl.copy) instead, so the current API refuses it there; the legacy
    neuronxcc.nki.isa.tensor_copy page (2.26) has v2's ScalarE copy through an fp32 cast, so a
    same-dtype copy there is not bit-accurate (an int32 beyond 2^24 rounds)."""
    m, site = active(), kernel_site()
    eng = _engine("tensor_copy", engine)
    v2_scalar = eng == "scalar" and engine is not None and m.hw.generation <= 2
    if v2_scalar and not legacy:
        raise m.fail(
            "tensor_copy engine",
            f"NeuronCore-v{m.hw.generation} ({m.hw.name}) has no Scalar Engine tensor_copy; copy with "
            "nki.isa.activation(op=nl.copy) on ScalarE, or leave the engine to the compiler",
            site,
        )
    if dst is None:
        dst = _new(m, src.shape, dtype or src.dtype)
    (src,) = _masked(mask, src)
    (dst,) = _masked(mask, dst)
    if _empty(dst, src):
        return dst
    _same_count(m, dst, src, "tensor_copy", site)
    compute = (lambda: _val(src)) if v2_scalar else (lambda: _copied(src, dst))
    return _simple("tensor_copy", eng, dst, [("src", src)], compute, (), src, site, m)


def reciprocal(
    dst: View | None, data: View, engine: Any = None, mask: Predicate | None = None, dtype: Any = None, **_: Any
) -> View:
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    (data,) = _masked(mask, data)
    (dst,) = _masked(mask, dst)
    return _simple(
        "reciprocal",
        _engine("reciprocal", engine),
        dst,
        [("data", data)],
        lambda: T.sem_reciprocal(M, _val(data)),
        (),
        data,
        site,
        m,
    )


def _fill_value(m: Machine, dst: View, value: Any, site: tuple[str, int]) -> Any:
    """memset's constant as stored: an integer into an integer tile exactly (memset "supports all
    valid NKI dtypes"; through fp32 an int32 beyond 2^24 would round), refused when out of its
    range; anything else through fp32."""
    if np.issubdtype(dst.dtype, np.integer) and np.isfinite(float(value)) and float(value) == int(value):
        info = np.iinfo(dst.dtype)
        if not info.min <= int(value) <= info.max:
            raise m.fail("memset value", f"memset value {value} is outside the range of {dst.dtype}", site)
        return np.asarray(int(value), dtype=dst.dtype)
    return np.float32(value)


def memset(
    dst: View, value: Any, engine: Any = None, mask: Predicate | None = None, name: Any = None, **_: Any
) -> View:
    """Fill `dst` with `value`."""
    m, site = active(), kernel_site()
    (dst,) = _masked(mask, dst)
    if _empty(dst):
        return dst
    fill = _fill_value(m, dst, value, site)
    return _simple("memset", _engine("memset", engine), dst, [], lambda: fill, (("value", float(value)),), dst, site, m)


def _pattern_values(
    m: Machine,
    shape: tuple[int, ...],
    pattern: Any,
    offset: Any,
    channel_multiplier: Any,
    opcode: str,
    site: tuple[str, int],
) -> Any:
    """offset + partition * channel_multiplier + sum(index_k * step_k) over the [[step, num], ...] pattern
    (current nki.isa.iota / affine_select), laid out row-major along dst's free axes."""
    pairs = [(int(st), int(n)) for st, n in pattern]
    free = int(math.prod(shape[1:]))
    if int(math.prod(n for _, n in pairs)) != free:
        raise m.fail(
            "shape mismatch",
            f"{opcode} pattern {pattern} covers {int(math.prod(n for _, n in pairs))} "
            f"elements per partition, dst has {free}",
            site,
        )
    vals = np.zeros([n for _, n in pairs] or [1], dtype=np.int64)
    for axis, (step, n) in enumerate(pairs):
        vals = vals + (np.arange(n, dtype=np.int64) * step).reshape([-1 if a == axis else 1 for a in range(len(pairs))])
    rows = np.arange(shape[0], dtype=np.int64)[:, None] * int(channel_multiplier)
    return (rows + vals.reshape(1, -1) + int(offset)).reshape(shape)


def iota(
    dst: View,
    expr: Any,
    offset: int = 0,
    engine: Any = None,
    mask: Predicate | None = None,
    channel_multiplier: int = 0,
    pattern: Any = None,
    name: Any = None,
) -> View:
    """Fill `dst` (GpSimd) with an affine index expression (legacy `nl.arange` form), or with the
    current API's `pattern=[[step, num], ...]`, `offset`, `channel_multiplier` form."""
    m, site = active(), kernel_site()
    if pattern is None and isinstance(expr, (list, tuple)):
        pattern, expr = expr, None

    def compute() -> Any:
        if pattern is not None:
            return _pattern_values(m, tuple(dst.shape), pattern, offset, channel_multiplier, "iota", site).astype(
                np.float64
            )
        vals = expr.evaluate(dst.shape) if isinstance(expr, IndexExpr) else np.full(dst.shape, int(expr))
        return (vals + offset).astype(np.float64)  # integer values: exact until the dst dtype rounds them

    if pattern is not None and not m.execute:
        _pattern_values(m, tuple(dst.shape), pattern, offset, channel_multiplier, "iota", site)  # shape check
    return _simple("iota", "gpsimd", dst, [], compute, (), dst, site, m)


def affine_select(
    dst: View | None,
    pred: Any = None,
    on_true_tile: View | None = None,
    on_false_value: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    pattern: Any = None,
    offset: int = 0,
    channel_multiplier: int = 0,
    cmp_op: Any = None,
    name: Any = None,
) -> View:
    """dst = on_true_tile where the affine predicate holds, else on_false_value (GpSimd).

    The predicate is a legacy `nl.arange` comparison (`pred`), or the current API's
    `cmp_op(offset + partition * channel_multiplier + pattern index, 0)` (cmp_op defaults to nl.equal).
    """
    m, site = active(), kernel_site()
    if pattern is None and isinstance(pred, (list, tuple)):
        pattern, pred = pred, None
    if not isinstance(on_true_tile, View):
        raise m.fail("affine_select operands", "on_true_tile must be a tile", site)
    if dst is None:
        dst = _new(m, on_true_tile.shape, dtype or on_true_tile.dtype)
    op = op_name(cmp_op) if cmp_op is not None else "equal"
    if pattern is not None and op not in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal"):
        raise m.fail("affine_select cmp_op", f"cmp_op {op!r} is not a comparison", site)

    def predicate() -> Any:
        if pattern is None:
            return pred.evaluate(on_true_tile.shape)
        vals = _pattern_values(m, tuple(on_true_tile.shape), pattern, offset, channel_multiplier, "affine_select", site)
        return T.ALU[op](M, vals.astype(np.float64), 0.0) != 0

    return _simple(
        "affine_select",
        "gpsimd",
        dst,
        [("on_true_tile", on_true_tile)],
        lambda: M.where(predicate(), _val(on_true_tile), np.float32(on_false_value)),
        (),
        on_true_tile,
        site,
        m,
    )


def tensor_tensor_scan(
    dst: View | None,
    data0: View,
    data1: View,
    initial: Any,
    op0: Any,
    op1: Any,
    reverse0: bool = False,
    reverse1: bool = False,
    mask: Predicate | None = None,
    dtype: Any = None,
    **_: Any,
) -> View:
    """Running scan along the free axis: r[i] = (data0[i] op0 r[i-1]) op1 data1[i]."""
    m, site = active(), kernel_site()
    f0, f1 = op_name(op0), op_name(op1)
    if dst is None:
        dst = _new(m, data0.shape, dtype or data0.dtype)
    _not_both_psum(m, "tensor_tensor_scan", data0, data1, "data0 and data1", site)
    reads = [("data0", data0), ("data1", data1)] + ([("initial", initial)] if isinstance(initial, View) else [])

    def compute() -> Any:
        # r[i] = op1(op0(data0[i], r[i-1]), data1[i]); reverse0 makes data0 op0's rhs, reverse1
        # makes data1 op1's lhs (nki.isa.tensor_tensor_scan, Neuron 2.30).
        d0 = _val(data0).reshape(data0.shape[0], -1)
        d1 = _val(data1).reshape(data1.shape[0], -1)
        prev = np.broadcast_to(_vec(initial, data0), (d0.shape[0], 1)).reshape(-1, 1)
        out = np.empty(d0.shape, np.float32)
        for i in range(d0.shape[1]):
            x = T.ALU[f0](M, prev, d0[:, i : i + 1]) if reverse0 else T.ALU[f0](M, d0[:, i : i + 1], prev)
            prev = T.ALU[f1](M, d1[:, i : i + 1], x) if reverse1 else T.ALU[f1](M, x, d1[:, i : i + 1])
            out[:, i : i + 1] = prev
        return out

    return _simple("tensor_tensor_scan", "vector", dst, reads, compute, (("op0", f0), ("op1", f1)), data0, site, m)


def _rows_masked(mask: Predicate | None, dst: View) -> View:
    """`dst` of a bn_stats/bn_aggr under `mask`: only the partitions it keeps. Its free positions are
    records (6 or 2 values per partition), not the masked data's elements: a last chunk of 4097 columns
    (one element) had the new [P, 6] record cut to [P, 1] ("bn_stats produces [128, 6] but dst is [128, 1]")."""
    if mask is None:
        return dst
    return dst.restrict({vid: box for vid, box in mask.box().items() if box[2] == 0})


def bn_stats(dst: View | None, data: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """Per-partition statistics (6 values: count, mean, M2 of each half) of <= 512 free elements (VectorE)."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, (data.shape[0], 6), dtype or float32)
    (data,) = _masked(mask, data)
    dst = _rows_masked(mask, dst)
    return _simple(
        "bn_stats",
        "vector",
        dst,
        [("data", data)],
        lambda: T.sem_bn_stats(M, _val(data).reshape(data.shape[0], -1)),
        (),
        data,
        site,
        m,
    )


def bn_aggr(dst: View | None, data: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """Aggregate bn_stats records [P, 6*G] into [P, 2] = mean, variance (VectorE)."""
    m, site = active(), kernel_site()
    if data.free_size % 3:
        raise m.fail(
            "bn_aggr data",
            f"bn_aggr data {data!r} has {data.free_size} elements per partition, "
            "not a multiple of 3 ([count, mean, M2] records of bn_stats)",
            site,
        )
    if dst is None:
        dst = _new(m, (data.shape[0], 2), dtype or float32)
    (data,) = _masked(mask, data)
    dst = _rows_masked(mask, dst)
    return _simple(
        "bn_aggr",
        "vector",
        dst,
        [("data", data)],
        lambda: T.sem_bn_aggr(M, _val(data).reshape(data.shape[0], -1)),
        (),
        data,
        site,
        m,
    )


# ---- documented but not emulated ---------------------------------------------------------------


def nc_matmul_mx(
    dst: View,
    stationary: View,
    moving: View,
    stationary_scale: View,
    moving_scale: View,
    tile_position: Any = None,
    tile_size: Any = None,
    accumulate: Any = None,
    name: Any = None,
) -> View:
    """MXFP8/MXFP4 matmul with dequantization (NeuronCore-v4): refused, never approximated.

    Its operands are x4-packed dtypes whose scale layout (8 partitions x 4 elements per uint8
    scale, quadrant-dependent scale partitions) the emulator does not model.
    """
    raise active().fail(
        "nc_matmul_mx not emulated",
        "nki.isa.nc_matmul_mx (MXFP8/MXFP4 matmul on NeuronCore-v4) "
        "uses x4-packed dtypes and block scales the emulator does not model",
        kernel_site(),
    )


def quantize_mx(*args: Any, **kwargs: Any) -> View:
    """MX quantization (NeuronCore-v4): refused, never approximated."""
    raise active().fail(
        "quantize_mx not emulated",
        "nki.isa.quantize_mx (MXFP8/MXFP4 quantization on "
        "NeuronCore-v4) produces x4-packed dtypes and block scales the emulator does not model",
        kernel_site(),
    )
