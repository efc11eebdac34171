"""No silent wrong result: every nki.isa and nki.language call the emulator implements, in both
APIs, run in small kernels through `axon.nki.run` (as a user runs them) and compared with an
independent NumPy formula written from the Neuron API reference (`formulas.py`), over random
shapes (partitions 1..128, odd free sizes), dtypes, operators, flags and legacy masks.

`test_every_implemented_call_has_a_differential_test` enumerates the emulator's API tables: a
call added to the emulator without a test here fails the suite.
"""

from __future__ import annotations

import inspect
import types

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import axon.nki
from axon.errors import NKIError
from axon.nki import current_isa, language, legacy_isa
from tests.nki import formulas as F

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PER_OP = settings(SETTINGS, max_examples=6)  # tests parametrized by operator: every operator, every run
FLOATS = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}

partitions = st.integers(1, 128)
free_sizes = st.one_of(st.integers(1, 65), st.sampled_from([127, 129, 255, 383, 511, 512]))
float_dtypes = st.sampled_from(sorted(FLOATS))


def _rand(seed: int, shape, lo: float = -2.0, hi: float = 2.0, dtype: str = "float32") -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(FLOATS[dtype])


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# ---- kernels the way a user writes them ---------------------------------------------------------


def run_current(body, inputs, dsts, hw="trn1"):
    """A current-API kernel: DMA every input into SBUF, call `body(tiles, dst_tiles)`, DMA every dst
    (PSUM through a tensor_copy) out to HBM. `dsts` are (shape, dtype name, "sbuf" | "psum")."""
    import nki.isa as nisa
    import nki.language as nl

    def kernel(*hbm):
        tiles = []
        for h in hbm:
            t = nl.ndarray(h.shape, h.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=h)
            tiles.append(t)
        outs = [nl.ndarray(shape, getattr(nl, dt), buffer=getattr(nl, buf)) for shape, dt, buf in dsts]
        body(tiles, outs)
        results = []
        for t in outs:
            if t.buffer is nl.psum:
                s = nl.ndarray(t.shape, t.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=s, src=t)
                t = s
            o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=o, src=t)
            results.append(o)
        return tuple(results)

    out = axon.nki.run(kernel, *inputs, hw=hw)
    return out if isinstance(out, tuple) else (out,)


def run_legacy(body, inputs, keep=None):
    """A legacy kernel: nl.load every input, `body(tiles)` returns result tiles, nl.store them;
    `keep` (rows) stores only the rows a mask let the instruction write."""
    import neuronxcc.nki.language as nl

    def kernel(*hbm):
        tiles = [nl.load(h) for h in hbm]
        results = []
        for r in body(tiles):
            rows = r.shape[0] if keep is None else keep
            o = nl.ndarray((rows,) + tuple(r.shape[1:]), r.dtype, buffer=nl.shared_hbm)
            nl.store(o, value=r if keep is None else r[0:rows])
            results.append(o)
        return tuple(results)

    out = axon.nki.run(kernel, *inputs)
    return out if isinstance(out, tuple) else (out,)


def _mask(P: int, keep: int):
    import neuronxcc.nki.language as nl

    return nl.arange(P)[:, None] < keep


# ---- nc_matmul: accumulate / overwrite over a K loop (both APIs) ---------------------------------


@SETTINGS
@given(
    K=st.integers(1, 128),
    M=st.integers(1, 128),
    N=free_sizes,
    dtype=float_dtypes,
    flags=st.lists(st.sampled_from([None, True, False]), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_current_nc_matmul(K, M, N, dtype, flags, seed):
    flags[0] = None if flags[0] is True else flags[0]  # the first write of a fresh PSUM tile cannot accumulate
    st_in = [_rand(seed + i, (K, M), dtype=dtype) for i in range(len(flags))]
    mv_in = [_rand(seed + 100 + i, (K, N), dtype=dtype) for i in range(len(flags))]

    def body(t, o):
        import nki.isa as nisa

        for i, flag in enumerate(flags):
            kw = {} if flag is None else {"accumulate": flag}
            nisa.nc_matmul(dst=o[0], stationary=t[i], moving=t[len(flags) + i], **kw)

    (got,) = run_current(body, st_in + mv_in, [((M, N), "float32", "psum")])
    prods = [F.matmul(s, m) for s, m in zip(st_in, mv_in)]
    scale = sum(np.abs(_f64(s)).T @ np.abs(_f64(m)) for s, m in zip(st_in, mv_in))
    F.assert_matches(got, F.nc_matmul_sequence(prods, flags), "float32", scale, f"nc_matmul flags={flags}")


def test_current_nc_matmul_k_loop_without_flags_accumulates():
    """The tutorials' K loop, `nisa.nc_matmul(dst=psum, ...)` once per K tile with no accumulate
    flag: the result is the whole product (the emulator used to keep only the last tile's)."""
    import nki.isa as nisa
    import nki.language as nl

    def mm(a_t, b):
        K, M = a_t.shape
        N = b.shape[1]
        out = nl.ndarray((M, N), nl.float32, buffer=nl.shared_hbm)
        psum = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            a = nl.ndarray((128, M), nl.float32, buffer=nl.sbuf)
            bb = nl.ndarray((128, N), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=a_t[k * 128 : (k + 1) * 128, :])
            nisa.dma_copy(dst=bb, src=b[k * 128 : (k + 1) * 128, :])
            nisa.nc_matmul(dst=psum, stationary=a, moving=bb)
        s = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=psum)
        nisa.dma_copy(dst=out, src=s)
        return out

    a, b = _rand(1, (1024, 128)), _rand(2, (1024, 256))
    got = axon.nki.run(mm, a, b)
    F.assert_matches(got, F.matmul(a, b), "float32", np.abs(_f64(a)).T @ np.abs(_f64(b)), "K loop")


def test_current_nc_matmul_accumulate_onto_unwritten_psum_is_an_error():
    import nki.isa as nisa
    import nki.language as nl

    def k(a):
        out = nl.ndarray((4, 4), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 4), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        p = nl.ndarray((4, 4), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=t, moving=t, accumulate=True)
        nisa.tensor_copy(dst=t, src=p)
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(NKIError, match="never-written"):
        axon.nki.run(k, np.ones((4, 4), np.float32))


@SETTINGS
@given(
    K=st.integers(1, 128),
    M=st.integers(1, 128),
    N=free_sizes,
    dtype=float_dtypes,
    ktiles=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_legacy_nc_matmul(K, M, N, dtype, ktiles, seed):
    """`res = nisa.nc_matmul(a, b)` overwrites; `psum[...] += nisa.nc_matmul(a, b)` accumulates."""
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    st_in = [_rand(seed + i, (K, M), dtype=dtype) for i in range(ktiles)]
    mv_in = [_rand(seed + 50 + i, (K, N), dtype=dtype) for i in range(ktiles)]

    def body(t):
        acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
        for i in range(ktiles):
            acc += nisa.nc_matmul(t[i], t[ktiles + i])
        last = nisa.nc_matmul(t[0], t[ktiles])
        return [nl.copy(acc), nl.copy(last)]

    acc, last = run_legacy(body, st_in + mv_in)
    prods = [F.matmul(s, m) for s, m in zip(st_in, mv_in)]
    scale = sum(np.abs(_f64(s)).T @ np.abs(_f64(m)) for s, m in zip(st_in, mv_in))
    F.assert_matches(acc, sum(prods), "float32", scale, "legacy += nc_matmul")
    F.assert_matches(last, prods[0], "float32", np.abs(_f64(st_in[0])).T @ np.abs(_f64(mv_in[0])), "legacy nc_matmul")


def test_current_nc_matmul_transpose_mode_with_identity_is_bit_exact():
    import nki.isa as nisa

    x = _rand(3, (32, 16))
    x[1, 2] = np.nan

    def body(t, o):
        nisa.nc_matmul(dst=o[0], stationary=t[0], moving=t[1], is_transpose=True)

    (got,) = run_current(body, [x, np.eye(32, dtype=np.float32)], [((16, 32), "float32", "psum")])
    np.testing.assert_array_equal(got, x.T)


# ---- transposes ---------------------------------------------------------------------------------


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 128),
    dtype=float_dtypes,
    engine=st.sampled_from(["tensor", "vector"]),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_nc_transpose(P, Fs, dtype, engine, api, seed):
    if engine == "vector":
        P, Fs = min(P, 32), min(Fs, 32)
    x = _rand(seed, (P, Fs), dtype=dtype)
    if api == "current":
        import nki.isa as nisa

        # the current API's dst has data's dtype (nki.isa.nc_transpose, Data types)
        (got,) = run_current(
            lambda t, o: nisa.nc_transpose(dst=o[0], data=t[0], engine=engine),
            [x],
            [((Fs, P), dtype, "psum" if engine == "tensor" else "sbuf")],
        )
        out_dtype = dtype
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(lambda t: [nisa.nc_transpose(t[0], engine=engine)], [x])
        out_dtype = dtype if engine == "vector" else "float32"
    F.assert_matches(got, F.transpose(_f64(x)), out_dtype, what="nc_transpose")


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 128),
    dtype=float_dtypes,
    api=st.sampled_from(["current", "legacy", "nl"]),
    seed=st.integers(0, 2**16),
)
def test_dma_transpose(P, Fs, dtype, api, seed):
    """nisa.dma_transpose (both APIs) and nl.load_transpose2d: HBM [a, b] -> SBUF [b, a]."""
    x = _rand(seed, (Fs, P), dtype=dtype)
    if api == "current":
        import nki.isa as nisa
        import nki.language as nl

        def k(a):
            t = nl.ndarray((P, Fs), a.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=t, src=a)
            out = nl.ndarray((P, Fs), a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t)
            return out
    else:
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        def k(a):
            t = nisa.dma_transpose(a) if api == "legacy" else nl.load_transpose2d(a)
            out = nl.ndarray((P, Fs), a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=t)
            return out

    F.assert_matches(axon.nki.run(k, x), F.transpose(_f64(x)), dtype, what=f"{api} dma transpose")


# ---- data movement ------------------------------------------------------------------------------


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    src=float_dtypes,
    dst=float_dtypes,
    seed=st.integers(0, 2**16),
    keep=st.integers(1, 128),
)
def test_dma_copy_load_store_and_casts(P, Fs, src, dst, seed, keep):
    """dma_copy casts src -> float32 -> dst (page('nki.isa.dma_copy')); nl.load/nl.store with a mask
    move only the kept rows."""
    import neuronxcc.nki.language as nl
    import nki.isa as nisa

    x = _rand(seed, (P, Fs), -100, 100, src)
    (got,) = run_current(lambda t, o: nisa.dma_copy(dst=o[0], src=t[0]), [x], [((P, Fs), dst, "sbuf")])
    F.assert_matches(got, _f64(x), dst, what="dma_copy cast")
    keep = min(keep, P)
    (got,) = run_legacy(lambda t: [t[0]], [x])
    np.testing.assert_array_equal(got, x)

    def k(a):
        t = nl.load(a, mask=_mask(P, keep))
        out = nl.ndarray((keep, Fs), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t[0:keep], mask=_mask(keep, keep))
        return out

    np.testing.assert_array_equal(axon.nki.run(k, x), x[:keep])


# ---- ScalarE: activation and its reduce registers ------------------------------------------------


@pytest.mark.parametrize("op", sorted(F.ACT))
@PER_OP
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    vector_scale=st.booleans(),
    with_bias=st.booleans(),
    reduce=st.booleans(),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_activation(P, Fs, dtype, op, vector_scale, with_bias, reduce, api, seed):
    lo, hi = F.ACT_DOMAIN.get(op, (-3.0, 3.0))
    x = _rand(seed, (P, Fs), lo, hi, dtype)
    positive = op in F.ACT_DOMAIN
    scale = _rand(seed + 1, (P, 1), 0.5, 1.0) if vector_scale else np.float32(0.75)
    bias = _rand(seed + 2, (P, 1), 0.0 if positive else -0.5, 0.5) if with_bias else None
    inputs = [x] + ([scale] if vector_scale else []) + ([bias] if with_bias else [])

    def args(t):
        s = t[1] if vector_scale else float(scale)
        b = t[1 + vector_scale] if with_bias else None
        return s, b

    if api == "current":
        import nki.isa as nisa

        def body(t, o):
            s, b = args(t)
            red = (
                {"reduce_op": np_add(), "reduce_res": o[1], "reduce_cmd": nisa.reduce_cmd.reset_reduce}
                if reduce
                else {}
            )
            nisa.activation(dst=o[0], op=act(op), data=t[0], scale=s, bias=b, **red)

        outs = run_current(body, inputs, [((P, Fs), dtype, "sbuf")] + ([((P, 1), "float32", "sbuf")] if reduce else []))
    else:
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        def legacy_body(t):
            s, b = args(t)
            if not reduce:
                return [nisa.activation(op=act(op), data=t[0], scale=s, bias=b)]
            res = nl.ndarray((P, 1), nl.float32)
            y = nisa.activation_reduce(op=act(op), data=t[0], reduce_op=np_add(), reduce_res=res, scale=s, bias=b)
            return [y, res]

        outs = run_legacy(legacy_body, inputs)
    want = F.activation(op, _f64(x), _f64(scale), None if bias is None else _f64(bias))
    # fp32 evaluation (1 + tanh(y) near -1, for instance) errs in proportion to the argument's size
    arg = np.abs(_f64(x) * _f64(scale)) + (0 if bias is None else np.abs(_f64(bias)))
    F.assert_matches(outs[0], want, dtype, np.maximum(arg, 1.0), f"{api} activation {op}", transcendental=True)
    if reduce:
        F.assert_matches(
            outs[1][:, 0],
            want.sum(axis=1),
            "float32",
            np.abs(want).sum(axis=1),
            "activation reduce",
            transcendental=True,
        )


def test_current_activation_reduce_cmd_accumulates_across_instructions():
    """reduce_cmd: reset_reduce, then reduce on top, then read out (page('nki.isa.activation'))."""
    import nki.isa as nisa

    x, y = _rand(4, (64, 40)), _rand(5, (64, 40))

    def body(t, o):
        nisa.activation(dst=o[0], op=act("exp"), data=t[0], reduce_op=np_add(), reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(
            dst=o[0], op=act("exp"), data=t[1], reduce_op=np_add(), reduce_res=o[1], reduce_cmd=nisa.reduce_cmd.reduce
        )

    _, res = run_current(body, [x, y], [((64, 40), "float32", "sbuf"), ((64, 1), "float32", "sbuf")])
    want = np.exp(_f64(x)).sum(axis=1) + np.exp(_f64(y)).sum(axis=1)
    F.assert_matches(res[:, 0], want, "float32", what="reduce_regs", transcendental=True)


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    op=st.sampled_from(["exp", "tanh", "square", "copy"]),
    seed=st.integers(0, 2**16),
)
def test_current_activation_reduce(P, Fs, dtype, op, seed):
    import nki.isa as nisa

    x = _rand(seed, (P, Fs), -1, 1, dtype)
    y, res = run_current(
        lambda t, o: nisa.activation_reduce(dst=o[0], op=act(op), data=t[0], reduce_op=np_add(), reduce_res=o[1]),
        [x],
        [((P, Fs), dtype, "sbuf"), ((P, 1), "float32", "sbuf")],
    )
    want = F.ACT[op](_f64(x))
    F.assert_matches(y, want, dtype, 1.0, f"activation_reduce {op}", transcendental=True)
    F.assert_matches(
        res[:, 0], want.sum(axis=1), "float32", np.abs(want).sum(axis=1), "activation_reduce sum", transcendental=True
    )


def act(name):
    import nki.language as nl

    return getattr(nl, name)


def np_add():
    import nki.language as nl

    return nl.add


# ---- VectorE / GpSimd ---------------------------------------------------------------------------

ALU_OPS = sorted(F.ALU)


def _alu_inputs(op, seed, shape, dtype):
    lo, hi = F.ALU_DOMAIN.get(op, (-3.0, 3.0))
    x = _rand(seed, shape, lo, hi, dtype)
    if op in ("equal", "not_equal", "greater_equal", "less_equal"):
        x = np.round(x).astype(x.dtype)  # ties happen
    return x


@pytest.mark.parametrize("op", ALU_OPS)
@PER_OP
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    out=float_dtypes,
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
    keep=st.integers(1, 128),
)
def test_tensor_tensor(P, Fs, dtype, out, op, api, seed, keep):
    a, b = _alu_inputs(op, seed, (P, Fs), dtype), _alu_inputs(op, seed + 1, (P, Fs), dtype)
    if op == "power":
        b = _rand(seed + 1, (P, Fs), -2, 2, dtype)
    want = F.ALU[op](_f64(a), _f64(b))
    scale = np.abs(_f64(a)) + np.abs(_f64(b))
    if api == "current":
        import nki.isa as nisa

        (got,) = run_current(
            lambda t, o: nisa.tensor_tensor(dst=o[0], data1=t[0], data2=t[1], op=act(op)),
            [a, b],
            [((P, Fs), out, "sbuf")],
        )
        F.assert_matches(
            got,
            want,
            out,
            scale if op in ("add", "subtract") else None,
            f"tensor_tensor {op}",
            transcendental=op == "power",
        )
    else:
        import neuronxcc.nki.isa as nisa

        keep = min(keep, P)
        (got,) = run_legacy(
            lambda t: [nisa.tensor_tensor(t[0], t[1], act(op), dtype=np.float32, mask=_mask(P, keep))],
            [a, b],
            keep=keep,
        )
        F.assert_matches(
            got,
            want[:keep],
            "float32",
            (scale if op in ("add", "subtract") else np.abs(want))[:keep],
            f"legacy masked tensor_tensor {op}",
            transcendental=op == "power",
        )


@pytest.mark.parametrize("op0", ALU_OPS)
@PER_OP
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    op1=st.sampled_from([None] + ALU_OPS),
    rev0=st.booleans(),
    rev1=st.booleans(),
    vec0=st.booleans(),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_tensor_scalar(P, Fs, dtype, op0, op1, rev0, rev1, vec0, api, seed):
    x = _rand(seed, (P, Fs), 0.5, 2.0, dtype)  # positive: divide and power stay defined under reverse
    o0 = _rand(seed + 1, (P, 1), 0.5, 2.0) if vec0 else np.float32(1.25)
    o1 = np.float32(0.75)
    inputs = [x] + ([o0] if vec0 else [])
    want = F.tensor_scalar(_f64(x), op0, _f64(o0), rev0, op1, _f64(o1), rev1)
    if api == "current":
        import nki.isa as nisa

        def body(t, o):
            nisa.tensor_scalar(
                dst=o[0],
                data=t[0],
                op0=act(op0),
                operand0=t[1] if vec0 else float(o0),
                reverse0=rev0,
                op1=None if op1 is None else act(op1),
                operand1=None if op1 is None else float(o1),
                reverse1=rev1,
            )

        (got,) = run_current(body, inputs, [((P, Fs), "float32", "sbuf")])
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(
            lambda t: [
                nisa.tensor_scalar(
                    t[0],
                    act(op0),
                    t[1] if vec0 else float(o0),
                    reverse0=rev0,
                    op1=None if op1 is None else act(op1),
                    operand1=None if op1 is None else float(o1),
                    reverse1=rev1,
                    dtype=np.float32,
                )
            ],
            inputs,
        )
    F.assert_matches(got, want, "float32", 4 * (np.abs(_f64(x)) + 2), f"tensor_scalar {op0},{op1}", transcendental=True)


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    op0=st.sampled_from(["add", "multiply", "subtract", "maximum"]),
    rop=st.sampled_from(["add", "maximum", "minimum"]),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_tensor_scalar_reduce(P, Fs, dtype, op0, rop, api, seed):
    x = _rand(seed, (P, Fs), dtype=dtype)
    if api == "current":
        import nki.isa as nisa

        y, r = run_current(
            lambda t, o: nisa.tensor_scalar_reduce(
                dst=o[0], data=t[0], op0=act(op0), operand0=0.5, reduce_op=act(rop), reduce_res=o[1]
            ),
            [x],
            [((P, Fs), dtype, "sbuf"), ((P, 1), "float32", "sbuf")],
        )
    else:
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        def body(t):
            res = nl.ndarray((P, 1), nl.float32)
            return [
                nisa.tensor_scalar_reduce(data=t[0], op0=act(op0), operand0=0.5, reduce_op=act(rop), reduce_res=res),
                res,
            ]

        y, r = run_legacy(body, [x])
    want = F.ALU[op0](_f64(x), 0.5)
    F.assert_matches(y, want, dtype, np.abs(_f64(x)) + 0.5, f"tensor_scalar_reduce {op0}")
    F.assert_matches(r[:, 0], F.REDUCE[rop](want, axis=1), "float32", np.abs(want).sum(axis=1), f"reduce {rop}")


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    op0=st.sampled_from(["add", "multiply", "subtract", "maximum"]),
    op1=st.sampled_from(["add", "multiply", "subtract", "minimum"]),
    rev0=st.booleans(),
    rev1=st.booleans(),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_scalar_tensor_tensor(P, Fs, dtype, op0, op1, rev0, rev1, api, seed):
    x, y = _rand(seed, (P, Fs), dtype=dtype), _rand(seed + 1, (P, Fs), dtype=dtype)
    v = _rand(seed + 2, (P, 1))
    if api == "current":
        import nki.isa as nisa

        (got,) = run_current(
            lambda t, o: nisa.scalar_tensor_tensor(
                dst=o[0],
                data=t[0],
                op0=act(op0),
                operand0=t[2],
                op1=act(op1),
                operand1=t[1],
                reverse0=rev0,
                reverse1=rev1,
            ),
            [x, y, v],
            [((P, Fs), "float32", "sbuf")],
        )
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(
            lambda t: [
                nisa.scalar_tensor_tensor(
                    data=t[0],
                    op0=act(op0),
                    operand0=t[2],
                    op1=act(op1),
                    operand1=t[1],
                    reverse0=rev0,
                    reverse1=rev1,
                    dtype=np.float32,
                )
            ],
            [x, y, v],
        )
    want = F.scalar_tensor_tensor(_f64(x), op0, _f64(v), op1, _f64(y), rev0, rev1)
    F.assert_matches(got, want, "float32", 8 * (np.abs(_f64(x)) + 2) ** 2, f"scalar_tensor_tensor {op0},{op1}")


@SETTINGS
@given(
    P=partitions,
    A=st.integers(1, 9),
    B=st.integers(1, 40),
    dtype=float_dtypes,
    op=st.sampled_from(["add", "maximum", "minimum", "multiply"]),
    negate=st.booleans(),
    keepdims=st.booleans(),
    last_only=st.booleans(),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_tensor_reduce(P, A, B, dtype, op, negate, keepdims, last_only, api, seed):
    x = _rand(seed, (P, A, B), 0.8 if op == "multiply" else -2, 1.2 if op == "multiply" else 2, dtype)
    axes = (2,) if last_only else (1, 2)
    want = F.tensor_reduce(op, _f64(x), axes, negate, keepdims)
    shape = want.shape
    if api == "current":
        import nki.isa as nisa

        (got,) = run_current(
            lambda t, o: nisa.tensor_reduce(
                dst=o[0], op=act(op), data=t[0], axis=axes, negate=negate, keepdims=keepdims
            ),
            [x],
            [(shape, "float32", "sbuf")],
        )
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(
            lambda t: [nisa.tensor_reduce(act(op), t[0], axes, negate=negate, keepdims=keepdims, dtype=np.float32)], [x]
        )
    scale = F.tensor_reduce("add", np.abs(_f64(x)), axes, False, keepdims) if op == "add" else None
    F.assert_matches(got, want, "float32", scale, f"tensor_reduce {op}", transcendental=op == "multiply")


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    src=float_dtypes,
    dst=float_dtypes,
    engine=st.sampled_from(["vector", "gpsimd", "scalar"]),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_tensor_copy(P, Fs, src, dst, engine, api, seed):
    x = _rand(seed, (P, Fs), -50, 50, src)
    if api == "current":
        import nki.isa as nisa

        # the current page has no ScalarE tensor_copy on NeuronCore-v2 (trn1): ScalarE's on trn2
        (got,) = run_current(
            lambda t, o: nisa.tensor_copy(dst=o[0], src=t[0], engine=engine),
            [x],
            [((P, Fs), dst, "sbuf")],
            hw="trn2" if engine == "scalar" else "trn1",
        )
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(lambda t: [nisa.tensor_copy(t[0], dtype=FLOATS[dst], engine=engine)], [x])
    F.assert_matches(got, _f64(x), dst, what="tensor_copy")  # page('nki.isa.tensor_copy'): a copy, cast to dst


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_reciprocal(P, Fs, dtype, api, seed):
    x = _rand(seed, (P, Fs), 0.25, 4.0, dtype) * np.where(np.arange(Fs) % 2, 1, -1).astype(FLOATS[dtype])
    if api == "current":
        import nki.isa as nisa

        (got,) = run_current(lambda t, o: nisa.reciprocal(dst=o[0], data=t[0]), [x], [((P, Fs), dtype, "sbuf")])
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(lambda t: [nisa.reciprocal(t[0])], [x])
    F.assert_matches(got, 1.0 / _f64(x), dtype, what="reciprocal")  # page('nki.isa.reciprocal'): 1 / x


@SETTINGS
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    value=st.sampled_from([0.0, 1.0, -2.5, 3.14159, 1e4]),
    api=st.sampled_from(["current", "legacy"]),
)
def test_memset(P, Fs, dtype, value, api):
    """page('nki.isa.memset'): every element of dst holds value (rounded to dst's dtype)."""
    if api == "current":
        import nki.isa as nisa

        (got,) = run_current(
            lambda t, o: nisa.memset(dst=o[0], value=value), [np.zeros((1, 1), np.float32)], [((P, Fs), dtype, "sbuf")]
        )
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(lambda t: [nisa.memset((P, Fs), value, FLOATS[dtype])], [np.zeros((1, 1), np.float32)])
    F.assert_matches(got, np.full((P, Fs), value), dtype, what="memset")


@SETTINGS
@given(
    P=partitions,
    dims=st.lists(st.tuples(st.integers(-3, 5), st.integers(1, 6)), min_size=1, max_size=3),
    offset=st.integers(-50, 50),
    cm=st.integers(-3, 3),
)
def test_current_iota(P, dims, offset, cm):
    import nki.isa as nisa

    n = int(np.prod([d for _, d in dims]))
    pattern = [list(d) for d in dims]
    (got,) = run_current(
        lambda t, o: nisa.iota(dst=o[0], pattern=pattern, offset=offset, channel_multiplier=cm),
        [np.zeros((1, 1), np.float32)],
        [((P, n), "float32", "sbuf")],
    )
    F.assert_matches(got, F.iota(P, pattern, offset, cm), "float32", what=f"iota {pattern}")


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 64),
    a=st.sampled_from([-3, -1, 1, 2]),
    b=st.sampled_from([-2, 1, 3]),
    c=st.integers(-20, 20),
)
def test_legacy_iota(P, Fs, a, b, c):
    """Legacy form: the values of an affine nl.arange expression (page('nki.isa.iota', 'legacy'))."""
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    def body(t):
        i_p, i_f = nl.arange(P)[:, None], nl.arange(Fs)[None, :]
        return [nisa.iota(a * i_p + b * i_f + c, dtype=nl.float32)]

    (got,) = run_legacy(body, [np.zeros((1, 1), np.float32)])
    F.assert_matches(got, a * np.arange(P)[:, None] + b * np.arange(Fs)[None, :] + c + 0.0, "float32", what="iota")


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 200),
    dtype=float_dtypes,
    cmp=st.sampled_from(["greater_equal", "greater", "less", "less_equal", "equal", "not_equal"]),
    step=st.integers(-2, 2),
    cm=st.integers(-2, 2),
    offset=st.integers(-30, 30),
    seed=st.integers(0, 2**16),
)
def test_current_affine_select(P, Fs, dtype, cmp, step, cm, offset, seed):
    import nki.isa as nisa

    x = _rand(seed, (P, Fs), dtype=dtype)

    def body(t, o):
        nisa.affine_select(
            dst=o[0],
            pattern=[[step, Fs]],
            channel_multiplier=cm,
            on_true_tile=t[0],
            on_false_value=-9.0,
            cmp_op=act(cmp),
            offset=offset,
        )

    (got,) = run_current(body, [x], [((P, Fs), dtype, "sbuf")])
    F.assert_matches(got, F.affine_select(_f64(x), -9.0, [[step, Fs]], offset, cm, cmp), dtype, what="affine_select")


@SETTINGS
@given(P=partitions, Fs=st.integers(1, 200), dtype=float_dtypes, shift=st.integers(-40, 40), seed=st.integers(0, 2**16))
def test_legacy_affine_select(P, Fs, dtype, shift, seed):
    """Causal-style predicate i_p - i_f + shift >= 0 (page('nki.isa.affine_select', 'legacy'))."""
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    x = _rand(seed, (P, Fs), dtype=dtype)

    def body(t):
        i_p, i_f = nl.arange(P)[:, None], nl.arange(Fs)[None, :]
        return [nisa.affine_select(i_p - i_f + shift >= 0, t[0], -9.0)]

    (got,) = run_legacy(body, [x])
    want = np.where(np.arange(P)[:, None] - np.arange(Fs)[None, :] + shift >= 0, _f64(x), -9.0)
    F.assert_matches(got, want, dtype, what="legacy affine_select")


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 60),
    dtype=float_dtypes,
    op0=st.sampled_from(["multiply", "add", "subtract"]),
    op1=st.sampled_from(["add", "subtract", "maximum"]),
    rev0=st.booleans(),
    rev1=st.booleans(),
    vec_init=st.booleans(),
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_tensor_tensor_scan(P, Fs, dtype, op0, op1, rev0, rev1, vec_init, api, seed):
    d0, d1 = _rand(seed, (P, Fs), 0.5, 1.0, dtype), _rand(seed + 1, (P, Fs), -1, 1, dtype)
    init = _rand(seed + 2, (P, 1)) if vec_init else np.float32(0.5)
    inputs = [d0, d1] + ([init] if vec_init else [])
    if api == "current":
        import nki.isa as nisa

        (got,) = run_current(
            lambda t, o: nisa.tensor_tensor_scan(
                dst=o[0],
                data0=t[0],
                data1=t[1],
                initial=t[2] if vec_init else float(init),
                op0=act(op0),
                op1=act(op1),
                reverse0=rev0,
                reverse1=rev1,
            ),
            inputs,
            [((P, Fs), "float32", "sbuf")],
        )
    else:
        import neuronxcc.nki.isa as nisa

        (got,) = run_legacy(
            lambda t: [
                nisa.tensor_tensor_scan(
                    t[0],
                    t[1],
                    t[2] if vec_init else float(init),
                    act(op0),
                    act(op1),
                    reverse0=rev0,
                    reverse1=rev1,
                    dtype=np.float32,
                )
            ],
            inputs,
        )
    want = F.tensor_tensor_scan(_f64(d0), _f64(d1), _f64(init).reshape(-1), op0, op1, rev0, rev1)
    F.assert_matches(got, want, "float32", np.maximum(np.abs(want), 1.0) * Fs, f"scan {op0},{op1} rev {rev0},{rev1}")


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 512),
    tiles=st.integers(1, 3),
    dtype=float_dtypes,
    api=st.sampled_from(["current", "legacy"]),
    seed=st.integers(0, 2**16),
)
def test_bn_stats_and_bn_aggr(P, Fs, tiles, dtype, api, seed):
    """bn_stats of each <= 512-wide tile (even/odd records), bn_aggr of all -> mean, variance."""
    xs = [_rand(seed + i, (P, Fs), -3, 5, dtype) for i in range(tiles)]
    if api == "current":
        import nki.isa as nisa

        def body(t, o):
            for i in range(tiles):
                nisa.bn_stats(dst=o[0][:, 6 * i : 6 * (i + 1)], data=t[i])
            nisa.bn_aggr(dst=o[1], data=o[0])

        stats, mv = run_current(body, xs, [((P, 6 * tiles), "float32", "sbuf"), ((P, 2), "float32", "sbuf")])
    else:
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        def legacy_body(t):
            stats = nl.ndarray((P, 6 * tiles), nl.float32)
            for i in range(tiles):
                stats[:, 6 * i : 6 * (i + 1)] = nisa.bn_stats(t[i])
            return [stats, nisa.bn_aggr(stats)]

        stats, mv = run_legacy(legacy_body, xs)
    x_all = np.concatenate([_f64(x) for x in xs], axis=1)
    want_stats = np.concatenate([F.bn_stats(_f64(x)) for x in xs], axis=1)
    F.assert_matches(stats, want_stats, "float32", np.abs(want_stats) + 25 * Fs, "bn_stats", transcendental=True)
    F.assert_matches(mv, F.mean_var(x_all), "float32", 25.0, "bn_aggr", transcendental=True)


def test_current_mx_calls_and_dtypes_are_refused_by_name():
    """nc_matmul_mx / quantize_mx and the x4-packed MX dtypes (NeuronCore-v4) are not emulated:
    each is an NKIError naming it, never an approximation."""
    import nki.isa as nisa
    import nki.language as nl

    def k_dtype(a):
        nl.ndarray((32, 4), nl.float8_e5m2_x4, buffer=nl.sbuf)
        return a

    def k_mx(a):
        t = nl.ndarray((32, 4), nl.float32, buffer=nl.sbuf)
        p = nl.ndarray((4, 4), nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=p, stationary=t, moving=t, stationary_scale=t, moving_scale=t)
        return a

    def k_quant(a):
        t = nl.ndarray((32, 4), nl.float32, buffer=nl.sbuf)
        nisa.quantize_mx(dst=t, src=t, dst_scale=t)
        return a

    a = np.zeros((2, 2), np.float32)
    with pytest.raises(NKIError, match="float8_e5m2_x4"):
        axon.nki.run(k_dtype, a)
    with pytest.raises(NKIError, match="nc_matmul_mx"):
        axon.nki.run(k_mx, a)
    with pytest.raises(NKIError, match="quantize_mx"):
        axon.nki.run(k_quant, a)
    with pytest.raises(NKIError, match="float4_e2m1fn_x4"):
        axon.nki.run(lambda a: (nl.ndarray((32, 4), nl.float4_e2m1fn_x4, buffer=nl.sbuf), a)[1], a)


# ---- nki.language -------------------------------------------------------------------------------

LANG_ALU = sorted(n for n, v in vars(language).items() if isinstance(v, language.Op) and v.kind == "alu")
LANG_ACT = sorted(n for n, v in vars(language).items() if isinstance(v, language.Op) and v.kind == "act")
LANG_REDUCE = sorted(n for n, v in vars(language).items() if isinstance(v, language.Op) and v.kind == "reduce")


@pytest.mark.parametrize("name", LANG_ALU)
@PER_OP
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=float_dtypes,
    form=st.sampled_from(["tiles", "scalar_right", "scalar_left", "vector"]),
    seed=st.integers(0, 2**16),
)
def test_language_binary_ops(P, Fs, dtype, name, form, seed):
    """nl.add(x, y) etc. with NumPy broadcasting of a scalar or a [P, 1] vector (nki.language.<op>)."""
    import neuronxcc.nki.language as nl

    op = getattr(language, name).isa_name
    x = _alu_inputs(op, seed, (P, Fs), dtype)
    y = _alu_inputs(op, seed + 1, (P, 1) if form == "vector" else (P, Fs), dtype)
    s = 1.0 if op in ("equal", "not_equal", "greater_equal", "less_equal") else 1.5
    fn = getattr(nl, name)

    def body(t):
        if form == "tiles" or form == "vector":
            return [fn(t[0], t[1], dtype=nl.float32)]
        return [fn(t[0], s, dtype=nl.float32) if form == "scalar_right" else fn(s, t[0], dtype=nl.float32)]

    (got,) = run_legacy(body, [x, y] if form in ("tiles", "vector") else [x])
    xf, yf = _f64(x), _f64(y)
    want = {
        "tiles": lambda: F.ALU[op](xf, yf),
        "vector": lambda: F.ALU[op](xf, yf),
        "scalar_right": lambda: F.ALU[op](xf, s),
        "scalar_left": lambda: F.ALU[op](s, xf),
    }[form]()
    F.assert_matches(got, want, "float32", 8 * (np.abs(xf) + 4), f"nl.{name} {form}", transcendental=op == "power")


@pytest.mark.parametrize("name", LANG_ACT)
@PER_OP
@given(P=partitions, Fs=free_sizes, dtype=float_dtypes, seed=st.integers(0, 2**16), keep=st.integers(1, 128))
def test_language_unary_ops(P, Fs, dtype, name, seed, keep):
    import neuronxcc.nki.language as nl

    op = getattr(language, name).isa_name
    lo, hi = F.ACT_DOMAIN.get(op, (-3.0, 3.0))
    x = _rand(seed, (P, Fs), lo, hi, dtype)
    keep = min(keep, P)
    (got,) = run_legacy(lambda t: [getattr(nl, name)(t[0], mask=_mask(P, keep))], [x], keep=keep)
    F.assert_matches(
        got,
        F.ACT[op](_f64(x))[:keep],
        dtype,
        np.maximum(np.abs(_f64(x)), 1.0)[:keep],
        f"nl.{name} masked",
        transcendental=True,
    )


@pytest.mark.parametrize("name", LANG_REDUCE)
@PER_OP
@given(
    P=partitions,
    A=st.integers(1, 6),
    B=st.integers(1, 90),
    dtype=float_dtypes,
    keepdims=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_language_reductions(P, A, B, dtype, name, keepdims, seed):
    import neuronxcc.nki.language as nl

    op = getattr(language, name).isa_name
    x = _rand(seed, (P, A, B), 0.9 if op == "multiply" else -2, 1.1 if op == "multiply" else 2, dtype)
    (got,) = run_legacy(lambda t: [getattr(nl, name)(t[0], axis=(1, 2), keepdims=keepdims, dtype=nl.float32)], [x])
    want = F.tensor_reduce(op, _f64(x), (1, 2), keepdims=keepdims)
    F.assert_matches(
        got,
        want,
        "float32",
        np.abs(_f64(x)).sum(axis=(1, 2), keepdims=keepdims) if op == "add" else None,
        f"nl.{name}",
        transcendental=True,
    )


LANG_BITVEC = {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift,
    "right_shift": np.right_shift,
}


@pytest.mark.parametrize("name", sorted(LANG_BITVEC))
@PER_OP
@given(
    P=partitions,
    Fs=free_sizes,
    dtype=st.sampled_from(["int32", "uint16", "int8"]),
    form=st.sampled_from(["tiles", "scalar_right", "vector"]),
    seed=st.integers(0, 2**16),
)
def test_language_bitvec_ops(P, Fs, dtype, name, form, seed):
    """nl.bitwise_and(x, y) etc. on integer tiles: bit patterns, no fp32 cast (nki.language.<op>;
    Supported Math Operators for NKI ISA: bitvec operators run on VectorE)."""
    import neuronxcc.nki.language as nl

    rng = np.random.default_rng(seed)
    shift = "shift" in name
    x = rng.integers(0, 16 if shift else 2**7, (P, Fs)).astype(dtype)  # shifts stay inside int8
    y = rng.integers(0, 3 if shift else 2**7, (P, 1) if form == "vector" else (P, Fs)).astype(dtype)
    fn = getattr(nl, name)
    if form == "scalar_right":
        (got,) = run_legacy(lambda t: [fn(t[0], 2 if shift else 3)], [x])
        want = LANG_BITVEC[name](x, np.array(2 if shift else 3, dtype))
    else:
        (got,) = run_legacy(lambda t: [fn(t[0], t[1])], [x, y])
        want = LANG_BITVEC[name](x, y)
    np.testing.assert_array_equal(got, want.astype(dtype))


@SETTINGS
@given(P=partitions, Fs=free_sizes, seed=st.integers(0, 2**16))
def test_language_invert(P, Fs, seed):
    """nl.invert(x): bitwise NOT of an integer tile (nki.language.invert, numpy.invert)."""
    import neuronxcc.nki.language as nl

    x = np.random.default_rng(seed).integers(-(2**20), 2**20, (P, Fs)).astype(np.int32)
    (got,) = run_legacy(lambda t: [nl.invert(t[0])], [x])
    np.testing.assert_array_equal(got, np.invert(x))


@SETTINGS
@given(P=partitions, Fs=free_sizes, dtype=float_dtypes, seed=st.integers(0, 2**16))
def test_language_logical_not(P, Fs, dtype, seed):
    """nl.logical_not(x): 1 where x is 0 (false), else 0, in x's dtype (nki.language.logical_not,
    numpy.logical_not; "inputs should be boolean-like")."""
    import neuronxcc.nki.language as nl

    x = np.round(_rand(seed, (P, Fs), -1.0, 1.0, dtype)).astype(dtype)
    (got,) = run_legacy(lambda t: [nl.logical_not(t[0])], [x])
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(_f64(got), np.logical_not(_f64(x)).astype(np.float64))


@SETTINGS
@given(P=partitions, Fs=free_sizes, scale=st.sampled_from([1.0, 60.0]), seed=st.integers(0, 2**16))
def test_language_softmax(P, Fs, scale, seed):
    """nl.softmax(x, axis=1) = exp(x - max) / sum(exp(x - max)) (nki.language.softmax); large inputs
    overflow exp unless the max is subtracted first, as the hardware sequence does."""
    import neuronxcc.nki.language as nl

    x = _rand(seed, (P, Fs), -2, 2) * np.float32(scale)
    (got,) = run_legacy(lambda t: [nl.softmax(t[0], axis=1)], [x])
    e = np.exp(_f64(x) - _f64(x).max(axis=1, keepdims=True))
    F.assert_matches(got, e / e.sum(axis=1, keepdims=True), "float32", 1.0, "nl.softmax", transcendental=True)


@SETTINGS
@given(P=partitions, Fs=free_sizes, dtype=float_dtypes, seed=st.integers(0, 2**16))
def test_language_mean_var(P, Fs, dtype, seed):
    """nl.mean (nki.language.mean) and nl.var (nki.language.var: population variance) of the free axis."""
    import neuronxcc.nki.language as nl

    x = _rand(seed, (P, Fs), -2, 3, dtype)
    mean, var = run_legacy(
        lambda t: [nl.mean(t[0], axis=1, keepdims=True, dtype=nl.float32), nl.var(t[0], axis=1, dtype=nl.float32)], [x]
    )
    F.assert_matches(mean[:, 0], _f64(x).mean(axis=1), "float32", 3.0, "nl.mean", transcendental=True)
    # nl.var drops the reduced axis (nki.language.var), so its result is [P]
    F.assert_matches(var, _f64(x).var(axis=1), "float32", 9.0, "nl.var", transcendental=True)


@SETTINGS
@given(
    M=st.integers(1, 128),
    K=st.integers(1, 128),
    N=free_sizes,
    dtype=float_dtypes,
    transpose_x=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_language_matmul_and_transpose(M, K, N, dtype, transpose_x, seed):
    """nl.matmul(x, y, transpose_x) = x @ y, x given as [K, M] when transpose_x (nki.language.matmul);
    nl.transpose swaps the two axes (nki.language.transpose)."""
    import neuronxcc.nki.language as nl

    x = _rand(seed, (K, M) if transpose_x else (M, K), dtype=dtype)
    y = _rand(seed + 1, (K, N), dtype=dtype)
    mm, tr = run_legacy(
        lambda t: [nl.copy(nl.matmul(t[0], t[1], transpose_x=transpose_x)), nl.copy(nl.transpose(t[0]))], [x, y]
    )
    xm = _f64(x).T if transpose_x else _f64(x)
    F.assert_matches(mm, xm @ _f64(y), "float32", np.abs(xm) @ np.abs(_f64(y)), "nl.matmul")
    F.assert_matches(tr, _f64(x).T, "float32", what="nl.transpose")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the emulator's y + c * (x - y) trace
@SETTINGS
@given(P=partitions, Fs=free_sizes, dtype=float_dtypes, seed=st.integers(0, 2**16))
def test_language_where_and_broadcast(P, Fs, dtype, seed):
    """nl.where(c, x, y) (nki.language.where) and tile.broadcast_to / nl.broadcast_to of [1, F] and [P, 1]
    (nki.language.broadcast_to)."""
    import neuronxcc.nki.language as nl

    x, y = _rand(seed, (P, Fs), dtype=dtype), _rand(seed + 1, (P, Fs), dtype=dtype)
    y[:, ::3] = -np.inf  # a causal mask's fill: a select must not compute inf - inf
    c = (_rand(seed + 2, (P, Fs)) > 0).astype(np.float32)
    row, col = _rand(seed + 3, (1, Fs), dtype=dtype), _rand(seed + 4, (P, 1), dtype=dtype)
    w, br, bc = run_legacy(
        lambda t: [
            nl.where(t[2], t[0], t[1]),
            nl.copy(nl.broadcast_to(t[3], (P, Fs))),
            nl.copy(t[4].broadcast_to((P, Fs))),
        ],
        [x, y, c, row, col],
    )
    F.assert_matches(w, np.where(c != 0, _f64(x), _f64(y)), dtype, what="nl.where")
    F.assert_matches(br, np.broadcast_to(_f64(row), (P, Fs)), dtype, what="broadcast_to rows")
    F.assert_matches(bc, np.broadcast_to(_f64(col), (P, Fs)), dtype, what="broadcast_to cols")


@SETTINGS
@given(
    P=partitions,
    Fs=st.integers(1, 100),
    n=st.integers(1, 4),
    op=st.sampled_from(["add", "maximum", "multiply"]),
    seed=st.integers(0, 2**16),
)
def test_language_loop_reduce(P, Fs, n, op, seed):
    """nl.loop_reduce(x, op, loop_indices) folds x over the loop's iterations (nki.language.loop_reduce)."""
    import neuronxcc.nki.language as nl

    x = _rand(seed, (n, P, Fs), 0.5, 1.5)

    def k(a):
        red = None
        for i in nl.affine_range(n):
            red = nl.loop_reduce(nl.load(a[i]), op=getattr(nl, op), loop_indices=[i])
        out = nl.ndarray((P, Fs), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=red)
        return out

    want = {"add": np.sum, "maximum": np.max, "multiply": np.prod}[op](_f64(x), axis=0)
    F.assert_matches(axon.nki.run(k, x), want, "float32", np.abs(_f64(x)).sum(axis=0), f"loop_reduce {op}")


@SETTINGS
@given(P=partitions, Fs=free_sizes, dtype=float_dtypes, value=st.floats(-100, 100, width=32), seed=st.integers(0, 99))
def test_language_constructors(P, Fs, dtype, value, seed):
    """nl.zeros/ones/full/zeros_like/ones_like fill (nki.language.<name>); shared_constant holds a NumPy
    constant and shared_identity_matrix(n) the identity (nki.language.shared_constant,
    shared_identity_matrix); ndarray/empty_like only allocate (their content is written here)."""
    import neuronxcc.nki.language as nl

    const = _rand(seed, (P, Fs), dtype=dtype)

    def k(a):
        outs = []
        for t in (
            nl.zeros((P, Fs), FLOATS[dtype]),
            nl.ones((P, Fs), FLOATS[dtype]),
            nl.full((P, Fs), float(value), FLOATS[dtype]),
            nl.zeros_like(nl.load(a)),
            nl.ones_like(nl.load(a)),
            nl.load(nl.shared_constant(const)),
            nl.load(nl.shared_identity_matrix(P)),
        ):
            o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
            nl.store(o, value=t)
            outs.append(o)
        e = nl.empty_like(nl.load(a))
        e[...] = nl.load(a)
        d = nl.ndarray((P, Fs), a.dtype, buffer=nl.sbuf)
        d[...] = nl.load(a)
        for t in (e, d):
            o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
            nl.store(o, value=t)
            outs.append(o)
        return tuple(outs)

    z, o, f, zl, ol, c, eye, e, d = axon.nki.run(k, const)
    F.assert_matches(z, np.zeros((P, Fs)), dtype, what="nl.zeros")
    F.assert_matches(o, np.ones((P, Fs)), dtype, what="nl.ones")
    F.assert_matches(f, np.full((P, Fs), float(value)), dtype, what="nl.full")
    F.assert_matches(zl, np.zeros((P, Fs)), dtype, what="nl.zeros_like")
    F.assert_matches(ol, np.ones((P, Fs)), dtype, what="nl.ones_like")
    F.assert_matches(c, _f64(const), dtype, what="nl.shared_constant")
    F.assert_matches(eye, np.eye(P), "float32", what="nl.shared_identity_matrix")
    F.assert_matches(e, _f64(const), dtype, what="nl.empty_like")
    F.assert_matches(d, _f64(const), dtype, what="nl.ndarray")


@SETTINGS
@given(P=partitions, Fs=free_sizes, n=st.integers(1, 3), seed=st.integers(0, 99))
def test_language_loops_and_programs(P, Fs, n, seed):
    """affine/sequential/static/dynamic_range iterate like range (nki.language.<name>_range); an SPMD
    launch kernel[g] runs program_id(0) = 0..g-1 of num_programs() = g (nki.language.program_id)."""
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    x = _rand(seed, (n * P, Fs))

    @nki.jit
    def k(a):
        out = nl.ndarray((n * P, Fs), nl.float32, buffer=nl.shared_hbm)
        pid, g = nl.program_id(0), nl.num_programs(0)
        for rng in (nl.affine_range, nl.sequential_range, nl.static_range, nl.dynamic_range):
            for i in rng(n):
                if rng is nl.affine_range and i % g == pid:
                    t = nl.load(a[nl.ds(i * P, P), :])
                    nl.device_print("t", t)
                    nl.store(out[i * P + nl.arange(P)[:, None], nl.arange(Fs)[None, :]], value=nl.multiply(t, 2.0))
        return out

    F.assert_matches(k[2](x), 2 * _f64(x), "float32", what="loops and SPMD programs")
    F.assert_matches(k[nl.spmd_dim(1, nl.nc(2))](x), 2 * _f64(x), "float32", what="spmd_dim(1, nc(2)) launch")

    @nki.jit
    def dims(a):
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.full((1, 1), float(10 * nl.program_ndim() + nl.num_programs(1)), nl.float32)
        nl.store(out, value=t)
        return out

    assert dims[2, 3](x[:1, :1])[0, 0] == 23  # nl.program_ndim: the launch grid's rank


@SETTINGS
@given(Fs=st.integers(1, 16), lo=st.integers(0, 4), step=st.integers(1, 3), count=st.integers(0, 4))
def test_language_compiled_loops(Fs, lo, step, count):
    """nl.fori_loop(lower, upper, body_fun, step) calls body_fun(i) for i in range(lower, upper, step);
    nl.while_loop(init, body_fun) repeats r = body_fun(r) while r != 0 (nki.language.fori_loop,
    nki.language.while_loop)."""
    import nki.isa as nisa
    import nki.language as nl

    x = _rand(lo + Fs, (8, Fs))

    def k(a):
        out = nl.ndarray((8, Fs), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, Fs), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nl.fori_loop(
            lo,
            Fs,
            lambda i: nisa.tensor_scalar(dst=t[:, i : i + 1], data=t[:, i : i + 1], op0=nl.multiply, operand0=3.0),
            step=step,
        )

        def body(r):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
            return r - 1

        nl.while_loop(count, body)
        nisa.dma_copy(dst=out, src=t)
        return out

    want = _f64(x).copy()
    want[:, lo:Fs:step] *= 3
    F.assert_matches(axon.nki.run(k, x), want + count, "float32", np.abs(want) + count, "fori_loop and while_loop")


@SETTINGS
@given(n=st.integers(1, 200), seed=st.integers(0, 99))
def test_language_static_cast(n, seed):
    """nl.static_cast(array, dtype) casts host arrays; bfloat16 rounds to nearest even."""
    import neuronxcc.nki.language as nl

    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 100
    F.assert_matches(nl.static_cast(x, nl.bfloat16), F.round_to_bfloat16(x), "float32", what="static_cast bf16")
    F.assert_matches(nl.static_cast(x, nl.float16), _f64(np.float16(x)), "float32", what="static_cast fp16")


# ---- enumeration: nothing implemented goes untested ---------------------------------------------

# nki.language names that are not calls on data: index builders, buffer/dtype markers, and the
# operator class; each is exercised inside the kernels above.
LANG_NOT_CALLS = {
    "arange",
    "ds",
    "mgrid",
    "par_dim",
    "Op",
    "Buffer",
    "DynSlice",
    "IndexExpr",
    "Predicate",
    "View",
    "as_dtype",
    "SimpleNamespace",
    "active",
    "maybe_active",
}
# nki.language calls each covered by a test above (beyond the Op families).
LANG_COVERED = {
    "load": test_dma_copy_load_store_and_casts,
    "store": test_dma_copy_load_store_and_casts,
    "load_transpose2d": test_dma_transpose,
    "mean": test_language_mean_var,
    "var": test_language_mean_var,
    "matmul": test_language_matmul_and_transpose,
    "transpose": test_language_matmul_and_transpose,
    "where": test_language_where_and_broadcast,
    "broadcast_to": test_language_where_and_broadcast,
    "loop_reduce": test_language_loop_reduce,
    "ndarray": test_language_constructors,
    "zeros": test_language_constructors,
    "ones": test_language_constructors,
    "full": test_language_constructors,
    "zeros_like": test_language_constructors,
    "ones_like": test_language_constructors,
    "empty_like": test_language_constructors,
    "shared_constant": test_language_constructors,
    "shared_identity_matrix": test_language_constructors,
    "affine_range": test_language_loops_and_programs,
    "sequential_range": test_language_loops_and_programs,
    "static_range": test_language_loops_and_programs,
    "dynamic_range": test_language_loops_and_programs,
    "fori_loop": test_language_compiled_loops,
    "while_loop": test_language_compiled_loops,
    "program_id": test_language_loops_and_programs,
    "num_programs": test_language_loops_and_programs,
    "device_print": test_language_loops_and_programs,
    "program_ndim": test_language_loops_and_programs,
    "nc": test_language_loops_and_programs,
    "spmd_dim": test_language_loops_and_programs,
    "static_cast": test_language_static_cast,
    "invert": test_language_invert,
    "logical_not": test_language_logical_not,
    "softmax": test_language_softmax,
}
# Instructions whose test is named differently from test_{api}_{name} / test_{name}.
ISA_COVERED = {
    "dma_copy": test_dma_copy_load_store_and_casts,
    "bn_stats": test_bn_stats_and_bn_aggr,
    "bn_aggr": test_bn_stats_and_bn_aggr,
    "activation_reduce": test_activation,
    "nc_matmul_mx": test_current_mx_calls_and_dtypes_are_refused_by_name,
    "quantize_mx": test_current_mx_calls_and_dtypes_are_refused_by_name,
}
LEGACY_NOT_INSTRUCTIONS = {"assign", "accumulate"}  # `t[...] = v` / `t += v`, exercised by the legacy kernels


def implemented_calls() -> dict[str, set[str]]:
    """The emulator's API tables: public functions of nki.isa (both generations) and nki.language."""
    isa_modules = {current_isa.__name__, legacy_isa.__name__} | {
        f"axon.nki.isa_{m}" for m in ("base", "tensor", "vector", "misc")
    }

    def funcs(mod: types.ModuleType) -> set[str]:
        return {
            n
            for n, v in vars(mod).items()
            if not n.startswith("_") and inspect.isfunction(v) and v.__module__ in isa_modules
        }

    lang = {
        n
        for n, v in vars(language).items()
        if not n.startswith("_")
        and (
            isinstance(v, language.Op)
            or (inspect.isfunction(v) and v.__module__ in (language.__name__, "axon.nki.lang_tensors"))
        )
    }
    return {
        "current": funcs(current_isa),
        "legacy": funcs(legacy_isa) - LEGACY_NOT_INSTRUCTIONS,
        "language": lang - LANG_NOT_CALLS,
    }


def _test_for(api: str, name: str):
    g = globals()
    if api == "language":
        op = getattr(language, name)
        if isinstance(op, language.Op):
            family = {
                "alu": (test_language_binary_ops, F.ALU),
                "act": (test_language_unary_ops, F.ACT),
                "reduce": (test_language_reductions, F.REDUCE),
                "bitvec": (test_language_bitvec_ops, LANG_BITVEC),
            }[op.kind]
            return family[0] if op.isa_name in family[1] else None  # a formula must exist for the op
        return LANG_COVERED.get(name)
    return ISA_COVERED.get(name) or g.get(f"test_{api}_{name}") or g.get(f"test_{name}")


def test_every_implemented_call_has_a_differential_test():
    calls = implemented_calls()
    missing = sorted(f"{api}:{name}" for api, names in calls.items() for name in names if _test_for(api, name) is None)
    assert not missing, f"implemented NKI calls without a differential test and formula: {missing}"
    # the exemptions name things that exist (so they cannot hide a renamed call)
    assert LANG_NOT_CALLS - {"Op"} <= set(vars(language)) | {"as_dtype", "SimpleNamespace"}
    for family, table in ((LANG_ALU, F.ALU), (LANG_ACT, F.ACT)):
        assert {getattr(language, n).isa_name for n in family} <= set(table)


def test_coverage_counts():
    """The covered/implemented figures the report quotes."""
    calls = implemented_calls()
    counts = {api: (sum(_test_for(api, n) is not None for n in names), len(names)) for api, names in calls.items()}
    assert all(c == n for c, n in counts.values()), counts
    assert counts["current"][1] >= 21 and counts["legacy"][1] >= 19 and counts["language"][1] >= 60


# ---- regressions: each discrepancy found against the reference pages ------------------------------


def test_current_nc_matmul_transpose_mode_is_still_a_matmul():
    """is_transpose marks the identity-moving matmul (page('nki.isa.nc_matmul'): on NeuronCore-v2 only
    a profiler hint); with another moving it computes stationary.T @ moving (the emulator used to
    return stationary.T whatever moving held)."""
    import nki.isa as nisa

    s, m = _rand(6, (32, 16)), _rand(7, (32, 24))
    (got,) = run_current(
        lambda t, o: nisa.nc_matmul(dst=o[0], stationary=t[0], moving=t[1], is_transpose=True),
        [s, m],
        [((16, 24), "float32", "psum")],
    )
    F.assert_matches(got, F.matmul(s, m), "float32", np.abs(_f64(s)).T @ np.abs(_f64(m)), "is_transpose matmul")


def test_current_refusals_name_the_call():
    """What the emulator cannot run faithfully is an NKIError naming it: FP8 double-row matmul (its
    [K, 2, M] layout), a max/min reduction on ScalarE's add-only reduce registers, and the documented
    nki.isa instructions it does not implement."""
    import nki.isa as nisa
    import nki.language as nl

    def double_row(t, o):
        nisa.nc_matmul(dst=o[0], stationary=t[0], moving=t[0], perf_mode=nisa.matmul_perf_mode.double_row)

    def max_regs(t, o):
        nisa.activation(dst=o[0], op=nl.exp, data=t[0], reduce_op=nl.max, reduce_res=o[1])

    def bf16_psum(t, o):
        nisa.nc_matmul(dst=o[0], stationary=t[0], moving=t[0])

    x = _rand(8, (8, 8))
    with pytest.raises(NKIError, match="nc_matmul dst dtype"):  # float32 dst on NeuronCore-v2/v3
        run_current(bf16_psum, [x], [((8, 8), "bfloat16", "psum")])
    with pytest.raises(NKIError, match="perf_mode"):
        run_current(double_row, [x], [((8, 8), "float32", "psum")])
    with pytest.raises(NKIError, match="nl.add only"):
        run_current(max_regs, [x], [((8, 8), "float32", "sbuf"), ((8, 1), "float32", "sbuf")])
    for name in current_isa.NOT_EMULATED:
        with pytest.raises(NKIError, match=f"nki.isa.{name} is not emulated"):
            getattr(nisa, name)


def test_legacy_activation_forwards_reduce_cmd():
    """The legacy page documents reduce_cmd too (page('nki.isa.activation', 'legacy')); the shim
    dropped it, so `reduce_cmd=reduce` silently restarted the sum."""
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    x, y = _rand(9, (16, 12)), _rand(10, (16, 12))

    def body(t):
        res = nl.ndarray((16, 1), nl.float32)
        nisa.activation(op=nl.exp, data=t[0], reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(op=nl.exp, data=t[1], reduce_op=nl.add, reduce_res=res, reduce_cmd=nisa.reduce_cmd.reduce)
        return [res]

    (res,) = run_legacy(body, [x, y])
    F.assert_matches(
        res[:, 0],
        np.exp(_f64(x)).sum(1) + np.exp(_f64(y)).sum(1),
        "float32",
        what="legacy reduce_cmd",
        transcendental=True,
    )


def test_current_affine_select_positional_form():
    """The documented order: affine_select(dst, pattern, offset, channel_multiplier, on_true_tile,
    on_false_value, cmp_op) - a causal mask p - f >= 0."""
    import nki.isa as nisa
    import nki.language as nl

    x = _rand(11, (16, 16))
    (got,) = run_current(
        lambda t, o: nisa.affine_select(o[0], [[-1, 16]], 0, 1, t[0], -9.0, nl.greater_equal),
        [x],
        [((16, 16), "float32", "sbuf")],
    )
    F.assert_matches(got, np.where(np.tril(np.ones((16, 16))) != 0, _f64(x), -9.0), "float32", what="causal")


@SETTINGS
@given(P=st.integers(1, 32), A=st.integers(1, 4), B=st.integers(1, 8), seed=st.integers(0, 99))
def test_current_nc_transpose_flattens_free_axes(P, A, B, seed):
    """page('nki.isa.nc_transpose'): several free axes are flattened, then transposed (the emulator
    rejected every tile that was not 2-D)."""
    import nki.isa as nisa

    x = _rand(seed, (P, A, B))
    (got,) = run_current(
        lambda t, o: nisa.nc_transpose(dst=o[0], data=t[0], engine=nisa.vector_engine),
        [x],
        [((A * B, P), "float32", "sbuf")],
    )
    F.assert_matches(got, F.transpose(_f64(x)), "float32", what="flattened transpose")


def test_current_nc_matmul_group_ends_when_psum_is_evicted():
    """A PSUM tile reused for successive output tiles (matmul, evict, matmul, evict, no accumulate
    flag): an accumulation group lasts until the tile is evicted (page('nki.isa.nc_matmul'),
    "Accumulation mode"), so each evicted tile is its own product, and a K loop after an eviction
    sums only its own tiles."""
    import nki.isa as nisa

    a, b, c, d = (_rand(20 + i, (64, 48)) for i in range(4))

    def body(t, o):
        nisa.nc_matmul(dst=o[0], stationary=t[0], moving=t[1])
        nisa.tensor_copy(dst=o[1], src=o[0])  # evict tile 1
        nisa.nc_matmul(dst=o[0], stationary=t[2], moving=t[3])  # tile 2, K tile 1: overwrites
        nisa.nc_matmul(dst=o[0], stationary=t[0], moving=t[3])  # tile 2, K tile 2: accumulates

    p, first = run_current(body, [a, b, c, d], [((48, 48), "float32", "psum"), ((48, 48), "float32", "sbuf")])
    F.assert_matches(first, F.matmul(a, b), "float32", np.abs(_f64(a)).T @ np.abs(_f64(b)), "tile 1")
    want = F.matmul(c, d) + F.matmul(a, d)
    F.assert_matches(
        p, want, "float32", np.abs(_f64(c)).T @ np.abs(_f64(d)) + np.abs(_f64(a)).T @ np.abs(_f64(d)), "tile 2"
    )
