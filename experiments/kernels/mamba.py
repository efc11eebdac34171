"""Mamba selective scan (HARDWARE.md section 6), fp32, current `nki` API.

out[b, c, l] = sum_s C[b, s, l] * h_s[c, l] with h_s[c, l] = exp(delta*A[c, s]) * h_s[c, l-1]
+ delta*u*B[b, s, l]. Channels go on partitions in tiles of 128; the sequence is the free axis and
one tensor_tensor_scan runs the recurrence. v1 loops channels then states; v2 puts the state loop
inside a group of channel tiles, so delta*u is computed once per channel tile and B, C are
broadcast once per state for the whole group.
"""

import nki
import nki.isa as nisa
import nki.language as nl
from bcast import ones_row, partition_broadcast

P = 128


def _row(src, b, s, seq, ones):
    """B[b, s, :] broadcast over the partitions."""
    row = nl.ndarray((1, seq), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=src[b, s : s + 1, :])
    return partition_broadcast(row, ones)


def _state_step(delta_t, du, a_col, b_bc, c_bc, acc, seq):
    """One state: deltaA = exp(delta * A), scan h = deltaA * h + du * B, acc += C * h."""
    dA = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=dA, op=nl.exp, data=delta_t, scale=a_col)
    dBu = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=dBu, data1=du, data2=b_bc, op=nl.multiply)
    h = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=h, data0=dA, data1=dBu, initial=0.0, op0=nl.multiply, op1=nl.add)
    ch = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=ch, data1=h, data2=c_bc, op=nl.multiply)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=ch, op=nl.add)


def _load_tile(src, b, ct, seq):
    t = nl.ndarray((P, seq), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src[b, ct * P : (ct + 1) * P, :])
    return t


@nki.jit
def mamba_v1(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    state = A.shape[1]
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones = ones_row()
    for b in nl.affine_range(batch):
        for ct in nl.affine_range(channels // P):
            delta_t = _load_tile(delta, b, ct, seq)
            u_t = _load_tile(u, b, ct, seq)
            a_t = nl.ndarray((P, state), dtype=A.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_t, src=A[ct * P : (ct + 1) * P, :])
            acc = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0)
            for s in nl.affine_range(state):
                du = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=du, data1=delta_t, data2=u_t, op=nl.multiply)
                _state_step(
                    delta_t, du, a_t[:, s : s + 1], _row(B, b, s, seq, ones), _row(C, b, s, seq, ones), acc, seq
                )
            nisa.dma_copy(dst=out[b, ct * P : (ct + 1) * P, :], src=acc)
    return out


@nki.jit
def mamba_v2(delta, u, A, B, C, group=8):
    """States outside channels: per group of `group` channel tiles, delta*u is computed once and
    each state's B and C rows are broadcast once for the whole group."""
    batch, channels, seq = delta.shape
    state = A.shape[1]
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    ones = ones_row()
    for b in nl.affine_range(batch):
        for g in nl.affine_range(channels // (P * group)):
            delta_g = nl.ndarray((P, group * seq), dtype=delta.dtype, buffer=nl.sbuf)
            du_g = nl.ndarray((P, group * seq), dtype=nl.float32, buffer=nl.sbuf)
            acc_g = nl.ndarray((P, group * seq), dtype=nl.float32, buffer=nl.sbuf)
            a_g = nl.ndarray((P, group * state), dtype=A.dtype, buffer=nl.sbuf)
            nisa.memset(dst=acc_g, value=0.0)
            for i in nl.affine_range(group):
                ct = g * group + i
                cols = slice(i * seq, (i + 1) * seq)
                nisa.dma_copy(dst=delta_g[:, cols], src=delta[b, ct * P : (ct + 1) * P, :])
                u_t = _load_tile(u, b, ct, seq)
                nisa.tensor_tensor(dst=du_g[:, cols], data1=delta_g[:, cols], data2=u_t, op=nl.multiply)
                nisa.dma_copy(dst=a_g[:, i * state : (i + 1) * state], src=A[ct * P : (ct + 1) * P, :])
            for s in nl.affine_range(state):
                b_bc, c_bc = _row(B, b, s, seq, ones), _row(C, b, s, seq, ones)
                for i in nl.affine_range(group):
                    cols = slice(i * seq, (i + 1) * seq)
                    _state_step(
                        delta_g[:, cols],
                        du_g[:, cols],
                        a_g[:, i * state + s : i * state + s + 1],
                        b_bc,
                        c_bc,
                        acc_g[:, cols],
                        seq,
                    )
            for i in nl.affine_range(group):
                ct = g * group + i
                nisa.dma_copy(dst=out[b, ct * P : (ct + 1) * P, :], src=acc_g[:, i * seq : (i + 1) * seq])
    return out
