"""Independent NumPy formulas of the NKI instructions, written from the Neuron API reference.

Nothing here imports the emulator or `axon.target.isa`: each formula is the reference page's
definition in float64, so a wrong emulator formula cannot agree with it by construction. Pages:
`CURRENT` (the `nki` API, Neuron 2.30) and `LEGACY` (`neuronxcc.nki`, Neuron 2.26).
"""

from __future__ import annotations

import math

import numpy as np

CURRENT = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.30.0/nki/api/generated/"
LEGACY = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/"


def page(name: str, api: str = "current") -> str:
    return (CURRENT if api == "current" else LEGACY) + name + ".html"


# ---- ALU operators -----------------------------------------------------------------------------
# nki.language.add/subtract/multiply/divide/maximum/minimum/power/greater/.../not_equal pages and
# the "Supported Math Operators" (nki-aluop) table: arithmetic ops compute in float32, comparisons
# give 1.0 where true and 0.0 where false. bypass skips the operator: its first operand passes
# through (page('nki.isa.activate2'): "if op1 is not bypass: val = op1(val, imm1)").
ALU = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
    "greater": lambda a, b: (a > b).astype(np.float64),
    "greater_equal": lambda a, b: (a >= b).astype(np.float64),
    "less": lambda a, b: (a < b).astype(np.float64),
    "less_equal": lambda a, b: (a <= b).astype(np.float64),
    "equal": lambda a, b: (a == b).astype(np.float64),
    "not_equal": lambda a, b: (a != b).astype(np.float64),
    "bypass": lambda a, b: np.broadcast_to(np.asarray(a, np.float64), np.broadcast(a, b).shape) + 0.0,
    # nki.language.logical_and/or/xor: "inputs should be boolean-like (0 or 1 values)", nonzero true;
    # nki.language.mod is Python's x % y (the sign of the divisor), fmod keeps the dividend's sign
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
    "logical_xor": lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float64),
    "mod": np.mod,
    "fmod": np.fmod,
}

# ---- activation functions ----------------------------------------------------------------------
# nki.language.<fn> pages and the "Supported Activation Functions" (nki-act-func) table. nl.gelu is
# the exact GELU x * Phi(x); gelu_apprx_tanh its tanh approximation (nki.language.gelu,
# nki.language.gelu_apprx_tanh); silu is x * sigmoid(x); rsqrt is 1 / sqrt(x).
_erf = np.vectorize(math.erf, otypes=[np.float64])

ACT = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "square": np.square,
    "reciprocal": lambda x: 1.0 / x,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    "relu": lambda x: np.maximum(x, 0.0),
    "abs": np.abs,
    "negative": lambda x: -x,
    "copy": lambda x: x + 0.0,
    "identity": lambda x: x + 0.0,
}

# Inputs each activation function is defined on (the act-func table's valid input ranges).
ACT_DOMAIN = {
    "log": (0.05, 4.0),
    "sqrt": (0.0, 4.0),
    "rsqrt": (0.05, 4.0),
    "reciprocal": (0.25, 4.0),
    "exp": (-4.0, 4.0),
}
ALU_DOMAIN = {"divide": (0.25, 4.0), "power": (0.25, 2.0), "mod": (0.25, 4.0), "fmod": (0.25, 4.0)}

# Reductions (nki.isa.tensor_reduce: arithmetic reduce ops; nl.sum/max/min/prod pages).
REDUCE = {"add": np.sum, "max": np.max, "maximum": np.max, "min": np.min, "minimum": np.min, "multiply": np.prod}


def _alu(op: str, a, b, reverse: bool = False):
    return ALU[op](b, a) if reverse else ALU[op](a, b)


# ---- nki.isa -----------------------------------------------------------------------------------


def nc_matmul_sequence(products, flags):
    """PSUM after a sequence of nc_matmul into one dst with no read in between (nki.isa.nc_matmul,
    "Accumulation mode", page('nki.isa.nc_matmul')): accumulate=False overwrites, True adds, None
    overwrites on the first write of the location and adds afterwards. `products` are
    stationary.T @ moving, float64."""
    psum = None
    for prod, flag in zip(products, flags):
        if flag is False or (flag is None and psum is None):
            psum = prod.copy()
        else:
            psum = psum + prod
    return psum


def matmul(stationary, moving):
    """stationary[K, M].T @ moving[K, N] (page('nki.isa.nc_matmul'); legacy page('nki.isa.nc_matmul',
    'legacy')): K is the partition axis of both, the result is [M, N], accumulated in float32."""
    return stationary.astype(np.float64).T @ moving.astype(np.float64)


def transpose(x):
    """Partition <-> flattened free axes (page('nki.isa.nc_transpose'), page('nki.isa.dma_transpose'))."""
    return x.reshape(x.shape[0], -1).T


def activation(op, x, scale=1.0, bias=None):
    """op(data * scale + bias), scale a scalar or [P, 1], bias [P, 1] (page('nki.isa.activation'))."""
    y = x * scale
    if bias is not None:
        y = y + bias
    return ACT[op](y)


def tensor_scalar(x, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False):
    """(data op0 operand0) op1 operand1, reverse swaps an op's inputs (page('nki.isa.tensor_scalar'))."""
    y = _alu(op0, x, operand0, reverse0)
    return y if op1 is None else _alu(op1, y, operand1, reverse1)


def scalar_tensor_tensor(x, op0, operand0, op1, operand1, reverse0=False, reverse1=False):
    """(data op0 operand0) op1 operand1, operand1 a full tile (page('nki.isa.scalar_tensor_tensor'))."""
    return _alu(op1, _alu(op0, x, operand0, reverse0), operand1, reverse1)


def tensor_reduce(op, x, axes, negate=False, keepdims=False):
    """Reduction over free axes, times -1 when negate (page('nki.isa.tensor_reduce'))."""
    r = REDUCE[op](x, axis=tuple(axes), keepdims=keepdims)
    return -r if negate else r


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False):
    """r[:, 0] = op1(op0(data0[:, 0], initial), data1[:, 0]); r[:, i] = op1(op0(data0[:, i], r[:, i-1]),
    data1[:, i]); reverse0 makes data0 the rhs of op0, reverse1 makes data1 the lhs of op1
    (page('nki.isa.tensor_tensor_scan'))."""
    out = np.empty(data0.shape, np.float64)
    prev = np.broadcast_to(np.asarray(initial, np.float64).reshape(-1, 1), (data0.shape[0], 1))[:, 0]
    for i in range(data0.shape[1]):
        x = _alu(op0, data0[:, i], prev, reverse0)
        prev = _alu(op1, x, data1[:, i], reverse1)
        out[:, i] = prev
    return out


def bn_stats(x):
    """[count, mean, variance*count] of the even free elements, then of the odd ones
    (page('nki.isa.bn_stats'))."""
    cols = []
    for part in (x[:, 0::2], x[:, 1::2]):
        n = part.shape[1]
        mean = part.mean(axis=1) if n else np.zeros(x.shape[0])
        m2 = ((part - mean[:, None]) ** 2).sum(axis=1) if n else np.zeros(x.shape[0])
        cols += [np.full(x.shape[0], float(n)), mean, m2]
    return np.stack(cols, axis=1)


def mean_var(x):
    """bn_aggr of the bn_stats of x: per-partition mean and (population) variance
    (page('nki.isa.bn_aggr'))."""
    return np.stack([x.mean(axis=1), x.var(axis=1)], axis=1)


def iota(partitions, pattern, offset=0, channel_multiplier=0):
    """offset + partition * channel_multiplier + sum(index_k * step_k) over [[step, num], ...]
    (page('nki.isa.iota')), row-major over the pattern's dims."""
    vals = np.zeros([n for _, n in pattern], np.float64)
    for axis, (step, n) in enumerate(pattern):
        shape = [1] * len(pattern)
        shape[axis] = n
        vals = vals + (np.arange(n) * step).reshape(shape)
    return offset + np.arange(partitions)[:, None] * channel_multiplier + vals.reshape(1, -1)


def affine_select(on_true, on_false_value, pattern, offset, channel_multiplier, cmp_op):
    """on_true where cmp_op(affine value, 0) else on_false_value (page('nki.isa.affine_select'))."""
    pred = ALU[cmp_op](iota(on_true.shape[0], pattern, offset, channel_multiplier), 0.0) != 0
    return np.where(pred.reshape(on_true.shape), on_true, on_false_value)


def round_to_bfloat16(x):
    """float32 -> bfloat16 -> float64, round to nearest even on the bit pattern (bfloat16 keeps the
    top 16 bits of a float32; nki.language.bfloat16)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


# ---- tolerance ---------------------------------------------------------------------------------

EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-8, "float16": 2.0**-10}
# one ulp among the subnormals, where a relative ulp no longer holds (float16 subnormals are 2**-24 apart)
SUBNORMAL_ULP = {"float32": 2.0**-149, "bfloat16": 2.0**-133, "float16": 2.0**-24}


def assert_matches(got, want, dtype_name: str, scale=None, what: str = "", transcendental: bool = False) -> None:
    """got (dst dtype) equals want (float64) rounded to the dst dtype: within 2 ulps of the result
    plus float32 rounding of the computation relative to `scale` (the magnitude of what was
    combined: inputs of a sum, for instance)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    eps = EPS.get(dtype_name, 2.0**-23)
    f32 = (64 if transcendental else 8) * 2.0**-23
    mag = np.abs(want) if scale is None else np.maximum(np.abs(want), np.asarray(scale, np.float64))
    tol = 2 * eps * np.abs(want) + 2 * SUBNORMAL_ULP.get(dtype_name, 2.0**-149) + f32 * mag + 1e-30
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
        bad = ~(np.abs(got - want) <= tol) & ~(np.isnan(got) & np.isnan(want)) & ~(got == want)
    if bad.any():
        i = tuple(int(v[0]) for v in np.nonzero(bad))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements differ, first at {i}: "
            f"emulator {got[i]!r}, formula {want[i]!r} ({dtype_name})"
        )
