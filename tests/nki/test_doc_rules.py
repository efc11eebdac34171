"""Rules and calls of the nki.isa / nki.language reference pages, in both API generations: PSUM
operand limits, tensor_reduce axes, affine_select's argument order, nl.where with a number,
bitvec operators, nl.softmax, and the operand-shape rules of activation and bn_aggr."""

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError

X = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
XI = np.random.default_rng(1).integers(-50, 50, (16, 8)).astype(np.int32)


def _psum_pair(a):
    """a copied into two PSUM tiles (current API)."""
    import nki.isa as nisa
    import nki.language as nl

    t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    p1 = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
    p2 = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=p1, src=t)
    nisa.tensor_copy(dst=p2, src=t)
    return t, p1, p2


def _stored(y):
    import nki.isa as nisa
    import nki.language as nl

    out = nl.ndarray(y.shape, y.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=y)
    return out


# ---- F1: tensor_tensor_scan / scalar_tensor_tensor may read at most one input from PSUM --------


def _scan(both_psum):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t, p1, p2 = _psum_pair(a)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=y, data0=p1, data1=p2 if both_psum else t, initial=0.0, op0=nl.add, op1=nl.add)
        return _stored(y)

    return k


def _stt(both_psum):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t, p1, p2 = _psum_pair(a)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(
            dst=y, data=p1, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=p2 if both_psum else t
        )
        return _stored(y)

    return k


def _legacy_psum(which):
    def k(a):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        t = nl.load(a)
        p1 = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
        p2 = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
        p1[...] = nl.copy(t)
        p2[...] = nl.copy(t)
        if which == "scan":
            y = nisa.tensor_tensor_scan(p1, p2, 0.0, nl.add, nl.add)
        else:
            y = nisa.scalar_tensor_tensor(data=p1, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=p2)
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=y)
        return out

    return k


@pytest.mark.parametrize(
    "make,opcode", [(_scan, "tensor_tensor_scan"), (_stt, "scalar_tensor_tensor")], ids=["scan", "stt"]
)
def test_two_psum_inputs_are_refused(make, opcode):
    with pytest.raises(NKIError, match=f"{opcode} inputs both in PSUM"):
        axon.nki.run(make(True), X)
    axon.nki.run(make(False), X)  # one input in PSUM is fine


@pytest.mark.parametrize("which,opcode", [("scan", "tensor_tensor_scan"), ("stt", "scalar_tensor_tensor")])
def test_two_psum_inputs_are_refused_legacy(which, opcode):
    with pytest.raises(NKIError, match=f"{opcode} inputs both in PSUM"):
        axon.nki.run(_legacy_psum(which), X)


# ---- F2: tensor_reduce reduces the last contiguous free axes ---------------------------------


def _reduce(axis, out_shape):
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        y = nl.ndarray(out_shape, nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=y, op=nl.add, data=t, axis=axis)
        return _stored(y)

    return k


def test_tensor_reduce_axes_end_at_the_last_axis():
    x = np.random.default_rng(2).standard_normal((16, 3, 5)).astype(np.float32)
    with pytest.raises(NKIError, match="reduce axes.*last contiguous free axes"):
        axon.nki.run(_reduce(1, (16, 5)), x)
    np.testing.assert_allclose(axon.nki.run(_reduce(2, (16, 3)), x), x.sum(2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(axon.nki.run(_reduce((1, 2), (16,)), x), x.sum((1, 2)), rtol=1e-5, atol=1e-5)


def test_legacy_tensor_reduce_axes_are_consecutive():
    def k(a):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        out = nl.ndarray((a.shape[0], a.shape[2]), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_reduce(nl.add, nl.load(a), axis=[1, 3]))
        return out

    with pytest.raises(NKIError, match="reduce axes"):
        axon.nki.run(k, np.ones((4, 2, 3, 5), np.float32))


# ---- F3: affine_select's documented positional order -----------------------------------------


def test_affine_select_documented_positional_order():
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        y = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        # (dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op): p - f + 2 >= 0
        nisa.affine_select(y, [[-1, a.shape[1]]], 2, 1, t, -9.0, nl.greater_equal)
        return _stored(y)

    p, f = np.arange(16)[:, None], np.arange(8)[None, :]
    np.testing.assert_array_equal(axon.nki.run(k, X), np.where(p - f + 2 >= 0, X, -9.0))


# ---- F4: nl.where with a number for y --------------------------------------------------------


def test_where_takes_a_number_for_y():
    def k(c, x):
        import neuronxcc.nki.language as nl

        out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.where(nl.load(c), nl.load(x), -3.0))
        return out

    c = (X > 0).astype(np.float32)
    np.testing.assert_array_equal(axon.nki.run(k, c, X), np.where(c != 0, X, -3.0))


# ---- F5: bitvec operators --------------------------------------------------------------------

BITVEC = [
    ("bitwise_and", lambda a, b: a & b),
    ("bitwise_or", lambda a, b: a | b),
    ("bitwise_xor", lambda a, b: a ^ b),
    ("left_shift", lambda a, b: a << b),
    ("right_shift", lambda a, b: a >> b),
]


@pytest.mark.parametrize("name,ref", BITVEC, ids=[n for n, _ in BITVEC])
def test_bitvec_ops_current(name, ref):
    def k(x):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(x.shape, nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        y = nl.ndarray(x.shape, nl.int32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=t, op0=getattr(nl, name), operand0=3)
        z = nl.ndarray(x.shape, nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=y, data2=t, op=getattr(nl, name))
        return _stored(z)

    x = (np.abs(XI) % 8 + 1).astype(np.int32) if "shift" in name else XI
    np.testing.assert_array_equal(axon.nki.run(k, x), ref(ref(x, np.int32(3)), x))


def test_bitvec_ops_legacy_and_invert():
    def k(x):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        t = nl.load(x)
        a = nisa.tensor_scalar(t, np.bitwise_and, 6)
        b = nl.bitwise_xor(a, t)
        out = nl.ndarray(x.shape, nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.invert(b))
        return out

    np.testing.assert_array_equal(axon.nki.run(k, XI), ~((XI & 6) ^ XI))


def test_bitvec_ops_run_on_the_vector_engine_only():
    def k(x):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(x.shape, nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.bitwise_and, operand0=6, engine=nisa.gpsimd_engine)
        return _stored(t)

    with pytest.raises(NKIError, match="bitvec operator engine"):
        axon.nki.run(k, XI)


# ---- F6: nl.softmax --------------------------------------------------------------------------


def _softmax_current(x):
    import nki.isa as nisa
    import nki.language as nl

    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return _stored(nl.softmax(t, axis=1))


def _softmax_legacy(x):
    import neuronxcc.nki.language as nl

    out = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.softmax(nl.load(x), axis=1))
    return out


@pytest.mark.parametrize("k", [_softmax_current, _softmax_legacy], ids=["current", "legacy"])
def test_softmax(k):
    x = X * 40.0  # exp overflows fp32 unless the max is subtracted
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(axon.nki.run(k, x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


# ---- F7: activation bias/scale and bn_aggr operand shapes ------------------------------------


def test_activation_bias_is_one_element_per_partition():
    def k(x, b):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        bt = nl.ndarray(b.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=bt, src=b)
        nisa.activation(dst=t, op=nl.exp, data=t, bias=bt)
        return _stored(t)

    with pytest.raises(NKIError, match=r"activation bias shape: .*one element per partition"):
        axon.nki.run(k, X, X)
    b = X[:, :1].copy()
    np.testing.assert_allclose(axon.nki.run(k, X, b), np.exp(X + b), rtol=1e-6)


def test_bn_aggr_takes_a_multiple_of_3_elements():
    def k(x):
        import nki.isa as nisa
        import nki.language as nl

        t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        mv = nl.ndarray((x.shape[0], 2), nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=t[:, 0:7])
        return _stored(mv)

    with pytest.raises(NKIError, match="bn_aggr data: .*not a multiple of 3"):
        axon.nki.run(k, X)
