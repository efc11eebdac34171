"""ScalarE / VectorE / GpSimd arithmetic: activations, tensor-tensor and tensor-scalar ops, reductions."""

from __future__ import annotations

from typing import Any

import numpy as np

from axon.nki.context import active, kernel_site
from axon.nki.dtypes import promoted_dtype
from axon.nki.indexing import Predicate
from axon.nki.isa_base import (
    M,
    _activation_vectors,
    _bitvec,
    _empty,
    _engine,
    _ival,
    _masked,
    _new,
    _not_both_psum,
    _reduce_axes,
    _same_count,
    _simple,
    _val,
    _write,
    op_name,
)
from axon.nki.machine import Machine
from axon.nki.memory import View
from axon.target import isa as T
from axon.target.isa import REDUCE_ALIASES, sem_activation

# ---- ScalarE / VectorE / GpSimd ----------------------------------------------------------------


def _vec(x: Any, ref: View, val: Any = _val) -> Any:
    """A scalar operand or a [P, 1] vector broadcast along ref's free axes (fp32, or `_ival`'s integers)."""
    if isinstance(x, View):
        return val(x).reshape((x.shape[0],) + (1,) * (len(ref.shape) - 1))
    return val(x)


def activation(
    dst: View | None,
    op: Any,
    data: View,
    bias: Any = None,
    scale: Any = 1.0,
    reduce_op: Any = None,
    reduce_res: View | None = None,
    reduce_cmd: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    name: Any = None,
    **_: Any,
) -> View:
    """dst = op(data * scale + bias) on ScalarE; with reduce_res, also its free-axis sum."""
    return _activation("activation", dst, op, data, bias, scale, reduce_op, reduce_res, mask, dtype, reduce_cmd)


def activation_reduce(
    dst: View | None,
    op: Any,
    data: View,
    reduce_op: Any = None,
    reduce_res: View | None = None,
    bias: Any = None,
    scale: Any = 1.0,
    mask: Predicate | None = None,
    dtype: Any = None,
    **_: Any,
) -> View:
    return _activation(
        "activation_reduce", dst, op, data, bias, scale, reduce_op or "add", reduce_res, mask, dtype, "reset_reduce"
    )


def _reduce_cmd(cmd: Any) -> str:
    name = getattr(cmd, "name", cmd)
    return "idle" if name is None else str(name)


def _activation(
    opcode: str,
    dst: View | None,
    op: Any,
    data: View,
    bias: Any,
    scale: Any,
    reduce_op: Any,
    reduce_res: View | None,
    mask: Predicate | None,
    dtype: Any,
    cmd: Any = None,
) -> View:
    m, site = active(), kernel_site()
    fn = op_name(op)
    if fn not in T.ACTIVATION:
        raise m.fail("activation function", f"{fn!r} is not a ScalarE activation function", site)
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    data, bias, scale, reduce_res = _masked(mask, data, bias, scale, reduce_res)
    (dst,) = _masked(mask, dst)
    if _empty(dst, data):
        return dst
    _same_count(m, dst, data, opcode, site)
    reads = [("data", data)] + [(r, v) for r, v in (("bias", bias), ("scale", scale)) if isinstance(v, View)]
    _activation_vectors(m, reads[1:], site)
    extra = [("reduce_res", reduce_res)] if reduce_res is not None else []
    if extra:
        opcode = "activation_reduce"
    attrs = (("op", fn), ("reduce", bool(extra)))

    def compute() -> Any:
        b = None if bias is None else _vec(bias, data)
        return sem_activation(M, _val(data), fn, _vec(scale, data), b)

    cmd = _reduce_cmd(cmd)
    if cmd not in ("idle", "reset", "reduce", "reset_reduce"):
        raise m.fail("activation reduce_cmd", f"reduce_cmd={cmd!r} is not emulated", site)
    if cmd in ("reduce", "reset_reduce") or reduce_res is not None:
        if REDUCE_ALIASES.get(op_name(reduce_op) or "add") != "add":
            # ScalarE's reduce registers only sum (nki.isa.activation / activation_reduce: "reduce_op
            # must be nl.add"); a max would be a silently different program on the device.
            raise m.fail(
                "activation reduce_op",
                f"{opcode} reduces with nl.add only, got {op_name(reduce_op)!r} "
                "(use nisa.tensor_reduce or tensor_scalar_reduce for max/min)",
                site,
            )
    if cmd == "idle" and reduce_res is not None:
        # Without an explicit reduce_cmd, a reduce_res asks for this instruction's reduction (the
        # legacy form, and activation_reduce): reset, reduce, read out.
        cmd = "reset_reduce"
    out = _simple(opcode, "scalar", dst, reads, None, attrs, data, site, m, extra)
    if m.execute:
        r = compute()
        _write(m, dst, r, opcode, site)
        # ScalarE's reduce_regs (one fp32 register per partition) persist across activation
        # instructions: reset zeroes them, reduce adds this instruction's free-axis reduction of
        # the activated values, reduce_res reads them out (nki.isa.activation, Neuron 2.30).
        regs = _scalar_reduce_regs(m)
        parts = r.shape[0]
        if cmd in ("reset", "reset_reduce"):
            regs[:] = 0.0
        if cmd in ("reduce", "reset_reduce"):
            kind = REDUCE_ALIASES[op_name(reduce_op) or "add"]
            part = M.reduce(kind, np.asarray(r, dtype=np.float32).reshape(parts, -1), (1,), False)
            regs[:parts] = regs[:parts] + part
        if reduce_res is not None:
            _write(m, reduce_res, regs[:parts].reshape(parts, 1), opcode, site)
    return out


def _scalar_reduce_regs(m: Machine) -> Any:
    regs = getattr(m, "scalar_reduce_regs", None)
    if regs is None:
        regs = np.zeros(m.hw.memory.partitions, dtype=np.float32)
        m.scalar_reduce_regs = regs  # type: ignore[attr-defined]
    return regs


def tensor_tensor(
    dst: View | None,
    data1: View,
    data2: View,
    op: Any,
    engine: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    name: Any = None,
    **_: Any,
) -> View:
    """dst = data1 op data2 elementwise (VectorE or GpSimd)."""
    m, site = active(), kernel_site()
    fn = op_name(op)
    eng = _engine("tensor_tensor", engine)
    if dst is None:
        dst = _new(m, data1.shape, dtype or promoted_dtype(data1.dtype, data2.dtype))
    data1, data2 = _masked(mask, data1, data2)
    (dst,) = _masked(mask, dst)
    if _empty(dst, data1):
        return dst
    _same_count(m, data1, data2, "tensor_tensor", site)
    _same_count(m, dst, data1, "tensor_tensor", site)
    _not_both_psum(m, "tensor_tensor", data1, data2, "data1 and data2", site)
    val = _ival if _bitvec(m, "tensor_tensor", (fn,), eng, [data1, data2, dst], site) else _val
    return _simple(
        "tensor_tensor",
        eng,
        dst,
        [("data1", data1), ("data2", data2)],
        lambda: T.sem_tensor_tensor(M, val(data1), val(data2), fn),
        (("op", fn),),
        data1,
        site,
        m,
    )


def tensor_scalar(
    dst: View | None,
    data: View,
    op0: Any,
    operand0: Any,
    reverse0: bool = False,
    op1: Any = None,
    operand1: Any = None,
    reverse1: bool = False,
    engine: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    name: Any = None,
    **_: Any,
) -> View:
    """dst = (data op0 operand0) op1 operand1 with scalar or [P, 1] operands."""
    m, site = active(), kernel_site()
    f0, f1 = op_name(op0), op_name(op1) or None
    eng = _engine("tensor_scalar", engine)
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    data, operand0, operand1 = _masked(mask, data, operand0, operand1)
    (dst,) = _masked(mask, dst)
    if _empty(dst, data):
        return dst
    _same_count(m, dst, data, "tensor_scalar", site)
    val = _ival if _bitvec(m, "tensor_scalar", (f0, f1 or ""), eng, [data, operand0, operand1, dst], site) else _val
    reads = [("data", data)] + [
        (r, v) for r, v in (("operand0", operand0), ("operand1", operand1)) if isinstance(v, View)
    ]
    return _simple(
        "tensor_scalar",
        eng,
        dst,
        reads,
        lambda: T.sem_tensor_scalar(
            M,
            val(data),
            f0,
            _vec(operand0, data, val),
            reverse0,
            f1,
            None if f1 is None else _vec(operand1, data, val),
            reverse1,
        ),
        (("op0", f0), ("op1", f1 or "")),
        data,
        site,
        m,
    )


def tensor_scalar_reduce(
    dst: View | None,
    data: View,
    op0: Any,
    operand0: Any,
    reduce_op: Any,
    reduce_res: View,
    reverse0: bool = False,
    mask: Predicate | None = None,
    dtype: Any = None,
    reduce_cmd: Any = None,
    reduce_init: Any = None,
    reduce_res_negate: bool = False,
    **_: Any,
) -> View:
    """tensor_scalar with one op, plus a free-axis reduction of the result into reduce_res [P, 1]."""
    m, site = active(), kernel_site()
    f0, fr = op_name(op0), REDUCE_ALIASES[op_name(reduce_op)]
    # The 2.30+ page adds VectorE accumulator registers (reduce_cmd, reduce_init, reduce_res_negate);
    # only this instruction's own reduction is emulated: the rest is refused, not ignored.
    cmd = _reduce_cmd(reduce_cmd)
    if cmd not in ("idle", "reset_reduce") or reduce_init is not None or reduce_res_negate:
        detail = f"reduce_cmd={cmd!r}, reduce_init={reduce_init!r}, reduce_res_negate={reduce_res_negate!r}"
        raise m.fail("tensor_scalar_reduce accumulator", f"{detail} is not emulated", site)
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    data, operand0, reduce_res = _masked(mask, data, operand0, reduce_res)
    (dst,) = _masked(mask, dst)
    reads = [("data", data)] + ([("operand0", operand0)] if isinstance(operand0, View) else [])
    _simple(
        "tensor_scalar_reduce",
        "vector",
        dst,
        reads,
        None,
        (("op0", f0), ("reduce_op", fr), ("reduce", True)),
        data,
        site,
        m,
        [("reduce_res", reduce_res)],
    )
    if m.execute:
        r = T.sem_tensor_scalar(M, _val(data), f0, _vec(operand0, data), reverse0)
        _write(m, dst, r, "tensor_scalar_reduce", site)
        _write(m, reduce_res, M.reduce(fr, r, tuple(range(1, r.ndim)), True), "tensor_scalar_reduce", site)
    return View.whole(dst.alloc) if dst.alloc.temp else dst


def scalar_tensor_tensor(
    dst: View | None,
    data: View,
    op0: Any,
    operand0: Any,
    op1: Any,
    operand1: View,
    reverse0: bool = False,
    reverse1: bool = False,
    engine: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    **_: Any,
) -> View:
    """dst = (data op0 operand0) op1 operand1, operand0 scalar/[P, 1], operand1 a full tile."""
    m, site = active(), kernel_site()
    f0, f1 = op_name(op0), op_name(op1)
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    data, operand0, operand1 = _masked(mask, data, operand0, operand1)
    (dst,) = _masked(mask, dst)
    _same_count(m, dst, data, "scalar_tensor_tensor", site)
    _same_count(m, operand1, data, "scalar_tensor_tensor", site)
    _not_both_psum(m, "scalar_tensor_tensor", data, operand1, "data and operand1", site)
    reads = (
        [("data", data)] + ([("operand0", operand0)] if isinstance(operand0, View) else []) + [("operand1", operand1)]
    )
    return _simple(
        "scalar_tensor_tensor",
        _engine("scalar_tensor_tensor", engine),
        dst,
        reads,
        lambda: T.sem_scalar_tensor_tensor(
            M, _val(data), f0, _vec(operand0, data), f1, _val(operand1), reverse0, reverse1
        ),
        (("op0", f0), ("op1", f1)),
        data,
        site,
        m,
    )


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(int(a) % ndim for a in axes)


def tensor_reduce(
    dst: View | None,
    op: Any,
    data: View,
    axis: Any,
    negate: bool = False,
    keepdims: bool = False,
    engine: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    name: Any = None,
    axes_rule: str = "",
    **_: Any,
) -> View:
    """Reduce `data` along free axes `axis` (add, max, min, multiply), optionally negated; `axes_rule`
    ("current" / "legacy") holds the axes to that nki.isa.tensor_reduce page's rule (nl.sum & co. take
    any free axes: the compiler lowers them through the access pattern)."""
    m, site = active(), kernel_site()
    kind = REDUCE_ALIASES.get(op_name(op))
    if kind is None:
        raise m.fail("reduce op", f"tensor_reduce cannot reduce with {op_name(op)!r}", site)
    axes = _axes(axis, len(data.shape))
    if 0 in axes:
        raise m.fail(
            "reduce over partitions", "tensor_reduce reduces free axes only (axis 0 is the partition axis)", site
        )
    if axes_rule:
        _reduce_axes(m, axes, len(data.shape), axes_rule == "current", site)
    out_shape = (
        tuple(1 if a in axes else s for a, s in enumerate(data.shape))
        if keepdims
        else tuple(s for a, s in enumerate(data.shape) if a not in axes)
    )
    if dst is None:
        dst = _new(m, out_shape, dtype or data.dtype)
    data, dst = _masked(mask, data, dst)
    return _simple(
        "tensor_reduce",
        _engine("tensor_reduce", engine),
        dst,
        [("data", data)],
        lambda: T.sem_reduce(M, _val(data), kind, axes, negate, keepdims),
        (("op", kind), ("negate", bool(negate))),
        data,
        site,
        m,
    )
