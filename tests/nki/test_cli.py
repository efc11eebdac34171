"""`axon nki run FILE.py:FN --input ...` as a user runs it."""

import numpy as np

import axon.nki
from axon.cli.nki import bind
from tests.conftest import axon_in_process, run_axon
from tests.nki.helpers import KERNELS


def test_nki_run_prints_output_shapes_and_dtypes():
    r = axon_in_process("nki", "run", f"{KERNELS / 'legacy_api.py'}:softmax", "--input", "x=float32[200,256]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "output 0: shape [200, 256] dtype float32"


def test_nki_run_two_inputs_bf16():
    r = axon_in_process(
        "nki",
        "run",
        f"{KERNELS / 'current_api.py'}:matmul_tiled",
        "--input",
        "a_t=bfloat16[256,128]",
        "--input",
        "b=bfloat16[256,512]",
    )
    assert r.returncode == 0, r.stderr
    assert "shape [128, 512] dtype bfloat16" in r.stdout


def test_bad_input_is_one_line_and_exit_2():  # in a new process, as a user runs it
    r = run_axon("nki", "run", f"{KERNELS / 'legacy_api.py'}:softmax", "--input", "x=float32[200,")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("axon: error: malformed --input")
    assert "Traceback" not in r.stderr


def test_rule_violation_is_one_line_with_the_kernel_line():
    r = axon_in_process("nki", "run", f"{KERNELS / 'rules.py'}:psum_tile_over_bank", "--input", "a=float32[128,512]")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "PSUM tile larger than a bank" in r.stderr and "rules.py:" in r.stderr


def test_missing_kernel_function():
    r = axon_in_process("nki", "run", f"{KERNELS / 'rules.py'}:nope", "--input", "a=float32[128,512]")
    assert r.returncode == 2 and "no kernel function 'nope'" in r.stderr


def test_nki_run_passes_non_tensor_parameters_by_keyword():
    kernel = f"{KERNELS / 'current_api.py'}:tiled_rows"
    r = axon_in_process("nki", "run", kernel, "--input", "x=float32[64,256]", "--arg", "times=3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "output 0: shape [192, 256] dtype float32"


def test_a_bad_kernel_parameter_is_one_line_and_exit_2():
    kernel = f"{KERNELS / 'current_api.py'}:tiled_rows"
    for arg, message in [
        ("times=three", "malformed --arg 'times=three': 'three' is not a Python literal"),
        ("3", "malformed --arg '3': expected NAME=VALUE"),
        ("repeats=2", "unexpected keyword argument 'repeats'"),
    ]:
        r = axon_in_process("nki", "run", kernel, "--input", "x=float32[64,256]", "--arg", arg)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert message in r.stderr
    r = axon_in_process(
        "nki", "profile", kernel, "--input", "x=float32[64,256]", "--arg", "times=1", "--arg", "times=2"
    )
    assert r.returncode == 2 and "--arg times given twice" in r.stderr


def _axpy(*alpha: str, run=axon_in_process):
    """`axon nki run` of axpy(x, alpha, y) on [64, 256] inputs, with `alpha` options between them."""
    kernel = f"{KERNELS / 'current_api.py'}:axpy"
    return run("nki", "run", kernel, "--input", "x=float32[64,256]", *alpha, "--input", "y=float32[64,256]")


def test_a_parameter_between_tensors_is_bound_by_name():
    """As AWS's layernorm tutorial kernel takes (input_tensor, epsilon, gamma_vector, beta_vector)."""
    r = _axpy("--arg", "alpha=2.0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "output 0: shape [64, 256] dtype float32"
    r = _axpy()
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "kernel axpy needs 'alpha': give --input alpha=DTYPE[...] or --arg alpha=VALUE" in r.stderr


def test_the_bound_call_computes_what_the_kernel_does():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 256)).astype(np.float32), rng.standard_normal((64, 256)).astype(np.float32)
    fn = axon.nki.load_kernel(f"{KERNELS / 'current_api.py'}:axpy")
    call, kwargs = bind(fn, [("y", y), ("x", x)], {"alpha": 3.0})
    out = axon.nki.run(fn, *call, **kwargs)
    np.testing.assert_allclose(out, 3.0 * x + y, rtol=1e-6)


def test_a_kernel_file_imports_its_siblings(tmp_path):
    """AWS's multi-core tensor-addition tutorial imports its single-core kernel from the file beside it."""
    (tmp_path / "copy_helpers.py").write_text(
        "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n"
        "def copy_through_sbuf(x):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x)\n"
        "    nisa.dma_copy(dst=out, src=t)\n"
        "    return out\n"
    )
    (tmp_path / "caller.py").write_text(
        "from copy_helpers import copy_through_sbuf\n\n\ndef k(x):\n    return copy_through_sbuf(x)\n"
    )
    r = axon_in_process("nki", "run", f"{tmp_path / 'caller.py'}:k", "--input", "x=float32[32,64]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "output 0: shape [32, 64] dtype float32"


def test_overflow_on_random_inputs_is_said_once_without_numpy_warnings():
    r = _axpy("--arg", "alpha=1e38", run=run_axon)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "output 0: shape [64, 256] dtype float32 (non-finite values)"
    assert "Warning" not in r.stderr, r.stderr


PARTIAL = """
import nki.isa as nisa
import nki.language as nl


def first_block(a):
    # copies only the first 128 rows and 256 columns: the rest of the output is never written
    assert a.shape[0] >= 128
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 256), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, 0:256])
    nisa.dma_copy(dst=out[0:128, 0:256], src=t)
    return out
"""


def test_nki_run_counts_the_output_elements_the_kernel_never_wrote(tmp_path):
    # they were reported as "(non-finite values)", as if the kernel had overflowed
    (tmp_path / "partial.py").write_text(PARTIAL)
    whole = axon_in_process("nki", "run", f"{tmp_path / 'partial.py'}:first_block", "--input", "a=float32[128,256]")
    assert whole.returncode == 0 and whole.stdout.strip() == "output 0: shape [128, 256] dtype float32"
    part = axon_in_process("nki", "run", f"{tmp_path / 'partial.py'}:first_block", "--input", "a=float32[200,300]")
    assert part.returncode == 0, part.stderr
    unwritten = 200 * 300 - 128 * 256
    assert f"({unwritten:,} of 60,000 elements never written by the kernel)" in part.stdout
    assert "non-finite" not in part.stdout


def test_a_bare_assert_in_a_kernel_shows_its_source_line(tmp_path):
    (tmp_path / "partial.py").write_text(PARTIAL)
    r = axon_in_process("nki", "run", f"{tmp_path / 'partial.py'}:first_block", "--input", "a=float32[64,256]")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.strip().endswith("raised AssertionError: assert a.shape[0] >= 128"), r.stderr
