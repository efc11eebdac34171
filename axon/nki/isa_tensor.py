"""Data movement and TensorE: `dma_copy`, `dma_transpose`, `nc_matmul`, `nc_transpose`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from axon.nki.context import AutoEngine, active, kernel_site
from axon.nki.dtypes import float32
from axon.nki.indexing import Predicate
from axon.nki.isa_base import (
    M,
    _copied,
    _empty,
    _engine,
    _masked,
    _new,
    _open_group,
    _same_count,
    _simple,
    _transposed_box,
    _val,
    matmul_perf_mode,
    op_name,
)
from axon.nki.memory import View
from axon.target import isa as T

# ---- data movement -----------------------------------------------------------------------------


def _no_psum(m: Any, opcode: str, dst: View, src: View, site: tuple[str, int]) -> None:
    """DMA "performs data movement between memory locations (SBUF or HBM)" (nki.isa.dma_copy):
    PSUM is read and written by the engines only."""
    for role, v in (("dst", dst), ("src", src)):
        if v.alloc.kind == "psum":
            raise m.fail(
                f"{opcode} {role} in PSUM", f"DMA moves data between HBM and SBUF; {role} {v!r} is in PSUM", site
            )


def dma_copy(
    dst: View,
    src: View,
    mask: Predicate | None = None,
    dge_mode: Any = None,
    name: Any = None,
    isa: bool = False,
    dst_rmw_op: Any = None,
    **_: Any,
) -> View:
    """DMA `src` into `dst` (HBM<->SBUF, or within one); a dtype change casts. `isa`: called as
    nki.isa.dma_copy, which refuses PSUM (nl.store of a PSUM tile is compiled through SBUF).
    `dst_rmw_op=nl.add` (the only one documented, nki.isa.dma_copy 2.26 and 2.28) adds `src` to
    what `dst` holds instead of overwriting it."""
    m, site = active(), kernel_site()
    dst, src = _masked(mask, dst, src)
    if _empty(dst, src):
        return dst
    _same_count(m, dst, src, "dma_copy", site)
    if _squeezed(dst.shape) != _squeezed(src.shape):
        # dst = src elementwise (nki.isa.dma_copy), as NumPy assigns: a [4, 8] source into an
        # [8, 4] destination is no copy but a reshape, which a kernel spells on the HBM view
        raise m.fail(
            "shape mismatch",
            f"dma_copy of a {list(src.shape)} source into a {list(dst.shape)} destination: the shapes "
            "must match (reshape the HBM tensor, or slice, to the tile's shape)",
            site,
        )
    if isa:
        _no_psum(m, "dma_copy", dst, src, site)
    rmw = op_name(dst_rmw_op)
    if rmw not in ("", "add"):
        raise m.fail("dma_copy dst_rmw_op", f"dst_rmw_op={rmw!r}: only nl.add is supported", site)
    if rmw:
        compute = lambda: _val(dst) + _val(src).reshape(dst.shape)  # noqa: E731
    else:
        compute = lambda: _copied(src, dst).reshape(dst.shape)  # noqa: E731
    return _simple(
        "dma_copy",
        "dma",
        dst,
        [("src", src)] + ([("dst", dst)] if rmw else []),
        compute if m.execute else None,
        (("src", src.alloc.kind), ("dst", dst.alloc.kind)) + ((("dst_rmw_op", rmw),) if rmw else ()),
        src,
        site,
        m,
    )


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in shape if s != 1)


def dma_transpose(
    dst: View, src: View, axes: Any = None, mask: Predicate | None = None, isa: bool = False, **_: Any
) -> View:
    """DMA `src` [a, b] into `dst` [b, a]."""
    m, site = active(), kernel_site()
    (src,) = _masked(mask, src)
    if isa:
        _no_psum(m, "dma_transpose", dst, src, site)
    if len(src.shape) != 2:
        raise m.fail("shape", f"dma_transpose of a {len(src.shape)}-D tile {list(src.shape)}: 2-D tiles only", site)
    dst = _transposed_box(dst, src)
    if tuple(dst.shape) != (src.shape[1], src.shape[0]):
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
        lambda: T.sem_transpose(M, _copied(src, dst)),
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
    dst: View | None,
    data: View,
    engine: Any = None,
    mask: Predicate | None = None,
    name: Any = None,
    dtype: Any = None,
    **_: Any,
) -> View:
    """Swap partition and free axis: TensorE (default, into PSUM) or VectorE (<= 32x32). Several free
    axes are flattened into one first (nki.isa.nc_transpose, Neuron 2.30)."""
    m, site = active(), kernel_site()
    eng = _engine("nc_transpose", engine)
    if len(data.shape) < 2:
        raise m.fail("shape", f"nc_transpose needs a tile with a free axis, got {list(data.shape)}", site)
    if eng == "vector" and max(data.partitions, data.free_size) > T.ISA_LIMITS["vector_transpose_max"]:
        raise m.fail("vector transpose > 32x32", f"nc_transpose on VectorE of {list(data.shape)}", site)
    on_tensor_engine = data.alloc.kind == "sbuf" and (dst is None or dst.alloc.kind == "psum")
    if eng == "tensor" and not on_tensor_engine:
        # nki.isa.nc_transpose: TensorE reads SBUF and writes PSUM; VectorE may use either. Left to
        # the compiler, a transpose TensorE cannot do goes to VectorE when it fits there.
        if isinstance(eng, AutoEngine) and max(data.partitions, data.free_size) <= T.ISA_LIMITS["vector_transpose_max"]:
            eng = "vector"
        else:
            where = f"data {data!r}" + ("" if dst is None else f", dst {dst!r}")
            raise m.fail(
                "TensorE transpose memory",
                f"nc_transpose on the Tensor Engine reads SBUF and writes PSUM: {where}",
                site,
            )
    if dst is None:
        dst = _new(
            m,
            (data.free_size, data.partitions),
            dtype or (float32 if eng == "tensor" else data.dtype),
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
