"""Tiled bf16 matmul in four steps of optimisation (HARDWARE.md section 6), current `nki` API.

result[M, N] = lhsT[K, M].T @ rhs[K, N]; all sizes multiples of the tiles (128 x 128 stationary,
512 moving). Written for the timing calibration; each version changes one thing.
"""

import nki
import nki.isa as nisa
import nki.language as nl

TK, TM, TN = 128, 128, 512  # contraction (partition), stationary free, moving free


def _psum_tile():
    # no memset: the first matmul of a group overwrites (accumulate=False), the others add
    return nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)


@nki.jit
def matmul_v1(lhsT, rhs):
    """Every matmul loads its own stationary and moving tile inside the K loop."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = _psum_tile()
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=k > 0)
            out = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], src=out)
    return result


@nki.jit
def matmul_v2(lhsT, rhs):
    """Loads hoisted out of the K loop: a column of lhsT per m, a column of rhs per (m, n)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // TK
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a = nl.ndarray((TK, kt * TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(kt):
            nisa.dma_copy(dst=a[:, k * TM : (k + 1) * TM], src=lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
        for n in nl.affine_range(N // TN):
            b = nl.ndarray((TK, kt * TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(kt):
                nisa.dma_copy(dst=b[:, k * TN : (k + 1) * TN], src=rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
            acc = _psum_tile()
            for k in nl.affine_range(kt):
                nisa.nc_matmul(
                    dst=acc,
                    stationary=a[:, k * TM : (k + 1) * TM],
                    moving=b[:, k * TN : (k + 1) * TN],
                    accumulate=k > 0,
                )
            out = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], src=out)
    return result


@nki.jit
def matmul_v3(lhsT, rhs, tiles_m=2, tiles_n=2):
    """Blocked over M and N: a block of tiles_m lhsT columns and tiles_n rhs columns stays in SBUF."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // TK
    bm, bn = TM * tiles_m, TN * tiles_n
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // bm):
        a = nl.ndarray((TK, kt * bm), dtype=lhsT.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(tiles_m):  # the block is loaded tile by tile, as v2 loads a column
            for k in nl.affine_range(kt):
                c0 = m * bm + i * TM
                nisa.dma_copy(
                    dst=a[:, k * bm + i * TM : k * bm + (i + 1) * TM], src=lhsT[k * TK : (k + 1) * TK, c0 : c0 + TM]
                )
        for n in nl.affine_range(N // bn):
            b = nl.ndarray((TK, kt * bn), dtype=rhs.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(tiles_n):
                for k in nl.affine_range(kt):
                    c0 = n * bn + j * TN
                    nisa.dma_copy(
                        dst=b[:, k * bn + j * TN : k * bn + (j + 1) * TN], src=rhs[k * TK : (k + 1) * TK, c0 : c0 + TN]
                    )
            for i in nl.affine_range(tiles_m):
                for j in nl.affine_range(tiles_n):
                    acc = _psum_tile()
                    for k in nl.affine_range(kt):
                        nisa.nc_matmul(
                            dst=acc,
                            stationary=a[:, k * bm + i * TM : k * bm + (i + 1) * TM],
                            moving=b[:, k * bn + j * TN : k * bn + (j + 1) * TN],
                            accumulate=k > 0,
                        )
                    out = nl.ndarray((TM, TN), dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out, src=acc)
                    r0, c0 = m * bm + i * TM, n * bn + j * TN
                    nisa.dma_copy(dst=result[r0 : r0 + TM, c0 : c0 + TN], src=out)
    return result


@nki.jit
def matmul_v4(lhsT, rhs, tiles_m=16, tiles_n=2, tiles_k=8):
    """Blocked over M, N and K: per N block the whole result column accumulates in SBUF (fp32),
    while K blocks of rhs and lhsT stream through; every tile loaded is used by a block of matmuls."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    bm, bn, bk = TM * tiles_m, TN * tiles_n, TK * tiles_k
    mt = M // TM
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // bn):
        res = nl.ndarray((TM, mt * bn), dtype=nl.float32, buffer=nl.sbuf)  # tile r at [:, r*bn:(r+1)*bn]
        nisa.memset(dst=res, value=0.0)
        for kb in nl.sequential_range(K // bk):
            b = nl.ndarray((TK, tiles_k * bn), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(tiles_k):
                r0 = (kb * tiles_k + k) * TK
                nisa.dma_copy(dst=b[:, k * bn : (k + 1) * bn], src=rhs[r0 : r0 + TK, n * bn : (n + 1) * bn])
            for m in nl.affine_range(M // bm):
                a = nl.ndarray((TK, tiles_k * bm), dtype=lhsT.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(tiles_k):
                    r0 = (kb * tiles_k + k) * TK
                    nisa.dma_copy(dst=a[:, k * bm : (k + 1) * bm], src=lhsT[r0 : r0 + TK, m * bm : (m + 1) * bm])
                for j in nl.affine_range(tiles_n):
                    for i in nl.affine_range(tiles_m):
                        acc = _psum_tile()
                        for k in nl.affine_range(tiles_k):
                            nisa.nc_matmul(
                                dst=acc,
                                stationary=a[:, k * bm + i * TM : k * bm + (i + 1) * TM],
                                moving=b[:, k * bn + j * TN : k * bn + (j + 1) * TN],
                                accumulate=k > 0,
                            )
                        c0 = (m * tiles_m + i) * bn + j * TN
                        nisa.tensor_tensor(dst=res[:, c0 : c0 + TN], data1=res[:, c0 : c0 + TN], data2=acc, op=nl.add)
        for r in nl.affine_range(mt):
            out = nl.ndarray((TM, bn), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=res[:, r * bn : (r + 1) * bn])
            nisa.dma_copy(dst=result[r * TM : (r + 1) * TM, n * bn : (n + 1) * bn], src=out)
    return result
