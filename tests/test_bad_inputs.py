"""Every user mistake is one line on stderr naming the problem and exit 2, within seconds."""

from __future__ import annotations

import errno
import importlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

import axon.spec as ax
from axon.errors import storage_failure
from tests.conftest import REPO, axon_in_process, refused, run_axon

SMALL_TUNE = ("tune", "softmax", "--preset", "small", "--trials", "2")  # a tune the refusal stops first

BAD_SPECS = """import numpy as np
import axon.spec as ax

@ax.spec(x="M K")
def uses_erf(x):
    return ax.erf(x)

@ax.spec(x="M K")
def uses_cumsum(x):
    return ax.cumsum(x)

@ax.spec(x="M K")
def uses_np_exp(x):
    return np.exp(x)

@ax.spec(x="M K")
def uses_np_mean(x):
    return np.mean(x)

@ax.spec(x="M K")
def unshaped(x, y):
    return x + y

@ax.spec(x="M K")
def uses_where(x):
    return ax.where(x > 0, x, 0.0)

@ax.spec(x="M K")
def uses_sqrtt(x):
    return ax.sqrtt(x)

@ax.spec(x="M K")
def numpy_scalars(x):
    return np.float32(2.0) * x + np.float64(1.0) / (x * x + 1)

@ax.spec(x="M K")
def uses_linalg_norm(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)

@ax.spec(x="M K")
def int_index(x):
    return x[0]

@ax.spec(x="M K")
def new_axis(x):
    return x[:, None, :]
"""


@pytest.fixture
def specs(tmp_path):
    path = tmp_path / "bad_specs.py"
    path.write_text(BAD_SPECS)
    return path


@pytest.mark.parametrize(
    "fn, fragments",
    [
        ("uses_erf", ("op ax.erf is not supported", "bad_specs.py:6", "axon/spec.py", "exp")),
        ("uses_cumsum", ("op ax.cumsum is not supported", "bad_specs.py:10")),
        ("uses_np_exp", ("np.exp applied to a traced tensor", "bad_specs.py:14", "use ax.exp")),
        ("uses_np_mean", ("np.mean applied to a traced tensor", "bad_specs.py:18", "use ax.mean")),
        ("unshaped", ("argument 'y' has no shape", "@ax.spec(y=")),
        # they read "np.norm applied ...", "only unit-step slices are supported, got 0" and "too many
        # indices for a rank-2 tensor": none of them what the line did
        ("uses_linalg_norm", ("np.linalg.norm applied to a traced tensor", "bad_specs.py:38")),
        ("int_index", ("an integer index (0) drops an axis", "slice it, 0:1", "bad_specs.py:42")),
        ("new_axis", ("None (np.newaxis) adds an axis", "use ax.reshape", "bad_specs.py:46")),
    ],
)
def test_spec_mistakes(specs, fn, fragments):
    for command in ("show", "check"):
        refused(command, f"{specs}:{fn}", "--shape", "M=4,K=8", fragments=fragments)


def test_an_unknown_op_is_offered_a_near_spelling_only(specs):
    """ax.where was answered "did you mean ax.power?" (difflib's 0.6 cutoff); a typo keeps its hint."""
    line = refused("check", f"{specs}:uses_where", "--shape", "M=4,K=8", fragments=("op ax.where is not supported",))
    assert "did you mean" not in line
    refused("check", f"{specs}:uses_sqrtt", "--shape", "M=4,K=8", fragments=("did you mean ax.sqrt?",))


def test_a_hardware_file_name_with_a_suffix_is_taken_as_a_path(tmp_path):
    """--hw specs.py was looked up as .../axon/target/hw/specs.py.yaml; a built-in name still is one."""
    (tmp_path / "specs.py").write_text("a: 1\n")
    refused("hw", "specs.py", cwd=tmp_path, fragments=("specs.py: missing field name",))
    refused("hw", "nosuch.json", cwd=tmp_path, fragments=("hardware file nosuch.json not found", "built-in: trn1"))
    (tmp_path / "trn1").write_text("not a hardware file\n")  # a file named like a built-in does not shadow it
    assert axon_in_process("hw", "trn1", cwd=tmp_path).returncode == 0


def test_numpy_scalars_still_trace(specs):
    result = axon_in_process("check", f"{specs}:numpy_scalars", "--shape", "M=4,K=8")
    assert result.returncode == 0 and "finite yes" in result.stdout, result.stderr


def test_numpy_style_min_var_and_abs_trace_as_their_ax_ops():
    """x.max() and x.mean() traced, x.min() and x.var() were "'Tensor' object has no attribute", and
    abs(x) "bad operand type for abs()"."""
    from axon.ir import evaluate, trace

    def spread(x):
        return abs(x - x.min()) / (x.var() + 1.0)

    x = np.random.default_rng(0).uniform(-1, 1, (4, 8))
    got = evaluate(trace(ax.spec(x="M K")(spread), M=4, K=8), {"x": x})["out"]
    want = np.abs(x - x.min(-1, keepdims=True)) / (x.var(-1, keepdims=True) + 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_tune_refuses_a_spec_mistake_before_tuning(specs, tmp_path):
    refused(
        "tune",
        f"{specs}:uses_np_exp",
        "--shape",
        "M=256,K=512",
        "--workdir",
        str(tmp_path / "w"),
        "--no-track",
        fragments=("np.exp applied to a traced tensor",),
        in_process=False,  # the refusal end to end: a new process, imports and all, within the CPU budget
    )


def test_workdir_that_is_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    refused(*SMALL_TUNE, "--workdir", str(afile), fragments=("workdir", "is a file"))
    assert afile.read_text() == "not a directory"


def test_workdir_that_is_a_symlink_loop(tmp_path):
    """A --workdir whose symbolic links lead back to themselves was a RuntimeError traceback ('Symlink
    loop from ...') out of Path.resolve, in tune, runs and ui alike."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for args in (SMALL_TUNE, ("runs",), ("ui",)):
        refused(*args, "--workdir", str(tmp_path / "a"), fragments=("workdir", "leads back to itself"))
    # --out too, before the tune (it was a traceback when the kernel was written, after it)
    refused(
        *SMALL_TUNE, "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "a"),
        fragments=(f"--out {tmp_path / 'a'} is a symbolic link that leads back to itself",),
    )  # fmt: skip
    assert not (tmp_path / "w" / "records.db").exists()


@pytest.mark.parametrize("sub", ["kernels", "cache/kernels", "plots"])
def test_workdir_whose_kernels_directory_is_a_file(tmp_path, sub):
    """`kernels` (or `cache/kernels`, `plots`) a file in the workdir: a FileExistsError traceback
    after the tuning, when the best kernel was written; now refused before it starts."""
    (tmp_path / "w" / sub).parent.mkdir(parents=True)
    (tmp_path / "w" / sub).write_text("mine")
    refused(
        "tune", "softmax", "--preset", "small", "--trials", "2", "--workdir", str(tmp_path / "w"),
        fragments=(f"{sub} is a file, not a directory", "--workdir"),
    )  # fmt: skip
    assert (tmp_path / "w" / sub).read_text() == "mine"


def test_a_journal_that_is_a_pipe_is_refused_not_waited_on(tmp_path):
    # --storage naming a named pipe: the journal's check read it, waiting for a writer for ever
    os.mkfifo(tmp_path / "journal")
    args = ("tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--workdir", str(tmp_path / "w"))
    result = run_axon(*args, "--storage", str(tmp_path / "journal"), timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "journal" in result.stderr and "is not a regular file (a named pipe)" in result.stderr


def test_overwritten_optuna_journal_names_the_file_and_the_way_out(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    content = b"\x00\x01garbage\n"
    (work / "optuna.log").write_bytes(content)
    line = refused(
        *SMALL_TUNE,
        "--workdir",
        str(work),
        "--no-track",
        fragments=("optuna.log is corrupt (line 1", "mv ", "records.db keeps every measurement"),
    )
    assert str(work / "optuna.log") in line
    assert (work / "optuna.log").read_bytes() == content  # nothing lost or rewritten


@pytest.mark.slow
def test_journal_cut_off_mid_write_is_refused_and_recovers_by_dropping_that_line(tmp_path):
    work = tmp_path / "w"
    args = ("tune", "softmax", "--preset", "small", "--workdir", str(work), "--no-track", "--quiet")
    first = axon_in_process(*args, "--trials", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    journal = work / "optuna.log"
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-25])  # a write cut off (kill -9, a full disk)
    refused(*args, "--trials", "3", fragments=("optuna.log is corrupt (its last line", "sed -i '$d'"))
    assert journal.read_bytes() == whole[:-25]
    journal.write_bytes(whole[: whole.rstrip(b"\n").rfind(b"\n") + 1])  # what the suggested sed does
    again = axon_in_process(*args, "--trials", "3")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "/ 0 failed trials" in again.stdout, again.stdout


@pytest.mark.parametrize(
    "line",
    [
        {"op_code": 99, "worker_id": "w"},  # an operation Optuna does not know: "AssertionError: Should not reach."
        123,  # JSON, but not a record
    ],
)
def test_journal_lines_that_parse_but_cannot_replay(tmp_path, line):
    work = tmp_path / "w"
    work.mkdir()
    good = {"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}
    (work / "optuna.log").write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    refused(*SMALL_TUNE, "--workdir", str(work), "--no-track", fragments=("optuna.log is corrupt (line 2", "mv "))


@pytest.mark.parametrize("trials", ["0", "-1"])
def test_sweep_trials_must_be_positive(trials, tmp_path):
    refused(
        "sweep",
        "configs/sweeps/nightly.yaml",
        "--trials",
        trials,
        "--workdir",
        str(tmp_path / "w"),
        fragments=("--trials",),
    )


@pytest.mark.parametrize("seconds", ["0", "-5"])
def test_tune_seconds_must_be_positive(seconds, tmp_path):
    refused(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--seconds",
        seconds,
        "--workdir",
        str(tmp_path / "w"),
        fragments=("--seconds",),
    )


def test_out_in_a_missing_directory(tmp_path):
    target = tmp_path / "nonexistent" / "dir" / "k.py"
    refused(*SMALL_TUNE, "--out", str(target), "--workdir", str(tmp_path / "w"), fragments=("--out", "does not exist"))
    assert not (tmp_path / "nonexistent").exists()


def test_out_ending_in_a_slash_is_refused_not_written_as_a_file(tmp_path):
    """`--out newdir/` (a directory that does not exist) wrote the kernel as a file named `newdir`."""
    refused(
        *SMALL_TUNE,
        "--out",
        "newdir/",
        "--workdir",
        "w",
        cwd=tmp_path,
        fragments=("--out newdir/ names a directory", "newdir/softmax.py"),
    )
    assert not (tmp_path / "newdir").exists()


KERNEL = """import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def double(a):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a[0:128, 0:512])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


@pytest.mark.slow
def test_profile_refuses_an_input_run_refuses(tmp_path):
    kernel = tmp_path / "double.py"
    kernel.write_text(KERNEL)
    good = axon_in_process(
        "nki", "profile", f"{kernel}:double", "--input", "a=float32[128,512]", "--out", str(tmp_path), "--no-png"
    )
    assert good.returncode == 0, good.stderr
    for shape in ("64,512", "128,256"):
        ran = axon_in_process("nki", "run", f"{kernel}:double", "--input", f"a=float32[{shape}]")
        assert ran.returncode == 2, ran.stdout
        profiled = refused(
            "nki", "profile", f"{kernel}:double", "--input", f"a=float32[{shape}]", "--out", str(tmp_path), "--no-png"
        )
        assert profiled == ran.stderr.strip()


def test_profile_out_in_a_missing_directory(tmp_path):
    kernel = tmp_path / "double.py"
    kernel.write_text(KERNEL)
    refused(
        "nki",
        "profile",
        f"{kernel}:double",
        "--input",
        "a=float32[128,512]",
        "--out",
        str(tmp_path / "no" / "where"),
        fragments=("--out", "does not exist"),
    )


def test_a_path_longer_than_the_system_takes_is_one_line(tmp_path):
    """A name over 255 bytes (a variable expanded twice) was an OSError traceback ('File name too
    long') from the first stat of it, in tune, verify, runs and nki profile alike."""
    kernel = tmp_path / "double.py"
    kernel.write_text(KERNEL)
    long = str(tmp_path / ("a" * 300))
    fragments = ("File name too long", "a" * 300, "give a shorter path")
    refused(*SMALL_TUNE, "--out", long + ".py", "--workdir", str(tmp_path / "w"), fragments=fragments)
    refused(*SMALL_TUNE, "--workdir", long, fragments=fragments)
    refused("verify", long + ".py", fragments=fragments)
    refused("runs", "--workdir", long, fragments=fragments)
    refused("nki", "profile", f"{kernel}:double", "--input", "a=float32[128,512]", "--out", long, fragments=fragments)


def test_profile_makes_its_out_directory_before_the_run_and_not_after_a_failed_one(tmp_path, monkeypatch):
    """--out of a directory the system will not make (/sys/x: EPERM, which os.access let pass) was an
    OSError traceback from mkdir after the whole run; a run that failed left nothing, and still does;
    --out "" wrote into the current directory."""
    kernel = tmp_path / "double.py"
    kernel.write_text(KERNEL)
    refused(
        "nki",
        "profile",
        f"{kernel}:double",
        "--input",
        "a=float32[64,512]",
        "--out",
        str(tmp_path / "new"),
        fragments=("double",),
    )
    assert not (tmp_path / "new").exists()
    refused("nki", "profile", f"{kernel}:double", "--input", "a=float32[128,512]", "--out", "", fragments=("is empty",))
    mkdir = Path.mkdir

    def refusing(self, *args, **kwargs):
        if self.name == "sysfs":
            raise PermissionError(errno.EPERM, "Operation not permitted", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refusing)
    target = str(tmp_path / "sysfs")
    refused(
        "nki",
        "profile",
        f"{kernel}:double",
        "--input",
        "a=float32[128,512]",
        "--out",
        target,
        fragments=(f"--out {target} cannot be made: Operation not permitted",),
    )


def test_run_refuses_inputs_larger_than_this_machine(tmp_path):
    kernel = tmp_path / "double.py"
    kernel.write_text(KERNEL)
    refused(  # in a new process: were the guard gone, a 4 TB allocation would not take the test worker down
        "nki",
        "run",
        f"{kernel}:double",
        "--input",
        "a=float32[1000000,1000000]",
        fragments=("GiB", "smaller inputs"),
        in_process=False,
    )


SPECS_THAT_RAISE = """import axon.spec as ax

@ax.spec(x="M N")
def compares(x):
    if ax.max(x) > 0:
        return x
    return -x

@ax.spec(x="M N")
def converts(x):
    return ax.exp(x) * float(x)

@ax.spec(x="M N")
def misspells(x):
    return ax.exp(xx)  # noqa: F821
"""


@pytest.mark.parametrize(
    "fn, fragments",
    [
        ("compares", ("spec compares failed while traced", "raising_specs.py:5", "TypeError", "'>'")),
        ("converts", ("spec converts failed while traced", "raising_specs.py:11", "TypeError: float()")),
        ("misspells", ("spec misspells failed while traced", "raising_specs.py:15", "NameError", "'xx'")),
    ],
)
def test_a_spec_that_raises_while_traced_is_one_line(tmp_path, fn, fragments):
    # a Python comparison, conversion or name error in the spec's body: was a traceback, exit 1
    path = tmp_path / "raising_specs.py"
    path.write_text(SPECS_THAT_RAISE)
    for command in ("show", "variants"):
        refused(command, f"{path}:{fn}", "--shape", "M=4,N=8", fragments=fragments)
    refused("tune", f"{path}:{fn}", "--shape", "M=4,N=8", "--workdir", str(tmp_path / "w"), fragments=fragments)


@pytest.mark.parametrize(
    "presets, fragments",
    [
        ("5", ("PRESETS must be a dict", "got int")),
        ("[1]", ("PRESETS must be a dict", "got list")),
        ('{"f": {"default": 5}}', ("PRESETS['f']['default'] must map dimension names to sizes",)),
        ('{"f": {"default": {"M": "abc", "N": 4}}}', ("PRESETS['f']['default']['M'] must be a positive integer",)),
        ('{"f": {"small": {"M": 128.0, "N": 4}}}', ("PRESETS['f']['small']['M'] must be a positive integer",)),
        ('{"f": {"default": {"M": 0, "N": 4}}}', ("PRESETS['f']['default']['M']", "got 0")),
    ],
)
def test_malformed_presets_name_the_file_and_the_entry(tmp_path, presets, fragments):
    # PRESETS = 5 or a preset that is not a dict: was a traceback (AttributeError, TypeError)
    path = tmp_path / "presets_spec.py"
    path.write_text(
        f'import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return ax.exp(x)\n\nPRESETS = {presets}\n'
    )
    refused("show", f"{path}:f", fragments=(str(path), *fragments))
    refused("tune", f"{path}:f", "--workdir", str(tmp_path / "w"), fragments=(str(path), *fragments))


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("--seed", "-1"), ("--seed", "-1")),  # was a numpy traceback
        (("--seed", str(2**32)), ("--seed",)),
        (("--patience", "0"), ("--patience",)),  # was accepted: a tune that measured nothing
        (("--patience", "-3"), ("--patience",)),
        (("--shape", "M=128,N=128,M=256"), ("dimension 'M' is given twice",)),  # the last M silently won
        (("--preset", "nosuch"), ("has no preset 'nosuch'",)),  # silently ignored by a spec without PRESETS
    ],
)
def test_tune_refuses_options_it_used_to_take(tmp_path, args, fragments):
    path = tmp_path / "plain.py"
    path.write_text('import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return ax.exp(x)\n')
    refused("tune", f"{path}:f", "--shape", "M=128,N=128", *args, "--workdir", str(tmp_path / "w"), fragments=fragments)


@pytest.mark.parametrize("command", ["check", "nki-run", "profile"])
def test_other_seeds_must_be_in_range(tmp_path, command):
    if command == "check":
        refused("check", "softmax", "--seed", "-1", fragments=("--seed",))
    else:
        cmd = ("nki", "run") if command == "nki-run" else ("nki", "profile")
        refused(
            *cmd,
            "examples/kernels/l2norm.py:l2_normalize",
            "--input",
            "a=float32[128,64]",
            "--seed",
            "-1",
            fragments=("--seed",),
        )


def test_sweep_seed_must_be_in_range(tmp_path):
    config = tmp_path / "s.yaml"
    config.write_text("entries:\n  - workload: softmax\n    preset: small\nseed: -1\n")
    refused("sweep", str(config), "--workdir", str(tmp_path / "w"), fragments=(str(config), "field seed", "-1"))


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("--shape", "M=200,n=1000"), ("has no dimension 'n'",)),  # listed every variant, exit 0
        (("--hw", "trn9"), ("trn9", "not found")),  # ignored without sizes
        (("--preset", "nosuch"), ("has no preset 'nosuch'",)),  # a note under the listing, exit 0
    ],
)
def test_variants_refuses_what_tune_refuses(tmp_path, args, fragments):
    path = tmp_path / "plain.py"
    path.write_text('import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return ax.exp(x - ax.max(x))\n')
    refused("variants", f"{path}:f", *args, fragments=fragments)


def test_a_directory_named_like_a_spec_file_is_not_reported_missing(tmp_path):
    (tmp_path / "model.py").mkdir()
    refused("tune", "model.py:f", cwd=tmp_path, fragments=("model.py' is a directory, not a file",))


@pytest.mark.parametrize("command", ["run", "profile"])
def test_a_directory_named_like_a_kernel_file_is_not_reported_missing(tmp_path, command):
    """`axon nki run kdir.py:k` said "kernel file kdir.py not found" of a directory that is there."""
    (tmp_path / "kdir.py").mkdir()
    os.mkfifo(tmp_path / "kpipe.py")
    refused(
        "nki", command, "kdir.py:k", "--input", "a=float32[4,4]", cwd=tmp_path, fragments=("kdir.py is a directory",)
    )
    refused("nki", command, "kpipe.py:k", cwd=tmp_path, fragments=("kpipe.py is not a regular file",))


def test_unreachable_tracking_server_is_refused_at_once(tmp_path):
    # MLflow's client retried a server that refuses connections with backoff: the tune sat silent for minutes
    refused(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        "1",
        "--workdir",
        str(tmp_path / "w"),
        "--tracking-uri",
        "http://127.0.0.1:1",
        fragments=("MLflow tracking server http://127.0.0.1:1 cannot be reached",),
    )


@pytest.mark.parametrize("dtype", ["float8_e4m3", "float64"])
def test_sweep_entry_dtype_is_one_tune_takes(tmp_path, dtype):
    # float8_e4m3 was accepted, tuned, then failed every kernel's check (exit 1, after the tuning);
    # float64 was refused only when its entry came to be checked, naming float8 among the dtypes to use
    config = tmp_path / "s.yaml"
    config.write_text(f"entries:\n  - workload: softmax\n    preset: small\n    dtype: {dtype}\n")
    refused(
        "sweep",
        str(config),
        "--workdir",
        str(tmp_path / "w"),
        fragments=("entries[0].dtype must be one of float32, bfloat16, float16", repr(dtype)),
    )


@pytest.mark.parametrize("name", ["out-1", "class", "nl", "1"])
def test_an_output_name_that_cannot_name_a_kernel_variable_is_refused(tmp_path, name):
    # {"out-1": ...} was emitted as `out-1 = ...`: every trial failed with the kernel's SyntaxError;
    # {1: ...} was a traceback; {"nl": ...} shadowed nki.language in the kernel
    key = name if name == "1" else repr(name)
    path = tmp_path / "outs.py"
    path.write_text(f'import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return {{{key}: x * 2}}\n')
    refused("tune", f"{path}:f", "--shape", "M=128,N=128", "--workdir", str(tmp_path / "w"), fragments=("output name",))


def _tune_once(path, tmp_path):
    """`axon tune PATH:f` at M=128,N=128, one trial, in this process."""
    shape, workdir = ("--shape", "M=128,N=128"), ("--workdir", str(tmp_path / "w"))
    return axon_in_process("tune", f"{path}:f", *shape, "--trials", "1", *workdir, "--no-track", "--quiet")


def test_a_spec_whose_kernel_computes_inf_leaks_no_numpy_warning(tmp_path):
    # x / 0.0 (refused now, see below; 1 / (x * 0) computes the same): the emulator's RuntimeWarning
    # ("divide by zero encountered in divide") reached the user's stderr
    import warnings

    path = tmp_path / "inf.py"
    path.write_text('import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return 1.0 / (x * 0.0)\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _tune_once(path, tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]


def test_a_spec_whose_own_reference_overflows_is_named_not_its_kernel(tmp_path):
    # exp(1000 * x) on [-1, 1]: 'the best kernel does not match the reference (max rel err inf)', as if
    # the kernel were wrong, where the float64 reference itself is inf
    path = tmp_path / "over.py"
    path.write_text('import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return ax.exp(x * 1000.0)\n')
    result = _tune_once(path, tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "the float64 reference itself is inf or NaN at 2,3" in result.stderr and "declare" in result.stderr


def test_family_out_that_names_a_file_is_refused(tmp_path):
    # `--out fam.py` with a --shape list made a directory named fam.py holding the family's files
    refused(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--shape",
        "M=128,256",
        "--out",
        str(tmp_path / "fam.py"),
        "--workdir",
        str(tmp_path / "w"),
        fragments=("--out", "fam.py names a file", "directory"),
    )
    assert not (tmp_path / "fam.py").exists()


@pytest.mark.parametrize(
    "body, line", [('x * float("inf")', 5), ('ax.maximum(x, float("nan"))', 5), ('x ** float("inf")', 5)]
)
def test_a_constant_that_is_not_finite_is_refused_at_its_line(tmp_path, body, line):
    # x * inf was emitted as the name `inf` in the kernel: every trial failed with a NameError
    path = tmp_path / "nonfinite.py"
    path.write_text(f'import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return {body}\n')
    refused(
        "tune",
        f"{path}:f",
        "--shape",
        "M=128,N=128",
        "--workdir",
        str(tmp_path / "w"),
        fragments=("is not finite", f"nonfinite.py:{line}"),
    )


@pytest.mark.parametrize("body", ["x / 0.0", "x / 0", "(x + 1) / np.float32(0)"])
def test_a_division_by_the_constant_zero_is_refused_at_its_line(tmp_path, body):
    # the kernel was all inf and its report said 'max rel err 0.00e+00 OK' (inf against inf)
    path = tmp_path / "byzero.py"
    path.write_text(f'import numpy as np\nimport axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return {body}\n')
    refused(
        "tune", f"{path}:f", "--shape", "M=128,N=128", "--workdir", str(tmp_path / "w"),
        fragments=("division by the constant 0", "byzero.py:6"),
    )  # fmt: skip


@pytest.mark.parametrize("value", ["abc", "0", "-2"])
def test_a_malformed_axon_cpus_is_refused_as_cpus_is(tmp_path, monkeypatch, value):
    # it was replaced quietly: "abc" by the default, "0" by 1, while --cpus 0 is refused
    monkeypatch.setenv("AXON_CPUS", value)
    refused(
        "tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--workdir", str(tmp_path),
        fragments=(f"AXON_CPUS={value!r}", "positive integer"),
    )  # fmt: skip


def test_rerunning_a_study_whose_every_trial_failed_says_so(tmp_path):
    # it said the study "already has --trials 3 trials ... raise --trials", as if they had measured something
    (tmp_path / "prime.py").write_text(
        "import axon.spec as ax\n\n@ax.spec(x='M K', w='K N')\ndef mm(x, w):\n    return x @ w\n"
    )
    args = (
        "tune",
        "prime.py:mm",
        "--shape",
        "M=128,K=1021,N=128",
        "--trials",
        "2",
        "--no-track",
        "--quiet",
        "--cpus",
        "1",
    )
    # the first run tunes (two trials that fail to lower): its exit 2 comes after them, not within a
    # refusal's CPU budget (4.02 s of 4.0 on a loaded machine); the second is refused before any trial
    first = axon_in_process(*args, cwd=tmp_path)
    assert first.returncode == 2 and "Traceback" not in first.stderr, first.stderr
    (line,) = first.stderr.strip().splitlines()  # one line, as a refusal
    assert line.startswith("axon: error: ") and "no trial produced a valid measurement" in line
    refused(*args, cwd=tmp_path, fragments=("already has 2 trials and every one failed", "pad it", "--study NAME"))


def test_rerunning_a_study_after_an_upgrade_measures_again(tmp_path, monkeypatch):
    # the same command after an upgrade that changed the simulator refused ("already has 2 trials,
    # none of them a kernel this version emits"): the old trials filled the budget. Now they do not
    # count, the best of them is measured again by the new code and the rest of the budget explores.
    args = ("tune", "softmax", "--preset", "small", "--trials", "2", "--no-track", "--quiet", "--cpus", "1")
    args += ("--workdir", str(tmp_path / "w"))
    assert axon_in_process(*args).returncode == 0
    monkeypatch.setattr("axon.measure.backend.timing_version", lambda: "another simulator")
    result = axon_in_process(*args)
    assert result.returncode == 0, result.stderr
    assert "after 2 measured / 0 reused" in result.stdout, result.stdout
    assert "2 earlier points not counted, measured before an upgrade" in result.stdout
    assert "the best 1 measured again" in result.stdout
    # and a third run of the same command, nothing changed, has nothing left to do
    again = axon_in_process(*args)
    assert again.returncode == 0 and "after 0 measured" in again.stdout and "resumed: " in again.stdout


def test_rerunning_a_study_whose_records_were_deleted_measures_again(tmp_path):
    # records.db deleted (or lost) while the Optuna journal stayed: its trials have no kernel behind
    # them, so they must not fill the budget of the next run
    args = ("tune", "rmsnorm", "--preset", "small", "--trials", "2", "--no-track", "--quiet", "--cpus", "1")
    args += ("--workdir", str(tmp_path / "w"))
    assert axon_in_process(*args).returncode == 0
    dbs = list((tmp_path / "w").rglob("records.db"))
    assert len(dbs) == 1
    dbs[0].unlink()
    result = axon_in_process(*args)
    assert result.returncode == 0, result.stderr
    assert "earlier points not counted" in result.stdout and "after 2 measured" in result.stdout


# A spec file is Python run on import and a spec function is run to be traced: neither may hang the
# command or end it with its own exit code (both did: `while True: pass` at the top level hung `axon
# show` with no word, and `sys.exit(3)` ended it with exit 3 and nothing said).
@pytest.mark.parametrize(
    "body, fragments",
    [
        ("while True:\n    pass\n", ("did not finish importing in 0.5 s", "endless_loop.py")),
        ("import sys\nsys.exit(3)\n", ("called sys.exit(3) while imported", "endless_loop.py")),
    ],
)
def test_a_spec_file_that_never_imports_or_exits_is_one_line(tmp_path, monkeypatch, body, fragments):
    monkeypatch.setattr("axon.workloads.IMPORT_SECONDS", 0.5)
    (tmp_path / "endless_loop.py").write_text("import axon.spec as ax\n" + body)
    refused("show", f"{tmp_path / 'endless_loop.py'}:f", "--shape", "M=4,N=8", fragments=fragments)


@pytest.mark.parametrize(
    "loop, fragments",
    [
        ("x = x + 1.0", ("more than 2,000 ops traced in spec f", "endless.py:6")),  # nodes without bound
        ("y = x + 1.0", ("spec f did not return in 0.5 s while traced", "endless.py:", "endless loop")),  # one node
    ],
)
def test_a_spec_that_loops_forever_while_traced_is_one_line(tmp_path, monkeypatch, loop, fragments):
    tracing = importlib.import_module("axon.ir.trace")  # the module: `axon.ir.trace` is also its function
    monkeypatch.setattr(tracing, "MAX_TRACED_NODES", 2000)
    monkeypatch.setattr(tracing, "TRACE_SECONDS", 0.5)
    spec = f"import axon.spec as ax\n\n@ax.spec(x='M N')\ndef f(x):\n    while True:\n        {loop}\n"
    (tmp_path / "endless.py").write_text(spec)
    refused("show", f"{tmp_path / 'endless.py'}:f", "--shape", "M=4,N=8", fragments=fragments)


def test_a_read_only_workdir_is_refused_before_tuning(tmp_path, monkeypatch):
    # an existing workdir on a read-only mount was Optuna's traceback opening optuna.log (a fresh
    # one under it was already "cannot be created"); tests run as root, who may write a 0o555
    # directory, so the mount's answer to access(2) is given here
    workdir = tmp_path / "ro"
    workdir.mkdir()
    workdir.chmod(0o555)
    real_access = os.access
    monkeypatch.setattr("axon.workdir.os.access", lambda p, mode: False if Path(p) == workdir else real_access(p, mode))
    args = ("tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--workdir", str(workdir))
    refused(*args, fragments=(f"workdir {workdir} is not writable", "--workdir"))


def test_a_full_disk_while_tuning_is_one_line(tmp_path, monkeypatch):
    # the disk filling up mid-tune (on a 1.2 MB tmpfs: MLflow's metrics insert) was a traceback of
    # 90 lines, exit 1; here the kernel's file is written to /dev/full, a real ENOSPC
    real_write_text = Path.write_text

    def full(path, data, *args, **kwargs):
        if path.parent.name != "kernels":
            return real_write_text(path, data, *args, **kwargs)
        with open("/dev/full", "w") as f:
            return f.write(data)

    monkeypatch.setattr(Path, "write_text", full)
    args = ("tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--quiet", "--cpus", "1")
    result = axon_in_process(*args, "--workdir", str(tmp_path / "w"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("axon: error: No space left on device"), result.stderr
    assert "the same command resumes" in lines[0]


def test_a_full_disk_while_the_kernel_is_written_keeps_the_out_file_and_the_same_command_resumes(tmp_path, monkeypatch):
    # written in place, the kernel's file was left empty by ENOSPC: the earlier kernel at --out was lost
    # and the same command, run again once there was room, refused --out as "not a kernel Axon wrote"
    out = tmp_path / "k.py"
    args = ("tune", "rmsnorm", "--preset", "small", "--trials", "1", "--no-track", "--quiet", "--cpus", "1")
    args += ("--workdir", str(tmp_path / "w"), "--out", str(out))
    assert axon_in_process(*args).returncode == 0
    earlier = out.read_text()
    real_write_text = Path.write_text

    def full(path, data, *a, **kwargs):
        if path.parent != tmp_path:
            return real_write_text(path, data, *a, **kwargs)
        with open(path, "w") as f, open("/dev/full", "w") as dev:
            f.flush()
            return dev.write(data)

    with monkeypatch.context() as patched:
        patched.setattr(Path, "write_text", full)
        result = axon_in_process(*args)
    assert result.returncode == 2 and "No space left on device" in result.stderr, result.stderr
    assert out.read_text() == earlier and sorted(p.name for p in tmp_path.iterdir()) == ["k.py", "w"]
    assert axon_in_process(*args).returncode == 0, "the same command, once there is room"


def test_a_kernel_written_through_a_symlink_goes_to_its_target(tmp_path):
    from axon.search.guards import write_kernel_file

    (tmp_path / "real").mkdir()
    (tmp_path / "k.py").symlink_to(tmp_path / "real" / "k.py")
    write_kernel_file(tmp_path / "k.py", "one")
    write_kernel_file(tmp_path / "k.py", "two")
    assert (tmp_path / "k.py").is_symlink() and (tmp_path / "real" / "k.py").read_text() == "two"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["k.py"]


def test_sqlites_full_disk_is_found_under_the_exceptions_that_wrap_it(tmp_path):
    # MLflow raises SQLite's "database or disk is full" inside SQLAlchemy's and its own exceptions
    db = sqlite3.connect(tmp_path / "tiny.db")
    db.execute("PRAGMA max_page_count = 2")
    db.execute("CREATE TABLE t (v BLOB)")
    try:
        try:
            db.execute("INSERT INTO t VALUES (?)", (b"x" * 100_000,))
        except sqlite3.OperationalError as exc:
            raise RuntimeError("(raised as a result of Query-invoked autoflush)") from exc
    except RuntimeError as wrapped:
        line = storage_failure(wrapped)
    assert line is not None and "database or disk is full" in line and "resumes" in line
    assert storage_failure(RuntimeError("database or disk")) is None


@pytest.mark.parametrize("command", ["run", "profile"])
@pytest.mark.parametrize(
    "body, fragments",
    [
        ("while True:\n    pass\n", ("loop.py: kernel file did not finish importing in 0.5 s",)),
        ("import sys\nsys.exit(4)\n", ("loop.py: kernel file called sys.exit(4) while imported",)),
    ],
)
def test_a_kernel_file_that_never_imports_or_exits_is_one_line(tmp_path, monkeypatch, command, body, fragments):
    # as a spec file's: the loop hung `axon nki run` with no word, sys.exit(4) ended it with exit 4
    monkeypatch.setattr(importlib.import_module("axon.cli.nki"), "IMPORT_SECONDS", 0.5)  # `axon.cli.nki`: the group
    (tmp_path / "loop.py").write_text("import nki\n" + body)
    args = ("--input", "a=float32[128,128]", *(("--out", str(tmp_path)) if command == "profile" else ()))
    refused("nki", command, f"{tmp_path / 'loop.py'}:k", *args, fragments=fragments)


ENDLESS = """import nki
import nki.language as nl


@nki.jit
def spin(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    while True:
        pass
    nl.store(out, value=t)
    return out


@nki.jit
def reload(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = 0
    while i >= 0:
        t = nl.load(a)
        i += 1
    nl.store(out, value=t)
    return out
"""


@pytest.mark.parametrize("command", ["run", "profile"])
@pytest.mark.parametrize("kernel, lines", [("spin", (9, 10)), ("reload", (19, 20, 21))])
def test_a_kernel_that_never_returns_is_stopped_with_its_line(tmp_path, monkeypatch, command, kernel, lines):
    # an endless loop in the kernel's body hung `axon nki run` and `nki profile` for ever, without a word;
    # it is stopped at a line of its loop (which one depends on when the time is up)
    monkeypatch.setattr(importlib.import_module("axon.cli.nki"), "RUN_SECONDS", 0.5)
    (tmp_path / "endless.py").write_text(ENDLESS)
    args = ("--input", "a=float32[128,128]", *(("--out", str(tmp_path)) if command == "profile" else ()))
    fragments = (f"kernel {kernel} did not return in 0.5 s", "an endless loop?")
    line = refused("nki", command, f"{tmp_path / 'endless.py'}:{kernel}", *args, fragments=fragments)
    assert any(line.startswith(f"axon: error: endless.py:{n}: ") for n in lines), line


@pytest.mark.parametrize("command", ["run", "profile"])
def test_a_kernel_that_takes_the_machines_memory_is_stopped_with_its_line(tmp_path, monkeypatch, command):
    # an endless loop of loads grows the emulator's trace by about 2 GB a minute: the 900 s limit would
    # come after the machine's memory was gone (8 GB in 5 min on a busy machine); 4 MB free here
    cli = importlib.import_module("axon.cli.nki")
    monkeypatch.setattr(cli, "available_bytes", lambda: 5 * 2**20)
    (tmp_path / "endless.py").write_text(ENDLESS)
    args = ("--input", "a=float32[128,512]", *(("--out", str(tmp_path)) if command == "profile" else ()))
    fragments = ("kernel reload grew this process to", "past 80% of the 0.0 GiB free", "an endless loop")
    # not `refused`: its CPU budget is for refusing bad input, and this kernel runs until its memory
    # grows (in a test worker whose heap has room from earlier tests, a few seconds)
    result = axon_in_process("nki", command, f"{tmp_path / 'endless.py'}:reload", *args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and all(f in lines[0] for f in fragments), result.stderr
    assert any(lines[0].startswith(f"axon: error: endless.py:{n}: ") for n in (19, 20, 21)), lines[0]


def test_out_in_a_directory_that_is_not_writable_is_refused_before_tuning(tmp_path, monkeypatch):
    # on a read-only mount the kernel's write failed after the whole tune; as root (the tests) a 0o555
    # directory is writable, so the mount's answer to access(2) is given here
    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr("axon.search.guards.os.access", lambda p, m: Path(p) != folder and real_access(p, m))
    args = ("tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--workdir", str(tmp_path / "w"))
    refused(*args, "--out", str(folder / "k.py"), fragments=(f"--out {folder / 'k.py'} is not writable",))


def test_out_naming_a_file_axon_did_not_write_is_refused_and_the_file_kept(tmp_path):
    # `axon tune model.py:block --out model.py` replaced the user's spec with the kernel, exit 0
    spec = tmp_path / "model.py"
    spec.write_text((REPO / "examples" / "my_model.py").read_text())
    before = spec.read_bytes()
    args = ("tune", f"{spec}:rmsnorm_matmul", "--preset", "small", "--trials", "1", "--no-track", "--quiet")
    refused(*args, "--workdir", str(tmp_path / "w"), "--out", str(spec), fragments=("is not a kernel Axon wrote",))
    assert spec.read_bytes() == before


def test_out_naming_a_device_or_a_pipe_is_refused_and_left_as_it_was(tmp_path):
    # the kernel is renamed over --out: as root, `--out /dev/full` replaced the device with the kernel, exit 0
    # (a pipe here, and a link to it, so that a regression replaces nothing of the machine's)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    link = tmp_path / "k.py"
    link.symlink_to(pipe)
    args = ("tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--workdir", str(tmp_path / "w"))
    for out in (pipe, link):
        refused(*args, "--out", str(out), fragments=(f"--out {out} is not a regular file (a named pipe)",))
    assert stat.S_ISFIFO(pipe.stat().st_mode) and link.is_symlink()


@pytest.mark.parametrize("name", ["nl", "nki", "nisa"])
def test_an_input_named_like_a_kernel_module_is_refused(tmp_path, name):
    # as an output of that name was: the kernel's parameter `nl` hid nki.language, and every trial failed
    # in the emulator ("kernel f raised AttributeError: 'View' ...")
    path = tmp_path / "ins.py"
    path.write_text(f'import axon.spec as ax\n\n@ax.spec({name}="M N")\ndef f({name}):\n    return {name} * 2\n')
    refused("show", f"{path}:f", "--shape", "M=128,N=128", fragments=(f"input name {name!r} must not be",))


def test_an_input_named_like_a_kernel_variable_is_refused_by_the_lowering(tmp_path):
    # inputs `x_sb` and `ones_float32` were shadowed by the kernel's own tiles of those names (a
    # `TypeError: 'LoopVar' object is not subscriptable` for one named `i_r`): every trial failed
    # with a message about the kernel's code, not the spec's names
    path = tmp_path / "names.py"
    path.write_text(
        'import axon.spec as ax\n\n@ax.spec(x_sb="M N", ones_float32="N")\n'
        "def clash(x_sb, ones_float32):\n    return x_sb * ones_float32\n"
    )
    args = ("tune", f"{path}:clash", "--shape", "M=256,N=512", "--trials", "2", "--no-track", "--quiet", "--cpus", "1")
    result = axon_in_process(*args, "--workdir", str(tmp_path / "w"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "input or output 'ones_float32' has the name of one of the kernel's own variables" in result.stderr


def test_profile_out_that_is_not_writable_is_refused_before_profiling(tmp_path, monkeypatch):
    # a read-only --out was an OSError traceback after the profile had run and printed
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: not (Path(p) == tmp_path and m & os.W_OK) and real_access(p, m))
    kernel = "examples/kernels/l2norm.py:l2_normalize"
    args = ("nki", "profile", kernel, "--input", "a=float32[128,512]", "--out", str(tmp_path))
    refused(*args, fragments=(f"--out {tmp_path} is not writable",))


def test_profile_out_or_its_file_that_is_a_pipe_is_refused_before_profiling(tmp_path):
    # --out a named pipe was a FileExistsError traceback after the profile; a pipe where the timeline
    # goes waited for a reader for ever
    kernel = "examples/kernels/l2norm.py:l2_normalize"
    args = ("nki", "profile", kernel, "--input", "a=float32[128,512]", "--no-png", "--out")
    os.mkfifo(tmp_path / "pipe")
    refused(*args, str(tmp_path / "pipe"), fragments=(f"--out {tmp_path / 'pipe'} is not a directory",))
    os.mkfifo(tmp_path / "l2_normalize.perfetto.json")
    refused(*args, str(tmp_path), fragments=("l2_normalize.perfetto.json is not a regular file",))


def test_a_full_disk_line_promises_a_resume_only_where_there_is_one():
    full = OSError(errno.ENOSPC, "No space left on device", "/d/x.png")
    assert "the same command resumes" in storage_failure(full, resumable=True)
    assert storage_failure(full, resumable=False) == "No space left on device: /d/x.png (free some space)"


@pytest.mark.parametrize("shape", ["M 0", "M N-256"])
def test_an_axis_of_size_zero_is_refused(tmp_path, shape):
    # x="M 0" (or N-256 at N=256) was a NumPy "cannot reshape array of size 0" traceback when tuned
    (tmp_path / "z.py").write_text(f'import axon.spec as ax\n\n@ax.spec(x="{shape}")\ndef z(x):\n    return x * 2\n')
    args = ("tune", f"{tmp_path / 'z.py'}:z", "--shape", "M=128,N=256" if "N" in shape else "M=128", "--trials", "1")
    refused(
        *args, "--no-track", "--workdir", str(tmp_path / "w"), fragments=("input x has shape [128, 0]", "at least 1")
    )


def test_a_shape_that_does_not_parse_names_the_file_the_spec_and_the_input(tmp_path):
    # it said only "cannot parse dimension '-4': ...", for every spec of the file, naming none of them
    (tmp_path / "d.py").write_text('import axon.spec as ax\n\n@ax.spec(x="M -4")\ndef neg(x):\n    return x * 2\n')
    refused("show", f"{tmp_path / 'd.py'}:neg", fragments=("d.py", "spec neg: input x ('M -4')", "'-4'"))


@pytest.mark.parametrize("command", ["run", "profile"])
def test_a_spec_given_to_nki_run_or_profile_says_it_is_a_spec(tmp_path, command):
    # the spec's ops ran on the emulator's views: "kernel softmax raised AttributeError: 'View' object
    # has no attribute '_b'", which names neither the mistake nor the command to use
    (tmp_path / "m.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef softmax(x):\n    return ax.exp(x - ax.max(x))\n"
    )
    args = ("--input", "x=float32[128,256]", *(("--out", str(tmp_path)) if command == "profile" else ()))
    ref = f"{tmp_path / 'm.py'}:softmax"
    refused("nki", command, ref, *args, fragments=(f"{ref} is an Axon spec (@ax.spec), not an NKI kernel", "axon tune"))


def test_a_kernel_file_given_as_a_spec_says_it_is_a_kernel(tmp_path):
    # "spec file '.../l2norm.py' failed to import: ModuleNotFoundError: No module named 'nki'"
    # (a new process: the emulator's import shim, once installed in this one, makes `import nki` work)
    kernel = REPO / "examples" / "kernels" / "l2norm.py"
    refused(
        "show",
        f"{kernel}:l2_normalize",
        fragments=(f"'{kernel}' is an NKI kernel file, not a spec (it imports nki)", "axon nki run"),
        in_process=False,
    )


@pytest.mark.parametrize(
    "value, fragment",
    [("0", "0.0 is not in the range x>0"), ("-1", "-1.0 is not in the range x>0"), ("nan", "nan is not a finite")],
)
def test_a_proof_timeout_that_is_not_a_positive_number_is_refused(value, fragment):
    # 0, -1 and nan were taken as 0.05 s per proof without a word
    refused("variants", "softmax", "--preset", "small", "--depth", "1", "--timeout", value, fragments=(fragment,))


def test_an_infinite_proof_timeout_is_refused(tmp_path):
    # Z3's timeout: OverflowError: cannot convert float infinity to integer, a traceback
    (tmp_path / "m.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef f(x):\n    return ax.exp(x) / ax.sum(ax.exp(x))\n"
    )
    refused("variants", f"{tmp_path / 'm.py'}:f", "--shape", "M=128,N=256", "--timeout", "inf", fragments=("inf",))


@pytest.mark.parametrize(
    "storage, fragment",
    [
        # FileNotFoundError from inside Optuna's journal backend, a traceback, exit 1
        ("{tmp}/nodir/x.log", "Optuna journal {tmp}/nodir/x.log: directory {tmp}/nodir does not exist"),
        # ImportError "Failed to import DB access module", a traceback, exit 1 (the password redacted)
        ("mysql://u:secret@h/db", "Optuna storage mysql://u:***@h/db cannot be opened"),
        # sqlalchemy's OperationalError "unable to open database file", a traceback, exit 1
        ("sqlite:///{tmp}/nodir/s.db", "cannot be opened: unable to open database file"),
    ],
)
def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path, storage, fragment):
    line = refused(
        "tune", "softmax", "--preset", "small", "--trials", "1", "--no-track", "--workdir", str(tmp_path / "w"),
        "--storage", storage.format(tmp=tmp_path),
        fragments=(fragment.format(tmp=tmp_path),),
    )  # fmt: skip
    assert "secret" not in line


@pytest.mark.parametrize("command", ["sweep", "worker"])
def test_a_sweep_or_worker_storage_that_cannot_be_opened_is_refused_before_any_task(tmp_path, command):
    # the sweep published itself, started its MLflow run and failed each task in turn, one line each
    args = ("sweep", str(REPO / "configs" / "sweeps" / "demo.yaml")) if command == "sweep" else ("worker",)
    line = refused(
        *args, "--workdir", str(tmp_path / "w"), "--storage", "mysql://u:secret@127.0.0.1/x",
        fragments=("Optuna storage mysql://u:***@127.0.0.1/x cannot be opened",),
    )  # fmt: skip
    assert "entry" not in line and not (tmp_path / "w" / "mlflow.db").exists()


@pytest.mark.parametrize("option", ["--out", "--storage", "profile --out"])
def test_a_path_under_a_file_says_the_file_is_not_a_directory(tmp_path, option):
    # "--out F/k.py: directory F does not exist", of a file F that exists
    (tmp_path / "f").write_text("x")
    if option == "profile --out":
        kernel = REPO / "examples" / "kernels" / "l2norm.py"
        args = ("nki", "profile", f"{kernel}:l2_normalize", "--input", "a=float32[128,128]", "--out", f"{tmp_path}/f/d")
    else:
        args = ("tune", "softmax", "--preset", "small", "--workdir", str(tmp_path / "w"), option, f"{tmp_path}/f/x")
    refused(*args, fragments=(f"{tmp_path / 'f'} is a file, not a directory",))


@pytest.mark.parametrize(
    "args", [(*SMALL_TUNE, "--out", ""), (*SMALL_TUNE, "--workdir", " "), ("runs", "--workdir", "")]
)
def test_an_empty_path_option_is_refused_not_taken_as_the_default(tmp_path, args):
    """`--out "$OUT"` with OUT unset ran on the default path without a word."""
    option = args[-2]
    refused(*args, cwd=tmp_path, fragments=(f"'{option}': is empty",))
    assert not (tmp_path / ".axon").exists()
