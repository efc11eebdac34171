"""The Python API: the import shim, jit kernels, loading from files, input parsing, tile math."""

import numpy as np
import pytest

import axon.nki
from axon.cli.nki import parse_input_spec
from axon.errors import NKIError
from tests.conftest import rel_err


def test_import_shim_maps_both_generations():
    import neuronxcc.nki as legacy
    import neuronxcc.nki.isa as lisa
    import neuronxcc.nki.language as lnl
    import neuronxcc.nki.typing as nt  # noqa: F401
    import nki
    import nki.isa as nisa
    import nki.language as nl

    assert nl is lnl and nki.jit is legacy.jit
    assert nisa.nc_matmul is not lisa.nc_matmul  # destination passing vs value returning


def test_jit_kernel_called_with_arrays_runs_in_the_emulator():
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def exp_plus_one(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.activation(dst=t, op=nl.exp, data=t, bias=None, scale=1.0)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.linspace(-2, 2, 128 * 64, dtype=np.float32).reshape(128, 64)
    assert rel_err(exp_plus_one(a), np.exp(a.astype(np.float64)) + 1) <= 1e-6
    assert rel_err(axon.nki.run(exp_plus_one, a), np.exp(a.astype(np.float64)) + 1) <= 1e-6


def test_spmd_grid_program_ids():
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def scale_rows(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * 128 : (i + 1) * 128])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=float(i + 1))
        nisa.dma_copy(dst=out[i * 128 : (i + 1) * 128], src=t)
        return out

    a = np.ones((256, 8), np.float32)
    out = scale_rows[2](a)
    assert np.all(out[:128] == 1) and np.all(out[128:] == 2)


def test_language_ops_and_masks_in_legacy_style():
    import neuronxcc.nki.language as nl

    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        t = nl.load(a[i_p, i_f], mask=(i_p < 100))
        y = nl.maximum(nl.silu(t, mask=(i_p < 100)), 0.5, mask=(i_p < 100))
        z = nl.subtract(1.0, y, mask=(i_p < 100))
        nl.store(out[i_p, i_f], value=z, mask=(i_p < 100))
        return out

    a = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    out = k_run = axon.nki.run(k, a)
    a64 = a.astype(np.float64)
    ref = 1.0 - np.maximum(a64 / (1 + np.exp(-a64)), 0.5)
    assert rel_err(out[:100], ref[:100]) <= 1e-6 and np.all(np.isnan(k_run[100:]))


def test_iota_affine_select_and_scan():
    import nki.isa as nisa
    import nki.language as nl

    def k(a):
        out = nl.ndarray((128, 16), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(16)[None, :]
        causal = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.affine_select(causal, i_p - i_f >= 0, t, -9.0)
        idx = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.iota(idx, i_p * 16 + i_f)
        s = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(s, causal, idx, 0.0, nl.add, nl.add)
        nisa.dma_copy(dst=out, src=s)
        return out

    a = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    out = axon.nki.run(k, a)
    p, f = np.mgrid[0:128, 0:16]
    causal = np.where(p >= f, a, -9.0)
    idx = p * 16 + f
    ref = np.zeros((128, 16))
    prev = np.zeros(128)
    for j in range(16):
        prev = (causal[:, j] + prev) + idx[:, j]
        ref[:, j] = prev
    assert rel_err(out, ref) <= 1e-5


def test_parse_input_spec():
    assert parse_input_spec("a=float32[128,512]") == ("a", (128, 512), "float32")
    for bad in ("a=float32", "=float32[1]", "a=complex[1]", "a=float32[0,4]"):
        with pytest.raises(NKIError):
            parse_input_spec(bad)


def test_kernel_python_errors_name_the_line():
    def broken(a):
        raise ValueError("boom")

    with pytest.raises(NKIError, match=r"test_api.py:\d+: kernel broken raised ValueError: boom"):
        axon.nki.run(broken, np.zeros((1, 1), np.float32))


def test_calls_outside_a_kernel_are_an_error():
    import nki.language as nl

    with pytest.raises(NKIError, match="inside a kernel"):
        nl.ndarray((128, 4), nl.float32)


SOURCE = """import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_one(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


def test_run_and_trace_accept_kernel_source_text():
    a = np.zeros((128, 4), np.float32)
    assert np.all(axon.nki.run(SOURCE, a) == 1)
    tr = axon.nki.trace(SOURCE, ((128, 4), "float32"))
    assert [i.line for i in tr.instructions] == [10, 11, 12]


def test_errors_in_kernel_source_name_the_line():
    bad = SOURCE.replace("buffer=nl.sbuf)", "buffer=nl.psum)\n    x = nl.ndarray((256, 4), nl.float32)")
    with pytest.raises(NKIError, match=r"nki_[0-9a-f]+\.py:10: partition axis > 128"):
        axon.nki.run(bad, np.zeros((128, 4), np.float32))


def test_two_kernel_files_in_two_folders_each_import_their_own_helpers(tmp_path):
    # the second kernel's `from helpers import SCALE` got the first folder's module from sys.modules:
    # it returned the input times 1.0 where its own helpers.py says 2.0, silently
    kernel = (
        "import nki.language as nl\nfrom helpers import SCALE\n\n\ndef k(a):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, nl.load(a) * SCALE)\n    return out\n"
    )
    a = np.ones((128, 64), np.float32)
    for folder, scale in (("one", 1.0), ("two", 2.0)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "helpers.py").write_text(f"SCALE = {scale}\n")
        (tmp_path / folder / "k.py").write_text(kernel)
        out = np.asarray(axon.nki.run(axon.nki.load_kernel(f"{tmp_path / folder / 'k.py'}:k"), a))
        assert np.all(out == scale), (folder, out[0, 0])


@pytest.mark.parametrize("cols", [1000, 1025, 4097])
def test_bn_stats_under_a_mask_keeps_whole_records_when_the_last_chunk_is_short(tmp_path, cols):
    # bn_stats over 512-column chunks with mask=(j*512 + i < cols): a last chunk of fewer than 6
    # columns had the mask cut the new [P, 6] record to [P, cols mod 512] ("bn_stats produces
    # [128, 6] but dst is [128, 1]"); AWS's layernorm tutorial v2 failed so at N=4097
    (tmp_path / "k.py").write_text(
        "import math\nimport numpy as np\nimport neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n\n\n"
        "def k(a):\n"
        "    out = nl.ndarray((a.shape[0], 2), dtype=np.float32, buffer=nl.shared_hbm)\n"
        "    i_p = nl.arange(128)[:, None]\n"
        "    x = nl.load(a[i_p, nl.arange(a.shape[1])[None, :]])\n"
        "    i_b, i_s = nl.arange(512)[None, :], nl.arange(6)[None, :]\n"
        "    n = math.ceil(a.shape[1] / 512)\n"
        "    st = nl.ndarray((128, 6 * n), dtype=np.float32)\n"
        "    for j in nl.affine_range(n):\n"
        "        st[i_p, j * 6 + i_s] = nisa.bn_stats(x[i_p, j * 512 + i_b], mask=(j * 512 + i_b < a.shape[1]))\n"
        "    nl.store(out[i_p, nl.arange(2)[None, :]], nisa.bn_aggr(st[i_p, nl.arange(6 * n)[None, :]]))\n"
        "    return out\n"
    )
    a = (np.random.default_rng(0).standard_normal((128, cols)) * 3 + 100).astype(np.float32)
    got = np.asarray(axon.nki.run(axon.nki.load_kernel(f"{tmp_path / 'k.py'}:k"), a), dtype=np.float64)
    x = a.astype(np.float64)
    assert rel_err(got[:, 0], x.mean(axis=1)) < 1e-6
    assert rel_err(got[:, 1], x.var(axis=1)) < 1e-4


@pytest.mark.parametrize("cols", [1, 3])
def test_a_row_reduction_without_keepdims_scales_its_rows_at_one_column_too(tmp_path, cols):
    # nl.sum(x, axis=[1]) is a [128] tile; times the [128, N] input it scales each row, but at N=1
    # ([128, 1] times [128]) it was "shape mismatch: nl.multiply of [128, 1] and [128]" (AWS's
    # rmsnorm and layernorm v1 tutorials at N=1)
    (tmp_path / "k.py").write_text(
        "import neuronxcc.nki.language as nl\n\n\ndef k(a):\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    i_p, i_f = nl.arange(128)[:, None], nl.arange(a.shape[1])[None, :]\n"
        "    x = nl.load(a[i_p, i_f], mask=(i_p < a.shape[0]))\n"
        "    s = nl.sum(nl.square(x), axis=[1])\n"
        "    nl.store(out[i_p, i_f], value=nl.multiply(x, s), mask=(i_p < a.shape[0]))\n"
        "    return out\n"
    )
    a = np.random.default_rng(0).standard_normal((100, cols)).astype(np.float32)
    got = np.asarray(axon.nki.run(axon.nki.load_kernel(f"{tmp_path / 'k.py'}:k"), a), dtype=np.float64)
    x = a.astype(np.float64)
    assert rel_err(got, x * (x * x).sum(axis=1, keepdims=True)) < 1e-6


def test_a_kernel_runs_with_blas_single_threaded_and_the_callers_threads_come_back():
    """Every nc_matmul is a small product: the emulator limits BLAS to one thread around each run
    (the libraries' thread pools found once per process), and the caller's setting is restored."""
    import nki
    import nki.language as nl
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> int:  # NumPy's BLAS: another loaded later (SciPy's) is not the emulator's
        pools = [i for i in threadpool_info() if i["user_api"] == "blas"]
        return max(i["num_threads"] for i in [p for p in pools if "numpy" in p["filepath"]] or pools)

    seen = []

    @nki.jit
    def copy(a):
        seen.append(blas_threads())
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    a = np.ones((128, 4), dtype=np.float32)
    with threadpool_limits(limits=2, user_api="blas"):
        for _ in range(2):
            assert np.array_equal(copy(a), a)
        assert blas_threads() == 2
    assert seen == [1, 1]
