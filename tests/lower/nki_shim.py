"""A stand-in for `axon.nki.run` while the emulator is being written: runs NKI source on NumPy.

Test-only. It gives `nki`, `nki.language` and `nki.isa` just the names Axon's emitted and expert
kernels use, with the meanings of `axon.lower.interpret` (itself built on `axon.ir.ops`). It checks
shapes, not hardware rules, and records no trace. The tests switch to `axon.nki.run` when it exists.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from axon.lower.interpret import _RED, _act, _alu, np_dtype


def _ns() -> dict[str, types.ModuleType]:
    nl = types.ModuleType("nki.language")
    for name in (
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "tanh",
        "sigmoid",
        "silu",
        "gelu_apprx_tanh",
        "relu",
        "square",
        "abs",
        "reciprocal",
        "copy",
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
        "power",
    ):
        setattr(nl, name, f"nl.{name}")
    for name in ("float32", "bfloat16", "float16"):
        setattr(nl, name, name)
    nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm = "sbuf", "psum", "hbm", "shared_hbm"
    nl.ndarray = lambda shape, dtype, buffer="sbuf": np.full(shape, np.nan, dtype=np_dtype(str(dtype)))
    nl.par_dim = int
    nl.affine_range = range
    isa = types.ModuleType("nki.isa")
    isa.scalar_engine, isa.gpsimd_engine, isa.vector_engine = "scalar", "gpsimd", "vector"

    def put(dst, value):
        value = np.asarray(value, dtype=np.float32)
        if dst.shape != value.shape:
            raise ValueError(f"shape mismatch: dst {dst.shape} vs value {value.shape}")
        dst[...] = value.astype(dst.dtype)

    f = lambda a: np.asarray(a, dtype=np.float32) if isinstance(a, np.ndarray) else a  # noqa: E731
    isa.dma_copy = lambda dst, src: put(dst, f(src))
    isa.tensor_copy = lambda dst, src, engine=None: put(dst, f(src))
    isa.dma_transpose = lambda dst, src: put(dst, f(src).T)
    isa.nc_transpose = lambda dst, data, engine=None: put(dst, f(data).T)
    isa.memset = lambda dst, value: put(dst, np.full(dst.shape, value))

    def nc_matmul(dst, stationary, moving, accumulate=False):
        r = f(stationary).T @ f(moving)
        put(dst, r + f(dst) if accumulate else r)

    def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None):
        out = _act(op, f(data) * f(scale) + (0.0 if bias is None else f(bias)))
        put(dst, out)
        if reduce_res is not None:
            put(reduce_res, np.sum(out, axis=1, keepdims=True))

    def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0):
        activation(dst, op, data, bias, scale, reduce_op, reduce_res)

    def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, engine=None):
        x = _alu(op0, f(operand0), f(data)) if reverse0 else _alu(op0, f(data), f(operand0))
        if op1 is not None:
            x = _alu(op1, f(operand1), x) if reverse1 else _alu(op1, x, f(operand1))
        put(dst, x)

    def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False):
        x = _alu(op0, f(operand0), f(data)) if reverse0 else _alu(op0, f(data), f(operand0))
        put(dst, x)
        put(reduce_res, _RED[reduce_op](x, axis=1, keepdims=True))

    isa.nc_matmul, isa.activation, isa.activation_reduce = nc_matmul, activation, activation_reduce
    isa.tensor_scalar, isa.tensor_scalar_reduce = tensor_scalar, tensor_scalar_reduce
    isa.tensor_tensor = lambda dst, data1, data2, op: put(dst, _alu(op, f(data1), f(data2)))
    isa.scalar_tensor_tensor = lambda dst, data, op0, operand0, op1, operand1: put(
        dst, _alu(op1, _alu(op0, f(data), f(operand0)), f(operand1))
    )
    isa.tensor_reduce = lambda dst, op, data, axis, keepdims=False, negate=False: put(
        dst, _RED[op](f(data), axis=axis, keepdims=True)
    )
    isa.reciprocal = lambda dst, data: put(dst, 1.0 / f(data))
    nki = types.ModuleType("nki")
    nki.jit = lambda fn: fn
    nki.language, nki.isa = nl, isa
    return {"nki": nki, "nki.language": nl, "nki.isa": isa}


def run_source(source: str, *arrays: np.ndarray, dtypes: tuple[str, ...] = ()) -> tuple[np.ndarray, ...]:
    """Execute the single @nki.jit function in `source` on `arrays` (cast to `dtypes`)."""
    saved = {k: sys.modules.get(k) for k in ("nki", "nki.language", "nki.isa")}
    sys.modules.update(_ns())
    try:
        scope: dict = {}
        exec(compile(source, "<kernel>", "exec"), scope)
        fn = [
            v
            for k, v in scope.items()
            if callable(v)
            and getattr(v, "__module__", None) is None
            and not k.startswith("_")
            and k not in ("nki", "nisa", "nl")
        ]
        kernel = fn[-1]
        args = [np.asarray(a).astype(np_dtype(d)) for a, d in zip(arrays, dtypes or ("float32",) * len(arrays))]
        out = kernel(*args)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return out if isinstance(out, tuple) else (out,)
