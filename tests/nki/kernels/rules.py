"""Kernels that break one hardware rule each; the offending line carries a `# RULE` marker."""

import nki.isa as nisa
import nki.language as nl


def _out():
    return nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)


def partition_over_128(a):
    t = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.sbuf)  # RULE
    nisa.dma_copy(dst=t, src=a)
    return a


def matmul_partition_mismatch(a):
    st = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    mv = nl.ndarray((64, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=st, value=1.0)
    nisa.memset(dst=mv, value=1.0)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, st, mv)  # RULE
    return a


def stationary_free_over_128(a):
    st = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.sbuf)
    mv = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=st, value=1.0)
    nisa.memset(dst=mv, value=1.0)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, st, mv)  # RULE
    return a


def moving_free_over_512(a):
    st = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    mv = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=st, value=1.0)
    nisa.memset(dst=mv, value=1.0)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, st, mv)  # RULE
    return a


def matmul_input_not_in_sbuf(a):
    st = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    mv = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=st, value=1.0)
    nisa.memset(dst=mv, value=1.0)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, st, mv)  # RULE
    return a


def matmul_output_not_in_psum(a):
    st = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    mv = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=st, value=1.0)
    nisa.memset(dst=mv, value=1.0)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(out, st, mv)  # RULE
    return a


def psum_tile_over_bank(a):
    ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)  # RULE
    return a


def sbuf_capacity(a):
    # 2 x 100 KiB per partition live at once (both read by the last instruction): over trn1's
    # 192 KiB, within trn2's 224 KiB. The error names the instruction where the second goes live.
    t1 = nl.ndarray((128, 25600), dtype=nl.float32, buffer=nl.sbuf)
    t2 = nl.ndarray((128, 25600), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t1, value=0.0)
    nisa.memset(dst=t2, value=0.0)  # RULE
    nisa.tensor_tensor(dst=t1, data1=t1, data2=t2, op=nl.add)
    return a


def sbuf_capacity_loop_ok(a):
    # 100 KiB per iteration: a loop body's tile dies at the end of its iteration, so this fits.
    for i in nl.affine_range(4):
        t = nl.ndarray((128, 25600), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
    return a


def psum_capacity(a):
    # 9 full banks written, then all read: one more than trn1's 8 PSUM banks.
    tiles = []
    for i in range(9):
        tiles.append(nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum))
        nisa.memset(dst=tiles[-1], value=0.0)  # RULE
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for p in tiles:
        nisa.tensor_copy(dst=t, src=p)
    return a


def gpsimd_touches_psum(a):
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=ps, value=0.0)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=ps, engine=nisa.gpsimd_engine)  # RULE
    return a


def read_never_written(a):
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    out = _out()
    nisa.dma_copy(dst=out, src=t)  # RULE
    return out


def read_partly_written(a):
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, :256], src=a[:, :256])
    out = _out()
    nisa.dma_copy(dst=out, src=t)  # RULE
    return out
