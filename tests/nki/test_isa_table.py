"""The ISA table: one definition per op, shared with the IR, usable from NumPy and Z3."""

import numpy as np
import z3

from axon.ir.ops import BINARY, UNARY
from axon.target import ACTIVATION, ALU, ISA, NUMPY_FP32, Instruction


def test_activations_reuse_the_ir_definitions():
    assert ACTIVATION["exp"] is UNARY["exp"] and ACTIVATION["gelu_apprx_tanh"] is UNARY["gelu"]
    assert ALU["add"] is BINARY["add"] and ALU["subtract"] is BINARY["sub"]


def test_exact_gelu_differs_from_tanh_approximation():
    x = np.linspace(-4, 4, 101, dtype=np.float32)
    exact = ACTIVATION["gelu"](NUMPY_FP32, x)
    approx = ACTIVATION["gelu_apprx_tanh"](NUMPY_FP32, x)
    assert exact.dtype == np.float32 and 0 < np.max(np.abs(exact - approx)) < 1e-3
    assert abs(float(ACTIVATION["gelu"](NUMPY_FP32, np.float32(1.0))) - 0.8413447) < 1e-6


class Z3Math:
    def maximum(self, a, b):
        return z3.If(a >= b, a, b)

    def minimum(self, a, b):
        return z3.If(a <= b, a, b)

    def where(self, c, a, b):
        return z3.If(c, a, b)


def test_alu_semantics_evaluate_symbolically_in_z3():
    a, b = z3.Reals("a b")
    s = z3.Solver()
    # (a max b) - (a min b) is never negative, for every real a, b
    s.add(ALU["subtract"](Z3Math(), ALU["maximum"](Z3Math(), a, b), ALU["minimum"](Z3Math(), a, b)) < 0)
    assert s.check() == z3.unsat
    s = z3.Solver()
    s.add(ALU["greater"](Z3Math(), a, b) == 1, a < b)
    assert s.check() == z3.unsat


def test_rows_name_engines_and_operand_buffers():
    for name in (
        "nc_matmul",
        "activation",
        "tensor_tensor",
        "tensor_scalar",
        "tensor_reduce",
        "tensor_copy",
        "dma_copy",
        "bn_stats",
        "bn_aggr",
        "iota",
        "affine_select",
        "tensor_tensor_scan",
        "memset",
    ):
        assert isinstance(ISA[name], Instruction) and ISA[name].engines
    assert ISA["nc_matmul"].operand("dst").buffers == frozenset({"psum"})
    assert ISA["nc_matmul"].operand("moving").max_free == "tensor_engine.moving_fmax"
    assert ISA["iota"].engines == ("gpsimd",) and ISA["activation"].engines == ("scalar",)


def test_cost_hook_points_at_the_cost_table():
    from axon.target import costs

    assert ISA["nc_matmul"].cost is costs.CYCLES["nc_matmul"]
