"""Expert baseline: blocked, double-buffered matmul (written for Axon from the algorithm).

Rows are taken in blocks of up to four 128-row tiles: the block's stationary tiles a^T[k, m] are
loaded once by DMA transpose and stay in SBUF. For every 512-column tile of b, each K tile of b is
loaded once and feeds the block's four matmuls (four times fewer loads of b than one row tile at a
time). b tiles, PSUM banks and the evacuation stage rotate over two buffers so that loads, matmuls,
evacuation and stores of consecutive tiles overlap.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    TK = min(128, K)
    nk = K // TK
    nm = M // 128
    RB = 4 if nm % 4 == 0 else (2 if nm % 2 == 0 else 1)  # row tiles per block
    a_t = nl.ndarray((TK, RB * nk * 128), dtype=a.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray((TK, 2 * 512), dtype=b.dtype, buffer=nl.sbuf)
    acc = nl.ndarray((2 * RB, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    res = nl.ndarray((128, 2 * 512), dtype=a.dtype, buffer=nl.sbuf)
    for r in nl.affine_range(nm // RB):
        for j in nl.affine_range(RB):
            row = (r * RB + j) * 128
            for k in nl.affine_range(nk):
                col = (j * nk + k) * 128
                nisa.dma_transpose(dst=a_t[0:TK, col:col + 128], src=a[row:row + 128, k * TK:k * TK + TK])
        for n in nl.affine_range((N + 511) // 512):
            w = min(512, N - n * 512)
            bank = (n % 2) * RB
            for k in nl.affine_range(nk):
                s = ((n * nk + k) % 2) * 512
                nisa.dma_copy(dst=b_tile[0:TK, s:s + w], src=b[k * TK:k * TK + TK, n * 512:n * 512 + w])
                for j in nl.affine_range(RB):
                    col = (j * nk + k) * 128
                    nisa.nc_matmul(dst=acc[bank + j, 0:128, 0:w], stationary=a_t[0:TK, col:col + 128],
                                   moving=b_tile[0:TK, s:s + w], accumulate=k > 0)
            for j in nl.affine_range(RB):
                q = ((n * RB + j) % 2) * 512
                row = (r * RB + j) * 128
                nisa.tensor_copy(dst=res[0:128, q:q + w], src=acc[bank + j, 0:128, 0:w])
                nisa.dma_copy(dst=out[row:row + 128, n * 512:n * 512 + w], src=res[0:128, q:q + w])
    return out
