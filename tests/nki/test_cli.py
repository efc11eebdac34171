"""`axon nki run FILE.py:FN --input ...` as a user runs it."""

import numpy as np
import pytest

import axon.nki
from axon.cli.nki import bind
from tests.conftest import axon_in_process, refused, run_axon
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


def test_inputs_that_do_not_fit_the_kernels_parameters_are_named_not_raised_by_the_kernel():
    # "kernel softmax raised TypeError: softmax() takes 1 positional argument but 2 were given"
    kernel = f"{KERNELS / 'legacy_api.py'}:softmax"
    for inputs, message in [
        (
            ("--input", "x=float32[8,16]", "--input", "z=float32[8]"),
            "softmax(x) cannot be called with --input x, --input z: too many positional arguments "
            "(--input z names none of its parameters, so the tensors went in order)",
        ),
        ((), "softmax(x) cannot be called with no --input or --arg: missing a required argument: 'x'"),
    ]:
        r = axon_in_process("nki", "run", kernel, *inputs)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert message in r.stderr and "raised" not in r.stderr, r.stderr
    # bound by name, a parameter after the last one given: "axpy() missing 2 required positional arguments"
    r = axon_in_process("nki", "run", f"{KERNELS / 'current_api.py'}:axpy", "--input", "x=float32[64,256]")
    assert r.returncode == 2 and "raised" not in r.stderr, r.stderr
    assert "axpy(x, alpha, y) cannot be called with --input x: missing a required argument: 'alpha': give" in r.stderr


@pytest.mark.parametrize("command", ["run", "profile"])
def test_an_input_named_like_a_parameter_is_not_bound_to_another_one_in_order(command, tmp_path):
    """`--input b=... --input q=...` for matmul_tiled(a_t, b): q names no parameter, so the tensors went
    in order, b's array as a_t, and the kernel failed at one of its lines on shapes (or ran on the swap)."""
    kernel = f"{KERNELS / 'current_api.py'}:matmul_tiled"
    refused(
        "nki",
        command,
        kernel,
        "--input",
        "b=float32[256,512]",
        "--input",
        "q=float32[256,128]",
        cwd=tmp_path,
        fragments=("--input b names a parameter of matmul_tiled(a_t, b), but q names none", "bound to a_t"),
    )
    r = axon_in_process(
        "nki", command, kernel, "--input", "a=float32[256,128]", "--input", "b=float32[256,512]", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr  # b in b's place: in order as before


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


def test_a_kernel_that_returns_nothing_says_so(tmp_path):
    # it printed nothing and exited 0, as a kernel with outputs does
    (tmp_path / "k.py").write_text(
        "import nki.language as nl\n\ndef forgot(a):\n    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)\n"
    )
    r = axon_in_process("nki", "run", f"{tmp_path / 'k.py'}:forgot", "--input", "a=float32[128,64]")
    assert (
        r.returncode == 0
        and r.stdout.strip() == "no output: kernel forgot returned no tensor (it returns what it writes)"
    )


def test_a_bare_assert_in_a_kernel_shows_its_source_line(tmp_path):
    (tmp_path / "partial.py").write_text(PARTIAL)
    r = axon_in_process("nki", "run", f"{tmp_path / 'partial.py'}:first_block", "--input", "a=float32[64,256]")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.strip().endswith("raised AssertionError: assert a.shape[0] >= 128"), r.stderr


SPMD = """import nki
import nki.language as nl


def rows(i):
    return i * 128 + nl.arange(128)[:, None]


@nki.jit
def add_rows(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = rows(nl.program_id(0)), nl.arange(512)[None, :]
    nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    return c


@nki.jit
def add_blocks(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = rows(nl.program_id(0)), nl.program_id(axis=1) * 256 + nl.arange(256)[None, :]
    nl.store(c[ix, iy], value=nl.load(a[ix, iy]) + nl.load(b[ix, iy]))
    return c


def host(a, b):
    return add_rows[a.shape[0] // 128](a, b)
"""
TWO = ("--input", "a=float32[512,512]", "--input", "b=float32[512,512]")


@pytest.mark.parametrize("command", ["run", "profile"])
def test_an_spmd_kernel_without_a_grid_is_one_line_naming_the_call(tmp_path, command):
    # it ran as program 0 alone and exited 0: `run` printed the output with 3/4 of it never written,
    # `profile` timed one program as the kernel's latency
    (tmp_path / "spmd.py").write_text(SPMD)
    out = ("--out", str(tmp_path), "--no-png") if command == "profile" else ()
    refused(
        "nki",
        command,
        f"{tmp_path / 'spmd.py'}:add_rows",
        *TWO,
        *out,
        fragments=("spmd.py:12: kernel add_rows calls nl.program_id(0), an SPMD kernel", "--grid N "),
    )
    refused(
        "nki",
        command,
        f"{tmp_path / 'spmd.py'}:add_blocks",
        *TWO,
        *out,
        fragments=("spmd.py:20: kernel add_blocks calls nl.program_id(0)", "--grid N,M "),
    )


def test_an_spmd_kernel_runs_on_the_grid_given(tmp_path):
    (tmp_path / "spmd.py").write_text(SPMD)
    for kernel, grid in (("add_rows", "4"), ("add_blocks", "4,2")):
        r = axon_in_process("nki", "run", f"{tmp_path / 'spmd.py'}:{kernel}", *TWO, "--grid", grid)
        assert r.returncode == 0 and r.stdout.strip() == "output 0: shape [512, 512] dtype float32", r.stderr
    p = axon_in_process(
        "nki", "profile", f"{tmp_path / 'spmd.py'}:add_rows", *TWO, "--grid", "4", "--out", str(tmp_path)
    )
    assert p.returncode == 0 and "dma           12 instr" in p.stdout, p.stdout  # 4 programs of 3 DMAs
    # a host function launches its kernel on a grid itself: nothing to give
    h = axon_in_process("nki", "run", f"{tmp_path / 'spmd.py'}:host", *TWO)
    assert h.returncode == 0 and "never written" not in h.stdout, h.stdout + h.stderr


@pytest.mark.parametrize(
    "grid, fragment",
    [
        ("4", "spmd.py:20: kernel add_blocks calls nl.program_id(axis=1), but --grid 4 has 1 axis: give 2 or more"),
        ("4,0", "malformed --grid '4,0': expected positive integers"),
        ("x", "malformed --grid 'x'"),
    ],
)
def test_a_grid_that_does_not_fit_is_one_line(tmp_path, grid, fragment):
    (tmp_path / "spmd.py").write_text(SPMD)
    refused("nki", "run", f"{tmp_path / 'spmd.py'}:add_blocks", *TWO, "--grid", grid, fragments=(fragment,))
