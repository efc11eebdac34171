"""Expert baseline: LayerNorm per 128-row tile (mean, centred sum of squares, fused scale-and-gain).

Written for Axon from the algorithm: mean by tensor_reduce, centring by tensor_scalar, the
variance folded into a squaring activation_reduce, rsqrt(var/N + eps) on ScalarE, then
(d * rstd) * g on VectorE and + b. The loaded tile rotates over two slots (the load of tile i+1
overlaps the compute of tile i, the store of tile i-1 reads the other slot); once d = x - mean is
formed the slot holding x takes the discarded squares and then the result.
"""

import nki
import nki.isa as nisa
import nki.language as nl


def _broadcast(v, n, dst, ones, row, psum):
    for c in nl.affine_range((n + 511) // 512):
        w = min(512, n - c * 512)
        nisa.dma_copy(dst=row[0:1, 0:w], src=v.reshape((1, n))[0:1, c * 512:c * 512 + w])
        nisa.nc_matmul(dst=psum[0:128, 0:w], stationary=ones[0:1, 0:128], moving=row[0:1, 0:w])
        nisa.tensor_copy(dst=dst[0:128, c * 512:c * 512 + w], src=psum[0:128, 0:w])


@nki.jit
def layernorm(x, g, b):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.ndarray((1, 128), dtype=g.dtype, buffer=nl.sbuf)
    row = nl.ndarray((1, 512), dtype=g.dtype, buffer=nl.sbuf)
    psum = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    g_all = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
    b_all = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones[0:1, 0:128], value=1.0)
    _broadcast(g, N, g_all, ones, row, psum)
    _broadcast(b, N, b_all, ones, row, psum)
    xt = nl.ndarray((128, 2 * N), dtype=x.dtype, buffer=nl.sbuf)
    d = nl.ndarray((128, N), dtype=nl.float32, buffer=nl.sbuf)
    mean = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    var = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    rstd = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range((M + 127) // 128):
        p = min(128, M - i * 128)
        q = i % 2
        s = q * N
        nisa.dma_copy(dst=xt[0:p, s:s + N], src=x[i * 128:i * 128 + p, 0:N])
        nisa.tensor_reduce(dst=mean[0:p, q:q + 1], op=nl.add, data=xt[0:p, s:s + N], axis=1, keepdims=True)
        nisa.tensor_scalar(dst=mean[0:p, q:q + 1], data=mean[0:p, q:q + 1], op0=nl.multiply, operand0=1.0 / N)
        nisa.tensor_scalar(dst=d[0:p, 0:N], data=xt[0:p, s:s + N], op0=nl.subtract, operand0=mean[0:p, q:q + 1])
        nisa.activation_reduce(dst=xt[0:p, s:s + N], op=nl.square, data=d[0:p, 0:N], reduce_op=nl.add,
                               reduce_res=var[0:p, q:q + 1])
        nisa.activation(dst=rstd[0:p, q:q + 1], op=nl.rsqrt, data=var[0:p, q:q + 1], scale=1.0 / N, bias=1e-5)
        nisa.scalar_tensor_tensor(dst=d[0:p, 0:N], data=d[0:p, 0:N], op0=nl.multiply, operand0=rstd[0:p, q:q + 1],
                                  op1=nl.multiply, operand1=g_all[0:p, 0:N])
        nisa.tensor_tensor(dst=xt[0:p, s:s + N], data1=d[0:p, 0:N], data2=b_all[0:p, 0:N], op=nl.add)
        nisa.dma_copy(dst=out[i * 128:i * 128 + p, 0:N], src=xt[0:p, s:s + N])
    return out
