"""A NumPy interpretation of a `TileProgram`, to check a lowering independently of emitted source.

It executes the statement tree instruction by instruction (fp32 arithmetic, results rounded to the
destination dtype) and checks that every operand shape matches. It is a lowering self-check, not an
NKI emulator: it reads no source, models no hardware rule beyond shapes, and records no trace.
The op meanings come from `axon.ir.ops` (the same definitions the reference uses); the row
statistics bn_stats/bn_aggr, which are no IR op, from the ISA table (`axon.target.isa`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from axon.errors import NKIError
from axon.ir.ops import BINARY, UNARY, NumpyMath
from axon.lower.program import Comment, Free, Ref, Stmt, Tensor, TileAlloc, TileInstr, TileLoop, TileProgram
from axon.target import isa

_M = NumpyMath()
_ACT = {"nl.copy": lambda x: x, "nl.gelu_apprx_tanh": lambda x: UNARY["gelu"](_M, x)}
_ALU = {
    "nl.add": "add",
    "nl.subtract": "sub",
    "nl.multiply": "mul",
    "nl.divide": "div",
    "nl.maximum": "maximum",
    "nl.minimum": "minimum",
}
_RED: dict[str, Callable[..., Any]] = {"nl.add": np.sum, "nl.maximum": np.max, "nl.minimum": np.min}


def np_dtype(dtype: str) -> Any:
    if dtype == "float32":
        return np.float32

    return {
        "bfloat16": ml_dtypes.bfloat16,
        "float16": np.float16,
        "float8_e4m3": ml_dtypes.float8_e4m3fn,
        "float8_e5m2": ml_dtypes.float8_e5m2,
    }[dtype]


def _act(name: str, x: np.ndarray) -> np.ndarray:
    if name in _ACT:
        return _ACT[name](x)
    return UNARY[name.removeprefix("nl.").replace("gelu_apprx_tanh", "gelu")](_M, x)


def _alu(name: str, a: Any, b: Any) -> Any:
    if name == "nl.power":
        return np.power(a, b)
    return BINARY[_ALU[name]](_M, a, b)


class _Machine:
    def __init__(self, prog: TileProgram, arrays: Mapping[str, np.ndarray]) -> None:
        self.mem: dict[str, np.ndarray] = {}
        for t in prog.inputs:  # in the body's shape (a reshape of a spec's shape: `TileProgram.views`)
            self.mem[t.name] = np.asarray(arrays[t.name]).astype(np_dtype(t.dtype)).reshape(t.shape)
        for t in prog.outputs + prog.scratch:
            self.mem[t.name] = np.full(t.shape, np.nan, dtype=np_dtype(t.dtype))

    def alloc(self, t: Tensor) -> None:
        self.mem[t.name] = np.full(t.shape, np.nan, dtype=np_dtype(t.dtype))

    def index(self, ref: Ref, env: Mapping[str, int]) -> tuple[np.ndarray, tuple]:
        arr = self.mem[ref.tensor]
        if ref.reshape:
            arr = arr.reshape(ref.reshape)
        idx = []
        for start, size in ref.index:
            s = start.value(env)
            idx.append(s if size is None else slice(s, s + size))
        return arr, tuple(idx)

    def read(self, ref: Ref, env: Mapping[str, int]) -> np.ndarray:
        arr, idx = self.index(ref, env)
        out = arr[idx].astype(np.float32)
        if out.shape != ref.shape:
            raise NKIError(f"{ref.render()}: out of bounds (got {out.shape}, expected {ref.shape})")
        return out

    def write(self, ref: Ref, env: Mapping[str, int], value: np.ndarray) -> None:
        arr, idx = self.index(ref, env)
        if arr[idx].shape != np.shape(value):
            raise NKIError(f"{ref.render()}: writing shape {np.shape(value)} into {arr[idx].shape}")
        arr[idx] = np.asarray(value, dtype=np.float32).astype(arr.dtype)

    def operand(self, v: Any, env: Mapping[str, int]) -> Any:
        return self.read(v, env) if isinstance(v, Ref) else v

    def run(self, stmts: tuple[Stmt, ...], env: dict[str, int]) -> None:
        for s in stmts:
            if isinstance(s, TileAlloc):
                self.alloc(s.tensor)
            elif isinstance(s, TileLoop):
                for i in range(s.extent):
                    self.run(s.body, {**env, s.var: i})
            elif isinstance(s, TileInstr):
                self.execute(s, env)
            elif isinstance(s, Free):
                for n in s.names:
                    self.mem.pop(n, None)
            elif not isinstance(s, Comment):  # pragma: no cover
                raise TypeError(s)

    def execute(self, ins: TileInstr, env: Mapping[str, int]) -> None:
        a = {k: self.operand(v, env) for k, v in ins.args}
        op = ins.opcode
        with np.errstate(all="ignore"):
            if op in ("dma_copy", "tensor_copy"):
                out = a["src"]
            elif op == "dma_transpose":
                out = a["src"].T
            elif op == "nc_transpose":
                out = a["data"].T
            elif op == "memset":
                out = np.full(ins.dst.shape, a["value"], dtype=np.float32)
            elif op == "nc_matmul":
                out = a["stationary"].T @ a["moving"]
                if a.get("accumulate"):
                    out = out + self.read(ins.dst, env)
            elif op in ("activation", "activation_reduce"):
                out = _act(
                    a["op"], a["data"] * a.get("scale", 1.0) + (a.get("bias") if a.get("bias") is not None else 0.0)
                )
                if "reduce_res" in a:
                    self.write(ins.arg("reduce_res"), env, np.sum(out, axis=1, keepdims=True))
            elif op == "tensor_scalar_reduce":
                d, o = a["data"], a["operand0"]
                out = _alu(a["op0"], o, d) if a.get("reverse0") else _alu(a["op0"], d, o)
                self.write(ins.arg("reduce_res"), env, _RED[a["reduce_op"]](out, axis=1, keepdims=True))
            elif op == "tensor_scalar":
                out = (
                    _alu(a["op0"], a["operand0"], a["data"])
                    if a.get("reverse0")
                    else _alu(a["op0"], a["data"], a["operand0"])
                )
                if a.get("op1"):
                    out = (
                        _alu(a["op1"], a["operand1"], out) if a.get("reverse1") else _alu(a["op1"], out, a["operand1"])
                    )
            elif op == "tensor_tensor":
                out = _alu(a["op"], a["data1"], a["data2"])
            elif op == "scalar_tensor_tensor":
                t = _alu(a["op0"], a["data"], a["operand0"])
                out = _alu(a["op1"], t, a["operand1"])
            elif op == "tensor_reduce":
                out = _RED[a["op"]](a["data"], axis=1, keepdims=True)
            elif op == "reciprocal":
                out = 1.0 / a["data"]
            elif op == "bn_stats":  # the row statistics of the ISA table (aggregates, not an IR op)
                out = isa.sem_bn_stats(_M, a["data"])
            elif op == "bn_aggr":
                out = isa.sem_bn_aggr(_M, a["data"])
            else:
                raise NKIError(f"interpret: unknown opcode {op}")
        self.write(ins.dst, env, np.asarray(out, dtype=np.float32))


def interpret(prog: TileProgram, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run `prog` on NumPy inputs (by name); the outputs by name, as float64.

    >>> from axon.workloads import get
    >>> from axon.target import load_hw
    >>> from axon.ir import evaluate, random_inputs
    >>> from axon.lower import lower
    >>> g = get("softmax").graph("small")
    >>> x = random_inputs(g)
    >>> out = interpret(lower(g, {}, load_hw("trn1")), x)["out"]
    >>> bool(abs(out - evaluate(g, x)["out"]).max() < 1e-5)
    True
    """
    m = _Machine(prog, arrays)
    m.run(prog.body, {})
    names = prog.output_names or tuple(t.name for t in prog.outputs)
    shapes = dict(prog.views)
    return {
        name: m.mem[t.name].astype(np.float64).reshape(shapes.get(t.name, t.shape))
        for name, t in zip(names, prog.outputs)
    }
