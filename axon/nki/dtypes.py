"""The emulated NeuronCore's dtypes (`nl.float32`, `nl.bfloat16`, ...) and memories (`nl.sbuf`,
`nl.psum`, `nl.hbm`), as kernels name them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from axon.errors import NKIError

# ---- dtypes ------------------------------------------------------------------------------------

float32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
# tf32 (1S,8E,10M, "Supported Data Types") is stored in fp32's 4 bytes and compares equal to it (the
# metadata is ignored by ==, and the name stays float32 in the trace); a value written to a tile of
# it is rounded to its 10-bit mantissa (`stored`)
tfloat32 = np.dtype(np.float32, metadata={"nki": "tfloat32"})
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
# no infinities, NaN only at S.1111.111, so up to 448 (nki.language.float8_e4m3fn, Neuron 2.29+)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
int8, int16, int32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
uint8, uint16, uint32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)

_DTYPE_NAMES = {
    "float32": float32,
    "fp32": float32,
    "bfloat16": bfloat16,
    "bf16": bfloat16,
    "float16": float16,
    "fp16": float16,
    "tfloat32": tfloat32,
    "float8_e4m3": float8_e4m3,
    "float8_e5m2": float8_e5m2,
    "float8_e4m3fn": float8_e4m3fn,
    "int8": int8,
    "int16": int16,
    "int32": int32,
    "uint8": uint8,
    "uint16": uint16,
    "uint32": uint32,
    "bool": bool_,
}


def as_dtype(dtype: Any) -> np.dtype:
    """A NumPy dtype from an nl dtype, a NumPy dtype/type or a name such as "bfloat16"."""
    if isinstance(dtype, str):
        if dtype in _DTYPE_NAMES:
            return _DTYPE_NAMES[dtype]
        raise NKIError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(_DTYPE_NAMES))}")
    try:
        return np.dtype(dtype)
    except TypeError:
        raise NKIError(f"unknown dtype {dtype!r}") from None


def stored(value: Any, dtype: np.dtype) -> Any:
    """`value` as a tile of `dtype` holds it: for tfloat32, fp32 rounded to nearest even at the
    10-bit mantissa; other dtypes round (or wrap) in the assignment itself."""
    if dtype.metadata is None:
        return value
    bits = np.array(value, dtype=np.float32).view(np.uint32)
    bits = (bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return np.where(np.isnan(np.asarray(value, np.float32)), np.float32(np.nan), bits.view(np.float32))


def dtype_name(dtype: np.dtype) -> str:
    return dtype.name


def promoted_dtype(a: Any, b: Any) -> np.dtype:
    """The dtype an arithmetic operation on tiles of dtypes `a` and `b` writes without dtype=, by
    the reference's "NKI Type Promotion" rules (nki.api.shared, 2.21+; nki.isa.tensor_tensor and
    nl.add name them): a float over an integer; of two floats the wider, and a new widened type for
    two different ones of one width (float16 and bfloat16 -> float32, two fp8 -> bfloat16); of two
    integers the wider, or the signed type that holds both (int8 and uint8 -> int16), float32 when
    that would be 64-bit (int32 and uint32)."""
    da, db = as_dtype(a), as_dtype(b)
    if da == db:
        return da if da.metadata == db.metadata else float32  # tfloat32 and float32: float32
    da, db = (uint8 if d == bool_ else d for d in (da, db))
    fa, fb = (not np.issubdtype(d, np.integer) for d in (da, db))
    if fa != fb:
        return da if fa else db
    if da.itemsize != db.itemsize and (
        fa or np.issubdtype(da, np.signedinteger) == np.issubdtype(db, np.signedinteger)
    ):
        return da if da.itemsize > db.itemsize else db
    if fa:  # two floats of one width
        return bfloat16 if da.itemsize == 1 else float32
    signed, unsigned = (da, db) if np.issubdtype(da, np.signedinteger) else (db, da)
    if signed == unsigned or signed.itemsize > unsigned.itemsize:
        return signed
    widened: dict[int, np.dtype] = {1: int16, 2: int32}
    return widened.get(unsigned.itemsize, float32)


def scalar_dtype(value: Any) -> np.dtype:
    """A scalar operand's dtype: a typed NumPy scalar's own, a weakly typed one's as the reference
    infers it ("Weakly Typed Scalar Type Inference": bool -> uint8, integer -> int32, floating ->
    float32; 64-bit NumPy scalars are weak too, the hardware has no 64-bit type)."""
    if isinstance(value, np.generic) and value.dtype.itemsize < 8:
        return value.dtype
    if isinstance(value, bool | np.bool_):
        return uint8
    return int32 if isinstance(value, int | np.integer) else float32


# ---- buffers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Buffer:
    """A memory an ndarray can live in; `kind` is what the trace records ("hbm", "sbuf", "psum")."""

    name: str
    kind: str


sbuf = Buffer("sbuf", "sbuf")
psum = Buffer("psum", "psum")
hbm = Buffer("hbm", "hbm")
private_hbm = Buffer("private_hbm", "hbm")
shared_hbm = Buffer("shared_hbm", "hbm")


class par_dim(int):
    """Marks the partition axis in a buffer shape: `(n, nl.par_dim(128), 512)`."""

    @property
    def size(self) -> int:
        return int(self)


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
