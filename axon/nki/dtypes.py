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
tfloat32 = float32  # tf32 is a TensorE input mode; its storage is fp32
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
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


def dtype_name(dtype: np.dtype) -> str:
    return dtype.name


def higher_precision(a: Any, b: Any) -> np.dtype:
    """Of two tile dtypes, the one of higher precision: the wider, a float over an integer of the
    same width, and of two floats of one width the one with more mantissa bits (float16 over
    bfloat16). A value-returning tensor_tensor without dtype= writes this (nki.isa.tensor_tensor,
    neuronxcc API)."""

    def rank(d: np.dtype) -> tuple[int, int, int]:
        is_float = not np.issubdtype(d, np.integer) and d != bool_
        return d.itemsize, int(is_float), int(ml_dtypes.finfo(d).nmant) if is_float else 0

    da, db = as_dtype(a), as_dtype(b)
    return db if rank(db) > rank(da) else da


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
