"""A small kernel for the profile CLI test: load, exp on ScalarE, store."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def exp_kernel(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=y, op=nl.exp, data=t)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=y)
    return out
