"""The nki.isa instructions, in the current destination-passing form (`dst` first).

Each function checks shapes, hands operands to `Machine.issue` (rules + trace record) and, in
execute mode, computes through the ISA table's semantics (`axon.target.isa`) in fp32, rounding on
the write to `dst`'s dtype. `dst=None` allocates the result (used by the legacy, value-returning
API in `legacy_isa.py`). Legacy `mask=` predicates shrink every operand to the masked box.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from axon.nki.machine import Machine, active, kernel_site
from axon.nki.memory import IndexExpr, Predicate, View, as_dtype, float32
from axon.target import isa as T
from axon.target.isa import ISA, NUMPY_FP32, REDUCE_ALIASES, sem_activation

M = NUMPY_FP32

# ---- engines and enums (nki.isa.vector_engine, nki.isa.engine.vector, ...) ---------------------
tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    "tensor",
    "vector",
    "scalar",
    "gpsimd",
    None,
)


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


_NUMPY_NAMES = {
    "true_divide": "divide",
    "max": "max",
    "amax": "max",
    "amin": "min",
    "negative": "negative",
    "absolute": "abs",
    "sum": "add",
}


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
            value = (
                np.broadcast_to(value, dst.shape)
                if value.size != int(math.prod(dst.shape))
                else value.reshape(dst.shape)
            )
        except ValueError:
            raise m.fail(
                "shape mismatch", f"{opcode} produces {list(value.shape)} but dst is {list(dst.shape)}", site
            ) from None
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


def _simple(
    opcode: str,
    eng: str,
    dst: View,
    reads: list[tuple[str, Any]],
    compute: Callable[[], Any] | None,
    attrs: tuple[tuple[str, Any], ...],
    main: View,
    site: tuple[str, int],
    m: Machine,
    extra_writes: list[tuple[str, View]] = (),
    read_dst: bool = False,  # type: ignore[assignment]
    checked: bool = False,
) -> View:
    views = [(r, v) for r, v in reads if isinstance(v, View)]
    for role, v in views:
        if v is not main and v.partitions != main.partitions and v.alloc.kind != "hbm":
            raise m.fail(
                "partition mismatch",
                f"{opcode}: {role} spans {v.partitions} partitions, data spans {main.partitions}",
                site,
            )
    m.issue(opcode, eng, views, [("dst", dst)] + list(extra_writes), main, attrs, site, read_dst, checked)
    if m.execute and compute is not None:
        _write(m, dst, compute(), opcode, site)
    # Reading PSUM (evicting it) or overwriting it with another instruction ends a matmul
    # accumulation group there; nc_matmul opens one (see `_accumulation_groups`).
    _set_groups(
        m, [v for _, v in views] + ([] if opcode == "nc_matmul" else [dst] + [v for _, v in extra_writes]), False
    )
    if opcode == "nc_matmul":
        _set_groups(m, [dst], True)
    # A result the instruction allocated itself (legacy form) is returned whole, even when a
    # mask let it write only part of it.
    return View.whole(dst.alloc) if dst.alloc.temp else dst


def _accumulation_groups(m: Machine) -> dict[int, Any]:
    """PSUM locations inside an open matmul accumulation group, per allocation: a bool array in
    execute mode, one bool (any location) in trace mode.

    nc_matmul(accumulate=None) overwrites a location's first write and accumulates later ones
    (nki.isa.nc_matmul, "Accumulation mode", Neuron 2.30), a group lasting "before the PSUM tile
    content is evicted back to SBUF". So reading the location, or writing it with another
    instruction, closes its group and the next matmul there overwrites again: a K loop per output
    tile accumulates, and a PSUM tile reused for successive tiles (matmul, evict, matmul, ...)
    starts afresh each time, as the tutorials and Axon's kernels expect.
    """
    groups = getattr(m, "psum_accumulation_groups", None)
    if groups is None:
        groups = m.psum_accumulation_groups = {}  # type: ignore[attr-defined]
    return groups


def _set_groups(m: Machine, views: list[Any], state: bool) -> None:
    groups = _accumulation_groups(m)
    for v in views:
        if not isinstance(v, View) or v.alloc.kind != "psum":
            continue
        if m.execute:
            g = groups.get(v.alloc.id)
            if g is None:
                if not state:
                    continue
                g = groups[v.alloc.id] = np.zeros(v.alloc.shape, dtype=bool)
            g[v.np_index()] = state
        else:
            groups[v.alloc.id] = state


def _open_group(m: Machine, v: View) -> Any:
    """Per element (execute) or for the allocation (trace): is `v` inside an open accumulation group?"""
    g = _accumulation_groups(m).get(v.alloc.id)
    if m.execute:
        return np.zeros(v.shape, dtype=bool) if g is None else g[v.np_index()].copy()
    return bool(g)


# ---- data movement -----------------------------------------------------------------------------


def dma_copy(
    dst: View, src: View, mask: Predicate | None = None, dge_mode: Any = None, name: Any = None, **_: Any
) -> View:
    """DMA `src` into `dst` (HBM<->SBUF, or within one); a dtype change casts."""
    m, site = active(), kernel_site()
    dst, src = _masked(mask, dst, src)
    if _empty(dst, src):
        return dst
    _same_count(m, dst, src, "dma_copy", site)
    return _simple(
        "dma_copy",
        "dma",
        dst,
        [("src", src)],
        (lambda: _val(src).reshape(dst.shape)) if m.execute else None,
        (("src", src.alloc.kind), ("dst", dst.alloc.kind)),
        src,
        site,
        m,
    )


def dma_transpose(dst: View, src: View, axes: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """DMA `src` [a, b] into `dst` [b, a]."""
    m, site = active(), kernel_site()
    (src,) = _masked(mask, src)
    dst = _transposed_box(dst, src)
    if len(src.shape) != 2 or tuple(dst.shape) != (src.shape[1], src.shape[0]):
        raise m.fail(
            "shape mismatch",
            f"dma_transpose of {list(src.shape)} needs dst {[*src.shape[::-1]]}, got {list(dst.shape)}",
            site,
        )
    return _simple(
        "dma_transpose",
        "dma",
        dst,
        [("src", src)],
        lambda: T.sem_transpose(M, _val(src)),
        (("src", src.alloc.kind), ("dst", dst.alloc.kind), ("transpose", True)),
        src,
        site,
        m,
    )


# ---- TensorE -----------------------------------------------------------------------------------


def nc_matmul(
    dst: View | None,
    stationary: View,
    moving: View,
    is_stationary_onezero: bool = False,
    is_moving_onezero: bool = False,
    is_transpose: bool = False,
    accumulate: Any = None,
    tile_position: Any = (),
    tile_size: Any = (),
    perf_mode: Any = None,
    name: Any = None,
    mask: Predicate | None = None,
) -> View:
    """dst[M, N] = stationary[K, M].T @ moving[K, N] on TensorE, fp32 in PSUM.

    accumulate=True adds into dst, False overwrites it, and None (the default) decides per PSUM
    element: the first write to a location overwrites, later writes accumulate (nki.isa.nc_matmul,
    "Accumulation mode", Neuron 2.30). So a K loop of plain `nc_matmul(dst=psum, ...)` calls sums
    its products, as the tutorials rely on.
    """
    m, site = active(), kernel_site()
    if not isinstance(stationary, View) or not isinstance(moving, View):
        raise m.fail("matmul operands", "stationary and moving must be tiles", site)
    if perf_mode not in (None, "none", matmul_perf_mode.none):
        # double_row splits the contraction over the partition axis and a first free axis of 2
        # with fp8 inputs; its operand layout is not emulated, so refuse rather than guess.
        raise m.fail("nc_matmul perf_mode", f"perf_mode={perf_mode!r} (FP8 double-row) is not emulated", site)
    full_shape = (stationary.free_size, moving.free_size)
    stationary, moving = _masked(mask, stationary, moving)
    m.check_operand("nc_matmul", "stationary", stationary, "tensor", site)
    m.check_operand("nc_matmul", "moving", moving, "tensor", site)
    if stationary.partitions != moving.partitions:
        raise m.fail(
            "matmul partition mismatch",
            f"stationary {list(stationary.shape)} and moving "
            f"{list(moving.shape)} must share the contraction (partition) size",
            site,
        )
    out_shape = (stationary.free_size, moving.free_size)
    if dst is None:
        dst = _new(m, full_shape, float32, "psum")
    if dst.shape != out_shape and len(dst.shape) == 2 and all(o <= d for o, d in zip(out_shape, dst.shape)):
        dst = dst.index((slice(0, out_shape[0]), slice(0, out_shape[1])))
    m.check_operand("nc_matmul", "dst", dst, "tensor", site)  # before the shape check: name the buffer rule
    if dst.dtype != float32 and not is_transpose:
        # "The dst tile must be a float32 tile in NeuronCore-v2 and NeuronCore-v3" (nki.isa.nc_matmul,
        # Neuron 2.30); a bf16 dst would silently round every partial sum.
        raise m.fail(
            "nc_matmul dst dtype", f"nc_matmul accumulates into a float32 PSUM tile, dst is {dst.dtype.name}", site
        )
    if int(math.prod(dst.shape)) != out_shape[0] * out_shape[1]:
        raise m.fail(
            "shape mismatch",
            f"nc_matmul of {list(stationary.shape)} x {list(moving.shape)} gives "
            f"{list(out_shape)}, dst is {list(dst.shape)}",
            site,
        )
    if accumulate is None:
        # Auto-detect: accumulate where an accumulation group is open (`_accumulation_groups`). The
        # trace records the allocation-level answer; execute mode decides element by element.
        group = _open_group(m, dst)
        written = group if m.execute else None
        acc = bool(np.any(group))
    else:
        written = None
        acc = bool(accumulate)
    attrs = (
        ("stationary_free", stationary.free_size),
        ("moving_free", moving.free_size),
        ("accumulate", acc),
        ("is_transpose", bool(is_transpose)),
    )

    def compute() -> Any:
        # Products of bf16/fp16/fp8 values are exact in fp32, so an fp32 matmul of the inputs
        # is the hardware's multiply-in-input-dtype, accumulate-in-fp32.
        st = _val(stationary).reshape(stationary.partitions, -1)
        mv = _val(moving).reshape(moving.partitions, -1)
        if is_transpose and mv.shape[0] == mv.shape[1] and np.array_equal(mv, np.eye(mv.shape[0], dtype=mv.dtype)):
            r = T.sem_transpose(M, st)  # transpose mode with the identity: bit-accurate (NaN/Inf kept)
        else:
            r = T.sem_nc_matmul(M, st, mv)
        if written is not None:
            prev = _val(dst).reshape(r.shape)
            return np.where(written.reshape(r.shape), r + np.where(written.reshape(r.shape), prev, 0), r)
        return r + _val(dst).reshape(r.shape) if acc else r

    # With auto-detect only the already-written elements are read: the poison rule applies to a
    # dst read in full.
    return _simple(
        "nc_matmul",
        "tensor",
        dst,
        [("stationary", stationary), ("moving", moving)],
        compute,
        attrs,
        moving,
        site,
        m,
        read_dst=acc and (written is None or bool(written.all())),
        checked=True,
    )


def nc_transpose(
    dst: View | None, data: View, engine: Any = None, mask: Predicate | None = None, name: Any = None, **_: Any
) -> View:
    """Swap partition and free axis: TensorE (default, into PSUM) or VectorE (<= 32x32). Several free
    axes are flattened into one first (nki.isa.nc_transpose, Neuron 2.30)."""
    m, site = active(), kernel_site()
    eng = _engine("nc_transpose", engine)
    if len(data.shape) < 2:
        raise m.fail("shape", f"nc_transpose needs a tile with a free axis, got {list(data.shape)}", site)
    if eng == "vector" and max(data.partitions, data.free_size) > T.ISA_LIMITS["vector_transpose_max"]:
        raise m.fail("vector transpose > 32x32", f"nc_transpose on VectorE of {list(data.shape)}", site)
    if dst is None:
        dst = _new(
            m,
            (data.free_size, data.partitions),
            float32 if eng == "tensor" else data.dtype,
            "psum" if eng == "tensor" else "sbuf",
        )
    (data,) = _masked(mask, data)
    dst = _transposed_box(dst, data) if len(data.shape) == 2 else dst
    return _simple(
        "nc_transpose",
        eng,
        dst,
        [("data", data)],
        lambda: T.sem_transpose(M, _val(data).reshape(data.partitions, -1)),
        (),
        data,
        site,
        m,
    )


# ---- ScalarE / VectorE / GpSimd ----------------------------------------------------------------


def _vec(x: Any, ref: View) -> Any:
    """A scalar operand or a [P, 1] vector broadcast along ref's free axes."""
    if isinstance(x, View):
        return _val(x).reshape((x.shape[0],) + (1,) * (len(ref.shape) - 1))
    return np.float32(x)


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
        dst = _new(m, data1.shape, dtype or data1.dtype)
    data1, data2 = _masked(mask, data1, data2)
    (dst,) = _masked(mask, dst)
    if _empty(dst, data1):
        return dst
    _same_count(m, data1, data2, "tensor_tensor", site)
    _same_count(m, dst, data1, "tensor_tensor", site)
    if data1.alloc.kind == "psum" and data2.alloc.kind == "psum":
        raise m.fail("tensor_tensor inputs both in PSUM", "at most one input of tensor_tensor may be in PSUM", site)
    return _simple(
        "tensor_tensor",
        eng,
        dst,
        [("data1", data1), ("data2", data2)],
        lambda: T.sem_tensor_tensor(M, _val(data1), _val(data2), fn),
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
            _val(data),
            f0,
            _vec(operand0, data),
            reverse0,
            f1,
            None if f1 is None else _vec(operand1, data),
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
    **_: Any,
) -> View:
    """tensor_scalar with one op, plus a free-axis reduction of the result into reduce_res [P, 1]."""
    m, site = active(), kernel_site()
    f0, fr = op_name(op0), REDUCE_ALIASES[op_name(reduce_op)]
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
    **_: Any,
) -> View:
    """Reduce `data` along free axes `axis` (add, max, min, multiply), optionally negated."""
    m, site = active(), kernel_site()
    kind = REDUCE_ALIASES.get(op_name(op))
    if kind is None:
        raise m.fail("reduce op", f"tensor_reduce cannot reduce with {op_name(op)!r}", site)
    axes = _axes(axis, len(data.shape))
    if 0 in axes:
        raise m.fail(
            "reduce over partitions", "tensor_reduce reduces free axes only (axis 0 is the partition axis)", site
        )
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


def tensor_copy(
    dst: View | None,
    src: View,
    engine: Any = None,
    mask: Predicate | None = None,
    dtype: Any = None,
    name: Any = None,
    **_: Any,
) -> View:
    """Copy (and cast) a tile on Vector, Scalar or GpSimd."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, src.shape, dtype or src.dtype)
    (src,) = _masked(mask, src)
    (dst,) = _masked(mask, dst)
    if _empty(dst, src):
        return dst
    _same_count(m, dst, src, "tensor_copy", site)
    return _simple(
        "tensor_copy", _engine("tensor_copy", engine), dst, [("src", src)], lambda: _val(src), (), src, site, m
    )


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


def memset(
    dst: View, value: Any, engine: Any = None, mask: Predicate | None = None, name: Any = None, **_: Any
) -> View:
    """Fill `dst` with `value`."""
    m, site = active(), kernel_site()
    (dst,) = _masked(mask, dst)
    if _empty(dst):
        return dst
    return _simple(
        "memset",
        _engine("memset", engine),
        dst,
        [],
        lambda: np.float32(value),
        (("value", float(value)),),
        dst,
        site,
        m,
    )


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


def bn_stats(dst: View | None, data: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """Per-partition statistics (6 values: count, mean, M2 of each half) of <= 512 free elements (VectorE)."""
    m, site = active(), kernel_site()
    if dst is None:
        dst = _new(m, (data.shape[0], 6), dtype or float32)
    (data,) = _masked(mask, data)
    (dst,) = _masked(mask, dst)
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
    if dst is None:
        dst = _new(m, (data.shape[0], 2), dtype or float32)
    (data,) = _masked(mask, data)
    (dst,) = _masked(mask, dst)
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
