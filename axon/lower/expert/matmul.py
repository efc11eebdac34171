"""Expert baseline: tiled matmul blocked over M (written for Axon from the algorithm).

For each block of 128 rows: the rows' stationary tiles a^T[k, m] are built once on TensorE and
kept in SBUF; then for every 512-column tile of b the K tiles accumulate in one PSUM bank and the
result is evacuated by VectorE and stored. Moving tiles of b are streamed.
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
    a_rows = nl.ndarray((128, K), dtype=a.dtype, buffer=nl.sbuf)
    a_t = nl.ndarray((TK, (K // TK) * 128), dtype=a.dtype, buffer=nl.sbuf)
    t_psum = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    b_tile = nl.ndarray((TK, 512), dtype=b.dtype, buffer=nl.sbuf)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    res = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
    for m in nl.affine_range(M // 128):
        nisa.dma_copy(dst=a_rows[0:128, 0:K], src=a[m * 128:m * 128 + 128, 0:K])
        for k in nl.affine_range(K // TK):
            nisa.nc_transpose(dst=t_psum[0:TK, 0:128], data=a_rows[0:128, k * TK:k * TK + TK])
            nisa.tensor_copy(dst=a_t[0:TK, k * 128:k * 128 + 128], src=t_psum[0:TK, 0:128])
        for n in nl.affine_range((N + 511) // 512):
            w = min(512, N - n * 512)
            for k in nl.affine_range(K // TK):
                nisa.dma_copy(dst=b_tile[0:TK, 0:w], src=b[k * TK:k * TK + TK, n * 512:n * 512 + w])
                nisa.nc_matmul(dst=acc[0:128, 0:w], stationary=a_t[0:TK, k * 128:k * 128 + 128], moving=b_tile[0:TK, 0:w],
                               accumulate=k > 0)
            nisa.tensor_copy(dst=res[0:128, 0:w], src=acc[0:128, 0:w])
            nisa.dma_copy(dst=out[m * 128:m * 128 + 128, n * 512:n * 512 + w], src=res[0:128, 0:w])
    return out
