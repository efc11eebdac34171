"""Row L2 normalization, y = a / sqrt(sum(a*a) + eps), as an NKI kernel (current `nki` API).

A hand-written example for `axon nki run` and `axon nki profile`: rows go to the partitions 128 at
a time (the last block may be ragged, handled by slicing), the whole row stays in SBUF, and the
row sums come from the same ScalarE pass that squares.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def l2_normalize(a, eps=1e-12):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for r in nl.affine_range((R + P - 1) // P):
        r0 = r * P
        rows = min(P, R - r0)
        tile = nl.ndarray((P, C), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile[:rows], src=a[r0:r0 + rows])
        # squares are discarded; only their fp32 row sums are kept
        squares = nl.ndarray((P, C), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares[:rows], op=nl.square, data=tile[:rows], reduce_op=nl.add,
                        reduce_res=sum_sq[:rows])
        inv_norm = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=inv_norm[:rows], data=sum_sq[:rows], op0=nl.add, operand0=eps,
                           op1=nl.power, operand1=-0.5)
        normed = nl.ndarray((P, C), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=normed[:rows], data=tile[:rows], op0=nl.multiply, operand0=inv_norm[:rows])
        nisa.dma_copy(dst=out[r0:r0 + rows], src=normed[:rows])
    return out
