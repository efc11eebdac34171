"""`nki.language` (nl): buffers, dtypes, tensor constructors, indexing, loops and tile-level math.

Tile-level calls (`nl.exp(x)`, `nl.add(a, b)`, `nl.sum(x, axis=1)`, `nl.load`, `nl.matmul`) return
new tiles and accept the legacy `mask=`/`dtype=`; each lowers to the nki.isa instruction the
compiler would pick (`instructions.py`), so the trace shows real instructions. Both API
generations share this module; what differs between them lives in `legacy_isa.py`.
"""

from __future__ import annotations

import builtins
from types import SimpleNamespace
from typing import Any

import numpy as np

from axon.nki import instructions as I
from axon.nki.machine import active, maybe_active
from axon.nki.memory import (
    Buffer,
    DynSlice,
    IndexExpr,
    Predicate,
    View,
    arange,
    as_dtype,
    bfloat16,
    bool_,
    ds,  # noqa: F401
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    hbm,
    int8,
    int16,
    int32,
    mgrid,
    par_dim,
    private_hbm,
    psum,
    sbuf,
    shared_hbm,
    tfloat32,
    uint8,
    uint16,
    uint32,
)

tile_size = SimpleNamespace(
    pmax=128,
    psum_fmax=512,
    gemm_stationary_fmax=128,
    gemm_moving_fmax=512,
    bn_stats_fmax=512,
    psum_partition_max=128,
    total_available_sbuf_size=192 * 1024,
)


# ---- tensors -----------------------------------------------------------------------------------


def _buffer_kind(buffer: Any) -> str:
    if buffer is None:
        return "sbuf"
    if isinstance(buffer, Buffer):
        return buffer.kind
    raise active().fail("buffer", f"{buffer!r} is not an NKI buffer (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm)")


def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **_: Any) -> View:
    """A new tensor in `buffer` (default SBUF); `nl.par_dim` marks the partition axis."""
    m = active()
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    pa = next((i for i, s in enumerate(shape) if isinstance(s, par_dim)), 0)
    if buffer is shared_hbm and m.num_programs:
        # In an SPMD launch every program's shared_hbm tensor from one line is the same tensor.
        from axon.nki.machine import kernel_site

        key = (kernel_site(), tuple(int(s) for s in shape))
        view = m.shared_tensors.get(key)
        if view is None:
            view = m.shared_tensors[key] = View.whole(
                m.allocate(tuple(int(s) for s in shape), as_dtype(dtype), "hbm", name, pa)
            )
        return view
    direct = buffer if getattr(buffer, "tiles", None) is not None else None  # nki.compiler mod_alloc
    return View.whole(
        m.allocate(tuple(int(s) for s in shape), as_dtype(dtype), _buffer_kind(buffer), name, pa, direct=direct)
    )


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "", **kw: Any) -> View:
    t = ndarray(shape, dtype, buffer, name)
    if t.alloc.kind == "hbm" or t.alloc.par_axis:
        # HBM is filled outside the engines; with block dimensions the compiler initializes each
        # block where it is first used (lazily), so the blocks are not all live from here: either
        # way the values are there from the start and no on-chip instruction is traced.
        if active().execute:
            t.alloc.data[...] = fill_value  # type: ignore[index]
            t.alloc.written[...] = True  # type: ignore[index]
        t.alloc.ever_written = True
        return t
    I.memset(t, fill_value)
    return t


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kw: Any) -> View:
    return full(shape, 0.0, dtype, buffer, name)


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kw: Any) -> View:
    return full(shape, 1.0, dtype, buffer, name)


def zeros_like(a: View, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    return zeros(a.shape, dtype or a.dtype, buffer or a.buffer)


def ones_like(a: View, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    return ones(a.shape, dtype or a.dtype, buffer or a.buffer)


def empty_like(a: View, dtype: Any = None, buffer: Any = None, **kw: Any) -> View:
    return ndarray(a.shape, dtype or a.dtype, buffer or a.buffer)


def shared_constant(constant: Any, dtype: Any = None, **kw: Any) -> View:
    """An HBM tensor holding a NumPy constant."""
    arr = np.asarray(constant)
    dt = as_dtype(dtype) if dtype is not None else arr.dtype
    t = ndarray(arr.shape, dt, shared_hbm, "constant")
    m = active()
    if m.execute:
        t.alloc.data[...] = arr.astype(dt)  # type: ignore[index]
        t.alloc.written[...] = True  # type: ignore[index]
    t.alloc.ever_written = True
    return t


def shared_identity_matrix(n: int, dtype: Any = float32, **kw: Any) -> View:
    return shared_constant(np.eye(n), dtype)


# ---- loops -------------------------------------------------------------------------------------


def _range(kind: str, args: tuple[int, ...]) -> Any:
    r = range(*(int(a) for a in args))
    m = maybe_active()
    return iter(r) if m is None else m.loop(kind, r)


def affine_range(*args: int, **_: Any) -> Any:
    """A loop without loop-carried dependencies (except accumulation)."""
    return _range("affine", args)


def sequential_range(*args: int, **_: Any) -> Any:
    return _range("sequential", args)


def static_range(*args: int, **_: Any) -> Any:
    return _range("static", args)


def dynamic_range(*args: int, **_: Any) -> Any:
    return _range("dynamic", args)


def program_id(axis: int = 0) -> int:
    ids = active().program_ids
    return ids[axis] if axis < len(ids) else 0


def num_programs(axes: int = 0) -> int:
    n = active().num_programs
    return n[axes] if axes < len(n) else 1


def program_ndim() -> int:
    """Number of dimensions of the SPMD launch grid (0 outside an SPMD launch)."""
    return len(active().num_programs)


def nc(n: int) -> int:
    """`nl.nc(n)`: n NeuronCores along one grid dimension (see `spmd_dim`)."""
    return int(n)


def spmd_dim(*factors: Any) -> int:
    """`nl.spmd_dim(grid_x, nl.nc(2))`: one logical grid dimension of grid_x * 2 programs, spread over
    cores; the emulator runs its programs one after another, so only the size matters."""
    size = 1
    for f in factors:
        size *= int(f)
    return size


class fp32:
    """`nl.fp32.min`: the most negative finite fp32 (bit pattern 0xff7fffff)."""

    min = float(np.finfo(np.float32).min)


def static_cast(x: Any, dtype: Any) -> Any:
    """`nl.static_cast(array, dtype)` on host arrays (the tutorials' test harnesses cast inputs)."""
    return np.asarray(x).astype(as_dtype(dtype))


def device_print(*_: Any, **__: Any) -> None:
    """Accepted and ignored: printing is not an instruction the trace models."""


def _mask(mask: Any) -> Any:
    """A Python bool given as `mask=` (an affine condition without index variables, evaluated at
    trace time): True keeps the whole instruction, False keeps none of it (returns "skip")."""
    if mask is True or (isinstance(mask, np.bool_) and bool(mask)):
        return None
    if mask is False or isinstance(mask, np.bool_):
        return "skip"
    return mask


# ---- data movement -----------------------------------------------------------------------------


def load(src: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """HBM view -> new SBUF tile (one DMA)."""
    m = active()
    if not isinstance(src, View) or src.alloc.kind != "hbm":
        raise m.fail("nl.load source", f"nl.load reads an HBM tensor, got {src!r}")
    mask = _mask(mask)
    t = I._new(m, src.shape, dtype or src.dtype)
    if mask != "skip":
        I.dma_copy(t, src, mask=mask)
    return t


def store(dst: View, value: View, mask: Predicate | None = None, **_: Any) -> None:
    """SBUF tile -> HBM view (one DMA)."""
    m = active()
    if not isinstance(dst, View) or dst.alloc.kind != "hbm":
        raise m.fail("nl.store destination", f"nl.store writes an HBM tensor, got {dst!r}")
    if not isinstance(value, View):
        raise m.fail("nl.store value", f"nl.store needs a tile value, got {value!r}")
    mask = _mask(mask)
    if mask != "skip":
        I.dma_copy(dst, value, mask=mask)


def load_transpose2d(src: View, mask: Predicate | None = None, dtype: Any = None, **_: Any) -> View:
    """HBM [a, b] -> SBUF [b, a] with a transposing DMA."""
    m = active()
    t = I._new(m, src.shape[::-1], dtype or src.dtype)
    I.dma_transpose(t, src, mask=mask)
    return t


# ---- tile-level math ---------------------------------------------------------------------------


def _is_vector(x: Any, ref: View) -> bool:
    return (
        isinstance(x, View)
        and x.ndim >= 1
        and x.free_size == 1
        and x.partitions == ref.partitions
        and ref.free_size > 1
    )


def _binary(fn: str, x: Any, y: Any, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> Any:
    m = active()
    mask = _mask(mask)
    if mask == "skip":  # the instruction is dropped: its result tile holds nothing written
        ref = x if isinstance(x, View) else y
        return I._new(m, ref.shape, dtype or ref.dtype)
    if not isinstance(x, View) and not isinstance(y, View):
        from axon.target.isa import ALU, NUMPY_FP32

        return ALU[fn](NUMPY_FP32, np.float32(x), np.float32(y))
    for v in (x, y):
        if isinstance(v, View) and v.alloc.kind == "hbm":
            raise m.fail("HBM operand", f"nl.{fn} computes on SBUF/PSUM tiles; load {v!r} first")
    if isinstance(x, View) and (not isinstance(y, View) or _is_vector(y, x)):
        return I.tensor_scalar(None, x, fn, y, mask=mask, dtype=dtype)
    if isinstance(y, View) and (not isinstance(x, View) or _is_vector(x, y)):
        return I.tensor_scalar(None, y, fn, x, reverse0=True, mask=mask, dtype=dtype)
    if x.shape != y.shape:
        raise m.fail("shape mismatch", f"nl.{fn} of {list(x.shape)} and {list(y.shape)} (use broadcast_to)")
    return I.tensor_tensor(None, x, y, fn, mask=mask, dtype=dtype)


def _unary(fn: str, x: View, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    if _mask(mask) == "skip":
        return I._new(active(), x.shape, dtype or x.dtype)
    mask = _mask(mask)
    if fn == "copy":
        return I.tensor_copy(None, x, mask=mask, dtype=dtype)
    return I.activation(None, fn, x, mask=mask, dtype=dtype)


def _reduce(
    kind: str, x: View, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Predicate | None = None, **_: Any
) -> View:
    return I.tensor_reduce(None, kind, x, axis, keepdims=keepdims, mask=mask, dtype=dtype)


class Op:
    """An nl operator: callable on tiles, and usable as `op=` of nki.isa instructions."""

    def __init__(self, name: str, kind: str) -> None:
        self.isa_name = name
        self.kind = kind  # "alu" | "act" | "reduce"
        self.__name__ = name

    def __call__(self, *args: Any, **kw: Any) -> Any:
        if self.kind == "alu":
            return _binary(self.isa_name, *args, **kw)
        if self.kind == "act":
            return _unary(self.isa_name, *args, **kw)
        return _reduce(self.isa_name, *args, **kw)

    def __repr__(self) -> str:
        return f"nl.{self.isa_name}"


add, subtract, multiply, divide = Op("add", "alu"), Op("subtract", "alu"), Op("multiply", "alu"), Op("divide", "alu")
maximum, minimum, power = Op("maximum", "alu"), Op("minimum", "alu"), Op("power", "alu")
greater, greater_equal, less = Op("greater", "alu"), Op("greater_equal", "alu"), Op("less", "alu")
less_equal, equal, not_equal = Op("less_equal", "alu"), Op("equal", "alu"), Op("not_equal", "alu")
bypass = Op("bypass", "alu")
exp, log, sqrt, rsqrt = Op("exp", "act"), Op("log", "act"), Op("sqrt", "act"), Op("rsqrt", "act")
square, reciprocal, tanh, sigmoid = (
    Op("square", "act"),
    Op("reciprocal", "act"),
    Op("tanh", "act"),
    Op("sigmoid", "act"),
)
silu, gelu, gelu_apprx_tanh, relu = (
    Op("silu", "act"),
    Op("gelu", "act"),
    Op("gelu_apprx_tanh", "act"),
    Op("relu", "act"),
)
copy, identity, abs, negative = Op("copy", "act"), Op("identity", "act"), Op("abs", "act"), Op("negative", "act")
sum, max, min, prod = Op("add", "reduce"), Op("max", "reduce"), Op("min", "reduce"), Op("multiply", "reduce")


def mean(
    x: View, axis: Any, dtype: Any = None, keepdims: bool = False, mask: Predicate | None = None, **_: Any
) -> View:
    """Sum along free axes, then scale by 1/count (two instructions, as the compiler emits)."""
    s = I.tensor_reduce(None, "add", x, axis, keepdims=keepdims, mask=mask, dtype=float32)
    count = 1
    for a in I._axes(axis, x.ndim):
        count *= x.shape[a]
    return I.tensor_scalar(None, s, "multiply", 1.0 / count, dtype=dtype or x.dtype, mask=mask)


def var(x: View, axis: Any, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    mu = mean(x, axis, dtype=float32, keepdims=True, mask=mask)
    d = I.tensor_scalar(None, x, "subtract", mu, dtype=float32, mask=mask)
    return mean(
        I.tensor_tensor(None, d, d, "multiply", mask=mask), axis, dtype=dtype or x.dtype, keepdims=True, mask=mask
    )


def transpose(x: View, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """Partition <-> free transpose on TensorE (result in PSUM)."""
    return I.nc_transpose(None, x, engine="tensor", mask=mask)


def matmul(x: View, y: View, transpose_x: bool = False, mask: Predicate | None = None, **_: Any) -> View:
    """x @ y into a new PSUM tile; x is [M, K] unless transpose_x (then [K, M], the stationary layout)."""
    # Operands in PSUM (an nl.transpose result, say) go through SBUF first, as the compiler does:
    # TensorE reads SBUF only.
    if y.alloc.kind == "psum":
        y = I.tensor_copy(None, y, dtype=y.dtype)
    if x.alloc.kind == "psum" and transpose_x:
        x = I.tensor_copy(None, x, dtype=x.dtype)
    if transpose_x:
        return I.nc_matmul(None, x, y, mask=mask)
    xt_psum = I.nc_transpose(None, x, engine="tensor")
    xt = I.tensor_copy(None, xt_psum, dtype=x.dtype)
    return I.nc_matmul(None, xt, y, mask=mask)


def where(condition: View, x: Any, y: Any, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """condition ? x : y as two VectorE instructions: y + condition * (x - y)."""
    m = active()
    if not isinstance(x, View) or not isinstance(y, View):
        raise m.fail("nl.where", "nl.where takes tiles for x and y here; use nisa.affine_select for index predicates")
    diff = I.tensor_tensor(None, x, y, "subtract", dtype=float32)
    sel = I.tensor_tensor(None, diff, condition, "multiply", dtype=float32)
    out = I.tensor_tensor(None, sel, y, "add", dtype=dtype or x.dtype, mask=mask)
    if m.execute:
        # A select, exactly: y + c * (x - y) rounds in fp32, and the result is x or y itself.
        box = out if out.alloc.last_write is None else View(out.alloc, *_box(out.alloc.last_write))
        pick = np.where(I._val(condition) != 0, I._val(x), I._val(y))
        box.alloc.data[box.np_index()] = (
            pick.reshape(box.shape)
            if pick.size == int(np.prod(box.shape))
            else pick[tuple(slice(0, n) for n in box.shape)]
        )
    return out


def _box(v: View) -> tuple[Any, ...]:
    return v.starts, v.steps, v.sizes, v.kept


def loop_reduce(
    x: View, op: Any, loop_indices: Any, dtype: Any = None, mask: Predicate | None = None, **_: Any
) -> View:
    """Reduce `x` across iterations of the loops in `loop_indices` into one accumulator tile."""
    m = active()
    from axon.nki.machine import kernel_site

    site = kernel_site()
    fn = I.op_name(op)
    fn = {"max": "maximum", "amax": "maximum", "min": "minimum", "amin": "minimum", "sum": "add"}.get(fn, fn)
    # The accumulator is one per call site and per iteration of the loops that are NOT reduced
    # (those named in loop_indices; without loop identities, the innermost loop).
    idx = loop_indices if isinstance(loop_indices, (list, tuple)) else [loop_indices]
    reduced = {getattr(i, "loop_id", None) for i in idx} - {None}
    if not reduced and m.loop_stack:
        reduced = {m.loop_stack[-1][0]}
    key = (site, tuple(x.shape), tuple((lid, it) for lid, _, it in m.loop_stack if lid not in reduced))
    acc = m.loop_reduce_acc.get(key)
    if acc is None:
        acc = I.tensor_copy(None, x, dtype=dtype or x.dtype, mask=mask)
        m.loop_reduce_acc[key] = acc
        return acc
    return I.tensor_tensor(acc, acc, x, fn, mask=mask)


def broadcast_to(x: View, shape: Any) -> View:
    return x.broadcast_to(tuple(shape))


def _broadcast(x: View, shape: tuple[int, ...]) -> View:
    """[1, F] -> [P, F] is a partition broadcast on TensorE (matmul with ones, into PSUM);
    [P, 1] -> [P, F] is a free-axis broadcast (VectorE copy)."""
    m = active()
    from axon.nki.machine import kernel_site

    site = kernel_site()
    shape = tuple(int(s) for s in shape)
    if x.shape == shape:
        return x
    if len(x.shape) == 1 and len(shape) == 2 and x.shape[0] == shape[0]:
        # [P] (a reduction without keepdims) is [P, 1]: a free-axis broadcast
        out = I._new(m, shape, x.dtype)
        m.issue("tensor_copy", "vector", [("src", x)], [("dst", out)], out, (("broadcast", True),), site)
        if m.execute:
            I._write(m, out, np.broadcast_to(I._val(x).reshape(-1, 1), shape), "broadcast_to", site)
        return out
    if len(shape) != len(x.shape) or any(a not in (1, b) for a, b in zip(x.shape, shape)):
        raise m.fail("broadcast_to", f"cannot broadcast {list(x.shape)} to {list(shape)}", site)
    if x.shape[0] == 1 and shape[0] > 1:
        # One matmul with a ones stationary per PSUM bank of columns, each evacuated to SBUF.
        out = I._new(m, shape, x.dtype)
        fmax = m.hw.tensor_engine.moving_fmax
        flat = shape[1] if len(shape) == 2 else None
        if flat is None:
            raise m.fail("broadcast_to", "partition broadcast supports 2-D tiles", site)
        for c0 in range(0, flat, fmax):
            c1 = builtins.min(flat, c0 + fmax)
            part = I._new(m, (shape[0], c1 - c0), float32, "psum")
            src = x.index((slice(None), slice(c0, c1)))
            m.issue(
                "nc_matmul",
                "tensor",
                [("moving", src)],
                [("dst", part)],
                src,
                (("stationary_free", shape[0]), ("moving_free", c1 - c0), ("broadcast", True)),
                site,
            )
            if m.execute:
                I._write(m, part, np.broadcast_to(I._val(src), part.shape), "broadcast_to", site)
            I.tensor_copy(out.index((slice(None), slice(c0, c1))), part)
        return out
    out = I._new(m, shape, x.dtype)
    m.issue("tensor_copy", "vector", [("src", x)], [("dst", out)], out, (("broadcast", True),), site)
    if m.execute:
        I._write(m, out, np.broadcast_to(I._val(x), shape), "broadcast_to", site)
    return out


class _NotEmulatedDtype:
    """An NKI dtype the emulator has no storage for: using it in a tensor is an NKIError naming it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name} (an MX x4-packed dtype of NeuronCore-v4, not emulated)"


# MX x4-packed dtypes (nki.isa.nc_matmul_mx / quantize_mx, NeuronCore-v4): refused, never approximated.
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = (
    _NotEmulatedDtype(n) for n in ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")
)
