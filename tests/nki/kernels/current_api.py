"""Kernels in the current `nki` API (destination passing), written for the emulator's tests."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_tiled(a_t, b):
    """C[M, N] = A @ B with A given transposed as a_t[K, M]; accumulates over K in PSUM."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = 128, 128, min(512, N)
    c = nl.ndarray((M, N), dtype=a_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range((M + TM - 1) // TM):
        m0 = m * TM
        mm = min(TM, M - m0)
        for n in nl.affine_range((N + TN - 1) // TN):
            n0 = n * TN
            nn = min(TN, N - n0)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range((K + TK - 1) // TK):
                k0 = k * TK
                kk = min(TK, K - k0)
                at = nl.ndarray((TK, TM), dtype=a_t.dtype, buffer=nl.sbuf)
                bt = nl.ndarray((TK, TN), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=at[:kk, :mm], src=a_t[k0 : k0 + kk, m0 : m0 + mm])
                nisa.dma_copy(dst=bt[:kk, :nn], src=b[k0 : k0 + kk, n0 : n0 + nn])
                nisa.nc_matmul(acc[:mm, :nn], at[:kk, :mm], bt[:kk, :nn], accumulate=k > 0)
            ct = nl.ndarray((TM, TN), dtype=a_t.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=ct[:mm, :nn], src=acc[:mm, :nn])
            nisa.dma_copy(dst=c[m0 : m0 + mm, n0 : n0 + nn], src=ct[:mm, :nn])
    return c


def _bcast_rows(vec, C, dtype):
    """A [128, C] SBUF tile holding the HBM vector `vec` [C] in every partition (TensorE broadcast)."""
    row = nl.ndarray((1, C), dtype=vec.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=vec.reshape((1, C)))
    return row.broadcast_to((128, C))


@nki.jit
def rmsnorm(x, w, eps=1e-6):
    """y = x * rsqrt(mean(x^2) + eps) * w; ragged rows handled by slices."""
    R, C = x.shape
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    wb = _bcast_rows(w, C, nl.float32)
    for r in nl.affine_range((R + 127) // 128):
        r0 = r * 128
        rr = min(128, R - r0)
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:rr], src=x[r0 : r0 + rr])
        sq = nl.ndarray((128, C), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[:rr], op=nl.square, data=t[:rr], reduce_op=nl.add, reduce_res=ss[:rr])
        rs = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rs[:rr], data=ss[:rr], op0=nl.multiply, operand0=1.0 / C, op1=nl.add, operand1=eps)
        nisa.activation(dst=rs[:rr], op=nl.rsqrt, data=rs[:rr])
        o = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(
            dst=o[:rr], data=t[:rr], op0=nl.multiply, operand0=rs[:rr], op1=nl.multiply, operand1=wb[:rr]
        )
        nisa.dma_copy(dst=y[r0 : r0 + rr], src=o[:rr])
    return y


@nki.jit
def softmax(x):
    """Row softmax; ragged rows handled by slices."""
    R, C = x.shape
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range((R + 127) // 128):
        r0 = r * 128
        rr = min(128, R - r0)
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:rr], src=x[r0 : r0 + rr])
        neg_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[:rr], op=nl.max, data=t[:rr], axis=1, negate=True, keepdims=True)
        e = nl.ndarray((128, C), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e[:rr], op=nl.exp, data=t[:rr], bias=neg_max[:rr], reduce_op=nl.add, reduce_res=s[:rr])
        inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv[:rr], data=s[:rr])
        o = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o[:rr], data=e[:rr], op0=nl.multiply, operand0=inv[:rr])
        nisa.dma_copy(dst=y[r0 : r0 + rr], src=o[:rr])
    return y


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """LayerNorm with bn_stats (<=512-element chunks) and bn_aggr; ragged rows and columns by slices."""
    R, C = x.shape
    FM = nl.tile_size.bn_stats_fmax
    chunks = (C + FM - 1) // FM
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    g = _bcast_rows(gamma, C, nl.float32)
    b = _bcast_rows(beta, C, nl.float32)
    for r in nl.affine_range((R + 127) // 128):
        r0 = r * 128
        rr = min(128, R - r0)
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:rr], src=x[r0 : r0 + rr])
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for j in range(chunks):
            c0 = j * FM
            nisa.bn_stats(dst=stats[:rr, 6 * j : 6 * j + 6], data=t[:rr, c0 : min(C, c0 + FM)])
        mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv[:rr], data=stats[:rr])
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[:rr], data=mv[:rr, 1:2], op0=nl.add, operand0=eps, op1=nl.power, operand1=-0.5)
        norm = nl.ndarray((128, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=norm[:rr], data=t[:rr], op0=nl.subtract, operand0=mv[:rr, 0:1], op1=nl.multiply, operand1=rstd[:rr]
        )
        nisa.tensor_tensor(dst=norm[:rr], data1=norm[:rr], data2=g[:rr], op=nl.multiply)
        o = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o[:rr], data1=norm[:rr], data2=b[:rr], op=nl.add)
        nisa.dma_copy(dst=y[r0 : r0 + rr], src=o[:rr])
    return y


@nki.jit
def attention(q, k, v):
    """softmax(q k^T / sqrt(D)) v, online softmax over 128-key blocks; ragged queries and keys by slices."""
    S, D = q.shape
    Sk = k.shape[0]
    TQ = TK = 128
    out = nl.ndarray((S, D), dtype=q.dtype, buffer=nl.shared_hbm)
    scale = 1.0 / D**0.5
    for qi in nl.affine_range((S + TQ - 1) // TQ):
        q0 = qi * TQ
        qq = min(TQ, S - q0)
        qt = nl.ndarray((D, TQ), dtype=q.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=qt[:, :qq], src=q[q0 : q0 + qq])
        m_run = nl.ndarray((TQ, 1), dtype=nl.float32, buffer=nl.sbuf)
        l_run = nl.ndarray((TQ, 1), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((TQ, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=m_run, value=-1e30)
        nisa.memset(dst=l_run, value=0.0)
        nisa.memset(dst=acc, value=0.0)
        for kj in nl.sequential_range((Sk + TK - 1) // TK):
            k0 = kj * TK
            kk = min(TK, Sk - k0)
            kt = nl.ndarray((D, TK), dtype=k.dtype, buffer=nl.sbuf)
            vt = nl.ndarray((TK, D), dtype=v.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=kt[:, :kk], src=k[k0 : k0 + kk])
            nisa.dma_copy(dst=vt[:kk], src=v[k0 : k0 + kk])
            s_ps = nl.ndarray((TQ, TK), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(s_ps[:qq, :kk], qt[:, :qq], kt[:, :kk])
            s = nl.ndarray((TQ, TK), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=s[:qq, :kk], op=nl.copy, data=s_ps[:qq, :kk], scale=scale)
            m_new = nl.ndarray((TQ, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=m_new[:qq], op=nl.max, data=s[:qq, :kk], axis=1, keepdims=True)
            nisa.tensor_tensor(dst=m_new[:qq], data1=m_new[:qq], data2=m_run[:qq], op=nl.maximum)
            neg = nl.ndarray((TQ, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=neg[:qq], data=m_new[:qq], op0=nl.multiply, operand0=-1.0)
            p = nl.ndarray((TQ, TK), dtype=q.dtype, buffer=nl.sbuf)
            rowsum = nl.ndarray((TQ, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(
                dst=p[:qq, :kk], op=nl.exp, data=s[:qq, :kk], bias=neg[:qq], reduce_op=nl.add, reduce_res=rowsum[:qq]
            )
            alpha = nl.ndarray((TQ, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=alpha[:qq], op=nl.exp, data=m_run[:qq], bias=neg[:qq])
            nisa.scalar_tensor_tensor(
                dst=l_run[:qq], data=l_run[:qq], op0=nl.multiply, operand0=alpha[:qq], op1=nl.add, operand1=rowsum[:qq]
            )
            # nki.isa.nc_transpose: dst has data's dtype (a bf16 p is transposed into a bf16 PSUM tile)
            pt_ps = nl.ndarray((TK, TQ), dtype=p.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=pt_ps[:kk, :qq], data=p[:qq, :kk])
            pt = nl.ndarray((TK, TQ), dtype=q.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=pt[:kk, :qq], src=pt_ps[:kk, :qq])
            pv = nl.ndarray((TQ, D), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(pv[:qq], pt[:kk, :qq], vt[:kk])
            nisa.scalar_tensor_tensor(
                dst=acc[:qq], data=acc[:qq], op0=nl.multiply, operand0=alpha[:qq], op1=nl.add, operand1=pv[:qq]
            )
            nisa.tensor_copy(dst=m_run[:qq], src=m_new[:qq])
        o = nl.ndarray((TQ, D), dtype=q.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o[:qq], data=acc[:qq], op0=nl.divide, operand0=l_run[:qq])
        nisa.dma_copy(dst=out[q0 : q0 + qq], src=o[:qq])
    return out


@nki.jit
def tiled_rows(x, times=1):
    """x (at most 128 rows) stacked `times` times: a non-tensor parameter that sets the output shape."""
    R, C = x.shape
    out = nl.ndarray((R * times, C), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    for t in nl.affine_range(times):
        nisa.dma_copy(dst=out[t * R : (t + 1) * R], src=tile)
    return out


@nki.jit
def axpy(x, alpha, y):
    """alpha * x + y (at most 128 rows): a non-tensor parameter between two tensors."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=alpha)
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    nisa.dma_copy(dst=out, src=a)
    return out
