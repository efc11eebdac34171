"""`axon nki run FILE.py:FN --input ...` as a user runs it."""

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
