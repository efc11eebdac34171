"""LayerNorm over the last axis of x[rows, hidden] (fp32), two ways (HARDWARE.md section 6).

v1 computes mean and variance per 128-row tile with nl.mean / nl.var, then normalizes, scales and
shifts; v2 gets mean and variance from bn_stats/bn_aggr and normalizes with one two-op
tensor_scalar. gamma and beta are [1, hidden], broadcast across partitions once.
"""

import nki
import nki.isa as nisa
import nki.language as nl
from bcast import broadcast_from_hbm, ones_row

P = 128
EPS = 1e-5
CHUNK = 1024


def _broadcast_params(gamma, beta):
    ones = ones_row()
    return broadcast_from_hbm(gamma, ones), broadcast_from_hbm(beta, ones)


@nki.jit
def layernorm_v1(x, gamma, beta):
    rows, hidden = x.shape
    out = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    g, b = _broadcast_params(gamma, beta)
    for t in nl.affine_range(rows // P):
        xt = nl.ndarray((P, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[t * P : (t + 1) * P, :])
        mean = nl.mean(xt, axis=1, keepdims=True)
        var = nl.var(xt, axis=1, keepdims=True)
        rstd = nl.rsqrt(var + EPS)
        # scale and shift a chunk of columns at a time, so the temporaries fit in SBUF
        for c in nl.affine_range(hidden // CHUNK):
            cols = slice(c * CHUNK, (c + 1) * CHUNK)
            y = nl.multiply(nl.subtract(xt[:, cols], mean), rstd)
            y = nl.add(nl.multiply(y, g[:, cols]), b[:, cols])
            nisa.dma_copy(dst=out[t * P : (t + 1) * P, cols], src=y)
    return out


@nki.jit
def layernorm_v2(x, gamma, beta):
    rows, hidden = x.shape
    fmax = 512  # bn_stats takes at most 512 elements per partition
    chunks = hidden // fmax
    out = nl.ndarray((rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    g, b = _broadcast_params(gamma, beta)
    for t in nl.affine_range(rows // P):
        xt = nl.ndarray((P, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[t * P : (t + 1) * P, :])
        stats = nl.ndarray((P, chunks * 6), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            nisa.bn_stats(dst=stats[:, c * 6 : (c + 1) * 6], data=xt[:, c * fmax : (c + 1) * fmax])
        mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd, data=mv[:, 1:2], op0=nl.add, operand0=EPS)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=rstd)
        y = nl.ndarray((P, hidden), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=xt, op0=nl.subtract, operand0=mv[:, 0:1], op1=nl.multiply, operand1=rstd)
        nisa.tensor_tensor(dst=y, data1=y, data2=g, op=nl.multiply)
        nisa.tensor_tensor(dst=y, data1=y, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[t * P : (t + 1) * P, :], src=y)
    return out
