"""The 20 built-in workloads as spec functions (formulas from ../shared/docs/WORKLOADS.md).

Each is written the way a user would write it; nothing downstream recognizes these functions by
name. Reductions are over the last axis with keepdims.
"""

from __future__ import annotations

import axon.spec as ax

# single operators -------------------------------------------------------------------------------


@ax.spec(a="M K", b="K N")
def matmul(a, b):
    return a @ b


@ax.spec(a="K M", b="K N")
def transpose_matmul(a, b):
    return a.T @ b


@ax.spec(a="B M K", b="B K N")
def bmm(a, b):
    return a @ b


def _softmax(x):
    e = ax.exp(x - ax.max(x))
    return e / ax.sum(e)


@ax.spec(x="M N")
def softmax(x):
    return _softmax(x)


def _rmsnorm(x, g, eps):
    return x / ax.sqrt(ax.mean(x * x) + eps) * g


@ax.spec(x="M N", g="N")
def rmsnorm(x, g, eps=1e-6):
    return _rmsnorm(x, g, eps)


def _layernorm(x, g, b, eps):
    return (x - ax.mean(x)) / ax.sqrt(ax.var(x) + eps) * g + b


@ax.spec(x="M N", g="N", b="N")
def layernorm(x, g, b, eps=1e-5):
    return _layernorm(x, g, b, eps)


@ax.spec(x="M N")
def silu(x):
    return x / (1 + ax.exp(-x))


@ax.spec(x="M N")
def gelu(x):
    return 0.5 * x * (1 + ax.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


@ax.spec(x="H S D", cos="S D/2", sin="S D/2")
def rope(x, cos, sin):
    x0, x1 = ax.split(x, 2, axis=-1)
    return ax.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


@ax.spec(theta="M N", g="M N", m="M N", v="M N")
def adamw(theta, g, m, v, lr=1e-3, wd=0.01, b1=0.9, b2=0.999, eps=1e-8):
    t = theta - lr * wd * theta
    m_new = b1 * m + (1 - b1) * g
    v_new = b2 * v + (1 - b2) * g * g
    theta_new = t - lr * m_new / (ax.sqrt(v_new / (1 - b2)) + eps)
    return {"theta": theta_new, "m": m_new, "v": v_new}


# multi-operator kernels -------------------------------------------------------------------------


@ax.spec(x="M K", g="K", w="K N")
def rmsnorm_matmul(x, g, w, eps=1e-6):
    return _rmsnorm(x, g, eps) @ w


@ax.spec(x="M K", z="M K", g="K", w="K N")
def add_rmsnorm_matmul(x, z, g, w, eps=1e-6):
    return _rmsnorm(x + z, g, eps) @ w


@ax.spec(x="M K", w="K N", z="M N", g="N")
def matmul_add_rmsnorm(x, w, z, g, eps=1e-6):
    return _rmsnorm(x @ w + z, g, eps)


@ax.spec(x="M K", g="K", b="K", w="K N")
def layernorm_matmul(x, g, b, w, eps=1e-5):
    return _layernorm(x, g, b, eps) @ w


@ax.spec(x="M D", wg="D F", wu="D F", wd="F D")
def swiglu(x, wg, wu, wd):
    return (ax.silu(x @ wg) * (x @ wu)) @ wd


@ax.spec(x="M K", w="K N", a="K R", b="R N")
def lora(x, w, a, b):
    return x @ w + (x @ a) @ b


@ax.spec(a="B M K", b="B K N")
def bmm_softmax(a, b):
    return _softmax(a @ b)


def _attention(q, k, v):
    return _softmax(q @ ax.transpose(k) / ax.sqrt(q.size(-1))) @ v


@ax.spec(q="H S D", k="H S D", v="H S D")
def attention(q, k, v):
    return _attention(q, k, v)


@ax.spec(q="KV*G S D", k="KV S D", v="KV S D")
def gqa_attention(q, k, v):
    group = q.shape[0] / k.shape[0]
    return _attention(q, ax.repeat(k, group, axis=0), ax.repeat(v, group, axis=0))


@ax.spec(q="H S D", k="H S D", v="H S D", gq="D", gk="D")
def qknorm_attention(q, k, v, gq, gk, eps=1e-6):
    return _attention(_rmsnorm(q, gq, eps), _rmsnorm(k, gk, eps), v)
