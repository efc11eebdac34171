"""The `axon` command as a user meets it: listings, graphs, and one clear line for every mistake."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest

from tests.conftest import REPO, axon_in_process, refused, run_axon


def _one_line_error(result, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("axon: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_workloads_lists_all_twenty():
    result = run_axon("workloads")  # a new process, as a user runs it
    assert result.returncode == 0, result.stderr
    rows = result.stdout.strip().splitlines()[1:]
    assert len(rows) == 20
    assert rows[0].split()[:2] == ["matmul", "single"]
    assert any(r.startswith("qknorm_attention") for r in rows)


def test_show_and_check():
    result = axon_in_process("show", "rmsnorm_matmul", "--shape", "M=128")
    assert result.returncode == 0, result.stderr
    assert "x: f32[M=128, K=1024]" in result.stdout and "matmul(" in result.stdout
    result = axon_in_process("check", "attention")
    assert result.returncode == 0, result.stderr
    assert "attention.out: shape [2, 256, 64]" in result.stdout and "finite yes" in result.stdout


def test_check_of_a_spec_with_non_finite_outputs_exits_1(tmp_path):
    """exp(1000 x) overflows on the check's inputs: `axon check` printed "finite NO" and exited 0 (click
    handed its Exit(1) back as a value the entry point dropped)."""
    (tmp_path / "big.py").write_text(
        'import axon.spec as ax\n\n\n@ax.spec(x="M N")\ndef big(x):\n    return ax.exp(x * 1000.0)\n'
    )
    with warnings.catch_warnings(record=True) as caught:  # numpy warned "invalid value" on the std of an inf
        warnings.simplefilter("always")
        result = axon_in_process("check", f"{tmp_path}/big.py:big", "--shape", "M=4,N=8")
    assert "finite NO" in result.stdout and result.returncode == 1, (result.returncode, result.stderr)
    assert re.search(r"finite NO: \d+ \+inf of 32 elements \(mean and std of the \d+ finite\)", result.stdout)
    assert "mean +inf" not in result.stdout and not [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_check_of_a_spec_undefined_on_negatives_says_so_and_evaluates_where_the_tuner_checks(tmp_path):
    """sqrt(x) without a declared range: `axon check` evaluated it on [-1, 1] only and said "finite NO",
    while the tuner checks its kernels on [0.05, 1] there (reference_case)."""
    (tmp_path / "roots.py").write_text(
        'import axon.spec as ax\n\n\n@ax.spec(x="M N")\ndef roots(x):\n    return ax.sqrt(x)\n'
    )
    result = axon_in_process("check", f"{tmp_path}/roots.py:roots", "--shape", "M=4,N=8")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "NaN in out on inputs in [-1, 1]" in result.stdout and "evaluated on [0.05, 1]" in result.stdout
    assert "range=(lo, hi)" in result.stdout and "finite yes" in result.stdout


def test_check_of_a_spec_undefined_on_its_declared_range_does_not_say_to_declare_it(tmp_path):
    """log(x) with x declared in [-1, 1]: the line ended "declare the range an input takes", of the
    range the user had declared."""
    (tmp_path / "logs.py").write_text(
        'import axon.spec as ax\n\n\n@ax.spec(x=ax.tensor("M N", range=(-1, 1)))\ndef logs(x):\n    return ax.log(x)\n'
    )
    result = axon_in_process("check", f"{tmp_path}/logs.py:logs", "--shape", "M=4,N=8")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "declared: x in [-1, 1]; narrow the range" in result.stdout
    assert "declare the range an input takes" not in result.stdout


def test_unknown_workload_suggests():
    _one_line_error(run_axon("show", "rmsnrom"), "unknown workload 'rmsnrom'", "did you mean 'rmsnorm'")


def test_a_workload_that_reads_as_a_path_says_what_the_path_is(tmp_path):
    """A directory (`tune models/:f`, `tune models:f`) or a file not ending in .py given as a spec was
    'unknown workload ...; `axon workloads` lists them', which lists the built-in ones only."""
    (tmp_path / "models").mkdir()
    (tmp_path / "model.txt").write_text("")
    for workload, what in (
        ("models:f", "models is a directory"),
        ("models/", "models is a directory"),
        ("model.txt:f", "model.txt is not a .py file"),
        ("mdoel.txt:f", "mdoel.txt is not found"),
    ):
        refused("show", workload, cwd=tmp_path, fragments=(f"unknown workload '{workload}'", what, "FILE.py:FUNCTION"))


@pytest.mark.parametrize("bad", ["M=12x", "M", "M=0", "=3", "M=4,,K=2"])
def test_malformed_shape(bad):
    _one_line_error(axon_in_process("show", "matmul", "--shape", bad), "malformed --shape")


@pytest.mark.parametrize("command", ["show", "check", "variants"])
@pytest.mark.parametrize("family", ["M=128..256", "M=128,256", "K=64,M=128..512:128"])
def test_a_range_of_shapes_outside_tune_says_only_tune_takes_one(command, family):
    """`axon show W --shape M=128..256` was only 'malformed --shape ...: expected NAME=POSITIVE_INT'."""
    refused(command, "matmul", "--shape", family, fragments=("malformed --shape", "is for `axon tune` only"))


def test_shape_mismatch_inside_a_spec_names_op_and_shapes(tmp_path):
    spec = tmp_path / "bad_spec.py"
    spec.write_text("import axon.spec as ax\n@ax.spec(x='M K', g='N')\ndef scale(x, g):\n    return x * g\n")
    _one_line_error(
        axon_in_process("show", f"{spec}:scale", "--shape", "M=4,K=8,N=3"), "mul:", "[M, K]", "[N]", "bad_spec.py:4"
    )


def test_unbound_dimension(tmp_path):
    spec = tmp_path / "free_spec.py"
    spec.write_text("import axon.spec as ax\n@ax.spec(x='M K')\ndef f(x):\n    return ax.exp(x)\n")
    _one_line_error(axon_in_process("check", f"{spec}:f", "--shape", "M=4"), "unbound dimension 'K'")
    result = axon_in_process("check", f"{spec}:f", "--shape", "M=4,K=8")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("command", ["check", "show", "variants", "tune"])
def test_shape_given_twice_binds_both_and_a_dimension_given_twice_is_refused(tmp_path, command):
    # `--shape M=4 --shape K=8` kept K=8 alone and said "unbound dimension 'M'"
    spec = tmp_path / "two.py"
    spec.write_text("import axon.spec as ax\n@ax.spec(x='M K')\ndef f(x):\n    return ax.exp(x)\n")
    extra = ("--trials", "1", "--no-track", "--workdir", str(tmp_path / "w")) if command == "tune" else ()
    result = axon_in_process(command, f"{spec}:f", "--shape", "M=128", "--shape", "K=8", *extra)
    assert result.returncode == 0, result.stderr
    _one_line_error(
        axon_in_process(command, f"{spec}:f", "--shape", "M=128", "--shape", "M=256,K=8", *extra), "'M' is given twice"
    )


def test_hardware_file_errors_name_field_and_file(tmp_path):
    good = axon_in_process("hw", "trn2")
    assert good.returncode == 0 and "sbuf_bytes_per_partition=229376" in good.stdout
    from axon.target.hardware import CONFIG_DIR

    source = (CONFIG_DIR / "trn1.yaml").read_text()
    missing = tmp_path / "missing_field.yaml"
    missing.write_text(source.replace("  fixed_cost_ns: 1300", "  # fixed cost removed"))
    _one_line_error(axon_in_process("hw", str(missing)), "missing_field.yaml", "missing field dma.fixed_cost_ns")
    negative = tmp_path / "negative_field.yaml"
    negative.write_text(source.replace("hbm_bandwidth_gbps: 410", "hbm_bandwidth_gbps: -410"))
    _one_line_error(
        axon_in_process("hw", str(negative)), "negative_field.yaml", "memory.hbm_bandwidth_gbps must be positive"
    )


def test_a_hardware_name_that_is_a_path_a_repeated_key_and_a_directory_are_each_one_line(tmp_path):
    # `name: x/../../../escaped` had `axon tune` write its kernel outside the working directory (the
    # name is in file names); a key given twice was only "line 8 is not valid YAML"; a directory
    # given as the file was ".../axon/target/hw/DIR.yaml not found"
    from axon.target.hardware import CONFIG_DIR

    source = (CONFIG_DIR / "trn1.yaml").read_text()
    (tmp_path / "esc.yaml").write_text(source.replace("name: trn1", "name: x/../../escaped", 1))
    _one_line_error(axon_in_process("hw", str(tmp_path / "esc.yaml")), "field name must be a machine name")
    (tmp_path / "dup.yaml").write_text(source.replace("name: trn1", "name: trn1\nname: trn9", 1))
    _one_line_error(axon_in_process("hw", str(tmp_path / "dup.yaml")), "key 'name' given twice")
    _one_line_error(axon_in_process("hw", str(tmp_path)), "is a directory")
    (tmp_path / "ok.yaml").write_text(source.replace("name: trn1", "name: trn1-lab_2.b", 1))
    assert axon_in_process("hw", str(tmp_path / "ok.yaml")).returncode == 0


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("tune", "softmax", "--bogus"), "No such option '--bogus'"),
        (("tune", "softmax", "--trials", "0"), "--trials"),
        (("show",), "Missing argument"),
    ],
)
def test_usage_errors_are_one_line_naming_the_command(args, fragment):
    _one_line_error(axon_in_process(*args), "axon " + args[0], fragment)


def test_python_dash_m_axon_runs_the_command(tmp_path):
    # `python -m axon` said "No module named axon.__main__; 'axon' is a package and cannot be directly executed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "axon", "show", "nosuch"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.startswith("axon: error: unknown workload 'nosuch'"), result.stderr


def test_a_ctrl_c_while_the_command_loads_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the command's first half second (Python importing it) printed a KeyboardInterrupt
    traceback from the middle of an import; the entry point catches it as the command does later."""
    import builtins

    from axon import entry

    real = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "axon.cli":
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    assert exit_.value.code == 130 and capsys.readouterr().err == "axon: interrupted\n"
