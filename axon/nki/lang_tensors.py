"""The `nki.language` calls that make tensors (`ndarray`, `zeros`, `shared_constant`, ...), loops
(`affine_range`, `program_id`, ...) and move data (`load`, `store`, `load_transpose2d`); part of the
`nki.language` namespace (`language.py`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from axon.nki import instructions as I
from axon.nki.context import active, kernel_site, maybe_active
from axon.nki.dtypes import Buffer, as_dtype, par_dim, shared_hbm, stored, uint8
from axon.nki.indexing import Predicate
from axon.nki.memory import View

# The nki.language calls of the API reference (legacy and current) that are not emulated: looking
# one up is an NKIError naming it (`language.__getattr__`), never an opaque AttributeError.
NOT_EMULATED = (
    "sign sin cos tan arctan ceil floor trunc abs_max abs_min erf erf_dx gelu_dx gelu_apprx_sigmoid "
    "gelu_apprx_sigmoid_dx silu_dx mish softplus dropout rms_norm all "
    "expand_dims gather_flattened atomic_rmw rand random_seed"
).split()


class TileSize:
    """`nl.tile_size`: the partition count and the PSUM bank (in fp32 elements) of the running
    kernel's hardware file (trn1's outside a kernel); the other sizes are the reference's constants."""

    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    total_available_sbuf_size = 192 * 1024

    @property
    def pmax(self) -> int:
        m = maybe_active()
        return 128 if m is None else m.hw.memory.partitions

    psum_partition_max = pmax

    @property
    def psum_fmax(self) -> int:
        m = maybe_active()
        return 512 if m is None else m.hw.memory.psum_bank_bytes // 4


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
            t.alloc.data[...] = stored(fill_value, t.alloc.dtype)  # type: ignore[index]
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
        t.alloc.data[...] = stored(arr.astype(dt), dt)  # type: ignore[index]
        t.alloc.written[...] = True  # type: ignore[index]
    t.alloc.ever_written = True
    return t


def shared_identity_matrix(n: int, dtype: Any = uint8, **kw: Any) -> View:
    """An n x n identity in shared HBM, uint8 unless `dtype` says otherwise (the documented default)."""
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


def _scalar(call: str, value: Any) -> int:
    """A loop bound or condition the emulator can hold: a Python or NumPy integer (a value in a
    register, `nisa.register_load`, is not emulated)."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise active().fail(f"nl.{call}", f"{value!r} is no integer: bounds and conditions in registers are not emulated")


def fori_loop(lower: Any, upper: Any, body_fun: Any, step: int = 1, unroll: Any = None) -> None:
    """`nl.fori_loop(lower, upper, body_fun, step=1, unroll=None)`: body_fun(i) for each i in
    range(lower, upper, step), a compiled loop (nki.language.fori_loop, NKI 0.7+); unroll=True
    unrolls it at compile time."""
    if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step <= 0:
        raise active().fail("nl.fori_loop", f"step={step!r}: a compile-time positive integer")
    bounds = (_scalar("fori_loop", lower), _scalar("fori_loop", upper), int(step))
    for i in _range("static" if unroll else "dynamic", bounds):
        body_fun(i)


def while_loop(init: Any, body_fun: Any) -> None:
    """`nl.while_loop(init, body_fun)`: r = init; while r != 0: r = body_fun(r), the condition
    checked before each iteration (nki.language.while_loop, NKI 0.7+); a Python bool init is refused."""
    if isinstance(init, bool):
        raise active().fail("nl.while_loop", "init is a Python bool: give an int (or an nl.int32 scalar)")
    r = _scalar("while_loop", init)
    while r != 0:
        r = _scalar("while_loop", body_fun(r))


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
