"""The nki.isa instructions, in the current destination-passing form (`dst` first).

Each function checks shapes, hands operands to `Machine.issue` (rules + trace record) and, in
execute mode, computes through the ISA table's semantics (`axon.target.isa`) in fp32, rounding on
the write to `dst`'s dtype. `dst=None` allocates the result (used by the legacy, value-returning
API in `legacy_isa.py`). Legacy `mask=` predicates shrink every operand to the masked box.
"""

from __future__ import annotations

from typing import Any, Callable

import math

import numpy as np

from axon.nki.machine import Machine, active, kernel_site
from axon.nki.memory import IndexExpr, Predicate, View, as_dtype, float32
from axon.target.isa import ISA, NUMPY_FP32, REDUCE_ALIASES, sem_activation
from axon.target import isa as T

M = NUMPY_FP32

# ---- engines and enums (nki.isa.vector_engine, nki.isa.engine.vector, ...) ---------------------
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = "tensor", "vector", "scalar", "gpsimd", None


class engine:
    tensor, vector, scalar, gpsimd, unknown = "tensor", "vector", "scalar", "gpsimd", None


class reduce_cmd:
    idle, reset, reduce, reset_reduce = "idle", "reset", "reduce", "reset_reduce"


class matmul_perf_mode:
    none, double_row = "none", "double_row"


def op_name(op: Any) -> str:
    """The ISA name of an ALU op / activation function given as nl.add, np.add, "add", ..."""
    if op is None:
        return ""
    if isinstance(op, str):
        return op
    name = getattr(op, "isa_name", None) or getattr(op, "__name__", None)
    if name is None:
        raise active().fail("operator", f"{op!r} is not an NKI operator")
    return _NUMPY_NAMES.get(name, name)


_NUMPY_NAMES = {"true_divide": "divide", "max": "max", "amax": "max", "amin": "min", "negative": "negative",
                "absolute": "abs", "sum": "add"}


# ---- helpers -----------------------------------------------------------------------------------


def _val(x: Any) -> Any:
    """fp32 NumPy values of a view (or the float of a scalar), as every engine computes in fp32."""
    if isinstance(x, View):
        return x.alloc.data[x.np_index()].astype(np.float32)  # type: ignore[index]
    return np.float32(x)


def _write(m: Machine, dst: View, value: Any, opcode: str, site: tuple[str, int]) -> None:
    value = np.asarray(value)
    if value.shape != dst.shape:
        try:
            value = np.broadcast_to(value, dst.shape) if value.size != int(math.prod(dst.shape)) \
                else value.reshape(dst.shape)
        except ValueError:
            raise m.fail("shape mismatch", f"{opcode} produces {list(value.shape)} but dst is {list(dst.shape)}",
                         site) from None
    dst.alloc.data[dst.np_index()] = value  # type: ignore[index]  # NumPy/ml_dtypes round to nearest even


def _new(m: Machine, shape: tuple[int, ...], dtype: Any, kind: str = "sbuf") -> View:
    return View.whole(m.allocate(tuple(shape), as_dtype(dtype), kind, temp=True))


def _masked(mask: Predicate | None, *views: Any) -> list[Any]:
    if mask is None:
        return list(views)
    box = mask.box()
    return [v.restrict(box) if isinstance(v, View) else v for v in views]


def _transposed_box(dst: View, src: View) -> View:
    """The [b, a] corner of `dst` a masked [a, b] source lands in."""
    want = tuple(src.shape[::-1])
    if len(dst.shape) == 2 and dst.shape != want and all(w <= d for w, d in zip(want, dst.shape)):
        return dst.index((slice(0, want[0]), slice(0, want[1])))
    return dst


def _empty(*views: Any) -> bool:
    return any(isinstance(v, View) and 0 in v.shape for v in views)


def _engine(opcode: str, eng: Any) -> str:
    return ISA[opcode].engines[0] if eng is None or eng == "unknown" else str(eng)


def _same_count(m: Machine, a: View, b: View, opcode: str, site: tuple[str, int]) -> None:
    both_on_chip = a.alloc.kind != "hbm" and b.alloc.kind != "hbm"
    if int(math.prod(a.shape)) != int(math.prod(b.shape)) or (both_on_chip and a.partitions != b.partitions):
        raise m.fail("shape mismatch", f"{opcode}: {list(a.shape)} vs {list(b.shape)}", site)


def _simple(opcode: str, eng: str, dst: View, reads: list[tuple[str, Any]], compute: Callable[[], Any] | None,
            attrs: tuple[tuple[str, Any], ...], main: View, site: tuple[str, int], m: Machine,
            extra_writes: list[tuple[str, View]] = (), read_dst: bool = False,  # type: ignore[assignment]
            checked: bool = False) -> View:
    views = [(r, v) for r, v in reads if isinstance(v, View)]
    for role, v in views:
        if v is not main and v.partitions != main.partitions and v.alloc.kind != "hbm":
            raise m.fail("partition mismatch", f"{opcode}: {role} spans {v.partitions} partitions, "
                         f"data spans {main.partitions}", site)
    m.issue(opcode, eng, views, [("dst", dst)] + list(extra_writes), main, attrs, site, read_dst, checked)
    if m.execute and compute is not None:
        _write(m, dst, compute(), opcode, site)
    # A result the instruction allocated itself (legacy form) is returned whole, even when a
    # mask let it write only part of it.
    return View.whole(dst.alloc) if dst.alloc.temp else dst


# ---- data movement -----------------------------------------------------------------------------


def dma_copy(dst: View, src: View, mask: Predicate | None = None, dge_mode: Any = None, name: Any = None,
             **_: Any) -> View:
    """DMA `src` into `dst` (HBM<->SBUF, or within one); a dtype change casts."""
    m, site = active(), kernel_site()
    dst, src = _masked(mask, dst, src)
    if _empty(dst, src):
        return dst
    _same_count(m, dst, src, "dma_copy", site)
    return _simple("dma_copy", "dma", dst, [("src", src)], (lambda: _val(src).reshape(dst.shape)) if m.execute else None,
                   (("src", src.alloc.kind), ("dst", dst.alloc.kind)), src, site, m)


def dma_transpose(dst: View, src: View, axes: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """DMA `src` [a, b] into `dst` [b, a]."""
    m, site = active(), kernel_site()
    (src,) = _masked(mask, src)
    dst = _transposed_box(dst, src)
    if len(src.shape) != 2 or tuple(dst.shape) != (src.shape[1], src.shape[0]):
        raise m.fail("shape mismatch", f"dma_transpose of {list(src.shape)} needs dst {[*src.shape[::-1]]}, "
                     f"got {list(dst.shape)}", site)
    return _simple("dma_transpose", "dma", dst, [("src", src)], lambda: T.sem_transpose(M, _val(src)),
                   (("src", src.alloc.kind), ("dst", dst.alloc.kind), ("transpose", True)), src, site, m)


# ---- TensorE -----------------------------------------------------------------------------------


def nc_matmul(dst: View | None, stationary: View, moving: View, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: Any = None,
              tile_position: Any = (), tile_size: Any = (), perf_mode: Any = None, name: Any = None,
              mask: Predicate | None = None, **_: Any) -> View:
    """dst[M, N] = stationary[K, M].T @ moving[K, N] on TensorE, fp32 in PSUM.

    accumulate=True adds into dst; False or None (the default) overwrites it, so the first matmul
    of an accumulation group writes and the rest accumulate (`accumulate=k > 0`).
    """
    m, site = active(), kernel_site()
    if not isinstance(stationary, View) or not isinstance(moving, View):
        raise m.fail("matmul operands", "stationary and moving must be tiles", site)
    full_shape = (stationary.free_size, moving.free_size)
    stationary, moving = _masked(mask, stationary, moving)
    m.check_operand("nc_matmul", "stationary", stationary, "tensor", site)
    m.check_operand("nc_matmul", "moving", moving, "tensor", site)
    if stationary.partitions != moving.partitions:
        raise m.fail("matmul partition mismatch", f"stationary {list(stationary.shape)} and moving "
                     f"{list(moving.shape)} must share the contraction (partition) size", site)
    out_shape = (stationary.free_size, moving.free_size)
    if dst is None:
        dst = _new(m, full_shape, float32, "psum")
    if dst.shape != out_shape and len(dst.shape) == 2 and all(o <= d for o, d in zip(out_shape, dst.shape)):
        dst = dst.index((slice(0, out_shape[0]), slice(0, out_shape[1])))
    m.check_operand("nc_matmul", "dst", dst, "tensor", site)  # before the shape check: name the buffer rule
    if int(math.prod(dst.shape)) != out_shape[0] * out_shape[1]:
        raise m.fail("shape mismatch", f"nc_matmul of {list(stationary.shape)} x {list(moving.shape)} gives "
                     f"{list(out_shape)}, dst is {list(dst.shape)}", site)
    acc = bool(accumulate)
    attrs = (("stationary_free", stationary.free_size), ("moving_free", moving.free_size),
             ("accumulate", acc), ("is_transpose", bool(is_transpose)))

    def compute() -> Any:
        # Products of bf16/fp16/fp8 values are exact in fp32, so an fp32 matmul of the inputs
        # is the hardware's multiply-in-input-dtype, accumulate-in-fp32.
        st = _val(stationary).reshape(stationary.partitions, -1)
        mv = _val(moving).reshape(moving.partitions, -1)
        r = st.T if is_transpose else T.sem_nc_matmul(M, st, mv)
        if is_transpose:
            r = T.sem_transpose(M, st)
        return r + _val(dst).reshape(r.shape) if acc else r

    return _simple("nc_matmul", "tensor", dst, [("stationary", stationary), ("moving", moving)], compute,
                   attrs, moving, site, m, read_dst=acc, checked=True)


def nc_transpose(dst: View | None, data: View, engine: Any = None, mask: Predicate | None = None,
                 name: Any = None, **_: Any) -> View:
    """Swap partition and free axis: TensorE (default, into PSUM) or VectorE (<= 32x32)."""
    m, site = active(), kernel_site()
    eng = _engine("nc_transpose", engine)
    if len(data.shape) != 2:
        raise m.fail("shape", f"nc_transpose needs a 2-D tile, got {list(data.shape)}", site)
    if eng == "vector" and max(data.shape) > T.ISA_LIMITS["vector_transpose_max"]:
        raise m.fail("vector transpose > 32x32", f"nc_transpose on VectorE of {list(data.shape)}", site)
    if dst is None:
        dst = _new(m, data.shape[::-1], float32 if eng == "tensor" else data.dtype, "psum" if eng == "tensor" else "sbuf")
    (data,) = _masked(mask, data)
    dst = _transposed_box(dst, data)
    return _simple("nc_transpose", eng, dst, [("data", data)], lambda: T.sem_transpose(M, _val(data)),
                   (), data, site, m)


# ---- ScalarE / VectorE / GpSimd ----------------------------------------------------------------


def _vec(x: Any, ref: View) -> Any:
    """A scalar operand or a [P, 1] vector broadcast along ref's free axes."""
    if isinstance(x, View):
        return _val(x).reshape((x.shape[0],) + (1,) * (len(ref.shape) - 1))
    return np.float32(x)


def activation(dst: View | None, op: Any, data: View, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
               reduce_res: View | None = None, reduce_cmd: Any = None, mask: Predicate | None = None,
               dtype: Any = None, name: Any = None, **_: Any) -> View:
    """dst = op(data * scale + bias) on ScalarE; with reduce_res, also its free-axis sum."""
    return _activation("activation", dst, op, data, bias, scale, reduce_op, reduce_res, mask, dtype)


def activation_reduce(dst: View | None, op: Any, data: View, reduce_op: Any = None, reduce_res: View | None = None,
                      bias: Any = None, scale: Any = 1.0, mask: Predicate | None = None, dtype: Any = None,
                      **_: Any) -> View:
    return _activation("activation_reduce", dst, op, data, bias, scale, reduce_op or "add", reduce_res, mask, dtype)


def _activation(opcode: str, dst: View | None, op: Any, data: View, bias: Any, scale: Any, reduce_op: Any,
                reduce_res: View | None, mask: Predicate | None, dtype: Any) -> View:
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
    extra = [("reduce_res", reduce_res)] if reduce_res is not None else []
    if extra:
        opcode = "activation_reduce"
    attrs = (("op", fn), ("reduce", bool(extra)))

    def compute() -> Any:
        b = None if bias is None else _vec(bias, data)
        return sem_activation(M, _val(data), fn, _vec(scale, data), b)

    out = _simple(opcode, "scalar", dst, reads, None, attrs, data, site, m, extra)
    if m.execute:
        r = compute()
        _write(m, dst, r, opcode, site)
        if reduce_res is not None:
            axes = tuple(range(1, r.ndim))
            kind = REDUCE_ALIASES[op_name(reduce_op) or "add"]
            _write(m, reduce_res, M.reduce(kind, r, axes, True), opcode, site)
    return out


def tensor_tensor(dst: View | None, data1: View, data2: View, op: Any, engine: Any = None,
                  mask: Predicate | None = None, dtype: Any = None, name: Any = None, **_: Any) -> View:
    """dst = data1 op data2 elementwise (VectorE or GpSimd)."""
    m, site = active(), kernel_site()
    fn = op_name(op)
    eng = _engine("tensor_tensor", engine)
    if dst is None:
        dst = _new(m, data1.shape, dtype or data1.dtype)
    data1, data2 = _masked(mask, data1, data2)
    (dst,) = _masked(mask, dst)
    if _empty(dst, data1):
        return dst
    _same_count(m, data1, data2, "tensor_tensor", site)
    _same_count(m, dst, data1, "tensor_tensor", site)
    if data1.alloc.kind == "psum" and data2.alloc.kind == "psum":
        raise m.fail("tensor_tensor inputs both in PSUM", "at most one input of tensor_tensor may be in PSUM", site)
    return _simple("tensor_tensor", eng, dst, [("data1", data1), ("data2", data2)],
                   lambda: T.sem_tensor_tensor(M, _val(data1), _val(data2), fn), (("op", fn),), data1, site, m)


def tensor_scalar(dst: View | None, data: View, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                  operand1: Any = None, reverse1: bool = False, engine: Any = None, mask: Predicate | None = None,
                  dtype: Any = None, name: Any = None, **_: Any) -> View:
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
    reads = [("data", data)] + [(r, v) for r, v in (("operand0", operand0), ("operand1", operand1)) if isinstance(v, View)]
    return _simple("tensor_scalar", eng, dst, reads,
                   lambda: T.sem_tensor_scalar(M, _val(data), f0, _vec(operand0, data), reverse0, f1,
                                               None if f1 is None else _vec(operand1, data), reverse1),
                   (("op0", f0), ("op1", f1 or "")), data, site, m)


def tensor_scalar_reduce(dst: View | None, data: View, op0: Any, operand0: Any, reduce_op: Any,
                         reduce_res: View, reverse0: bool = False, mask: Predicate | None = None,
                         dtype: Any = None, **_: Any) -> View:
    """tensor_scalar with one op, plus a free-axis reduction of the result into reduce_res [P, 1]."""
    m, site = active(), kernel_site()
    f0, fr = op_name(op0), REDUCE_ALIASES[op_name(reduce_op)]
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    data, operand0, reduce_res = _masked(mask, data, operand0, reduce_res)
    (dst,) = _masked(mask, dst)
    reads = [("data", data)] + ([("operand0", operand0)] if isinstance(operand0, View) else [])
    _simple("tensor_scalar_reduce", "vector", dst, reads, None, (("op0", f0), ("reduce_op", fr), ("reduce", True)),
            data, site, m, [("reduce_res", reduce_res)])
    if m.execute:
        r = T.sem_tensor_scalar(M, _val(data), f0, _vec(operand0, data), reverse0)
        _write(m, dst, r, "tensor_scalar_reduce", site)
        _write(m, reduce_res, M.reduce(fr, r, tuple(range(1, r.ndim)), True), "tensor_scalar_reduce", site)
    return View.whole(dst.alloc) if dst.alloc.temp else dst


def scalar_tensor_tensor(dst: View | None, data: View, op0: Any, operand0: Any, op1: Any, operand1: View,
                         reverse0: bool = False, reverse1: bool = False, engine: Any = None,
                         mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """dst = (data op0 operand0) op1 operand1, operand0 scalar/[P, 1], operand1 a full tile."""
    m, site = active(), kernel_site()
    f0, f1 = op_name(op0), op_name(op1)
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    data, operand0, operand1 = _masked(mask, data, operand0, operand1)
    (dst,) = _masked(mask, dst)
    _same_count(m, dst, data, "scalar_tensor_tensor", site)
    _same_count(m, operand1, data, "scalar_tensor_tensor", site)
    reads = [("data", data)] + ([("operand0", operand0)] if isinstance(operand0, View) else []) + [("operand1", operand1)]
    return _simple("scalar_tensor_tensor", _engine("scalar_tensor_tensor", engine), dst, reads,
                   lambda: T.sem_scalar_tensor_tensor(M, _val(data), f0, _vec(operand0, data), f1, _val(operand1),
                                                      reverse0, reverse1),
                   (("op0", f0), ("op1", f1)), data, site, m)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(int(a) % ndim for a in axes)


def tensor_reduce(dst: View | None, op: Any, data: View, axis: Any, negate: bool = False, keepdims: bool = False,
                  engine: Any = None, mask: Predicate | None = None, dtype: Any = None, name: Any = None,
                  **_: Any) -> View:
    """Reduce `data` along free axes `axis` (add, max, min, multiply), optionally negated."""
    m, site = active(), kernel_site()
    kind = REDUCE_ALIASES.get(op_name(op))
    if kind is None:
        raise m.fail("reduce op", f"tensor_reduce cannot reduce with {op_name(op)!r}", site)
    axes = _axes(axis, len(data.shape))
    if 0 in axes:
        raise m.fail("reduce over partitions", "tensor_reduce reduces free axes only (axis 0 is the partition axis)", site)
    out_shape = tuple(1 if a in axes else s for a, s in enumerate(data.shape)) if keepdims else \
        tuple(s for a, s in enumerate(data.shape) if a not in axes)
    if dst is None:
        dst = _new(m, out_shape, dtype or data.dtype)
    data, dst = _masked(mask, data, dst)
    return _simple("tensor_reduce", _engine("tensor_reduce", engine), dst, [("data", data)],
                   lambda: T.sem_reduce(M, _val(data), kind, axes, negate, keepdims),
                   (("op", kind), ("negate", bool(negate))), data, site, m)


def tensor_copy(dst: View | None, src: View, engine: Any = None, mask: Predicate | None = None, dtype: Any = None,
                name: Any = None, **_: Any) -> View:
    """Copy (and cast) a tile on Vector, Scalar or GpSimd."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, src.shape, dtype or src.dtype)
    (src,) = _masked(mask, src)
    (dst,) = _masked(mask, dst)
    if _empty(dst, src):
        return dst
    _same_count(m, dst, src, "tensor_copy", site)
    return _simple("tensor_copy", _engine("tensor_copy", engine), dst, [("src", src)], lambda: _val(src), (), src, site, m)


def reciprocal(dst: View | None, data: View, engine: Any = None, mask: Predicate | None = None, dtype: Any = None,
               **_: Any) -> View:
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, data.shape, dtype or data.dtype)
    (data,) = _masked(mask, data)
    (dst,) = _masked(mask, dst)
    return _simple("reciprocal", _engine("reciprocal", engine), dst, [("data", data)],
                   lambda: T.sem_reciprocal(M, _val(data)), (), data, site, m)


def memset(dst: View, value: Any, engine: Any = None, mask: Predicate | None = None, name: Any = None,
           **_: Any) -> View:
    """Fill `dst` with `value`."""
    m, site = active(), kernel_site()
    (dst,) = _masked(mask, dst)
    if _empty(dst):
        return dst
    return _simple("memset", _engine("memset", engine), dst, [], lambda: np.float32(value),
                   (("value", float(value)),), dst, site, m)


def iota(dst: View, expr: IndexExpr | int, offset: int = 0, engine: Any = None, mask: Predicate | None = None,
         **_: Any) -> View:
    """Fill `dst` with the values of an affine index expression (GpSimd)."""
    m, site = active(), kernel_site()

    def compute() -> Any:
        vals = expr.evaluate(dst.shape) if isinstance(expr, IndexExpr) else np.full(dst.shape, int(expr))
        return (vals + offset).astype(np.float32)

    return _simple("iota", "gpsimd", dst, [], compute, (), dst, site, m)


def affine_select(dst: View | None, pred: Predicate, on_true_tile: View, on_false_value: Any,
                  mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """dst = on_true_tile where the affine predicate holds, else on_false_value (GpSimd)."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, on_true_tile.shape, dtype or on_true_tile.dtype)
    return _simple("affine_select", "gpsimd", dst, [("on_true_tile", on_true_tile)],
                   lambda: M.where(pred.evaluate(on_true_tile.shape), _val(on_true_tile), np.float32(on_false_value)),
                   (), on_true_tile, site, m)


def tensor_tensor_scan(dst: View | None, data0: View, data1: View, initial: Any, op0: Any, op1: Any,
                       reverse0: bool = False, reverse1: bool = False, mask: Predicate | None = None,
                       dtype: Any = None, **_: Any) -> View:
    """Running scan along the free axis: r[i] = (data0[i] op0 r[i-1]) op1 data1[i]."""
    m, site = active(), kernel_site()
    f0, f1 = op_name(op0), op_name(op1)
    if dst is None:
        dst = _new(m, data0.shape, dtype or data0.dtype)
    reads = [("data0", data0), ("data1", data1)] + ([("initial", initial)] if isinstance(initial, View) else [])
    return _simple("tensor_tensor_scan", "vector", dst, reads,
                   lambda: T.sem_scan(M, _val(data0), _val(data1), _vec(initial, data0), f0, f1),
                   (("op0", f0), ("op1", f1)), data0, site, m)


def bn_stats(dst: View | None, data: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """Per-partition statistics (6 values: count, mean, M2 of each half) of <= 512 free elements (VectorE)."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, (data.shape[0], 6), dtype or float32)
    (data,) = _masked(mask, data)
    (dst,) = _masked(mask, dst)
    return _simple("bn_stats", "vector", dst, [("data", data)],
                   lambda: T.sem_bn_stats(M, _val(data).reshape(data.shape[0], -1)), (), data, site, m)


def bn_aggr(dst: View | None, data: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """Aggregate bn_stats records [P, 6*G] into [P, 2] = mean, variance (VectorE)."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, (data.shape[0], 2), dtype or float32)
    (data,) = _masked(mask, data)
    (dst,) = _masked(mask, dst)
    return _simple("bn_aggr", "vector", dst, [("data", data)],
                   lambda: T.sem_bn_aggr(M, _val(data).reshape(data.shape[0], -1)), (), data, site, m)
