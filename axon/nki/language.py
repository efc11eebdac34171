"""`nki.language` (nl): buffers, dtypes, tensor constructors, indexing, loops and tile-level math.

Tile-level calls (`nl.exp(x)`, `nl.add(a, b)`, `nl.sum(x, axis=1)`, `nl.load`, `nl.matmul`) return
new tiles and accept the legacy `mask=`/`dtype=`; each lowers to the nki.isa instruction the
compiler would pick (`instructions.py`), so the trace shows real instructions. Both API
generations share this module; what differs between them lives in `legacy_isa.py`.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from axon.errors import NKIError
from axon.nki import instructions as I
from axon.nki.context import active, kernel_site, maybe_active
from axon.nki.dtypes import (
    Buffer,
    as_dtype,
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float16,
    float32,
    hbm,
    int8,
    int16,
    int32,
    par_dim,
    private_hbm,
    promoted_dtype,
    psum,
    sbuf,
    scalar_dtype,
    shared_hbm,
    stored,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from axon.nki.indexing import DynSlice, IndexExpr, Predicate, arange, ds, mgrid
from axon.nki.lang_tensors import (
    NOT_EMULATED,
    TileSize,
    _buffer_kind,
    _mask,
    _range,
    affine_range,
    device_print,
    dynamic_range,
    empty_like,
    fori_loop,
    fp32,
    full,
    load,
    load_transpose2d,
    nc,
    ndarray,
    num_programs,
    ones,
    ones_like,
    program_id,
    program_ndim,
    sequential_range,
    shared_constant,
    shared_identity_matrix,
    spmd_dim,
    static_cast,
    static_range,
    store,
    while_loop,
    zeros,
    zeros_like,
)
from axon.nki.memory import View
from axon.nki.view_ops import OPERATORS
from axon.target.isa import ALU, NUMPY_FP32

tile_size = TileSize()


# ---- tile-level math ---------------------------------------------------------------------------


def _is_vector(x: Any, ref: View) -> bool:
    """`x` is one value per partition of `ref` (also a [P] tile against a [P, 1] one, as at N=1)."""
    return (
        isinstance(x, View)
        and x.ndim >= 1
        and x.free_size == 1
        and x.partitions == ref.partitions
        and (ref.free_size > 1 or x.ndim < ref.ndim)
    )


def _binary(fn: str, x: Any, y: Any, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> Any:
    m = active()
    mask = _mask(mask)
    if not isinstance(x, View) and not isinstance(y, View):
        return ALU[fn](NUMPY_FP32, np.float32(x), np.float32(y))
    # without dtype=, the promoted dtype of both operands, a scalar's included (nki.api.shared,
    # "NKI Type Promotion": (np.int8, 2) -> np.int32, (np.float16, 1.2) -> np.float32)
    dtype = dtype or promoted_dtype(*(v.dtype if isinstance(v, View) else scalar_dtype(v) for v in (x, y)))
    if mask == "skip":  # the instruction is dropped: its result tile holds nothing written
        return I._new(m, (x if isinstance(x, View) else y).shape, dtype)
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
        self.kind = kind  # "alu" | "bitvec" (integer tiles) | "act" | "reduce"
        self.__name__ = name

    def __call__(self, *args: Any, **kw: Any) -> Any:
        if self.kind in ("alu", "bitvec"):
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
# bitvec operators (integer tiles, Vector Engine); np.bitwise_and etc. name the same ops
bitwise_and, bitwise_or = Op("bitwise_and", "bitvec"), Op("bitwise_or", "bitvec")
# logical operators (1/0 of boolean-like inputs) and remainders (nki.language.logical_and, mod, fmod)
logical_and, logical_or, logical_xor = Op("logical_and", "alu"), Op("logical_or", "alu"), Op("logical_xor", "alu")
mod, fmod = Op("mod", "alu"), Op("fmod", "alu")
bitwise_xor, left_shift, right_shift = (
    Op("bitwise_xor", "bitvec"),
    Op("left_shift", "bitvec"),
    Op("right_shift", "bitvec"),
)


def invert(x: View, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """Bitwise NOT of an integer tile (nl.invert), one VectorE tensor_scalar."""
    return I.tensor_scalar(None, x, "invert", 0, mask=_mask(mask), dtype=dtype, engine="vector")


def logical_not(x: View, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """1 where x is 0, else 0 (nl.logical_not), in x's dtype unless `dtype` says otherwise."""
    return _binary("equal", x, 0, dtype=dtype or x.dtype, mask=mask)


invert.isa_name = "invert"  # type: ignore[attr-defined]  # also usable as op= of nki.isa instructions
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
    """Sum along free axes, then scale by 1/count (two instructions, as the compiler emits). An
    integer tile's mean is float32 unless `dtype` says otherwise (nki.language.mean)."""
    s = I.tensor_reduce(None, "add", x, axis, keepdims=keepdims, mask=mask, dtype=float32)
    count = 1
    for a in I._axes(axis, x.ndim):
        count *= x.shape[a]
    out = dtype or (float32 if np.issubdtype(x.dtype, np.integer) else x.dtype)
    return I.tensor_scalar(None, s, "multiply", 1.0 / count, dtype=out, mask=mask)


def var(x: View, axis: Any, dtype: Any = None, mask: Predicate | None = None, keepdims: bool = False, **_: Any) -> View:
    """Variance along free axes; the reduced axes are dropped from the shape, as nl.mean's are
    (nki.language.var), unless `keepdims`."""
    mu = mean(x, axis, dtype=float32, keepdims=True, mask=mask)
    d = I.tensor_scalar(None, x, "subtract", mu, dtype=float32, mask=mask)
    return mean(
        I.tensor_tensor(None, d, d, "multiply", mask=mask), axis, dtype=dtype or x.dtype, keepdims=keepdims, mask=mask
    )


def transpose(x: View, dtype: Any = None, mask: Predicate | None = None, **_: Any) -> View:
    """Partition <-> free transpose on TensorE (result in PSUM), of dtype `dtype`, by default x's
    ("if not specified, it will default to be the same as the data type of the input tile")."""
    mask = _mask(mask)
    if x.alloc.kind == "psum":  # TensorE reads SBUF (nki.isa.nc_transpose): through SBUF, as nl.matmul
        x = I.tensor_copy(None, x, dtype=x.dtype)
    out = I._new(active(), (x.free_size, x.partitions), dtype or x.dtype, "psum")
    return out if mask == "skip" else I.nc_transpose(out, x, engine="tensor", mask=mask)


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
    """condition ? x : y as three VectorE instructions: y + condition * (x - y); y is a tile or a
    number (a tensor_scalar then). Without dtype=, the promoted dtype of the input tiles x and y
    ("whichever input type has the highest precision", nki.language.where)."""
    m = active()
    if not isinstance(x, View):
        raise m.fail("nl.where", "x of nl.where must be a tile (y may be a tile or a number)")
    if isinstance(y, View):
        diff = I.tensor_tensor(None, x, y, "subtract", dtype=float32)
    else:
        diff = I.tensor_scalar(None, x, "subtract", y, dtype=float32)
    sel = _binary("multiply", diff, condition, dtype=float32)  # a [P, 1] condition broadcasts as in nl.multiply
    if isinstance(y, View):
        out = I.tensor_tensor(None, sel, y, "add", dtype=dtype or promoted_dtype(x.dtype, y.dtype), mask=mask)
    else:
        out = I.tensor_scalar(None, sel, "add", y, dtype=dtype or x.dtype, mask=mask)
    if m.execute:
        # A select, exactly: y + c * (x - y) rounds in fp32, and the result is x or y itself.
        w = out.alloc.last_write
        box = out if w is None else View(out.alloc, w.starts, w.steps, w.sizes, w.kept)
        pick = stored(np.where(I._val(condition) != 0, I._val(x), I._val(y)), box.alloc.dtype)
        assert box.alloc.data is not None  # execute mode holds data
        box.alloc.data[box.np_index()] = (
            pick.reshape(box.shape)
            if pick.size == int(np.prod(box.shape))
            else pick[tuple(slice(0, n) for n in box.shape)]
        )
    return out


def softmax(
    x: View, axis: Any = -1, dtype: Any = None, compute_dtype: Any = None, mask: Predicate | None = None, **_: Any
) -> View:
    """exp(x - max) / sum(exp(x - max)) along the free axes, as the hardware computes it: a negated
    max reduction (VectorE), exp with that as bias summing as it goes (ScalarE), reciprocal, multiply."""
    m = active()
    axes = I._axes(axis, x.ndim)
    if 0 in axes:
        raise m.fail("nl.softmax axis", f"axis={axis}: softmax runs along free axes, not the partition axis (0)")
    if sorted(axes) != list(range(1, x.ndim)):
        raise m.fail("nl.softmax axis", f"softmax over axis={axis} of a {list(x.shape)} tile (not all its free axes)")
    if mask is not None:
        raise m.fail("nl.softmax mask", "a masked nl.softmax is not emulated (slice the tile instead)")
    neg_max = I.tensor_reduce(None, "max", x, axes, negate=True, keepdims=True, dtype=float32)
    e, total = I._new(m, x.shape, float32), I._new(m, (x.shape[0], 1), float32)
    I.activation(e, "exp", x, bias=neg_max, reduce_res=total)
    inv = I.reciprocal(None, total, dtype=float32)
    return I.tensor_scalar(None, e, "multiply", inv, dtype=dtype or compute_dtype or x.dtype)


def loop_reduce(
    x: View, op: Any, loop_indices: Any, dtype: Any = None, mask: Predicate | None = None, **_: Any
) -> View:
    """Reduce `x` across iterations of the loops in `loop_indices` into one accumulator tile."""
    m = active()

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


def __getattr__(name: str) -> Any:
    if name in NOT_EMULATED:
        raise NKIError(f"nki.language.{name} is not emulated by Axon's NKI emulator")
    raise AttributeError(f"module 'nki.language' has no attribute {name!r}")


# the operators of views in kernel expressions (`a * b`, `x ** 2`, `t.broadcast_to(shape)`)
_VIEW_OPS: tuple[Any, ...] = (add, subtract, multiply, divide, power, greater, greater_equal, less, less_equal, invert)
_VIEW_OPS += (equal, not_equal, bitwise_and, bitwise_or, bitwise_xor, left_shift, right_shift, mod, abs)
OPERATORS.update({op.isa_name: op for op in _VIEW_OPS}, broadcast=_broadcast)
