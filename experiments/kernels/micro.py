"""Micro-kernels of HARDWARE.md section 6: one 32 KiB DMA on one engine, a dependent ScalarE chain."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def dma_32k(x):
    """x: [8, 2048] bfloat16 in HBM (32 KiB, 4 KiB per partition): 8 partitions are one DMA engine's share."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t[0:1, 0:1])
    return out


def scalar_chain(n):
    """A kernel applying n dependent 1-element activations on ScalarE."""

    @nki.jit
    def chain(x):
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        for _ in range(n):
            nisa.activation(dst=t, op=nl.exp, data=t, scale=0.5)
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    return chain
