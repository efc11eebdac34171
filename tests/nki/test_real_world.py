"""NKI written elsewhere runs: compiler-style block tensors allocated by liveness, fresh-arange
masks on partial tiles, several arange terms in one axis, never-written memory tracked to the
output, direct allocation, SPMD launch facts, compile-time parameters. Kernels: kernels/real_world.py."""

import numpy as np
import pytest

import axon.nki
from axon.errors import NKIError
from tests.nki.helpers import KERNELS, kernel

LINES = (KERNELS / "real_world.py").read_text().splitlines()


def rule_line(name: str) -> int:
    start = next(i for i, s in enumerate(LINES) if s.startswith(f"def {name}("))
    return next(i + 1 for i in range(start, len(LINES)) if "# RULE" in LINES[i])


def k(name):
    return kernel("real_world", name)


def test_compiler_style_block_tensors_run_far_over_sbuf_by_liveness():
    # 3 block tensors of 79 blocks x 2 KiB: 1.2 MiB per partition declared, 192 KiB available.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((10000, 1024), np.float32), rng.standard_normal((10000, 1024), np.float32)
    out, tr = axon.nki.run_with_trace(k("block_scale_add"), a, b)
    np.testing.assert_allclose(out, 2 * a + b, rtol=1e-6)
    assert tr.meta["peak_sbuf_bytes_per_partition"] <= 196608
    # the last, partial tile (10000 = 78 * 128 + 16) is loaded, computed and stored as 16 rows
    last = [i for i in tr.instructions if i.opcode == "dma_copy" and i.loops and i.loops[0][2] == 78]
    sbuf = [a for i in last for a in i.reads + i.writes if a.buffer == "sbuf"]
    assert len(sbuf) == 6 and all(a.partition_hi - a.partition_lo == 16 for a in sbuf)


def test_block_matmul_with_lazy_psum_zeros_and_two_term_index():
    rng = np.random.default_rng(1)
    lhs_t, rhs = rng.standard_normal((384, 256), np.float32), rng.standard_normal((384, 512), np.float32)
    lhs_p = np.ascontiguousarray(lhs_t.reshape(3, 128, 256).transpose(1, 0, 2))
    out = axon.nki.run(k("block_matmul"), lhs_p, rhs)
    np.testing.assert_allclose(out, lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)
    tr = axon.nki.trace(k("block_matmul"), ((128, 3, 256), "float32"), ((384, 512), "float32"))
    assert tr.count()["nc_matmul"] == 2 * 3


def test_blocks_that_cannot_fit_name_the_live_tensors():
    a = np.ones((128, 20480), np.float32)
    with pytest.raises(NKIError) as err:
        axon.nki.run(k("blocks_all_live"), a)
    msg = str(err.value)
    assert "SBUF capacity exceeded" in msg and "x_blocks" in msg and "y_blocks" in msg and "scratch" in msg
    assert msg.startswith(f"real_world.py:{rule_line('blocks_all_live')}: ")
    with pytest.raises(NKIError, match="SBUF capacity exceeded"):
        axon.nki.trace(k("blocks_all_live"), ((128, 20480), "float32"))


def test_a_tile_no_longer_used_is_free_even_while_python_holds_it():
    # Three 100 KiB tiles, all held by Python names to the end, used one after another.
    def seq(a):
        import nki.isa as nisa
        import nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t1 = nl.ndarray((128, 25600), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t1, value=1.0)
        nisa.dma_copy(dst=out[:, 0:512], src=t1[:, 0:512])
        t2 = nl.ndarray((128, 25600), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t2, value=2.0)
        nisa.dma_copy(dst=out[:, 0:512], src=t2[:, 0:512])
        t3 = nl.ndarray((128, 25600), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t3, value=3.0)
        nisa.dma_copy(dst=out[:, 0:512], src=t3[:, 0:512])
        return out

    out = axon.nki.run(seq, np.zeros((128, 512), np.float32))
    assert np.all(out == 3.0)


def test_several_arange_terms_in_one_axis_transpose_within_rows():
    a = np.arange(5 * 12, dtype=np.float32).reshape(5, 12)
    out = axon.nki.run(k("transpose_within_rows"), a, (3, 4))
    np.testing.assert_array_equal(out, a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12))


def test_index_terms_that_do_not_tile_the_axis_name_the_line():
    with pytest.raises(NKIError) as err:
        axon.nki.run(k("overlapping_terms"), np.ones((128, 32), np.float32))
    assert str(err.value).startswith(f"real_world.py:{rule_line('overlapping_terms')}: ")
    assert "do not tile the axis" in str(err.value)


def test_masked_partial_tile_read_unmasked_is_legal_until_it_reaches_hbm():
    a = np.random.default_rng(2).standard_normal((200, 64)).astype(np.float32)
    out = axon.nki.run(k("partial_tile_unmasked_middle"), a, False)
    e = np.exp(a)
    np.testing.assert_allclose(out[:200], e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    assert np.all(np.isnan(out[200:]))  # never written, never stored: poison, not zeros
    with pytest.raises(NKIError) as err:
        axon.nki.run(k("partial_tile_unmasked_middle"), a, True)
    msg = str(err.value)
    assert msg.startswith(f"real_world.py:{rule_line('partial_tile_unmasked_middle')}: read of never-written memory")
    assert "dma_copy" in msg


def test_accumulating_into_a_fresh_psum_tile_starts_the_group():
    rng = np.random.default_rng(3)
    lhs_t, rhs = rng.standard_normal((256, 128), np.float32), rng.standard_normal((256, 512), np.float32)
    out = axon.nki.run(k("accumulate_into_fresh_psum"), lhs_t, rhs)
    np.testing.assert_allclose(out, lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)


def test_direct_allocation_is_honoured_and_checked():
    a = np.random.default_rng(4).standard_normal((128, 128)).astype(np.float32)
    np.testing.assert_array_equal(axon.nki.run(k("direct_allocation"), a, 0), a.T)
    with pytest.raises(NKIError, match="SBUF direct allocation out of range"):
        axon.nki.run(k("direct_allocation"), a, 196608 - 1024)


def test_spmd_launch_facts_from_a_host_caller():
    out = axon.nki.run(kernel("real_world", "launch_on_two_cores"), np.zeros((1,), np.float32))
    np.testing.assert_array_equal(out, [[1, 4, 0], [1, 4, 1], [1, 4, 2], [1, 4, 3]])


def test_partition_vector_broadcasts_along_the_free_axis():
    a = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(axon.nki.run(k("row_broadcast"), a), a - a.max(axis=1, keepdims=True))


def test_trace_takes_compile_time_parameters():
    import nki.language as nl

    tr = axon.nki.trace(k("shaped_by_parameters"), ((128, 512), "float32"), (64, 256), nl.bfloat16, 3)
    assert tr.count()["dma_copy"] == 2
    out = axon.nki.run(k("shaped_by_parameters"), np.ones((128, 512), np.float32), (64, 256), nl.float32, 3)
    assert out.shape == (64, 256) and np.all(out == 3)


def test_current_api_block_tensor_by_liveness():
    # The current API with a block-dimension SBUF tensor of 64 blocks x 16 KiB (1 MiB declared).
    def scale(a):
        import nki.isa as nisa
        import nki.language as nl

        n = a.shape[0] // 128
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((n, nl.par_dim(128), a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(n):
            nisa.dma_copy(dst=buf[i], src=a[i * 128 : (i + 1) * 128, :])
            nisa.tensor_scalar(dst=buf[i], data=buf[i], op0=nl.multiply, operand0=3.0)
            nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128, :], src=buf[i])
        return out

    a = np.random.default_rng(6).standard_normal((64 * 128, 4096)).astype(np.float32)
    np.testing.assert_allclose(axon.nki.run(scale, a), 3 * a, rtol=1e-6)
    tr = axon.nki.trace(scale, (a.shape, "float32"))
    assert tr.meta["peak_sbuf_bytes_per_partition"] == 4096 * 4


def test_bool_masks_and_nc_version():
    def k(a):
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        n = a.shape[0]
        t = nl.load(a, mask=(n <= 128))  # a condition without index variables: a Python bool
        version = 2.0 if nisa.get_nc_version() == nisa.nc_version.gen2 else 3.0
        nl.store(out, value=nl.multiply(t, version, mask=(n > 0)), mask=True)
        nl.store(out, value=nl.multiply(t, 100.0), mask=(n > 128))  # dropped
        return out

    a = np.ones((128, 8), np.float32)
    assert np.all(axon.nki.run(k, a, hw="trn1") == 2.0) and np.all(axon.nki.run(k, a, hw="trn2") == 3.0)


def test_transposing_store_through_swapped_index_variables():
    def k(a):
        import neuronxcc.nki.language as nl

        out = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.shared_hbm)
        ip, jf = nl.arange(a.shape[0])[:, None], nl.arange(a.shape[1])[None, :]
        nl.store(out[jf, ip], value=nl.load(a[ip, jf]))  # the free variable indexes out's first axis
        return out

    a = np.arange(96 * 40, dtype=np.float32).reshape(96, 40)
    np.testing.assert_array_equal(axon.nki.run(k, a), a.T)


def test_sim_backend_extrapolates_a_compiler_style_kernel():
    # The block tensors' liveness holds with a partial trace (loop_limit): the sim backend's loop
    # extrapolation measures compiler-style kernels, close to simulating them whole.
    from axon.measure.backend import SimBackend
    from axon.target.hardware import load_hw

    source = (KERNELS / "real_world.py").read_text()
    inputs = [("v1", (40 * 128, 1024), "float32"), ("v2", (40 * 128, 1024), "float32")]
    hw = load_hw("trn1")
    cut = SimBackend(extrapolate=True).measure(source, "block_scale_add", inputs, hw)
    whole = SimBackend(extrapolate=False).measure(source, "block_scale_add", inputs, hw)
    assert cut.status == "ok" and whole.status == "ok", (cut.error, whole.error)
    assert cut.details["timing"] != "whole"
    assert abs(cut.latency_ns - whole.latency_ns) <= 0.1 * whole.latency_ns


def test_loop_reduce_reduces_the_named_loop_not_the_innermost():
    # Compiler style (lora): the reduced loop i1 is outside a loop i2 that is not reduced.
    def k(a):
        import neuronxcc.nki.language as nl
        import numpy as np

        out = nl.ndarray((128, 2 * 64), np.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((2, nl.par_dim(128), 64), dtype=np.float32, buffer=nl.sbuf)
        for i1 in nl.sequential_range(3):
            for i2 in nl.affine_range(2):
                t = nl.load(a[i1, :, i2 * 64 : (i2 + 1) * 64])
                acc[i2, nl.arange(128)[:, None], nl.arange(64)[None, :]] = nl.loop_reduce(
                    t, op=np.add, loop_indices=[i1], mask=None, dtype=np.float32
                )
        for i2 in nl.affine_range(2):
            nl.store(out[:, i2 * 64 : (i2 + 1) * 64], value=acc[i2])
        return out

    a = np.random.default_rng(7).standard_normal((3, 128, 128)).astype(np.float32)
    np.testing.assert_allclose(axon.nki.run(k, a), a.sum(axis=0), rtol=1e-5)


def test_direct_psum_allocations_may_overlay_and_must_lie_in_the_banks():
    def k(a, base_bank):
        import neuronxcc.nki as nki
        import neuronxcc.nki.isa as nisa
        import neuronxcc.nki.language as nl

        psum_mod = nki.compiler.psum.mod_alloc
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        ident = nl.load(nl.shared_identity_matrix(128, dtype=a.dtype))
        # two tensors of 7 banks each placed on the same banks, used one after the other
        p1 = nl.ndarray(
            (7, nl.par_dim(128), 512), dtype=nl.float32, buffer=psum_mod(base_bank=base_bank, num_bank_tiles=(7,))
        )
        p2 = nl.ndarray((7, nl.par_dim(128), 512), dtype=nl.float32, buffer=psum_mod(base_bank=0, num_bank_tiles=(7,)))
        p1[0, :, 0:128] = nisa.nc_matmul(t, ident)
        s = nl.copy(p1[0, :, 0:128])
        p2[1, :, 0:128] = nisa.nc_matmul(s, ident)
        nl.store(out, value=nl.copy(p2[1, :, 0:128]))
        return out

    a = np.random.default_rng(8).standard_normal((128, 128)).astype(np.float32)
    np.testing.assert_allclose(axon.nki.run(k, a, 0), a, rtol=1e-6)
    with pytest.raises(NKIError, match="PSUM direct allocation out of range"):
        axon.nki.run(k, a, 2)
