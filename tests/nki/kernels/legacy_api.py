"""Kernels in the legacy `neuronxcc.nki` API (return values, masks, nl.load/store, += into PSUM)."""

import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiled(a_t, b):
    """C = A @ B from a_t[K, M]; ragged K, M, N handled by masks; accumulates over K in PSUM."""
    K, M = a_t.shape
    _, N = b.shape
    TK, TM, TN = 128, 128, 512
    c = nl.ndarray((M, N), dtype=a_t.dtype, buffer=nl.shared_hbm)
    i_k = nl.arange(TK)[:, None]
    i_m = nl.arange(TM)[None, :]
    i_n = nl.arange(TN)[None, :]
    i_mp = nl.arange(TM)[:, None]
    for m in nl.affine_range(math.ceil(M / TM)):
        for n in nl.affine_range(math.ceil(N / TN)):
            res = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(math.ceil(K / TK)):
                mk = k * TK + i_k < K
                at = nl.load(a_t[k * TK + i_k, m * TM + i_m], mask=mk & (m * TM + i_m < M))
                bt = nl.load(b[k * TK + i_k, n * TN + i_n], mask=mk & (n * TN + i_n < N))
                res += nisa.nc_matmul(at[i_k, i_m], bt[i_k, i_n], mask=mk & (m * TM + i_m < M) & (n * TN + i_n < N))
            out = nl.copy(res, dtype=a_t.dtype)
            nl.store(c[m * TM + i_mp, n * TN + i_n], value=out, mask=(m * TM + i_mp < M) & (n * TN + i_n < N))
    return c


@nki.jit
def rmsnorm(x, w, eps=1e-6):
    """y = x / sqrt(mean(x^2) + eps) * w, rows ragged over 128-partition tiles (masks)."""
    R, C = x.shape
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(C)[None, :]
    wt = nl.load(w.reshape((1, C))[nl.arange(1)[:, None], i_f])
    wb = nl.copy(wt.broadcast_to((128, C)), dtype=nl.float32)
    for r in nl.affine_range(math.ceil(R / 128)):
        msk = r * 128 + i_p < R
        t = nl.load(x[r * 128 + i_p, i_f], mask=msk)
        ms = nl.mean(nl.square(t, mask=msk), axis=1, keepdims=True, mask=msk, dtype=nl.float32)
        rs = nl.rsqrt(nl.add(ms, eps, mask=msk), mask=msk)
        scaled = nl.multiply(t, rs, mask=msk, dtype=nl.float32)
        out = nl.multiply(scaled, wb, mask=msk, dtype=x.dtype)
        nl.store(y[r * 128 + i_p, i_f], value=out, mask=msk)
    return y


@nki.jit
def softmax(x):
    """Row softmax; rows ragged over 128-partition tiles (masks)."""
    R, C = x.shape
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(C)[None, :]
    for r in nl.affine_range(math.ceil(R / 128)):
        msk = r * 128 + i_p < R
        t = nl.load(x[r * 128 + i_p, i_f], mask=msk)
        mx = nl.max(t, axis=1, keepdims=True, mask=msk, dtype=nl.float32)
        neg = nl.multiply(mx, -1.0, mask=msk)
        s = nl.ndarray((128, 1), dtype=nl.float32)
        e = nisa.activation_reduce(
            op=nl.exp, data=t, reduce_op=nl.add, reduce_res=s, bias=neg, mask=msk, dtype=nl.float32
        )
        inv = nl.reciprocal(s, mask=msk)
        out = nl.multiply(e, inv, mask=msk, dtype=x.dtype)
        nl.store(y[r * 128 + i_p, i_f], value=out, mask=msk)
    return y


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta with bn_stats/bn_aggr over <=512 chunks (masks)."""
    R, C = x.shape
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    FM = nl.tile_size.bn_stats_fmax
    chunks = math.ceil(C / FM)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(C)[None, :]
    i_c = nl.arange(FM)[None, :]
    i_6 = nl.arange(6)[None, :]
    i_1 = nl.arange(1)[:, None]
    g = nl.copy(nl.load(gamma.reshape((1, C))[i_1, i_f]).broadcast_to((128, C)), dtype=nl.float32)
    b = nl.copy(nl.load(beta.reshape((1, C))[i_1, i_f]).broadcast_to((128, C)), dtype=nl.float32)
    for r in nl.affine_range(math.ceil(R / 128)):
        msk = r * 128 + i_p < R
        t = nl.load(x[r * 128 + i_p, i_f], mask=msk)
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32)
        for j in nl.static_range(chunks):
            stats[i_p, j * 6 + i_6] = nisa.bn_stats(t[i_p, j * FM + i_c], mask=msk & (j * FM + i_c < C))
        mv = nisa.bn_aggr(stats, mask=msk)
        rstd = nisa.tensor_scalar(mv[:, 1:2], nl.add, eps, op1=nl.power, operand1=-0.5, mask=msk)
        norm = nisa.tensor_scalar(
            t, nl.subtract, mv[:, 0:1], op1=nl.multiply, operand1=rstd, mask=msk, dtype=nl.float32
        )
        out = nl.add(nl.multiply(norm, g, mask=msk), b, mask=msk, dtype=x.dtype)
        nl.store(y[r * 128 + i_p, i_f], value=out, mask=msk)
    return y


@nki.jit
def attention(q, k, v):
    """softmax(q k^T / sqrt(D)) v with online softmax over 128-key blocks; ragged queries (masks)."""
    S, D = q.shape
    Sk = k.shape[0]
    TQ = TK = 128
    out = nl.ndarray((S, D), dtype=q.dtype, buffer=nl.shared_hbm)
    scale = 1.0 / math.sqrt(D)
    i_q = nl.arange(TQ)[:, None]
    i_qf = nl.arange(TQ)[None, :]
    i_dp = nl.arange(D)[:, None]
    i_d = nl.arange(D)[None, :]
    i_kp = nl.arange(TK)[:, None]
    i_kf = nl.arange(TK)[None, :]
    for qi in nl.affine_range(math.ceil(S / TQ)):
        mq = qi * TQ + i_q < S
        qt = nl.load_transpose2d(q[qi * TQ + i_q, i_d], mask=mq)  # [D, TQ]
        m_run = nl.full((TQ, 1), -1e30, dtype=nl.float32)
        l_run = nl.zeros((TQ, 1), dtype=nl.float32)
        acc = nl.zeros((TQ, D), dtype=nl.float32)
        for kj in nl.sequential_range(Sk // TK):
            kt = nl.load_transpose2d(k[kj * TK + i_kp, i_d])  # [D, TK]
            vt = nl.load(v[kj * TK + i_kp, i_d])  # [TK, D]
            s_ps = nisa.nc_matmul(qt[i_dp, i_qf], kt[i_dp, i_kf], mask=(qi * TQ + i_qf < S))
            s = nisa.activation(op=nl.copy, data=s_ps, scale=scale, mask=mq, dtype=nl.float32)
            mx = nl.max(s, axis=1, keepdims=True, mask=mq)
            m_new = nl.maximum(m_run, mx, mask=mq)
            neg = nl.multiply(m_new, -1.0, mask=mq)
            rowsum = nl.ndarray((TQ, 1), dtype=nl.float32)
            p = nisa.activation_reduce(
                op=nl.exp, data=s, reduce_op=nl.add, reduce_res=rowsum, bias=neg, mask=mq, dtype=nl.float32
            )
            alpha = nisa.activation(op=nl.exp, data=m_run, bias=neg, mask=mq)
            l_run[...] = nisa.scalar_tensor_tensor(
                data=l_run, op0=nl.multiply, operand0=alpha, op1=nl.add, operand1=rowsum, mask=mq
            )
            pt = nl.copy(nisa.nc_transpose(p[i_q, i_kf], mask=mq), dtype=q.dtype, mask=(qi * TQ + i_qf < S))  # [TK, TQ]
            pv = nisa.nc_matmul(pt[i_kp, i_qf], vt[i_kp, i_d], mask=(qi * TQ + i_qf < S))  # [TQ, D]
            acc[...] = nisa.scalar_tensor_tensor(
                data=acc, op0=nl.multiply, operand0=alpha, op1=nl.add, operand1=pv, mask=mq
            )
            m_run[...] = nl.copy(m_new, mask=mq)
        o = nisa.tensor_scalar(acc, nl.divide, l_run, mask=mq, dtype=q.dtype)
        nl.store(out[qi * TQ + i_q, i_d], value=o, mask=mq)
    return out
