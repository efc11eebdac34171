"""Partition broadcast [1, F] -> [P, F] the way the hardware does it: a matmul with a ones
stationary on TensorE (one PSUM bank of columns at a time), then a copy out of PSUM on ScalarE,
which these kernels leave mostly idle (VectorE is their bottleneck). The copy is activation(op=nl.copy):
NeuronCore-v2 has no ScalarE tensor_copy (nki.isa.tensor_copy)."""

import nki.isa as nisa
import nki.language as nl

P = 128
BANK = 512  # fp32 columns per PSUM bank


def ones_row():
    ones = nl.ndarray((1, P), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    return ones


def partition_broadcast(row, ones, dtype=nl.float32):
    """row: an SBUF tile [1, F] -> a new SBUF tile [P, F] with the row on every partition."""
    free = row.shape[1]
    out = nl.ndarray((P, free), dtype=dtype, buffer=nl.sbuf)
    cols = min(free, BANK)
    for c in nl.affine_range(free // cols):
        part = nl.ndarray((P, cols), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=part, stationary=ones, moving=row[:, c * cols : (c + 1) * cols])
        nisa.activation(dst=out[:, c * cols : (c + 1) * cols], op=nl.copy, data=part)
    return out


def broadcast_from_hbm(src, ones, dtype=nl.float32):
    """src: an HBM row [1, F] -> an SBUF tile [P, F], loading one bank of columns at a time (a
    [1, F] SBUF tile would take F elements of every partition's budget)."""
    free = src.shape[1]
    cols = min(free, BANK)
    out = nl.ndarray((P, free), dtype=dtype, buffer=nl.sbuf)
    for c in nl.affine_range(free // cols):
        row = nl.ndarray((1, cols), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=src[:, c * cols : (c + 1) * cols])
        part = nl.ndarray((P, cols), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=part, stationary=ones, moving=row)
        nisa.activation(dst=out[:, c * cols : (c + 1) * cols], op=nl.copy, data=part)
    return out
