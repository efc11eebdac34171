"""The spec language: write tensor programs like NumPy, `import axon.spec as ax`.

    import axon.spec as ax

    @ax.spec(x="M K", g="K", w="K N")
    def rmsnorm_matmul(x, g, w, eps=1e-6):
        return (x * ax.rsqrt(ax.mean(x * x) + eps) * g) @ w

Reductions default to the last axis with keepdims, as in WORKLOADS.md.
"""

from axon.ir.frontend import (  # noqa: F401 - this module is the public re-export
    Tensor,
    abs,
    add,
    cast,
    concat,
    concatenate,
    dimsize,
    divide,
    exp,
    gelu,
    log,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    power,
    reciprocal,
    relu,
    repeat,
    reshape,
    rsqrt,
    sigmoid,
    silu,
    spec,
    split,
    sqrt,
    square,
    subtract,
    sum,
    tanh,
    tensor,
    transpose,
    var,
)
