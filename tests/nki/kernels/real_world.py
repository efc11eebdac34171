"""Kernels in the styles of NKI code written elsewhere: compiler-emitted block dimensions, fresh
nl.arange masks, several arange terms in one axis, direct allocation, masked partial tiles.
Each is small; the tests compare them with NumPy. `# RULE` marks the line an error must name."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc.nki import trace  # noqa: F401  (compiler-emitted kernels import it)
from neuronxcc.nki.language import par_dim


@nki.jit
def block_scale_add(v1, v2):
    """out = 2 * v1 + v2 on [R, 1024], R not a multiple of 128, compiler style: block tensors whose
    declared size (R/128 blocks x 1024 floats x 3 tensors) is far over SBUF once R is large; every
    mask uses a fresh nl.arange."""
    R, F = v1.shape
    n = (R + 127) // 128
    out = nl.ndarray((R, F), dtype=np.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((n, 2, nl.par_dim(128), F // 2), dtype=np.float32, name="a_local", buffer=nl.sbuf)
    b = nl.ndarray((n, 2, nl.par_dim(128), F // 2), dtype=np.float32, name="b_local", buffer=nl.sbuf)
    c = nl.ndarray((n, 2, nl.par_dim(128), F // 2), dtype=np.float32, name="c_local", buffer=nl.sbuf)
    for i0 in nl.affine_range(n):
        for i1 in nl.affine_range(2):
            a[i0, i1, nl.arange(128)[:, None], nl.arange(F // 2)[None, :]] = nl.load(
                v1[128 * i0 + nl.arange(128)[:, None], (F // 2) * i1 + nl.arange(F // 2)[None, :]],
                dtype=np.float32,
                mask=-128 * i0 + -1 * nl.arange(128)[:, None] + (R - 1) >= 0,
            )
            b[i0, i1, nl.arange(128)[:, None], nl.arange(F // 2)[None, :]] = nl.load(
                v2[128 * i0 + nl.arange(128)[:, None], (F // 2) * i1 + nl.arange(F // 2)[None, :]],
                dtype=np.float32,
                mask=-128 * i0 + -1 * nl.arange(128)[:, None] + (R - 1) >= 0,
            )
            c[i0, i1, nl.arange(128)[:, None], nl.arange(F // 2)[None, :]] = nisa.scalar_tensor_tensor(
                data=a[i0, i1, nl.arange(128)[:, None], nl.arange(F // 2)[None, :]],
                op0=nl.multiply,
                operand0=np.float32(2.0),
                op1=nl.add,
                operand1=b[i0, i1, nl.arange(128)[:, None], nl.arange(F // 2)[None, :]],
                mask=-128 * i0 + -1 * nl.arange(128)[:, None] + (R - 1) >= 0,
                engine=nki.isa.unknown_engine,
            )
            nl.store(
                out[128 * i0 + nl.arange(128)[:, None], (F // 2) * i1 + nl.arange(F // 2)[None, :]],
                value=c[i0, i1, nl.arange(128)[:, None], nl.arange(F // 2)[None, :]],
                mask=-128 * i0 + -1 * nl.arange(128)[:, None] + (R - 1) >= 0,
            )
    return out


@nki.jit
def block_matmul(lhs_p, rhs):
    """out[M, N] = lhs.T @ rhs with lhs_p = lhs_t [K, M] laid out [128, K/128, M] (the caller
    reshapes, as for compiler-emitted kernels), compiler style: K tiles held in a block tensor, a
    PSUM block tensor zeroed lazily and accumulated with `+=`, and an SBUF tile filled through an
    index with two nl.arange terms on one axis (128 * j + i)."""
    _, kt, M = lhs_p.shape
    _, N = rhs.shape
    mt = M // 128
    out = nl.ndarray((M, N), dtype=np.float32, buffer=nl.shared_hbm)
    lhs = nl.ndarray((mt, nl.par_dim(128), kt * 128), dtype=np.float32, name="lhs_local", buffer=nl.sbuf)
    r = nl.ndarray((kt, nl.par_dim(128), N), dtype=np.float32, name="rhs_local", buffer=nl.sbuf)
    acc = nl.zeros((mt, nl.par_dim(128), N), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
    res = nl.ndarray((mt, nl.par_dim(128), N), dtype=np.float32, buffer=nl.sbuf)
    for k in nl.affine_range(kt):
        r[k, nl.arange(128)[:, None], nl.arange(N)[None, :]] = nl.load(
            rhs[128 * k + nl.arange(128)[:, None], nl.arange(N)[None, :]], dtype=np.float32, mask=None
        )
    for m in nl.affine_range(mt):
        lhs[m, nl.arange(128)[:, None, None], 128 * nl.arange(kt)[None, :, None] + nl.arange(128)[None, None, :]] = (
            nl.load(
                lhs_p[
                    nl.arange(128)[:, None, None], nl.arange(kt)[None, :, None], 128 * m + nl.arange(128)[None, None, :]
                ],
                dtype=np.float32,
            )
        )
        for k in nl.affine_range(kt):
            acc[m, nl.arange(128)[:, None], nl.arange(N)[None, :]] += nisa.nc_matmul(
                lhs[m, nl.arange(128)[:, None], 128 * k + nl.arange(128)[None, :]],
                r[k, nl.arange(128)[:, None], nl.arange(N)[None, :]],
                mask=None,
            )
        res[m, nl.arange(128)[:, None], nl.arange(N)[None, :]] = nl.copy(
            acc[m, nl.arange(128)[:, None], nl.arange(N)[None, :]], dtype=np.float32
        )
        nl.store(
            out[128 * m + nl.arange(128)[:, None], nl.arange(N)[None, :]],
            value=res[m, nl.arange(128)[:, None], nl.arange(N)[None, :]],
        )
    return out


@nki.jit
def blocks_all_live(a):
    """Two block tensors of 80 KiB blocks, each block read only after every block of both is
    written: even the best schedule holds a block of each plus a 40 KiB tile (200 KiB > 192 KiB)."""
    out = nl.ndarray((128, 20480), dtype=np.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((2, nl.par_dim(128), 20480), dtype=np.float32, name="x_blocks", buffer=nl.sbuf)
    y = nl.ndarray((2, nl.par_dim(128), 20480), dtype=np.float32, name="y_blocks", buffer=nl.sbuf)
    t = nl.ndarray((128, 10240), dtype=np.float32, name="scratch", buffer=nl.sbuf)
    t[...] = 1.0
    for i in nl.affine_range(2):
        x[i] = nl.load(a[:, 0:20480])
        y[i] = nl.load(a[:, 0:20480])  # RULE
    for i in nl.affine_range(2):
        x[i] = nl.add(x[i], y[i])
    nl.store(out[:, 0:10240], value=t)
    nl.store(out, value=x[1])
    return out


@nki.jit
def transpose_within_rows(a, shape2d):
    """Each row of a [P, X*Y] holds an X x Y matrix; write its Y x X transpose (index i2 * X + i1)."""
    P, _ = a.shape
    X, Y = shape2d
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    i_p = nl.arange(P)[:, None, None]
    i1 = nl.arange(X)[None, :, None]
    i2 = nl.arange(Y)[None, None, :]
    o = nl.ndarray((P, X * Y), dtype=a.dtype, buffer=nl.sbuf)
    o[i_p, i2 * X + i1] = nl.copy(t[i_p, i1 * Y + i2])
    nl.store(out, value=o)
    return out


@nki.jit
def overlapping_terms(a):
    """i1 * 4 + i2 with i2 up to 7 does not tile the axis: an error naming this line."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    o = nl.copy(t[nl.arange(128)[:, None, None], 4 * nl.arange(4)[None, :, None] + nl.arange(8)[None, None, :]])  # RULE
    nl.store(out[:, 0:32], value=o)
    return out


@nki.jit
def partial_tile_unmasked_middle(a, store_all):
    """A masked load of the last partial tile, an unmasked exp over the whole tile (rows past the
    end hold nothing), then a store: masked (legal), or unmasked (never-written data reaches HBM)."""
    R, F = a.shape
    out = nl.ndarray(((R + 127) // 128 * 128, F), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(F)[None, :]
    for i in nl.affine_range((R + 127) // 128):
        t = nl.load(a[i * 128 + i_p, i_f], mask=(i * 128 + i_p < R))
        e = nl.exp(t)
        s = nl.sum(e, axis=1, keepdims=True)
        y = nl.divide(e, s)
        if store_all:
            nl.store(out[i * 128 + i_p, i_f], value=y)  # RULE
        else:
            nl.store(out[i * 128 + i_p, i_f], value=y, mask=(i * 128 + i_p < R))
    return out


@nki.jit
def accumulate_into_fresh_psum(lhs_t, rhs):
    """`+=` of nc_matmul into a PSUM tile nothing wrote: the first product starts the group."""
    K, M = lhs_t.shape
    out = nl.ndarray((M, rhs.shape[1]), dtype=np.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((M, rhs.shape[1]), dtype=np.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        ps += nisa.nc_matmul(nl.load(lhs_t[k * 128 : (k + 1) * 128, :]), nl.load(rhs[k * 128 : (k + 1) * 128, :]))
    nl.store(out, value=nl.copy(ps, dtype=np.float32))
    return out


sb_mod = nki.compiler.sbuf.mod_alloc
psum_mod = nki.compiler.psum.mod_alloc


@nki.compiler.skip_middle_end_transformations
@nki.jit
def direct_allocation(a, base):
    """out = a.T via TensorE, every on-chip tensor placed by hand (SBUF at byte `base`)."""
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    ident = nl.ndarray((par_dim(128), 128), dtype=a.dtype, buffer=sb_mod(base_addr=base, num_free_tiles=(1,)))
    ident[...] = nl.load(nl.shared_identity_matrix(128, dtype=a.dtype))
    t = nl.ndarray((par_dim(128), 128), dtype=a.dtype, buffer=sb_mod(base_addr=base + 512, num_free_tiles=(1,)))
    t[...] = nl.load(a)
    ps = nl.ndarray((2, par_dim(128), 128), dtype=np.float32, buffer=psum_mod(base_bank=0, num_bank_tiles=(2,)))
    ps[0] = nisa.nc_matmul(t, ident, is_transpose=True)
    o = nl.ndarray((par_dim(128), 128), dtype=a.dtype, buffer=sb_mod(base_addr=base + 1024, num_free_tiles=(1,)))
    o[...] = nl.copy(ps[0])
    nl.store(out, value=o)
    return out


@nki.jit
def launch_facts(a):
    """Writes [program_ndim, num_programs(0), program_id(0)] of each program into its row."""
    out = nl.ndarray((4, 3), dtype=np.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 3), dtype=np.float32, buffer=nl.sbuf)
    pid = nl.program_id(0)
    t[:, 0:1] = float(nl.program_ndim())
    t[:, 1:2] = float(nl.num_programs(0))
    t[:, 2:3] = float(pid)
    nl.store(out[pid : pid + 1, :], value=t)
    return out


def launch_on_two_cores(a):
    """A host caller: 2 programs on each of 2 cores along axis 0."""
    return launch_facts[nl.spmd_dim(2, nl.nc(2))](a)


@nki.jit
def row_broadcast(a):
    """a - rowmax(a), the max reduced without keepdims ([P]) and broadcast back to [P, F]."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    mx = nl.max(t, axis=1)
    nl.store(out, value=nl.subtract(t, mx.broadcast_to(a.shape)))
    return out


@nki.jit
def shaped_by_parameters(a, shape, dtype, scale):
    """Compile-time parameters: a tuple shape, a dtype and a number."""
    out = nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)
    t = nl.load(a[0 : shape[0], 0 : shape[1]])
    nl.store(out, value=nl.multiply(t, scale, dtype=dtype))
    return out
