"""Seventh round of reference-page rules: loop-carried dependencies in nl.affine_range loops
(nki.language.affine_range: iterations independent except associative reductions), dma_copy's
`dst = src` of equal shapes, nl.logical_* and nl.mod/fmod (`%`), abs() of a tile."""

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError
from tests.nki.test_doc_rules6 import _stored

A = (np.arange(128 * 8, dtype=np.float32).reshape(128, 8) % 7) / 10
CARRIED = (
    r"loop-carried dependency in nl\.affine_range: .* affine_range loop at test_doc_rules7\.py:\d+"
    r".*nl\.sequential_range"
)


def _chain(loop):
    def k(a):
        import neuronxcc.nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        for _ in getattr(nl, loop)(3):
            t = nl.exp(t)  # t = f(t): each iteration reads what the one before produced
        nl.store(out, value=t)
        return out

    return k


def test_a_value_carried_through_an_affine_range_is_refused_and_runs_sequentially():
    with pytest.raises(NKIError, match=CARRIED):
        axon.nki.run(_chain("affine_range"), A)
    np.testing.assert_allclose(axon.nki.run(_chain("sequential_range"), A), np.exp(np.exp(np.exp(A))), rtol=1e-5)


def test_a_current_api_kernel_unrolls_its_affine_range_in_order():
    # nki 0.x unrolls every loop but dynamic_range (NKI.md): a value carried across is its data flow
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        for _ in nl.affine_range(3):
            nisa.activation(dst=t, op=nl.exp, data=t)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_allclose(axon.nki.run(k, A), np.exp(np.exp(np.exp(A))), rtol=1e-5)


def test_an_affine_iteration_reading_the_tile_slice_the_previous_one_wrote_is_refused():
    def k(a):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        buf = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        buf[:, 0:8] = nl.load(a)
        for i in nl.affine_range(1, 4):
            buf[:, nl.ds(i * 8, 8)] = nl.multiply(buf[:, nl.ds((i - 1) * 8, 8)], 2.0)
        nl.store(out, value=buf)
        return out

    with pytest.raises(NKIError, match=r"reads data .* in iteration 2 of .* its iteration 1 wrote"):
        axon.nki.run(k, A)


def test_an_affine_iteration_loading_what_the_previous_one_stored_to_hbm_is_refused():
    def k(a):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((3, 128, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=nl.load(a))
        for i in nl.affine_range(1, 3):
            nl.store(out[i], value=nl.load(out[i - 1]))
        return out

    with pytest.raises(NKIError, match=CARRIED):
        axon.nki.run(k, A)


def test_a_block_of_a_block_tensor_read_in_the_next_affine_iteration_is_refused():
    def k(a, carried):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        blocks = nl.ndarray((4, nl.par_dim(128), 8), nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            blocks[i] = nl.load(a)  # each block a tile of its own, first written in its iteration
            src = blocks[i - 1] if carried and i > 0 else blocks[i]
            nl.store(out, value=nl.exp(src))
        return out

    np.testing.assert_allclose(axon.nki.run(k, A, False), np.exp(A), rtol=1e-6)
    with pytest.raises(NKIError, match=r"reads data .* in iteration 1 of .* its iteration 0 wrote"):
        axon.nki.run(k, A, True)


def test_accumulations_the_docs_allow_in_an_affine_range_run():
    def k(a, w):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 8), nl.float32, buffer=nl.sbuf)
        acc2 = nl.zeros((128, 8), nl.float32, buffer=nl.sbuf)
        hi = nl.full((128, 8), -1e30, nl.float32, buffer=nl.sbuf)
        row = nl.full((128, 1), -1e30, nl.float32, buffer=nl.sbuf)
        psum = nl.zeros((128, 8), nl.float32, buffer=nl.psum)
        for _ in nl.affine_range(3):
            x = nl.load(a)
            acc += x  # in place
            acc2[...] = nl.add(acc2, x)  # assigned back over what it read
            hi = nl.maximum(hi, x)  # rebound, as nl.loop_reduce's own example
            row = nl.maximum(nl.max(x, axis=1, keepdims=True), row)  # the accumulator second (data2)
            psum += nl.matmul(nl.load(w), x, transpose_x=True)  # matmul accumulation
        t = nl.add(nl.add(acc, acc2), nl.add(nl.add(hi, psum), row))
        nl.store(out, value=t)
        return out

    w = np.eye(128, dtype=np.float32)
    got = axon.nki.run(k, A, w)
    np.testing.assert_allclose(got, 3 * A + 3 * A + A + 3 * A + A.max(axis=1, keepdims=True), rtol=1e-5)


def test_a_current_api_in_place_accumulation_and_nested_loops_reading_outer_data_run():
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for _ in nl.affine_range(2):
            x = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)  # written in the outer iteration, read by the inner loop
            for _ in nl.affine_range(2):
                nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)
        nisa.dma_copy(dst=out, src=acc)
        return out

    np.testing.assert_allclose(axon.nki.run(k, A), 4 * A, rtol=1e-6)


def test_dma_copy_refuses_a_source_of_another_shape_with_as_many_elements():
    def k(a, shape):
        import nki.isa as nisa
        import nki.language as nl

        out = nl.ndarray(shape, nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out

    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    with pytest.raises(NKIError, match=r"shape mismatch: dma_copy of a \[4, 8\] source into a \[8, 4\]"):
        axon.nki.run(k, a, (8, 4))
    np.testing.assert_array_equal(axon.nki.run(k, a, (1, 4, 8)), a[None])  # axes of 1 are no reshape


X = np.array([[1.0, -2.0, 3.5, 0.0, -7.0]], np.float32)
Y = np.array([[0.0, 3.0, 2.0, 0.0, 2.0]], np.float32)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (lambda x, y, nl: nl.logical_and(x, y), [0, 1, 1, 0, 1]),
        (lambda x, y, nl: nl.logical_or(x, y), [1, 1, 1, 0, 1]),
        (lambda x, y, nl: nl.logical_xor(x, y), [1, 0, 0, 0, 0]),
        (lambda x, y, nl: nl.logical_not(x), [0, 0, 0, 1, 0]),
        (lambda x, y, nl: x % 2.0, [1, 0, 1.5, 0, 1]),  # Python's %: the sign of the divisor
        (lambda x, y, nl: nl.mod(x, 2.0), [1, 0, 1.5, 0, 1]),
        (lambda x, y, nl: nl.fmod(x, 2.0), [1, 0, 1.5, 0, -1]),  # the sign of the dividend
        (lambda x, y, nl: abs(x), [1, 2, 3.5, 0, 7]),
    ],
)
def test_logical_operators_remainders_and_abs_of_tiles(expr, expected):
    got = axon.nki.run(_stored(expr), X, Y)
    np.testing.assert_array_equal(got, np.array([expected], np.float32))


def test_floor_division_of_a_tile_is_refused_by_name():
    with pytest.raises(NKIError, match=r"floor division of a tile: .* nl\.mod"):
        axon.nki.run(_stored(lambda x, y, nl: x // 2.0), X, Y)


def test_fori_loop_and_while_loop_run_their_bodies_in_order():
    # nki.language.fori_loop / while_loop (NKI 0.7+: compiled loops; the range iterators are deprecated)
    def k(a):
        import nki.isa as nisa
        import nki.language as nl

        out = nl.ndarray((128, 8), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)

        def double_column(i):
            nisa.tensor_scalar(dst=t[:, i : i + 1], data=t[:, i : i + 1], op0=nl.multiply, operand0=2.0)

        nl.fori_loop(0, 8, double_column, step=2)

        def add_one(r):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
            return r - 1

        nl.while_loop(3, add_one)
        nisa.dma_copy(dst=out, src=t)
        return out

    want = A.copy()
    want[:, 0::2] *= 2
    np.testing.assert_allclose(axon.nki.run(k, A), want + 3, rtol=1e-6)
    trace = axon.nki.trace(k, A)
    assert [lp.kind for lp in trace.loops] == ["dynamic"]


def test_while_loop_refuses_a_python_bool_condition():
    def k(a):
        import nki.language as nl

        nl.while_loop(True, lambda r: 0)
        return a

    with pytest.raises(NKIError, match="Python bool"):
        axon.nki.run(k, A)
