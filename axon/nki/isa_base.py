"""What every emulated `nki.isa` instruction shares: the engine and command enums, operand
conversion, writing a result under the machine's rules, and PSUM accumulation groups."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from axon.nki.context import AutoEngine, active
from axon.nki.dtypes import as_dtype, stored
from axon.nki.indexing import Predicate
from axon.nki.machine import Machine
from axon.nki.memory import View
from axon.target.isa import BITVEC, ISA, NUMPY_FP32

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


def _copied(src: View, dst: View) -> Any:
    """What a copy of `src` writes into `dst`: the stored values themselves when the dtypes match
    (a DMA moves bytes; tensor_copy "performs a bit-accurate copy" then, nki.isa.tensor_copy), else
    through fp32 (the intermediate cast of a converting copy). Through fp32 an int32 beyond 2^24
    would round."""
    if src.dtype == dst.dtype:
        return src.alloc.data[src.np_index()].copy()  # type: ignore[index]
    return _val(src)


def _ival(x: Any) -> Any:
    """Integer values of a view (or an integer scalar): what bitvec operators compute on."""
    if isinstance(x, View):
        return x.alloc.data[x.np_index()].astype(np.int64)  # type: ignore[index]
    return np.int64(x)


def _bitvec(m: Machine, opcode: str, ops: tuple[str, ...], eng: str, views: list[Any], site: tuple[str, int]) -> bool:
    """Whether `ops` hold a bitvec operator (nl.bitwise_and, ...). Those run on the Vector Engine
    only, on integer tiles (Supported Math Operators for NKI ISA)."""
    bits = [op for op in ops if op in BITVEC]
    if not bits:
        return False
    if eng != "vector":
        raise m.fail(
            "bitvec operator engine", f"{opcode} with {bits[0]} runs on the Vector Engine only, not {eng}", site
        )
    for v in views:
        if isinstance(v, View) and not np.issubdtype(v.dtype, np.integer):
            raise m.fail(
                "bitvec operator dtype",
                f"{opcode} with {bits[0]} takes integer tiles, {v!r} is {v.dtype} (a comparison writes 1/0 in "
                "its operands' dtype: give it dtype=nl.uint8 to combine it with &, |, ^ or ~)",
                site,
            )
    return True


def _reduce_axes(m: Machine, axes: tuple[int, ...], ndim: int, last: bool, site: tuple[str, int]) -> None:
    """nki.isa.tensor_reduce's axes are consecutive free axes: in the current API they end at the
    final axis (`last`); the legacy page also allows them to start at axis 1."""
    lo, hi = min(axes), max(axes)
    if sorted(set(axes)) != list(range(lo, hi + 1)) or (hi != ndim - 1 and (last or lo != 1)):
        raise m.fail(
            "reduce axes",
            f"tensor_reduce axis={axes} of a {ndim}-D tile: the reduction axes must be the last contiguous free "
            f"axes, ending at the final axis ({ndim - 1})",
            site,
        )


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
    # NumPy/ml_dtypes round to nearest even; tfloat32 is rounded by `stored`
    dst.alloc.data[dst.np_index()] = stored(value, dst.alloc.dtype)  # type: ignore[index]


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
    if eng is None or eng == "unknown":
        allowed = ISA[opcode].engines
        return AutoEngine(allowed[0]) if len(allowed) > 1 else allowed[0]
    return str(eng)


def _same_count(m: Machine, a: View, b: View, opcode: str, site: tuple[str, int]) -> None:
    both_on_chip = a.alloc.kind != "hbm" and b.alloc.kind != "hbm"
    if int(math.prod(a.shape)) != int(math.prod(b.shape)) or (both_on_chip and a.partitions != b.partitions):
        raise m.fail("shape mismatch", f"{opcode}: {list(a.shape)} vs {list(b.shape)}", site)


def _activation_vectors(m: Machine, reads: list[tuple[str, View]], site: tuple[str, int]) -> None:
    """An activation's bias and scale tiles: [P, 1] vectors, a bias of float32, float16 or bfloat16
    and a scale of float32 (nki.errors err_activation_bias_invalid_type and
    err_activation_scale_invalid_type, Neuron 2.21+)."""
    for role, v in reads:
        if v.free_size != 1:
            why = f"must hold one element per partition ([P, 1]), not {v.free_size}"
            raise m.fail(f"activation {role} shape", f"{role} {v!r} {why}", site)
        allowed = ("float32",) if role == "scale" else ("float32", "float16", "bfloat16")
        if v.dtype.name not in allowed:
            why = f"a {role} vector must be {' or '.join(allowed)}, not {v.dtype.name}"
            raise m.fail(f"activation {role} dtype", f"{role} {v!r}: {why}", site)


def _not_both_psum(m: Machine, opcode: str, a: Any, b: Any, roles: str, site: tuple[str, int]) -> None:
    """Two tile inputs of a VectorE/GpSimd instruction may not both be read from PSUM."""
    if isinstance(a, View) and isinstance(b, View) and a.alloc.kind == "psum" and b.alloc.kind == "psum":
        raise m.fail(f"{opcode} inputs both in PSUM", f"at most one input of {opcode} may be in PSUM ({roles})", site)


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
    extra_writes: Sequence[tuple[str, View]] = (),
    read_dst: bool = False,
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
