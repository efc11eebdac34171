"""A user's own spec file (`path.py:function`) through every command, from another working directory."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from axon.workloads import all_workloads, get, identifier, load_spec
from tests.conftest import axon_in_process, refused

SPEC = """import axon.spec as ax

@ax.spec(x="M K", g="K", w="K N")
def rmsnorm_matmul(x, g, w, eps=1e-6):
    return (x / ax.sqrt(ax.mean(x * x) + eps) * g) @ w

# a spec whose function name is not an identifier
odd = ax.spec(x="M N")(lambda x: ax.exp(x) * 2.0)

PRESETS = {"rmsnorm_matmul": {"small": {"M": 256, "K": 256, "N": 128}}}
"""

SHAPE = "M=256,K=256,N=128"


@pytest.fixture
def layout(tmp_path):
    """tmp/specs/my_model.py, and tmp/cwd as the working directory (the spec is ../specs/...)."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "my_model.py").write_text(SPEC)
    (tmp_path / "cwd").mkdir()
    return tmp_path


def _kernel_path(stdout: str) -> str:
    match = re.search(r"kernel: (\S+)", stdout)
    assert match, stdout
    return match.group(1)


def test_identifier_is_a_valid_python_name():
    for name in ["rmsnorm_matmul", "my-fn", "2x", "<lambda>", "def", "", "nki", "nl"]:
        out = identifier(name)
        assert out.isidentifier() and out not in ("def", "nki", "nl"), (name, out)
    assert identifier("rmsnorm_matmul") == "rmsnorm_matmul"


def test_builtin_workloads_keep_their_kernel_names():
    # results tables are keyed on the emitted source: a built-in's graph (so kernel) name is its name
    for w in all_workloads():
        assert w.kernel_name == w.name
        assert w.graph("small").name == w.name


def test_spec_resolves_the_same_from_any_directory(layout, monkeypatch):
    monkeypatch.chdir(layout / "cwd")
    relative = load_spec("../specs/my_model.py:rmsnorm_matmul")
    absolute = get(f"{layout}/specs/my_model.py:rmsnorm_matmul")
    assert relative.name == absolute.name == f"{layout}/specs/my_model.py:rmsnorm_matmul"
    assert relative.kernel_name == "rmsnorm_matmul"
    assert get(f"{layout}/specs/my_model.py:odd").kernel_name == "_lambda_"


@pytest.mark.slow
def test_tune_a_spec_by_relative_path_from_another_directory(layout):
    result = axon_in_process(
        "tune",
        "../specs/my_model.py:rmsnorm_matmul",
        "--shape",
        SHAPE,
        "--trials",
        "3",
        "--workdir",
        "../w",
        "--no-track",
        "--quiet",
        cwd=layout / "cwd",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "0 failed" in result.stdout and "numerics" in result.stdout and "OK" in result.stdout
    kernel = _kernel_path(result.stdout)
    assert kernel == str(layout / "w" / "kernels" / re.search(r"rmsnorm_matmul_trn1_\w{8}\.py", kernel).group(0))
    source = (layout / "w" / "kernels").joinpath(kernel.rsplit("/", 1)[1]).read_text()
    assert "def rmsnorm_matmul(" in source
    # the kernels the backend traced are in the workdir, not the system temp folder
    assert list((layout / "w" / "cache" / "kernels").glob("kernel_*.py"))
    # the kernel runs as any NKI file does
    run = axon_in_process(
        "nki",
        "run",
        f"{kernel}:rmsnorm_matmul",
        "--input",
        "x=float32[256,256]",
        "--input",
        "g=float32[256]",
        "--input",
        "w=float32[256,128]",
        cwd=layout,
    )
    assert run.returncode == 0 and "output 0: shape [256, 128]" in run.stdout, run.stderr


CENTRED = """import axon.spec as ax

@ax.spec(x="M K", w="K N", g="M N")
def swish_gate(x, w, g):
    h = (x - ax.mean(x)) @ w
    return h * (g / (1.0 + ax.exp(-g)))
"""


@pytest.mark.slow
def test_a_bfloat16_spec_that_centres_rows_before_a_matmul_gets_a_checked_kernel(tmp_path):
    """Its kernel feeds TensorE the centred rows in bfloat16, as every bfloat16 matmul kernel does; the
    spec as written was held to float32 operands, so every kernel failed the adversarial check."""
    (tmp_path / "gate.py").write_text(CENTRED)
    result = axon_in_process(
        "tune", "gate.py:swish_gate", "--shape", "M=128,K=128,N=128", "--dtype", "bfloat16", "--trials", "3",
        "--no-track", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"adversarial: emulator in bfloat16 .* OK", result.stdout), result.stdout


@pytest.mark.slow
def test_tune_a_lambda_spec_by_absolute_path_through_the_python_api(layout, monkeypatch):
    from axon.search.api import TuneRequest, tune

    monkeypatch.chdir(layout / "cwd")
    report = tune(
        TuneRequest.make(
            f"{layout}/specs/my_model.py:odd", shape={"M": 256, "N": 512}, trials=2, workdir=layout / "w", track=False
        )
    )
    assert report.best_latency_ns and report.failed == 0 and report.numerics.ok
    assert report.kernel_path.startswith(str(layout / "w" / "kernels" / "_lambda__trn1_"))
    assert "def _lambda_(" in open(report.kernel_path).read()
    # the same spec by a relative path is the same task: its measurements are reused
    again = tune(
        TuneRequest.make(
            "../specs/my_model.py:odd", shape={"M": 256, "N": 512}, trials=3, workdir=layout / "w", track=False
        )
    )
    assert again.workload == report.workload and again.measured <= 1


@pytest.mark.slow
def test_sweep_entry_spec_path_is_relative_to_the_config_file(layout):
    (layout / "configs").mkdir()
    config = layout / "configs" / "mine.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "mine",
                "hw": "trn1",
                "trials": 2,
                "entries": [{"workload": "../specs/my_model.py:rmsnorm_matmul", "preset": "small"}],
            }
        )
    )
    result = axon_in_process("sweep", str(config), "--workdir", "../w", "--quiet", cwd=layout / "cwd")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "../specs/my_model.py:rmsnorm_matmul[small]:float32@trn1" in result.stdout
    assert "FAILED" not in result.stdout
    # the same entry relative to the working directory instead is refused before any work, naming it
    config.write_text(
        yaml.safe_dump(
            {
                "name": "mine",
                "hw": "trn1",
                "trials": 2,
                "entries": [{"workload": "specs/my_model.py:rmsnorm_matmul", "preset": "small"}],
            }
        )
    )
    bad = axon_in_process("sweep", str(config), "--workdir", "../w", cwd=layout / "cwd")
    assert bad.returncode == 2 and "entries[0].workload" in bad.stderr and "config file's directory" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.slow
def test_sweep_with_a_failing_entry_exits_non_zero_and_names_it(layout):
    # the entry passes every check before tuning, then fails while tuning: no point fits a tiny SBUF
    from axon.target.hardware import CONFIG_DIR

    tiny = layout / "tiny.yaml"
    tiny.write_text(
        re.sub(
            r"sbuf_bytes_per_partition: \d+", "sbuf_bytes_per_partition: 2048", (CONFIG_DIR / "trn1.yaml").read_text()
        )
    )
    config = layout / "s.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "tinysweep",
                "hw": str(tiny),
                "trials": 2,
                "sampler": "random",
                "entries": [{"workload": "specs/my_model.py:rmsnorm_matmul", "preset": "small"}],
            }
        )
    )
    result = axon_in_process("sweep", str(config), "--workdir", "w", "--quiet", cwd=layout)
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert (
        "axon: error: sweep tinysweep: entry specs/my_model.py:rmsnorm_matmul[small]:float32@trn1 failed"
        in result.stderr
    )
    assert "sbuf:" in result.stderr


def test_show_check_and_variants_of_a_spec_from_another_directory(layout):
    cwd = layout / "cwd"
    for ref in ("../specs/my_model.py:rmsnorm_matmul", f"{layout}/specs/my_model.py:rmsnorm_matmul"):
        show = axon_in_process("show", ref, "--shape", SHAPE, cwd=cwd)
        assert show.returncode == 0 and "x: f32[M=256, K=256]" in show.stdout, show.stderr
        check = axon_in_process("check", ref, "--shape", SHAPE, cwd=cwd)
        assert check.returncode == 0 and "rmsnorm_matmul.out: shape [256, 128]" in check.stdout, check.stderr
    variants = axon_in_process("variants", "../specs/my_model.py:rmsnorm_matmul", "--depth", "2", cwd=cwd)
    assert variants.returncode == 0 and "== variant 1" in variants.stdout, variants.stderr
    missing = axon_in_process("show", "specs/my_model.py:rmsnorm_matmul", cwd=cwd)
    assert missing.returncode == 2 and "spec file" in missing.stderr and "not found" in missing.stderr
    assert str(cwd / "specs" / "my_model.py") in missing.stderr


CHAIN = """import axon.spec as ax

@ax.spec(x="M K", a="K H", b="H N")
def chain(x, a, b):
    return ax.gelu(x @ a) @ b
"""


@pytest.mark.slow  # 12 s: a tune end to end (tests/lower/test_lowering.py checks the lowering in 0.2 s)
def test_tune_a_contraction_that_is_not_a_multiple_of_the_tile(tmp_path):
    # K=200 and H=200: every tile_k (128, 64) left a remainder, so every trial failed ("no trial produced
    # a valid measurement"); now the contraction is tiled by its largest divisor under tile_k (100, 50)
    (tmp_path / "chain.py").write_text(CHAIN)
    args = ("tune", "chain.py:chain", "--trials", "2", "--workdir", "w", "--no-track", "--quiet", "--cpus", "1")
    result = axon_in_process(*args, "--shape", "M=128,K=200,H=200,N=128", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "0 failed" in result.stdout and "max rel err" in result.stdout, result.stdout
    assert all(
        line.endswith("OK") for line in result.stdout.splitlines() if "numerics:" in line or "adversarial:" in line
    )
    assert (tmp_path / _kernel_path(result.stdout)).is_file() and result.stderr == ""


def test_the_same_command_after_an_edit_of_the_spec_says_so(tmp_path):
    # its earlier points were "measured before an upgrade or their records lost": the user had edited
    # the spec, and read that as Axon's doing
    spec = tmp_path / "s.py"
    spec.write_text('import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return ax.exp(x) * 2.0\n')
    args = ("tune", "s.py:f", "--shape", "M=128,N=256", "--trials", "2", "--workdir", "w", "--no-track", "--quiet")
    assert axon_in_process(*args, cwd=tmp_path).returncode == 0
    spec.write_text(spec.read_text().replace("* 2.0", "* 3.0"))
    result = axon_in_process(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "earlier points not counted, measured before an upgrade or an edit of the spec" in result.stdout


@pytest.mark.slow
def test_a_contraction_without_a_useful_tile_is_refused_naming_it(tmp_path):
    # K=251 (prime): tiles of one row would be correct and far slower than a padded K; the reason says so
    (tmp_path / "chain.py").write_text(CHAIN)
    args = ("tune", "chain.py:chain", "--trials", "2", "--workdir", "w", "--no-track", "--quiet", "--cpus", "1")
    result = axon_in_process(*args, "--shape", "M=128,K=251,H=128,N=128", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "contraction 251" in result.stderr and "pad it to a multiple of 64" in result.stderr, result.stderr


def test_a_spec_that_casts_to_bfloat16_is_checked_at_the_bfloat16_tolerance(tmp_path):
    # the float64 reference does not round at ax.cast: the kernel, which does, was held to float32's 1e-5
    # and every kernel failed ("the best kernel does not match the reference (max rel err 1.95e-03)")
    spec = 'import axon.spec as ax\n\n@ax.spec(x="M N")\ndef half(x):\n    return ax.cast(x, "bfloat16") * 2\n'
    (tmp_path / "half.py").write_text(spec)
    args = ("tune", "half.py:half", "--shape", "M=128,N=128", "--trials", "1", "--workdir", "w", "--no-track")
    result = axon_in_process(*args, "--quiet", "--cpus", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "(tolerance 0.02) OK" in result.stdout, result.stdout


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_variants_at_a_narrow_dtype_number_them_as_tune_does(tmp_path, dtype):
    # the listing traced the spec in float32 whatever --dtype said: at bfloat16 every variant, the spec as
    # written too, was "not tuned: beyond tune's search" (ids of float32 graphs) while "tune offers 2"
    from axon.search.api import verified_variants
    from axon.search.problem import LoweredProblem
    from axon.target import load_hw
    from axon.workloads import get as get_workload

    (tmp_path / "chain.py").write_text(CHAIN.replace("ax.gelu(x @ a) @ b", "(x @ a) @ b"))
    shape = "M=128,K=128,H=128,N=128"
    result = axon_in_process("variants", "chain.py:chain", "--shape", shape, "--dtype", dtype, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listed = dict(re.findall(r"== variant (\d+)  id (\w{8})", result.stdout))
    graph = get_workload(f"{tmp_path}/chain.py:chain").graph(None, dtype=dtype, M=128, K=128, H=128, N=128)
    tuned = LoweredProblem("chain", graph, load_hw("trn1"), verified_variants(graph), dtype).variants
    assert listed == {str(i): v.hash[:8] for i, v in enumerate(tuned)}, result.stdout


SDPA = """import axon.spec as ax

@ax.spec(q="S D", k="D T", bias="S T")
def sdpa(q, k, bias):
    s = (q @ k) * 0.125 + bias
    p = ax.exp(s - ax.max(s))
    return p / ax.sum(p)
"""


def test_variants_not_offered_are_told_apart_by_their_id(tmp_path):
    # two rejected variants with the same moves ("sink-factor + unshift-exp") printed two identical lines
    (tmp_path / "sdpa.py").write_text(SDPA)
    shape = ("--shape", "S=128,D=64,T=128")
    tuned = axon_in_process(
        "tune", "sdpa.py:sdpa", *shape, "--trials", "1", "--workdir", "w", "--no-track", cwd=tmp_path
    )
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    ids = re.findall(r"not offered \(floating point\): .* \[id (\w{8})\]$", tuned.stdout, re.M)
    listed = axon_in_process("variants", "sdpa.py:sdpa", *shape, cwd=tmp_path)
    assert len(ids) > 1 and len(set(ids)) == len(ids), tuned.stdout
    assert set(ids) == set(re.findall(r"^#   id (\w{8})  ", listed.stdout, re.M)), listed.stdout


@pytest.mark.slow
def test_a_report_whose_op_by_op_kernel_does_not_lower_says_so(tmp_path):
    """One row of 65,536: the fused kernel lowers (rows split), the op-by-op one does not fit SBUF, and
    the report's "vs unfused" line was missing without a word (its JSON field null)."""
    (tmp_path / "wide.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N', y='M N')\n"
        "def wide(x, y):\n    return ax.square(x - y) * 0.5 + ax.maximum(x, y)\n"
    )
    done = axon_in_process(
        "tune", "wide.py:wide", "--shape", "M=1,N=65536", "--dtype", "bfloat16", "--trials", "4", "--quiet",
        "--no-track", "--cpus", "1", "--workdir", "w", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("  vs unfused"))
    assert line.split()[2:] == ["n/a", "(the", "op-by-op", "kernel", "does", "not", "lower", "at", "this", "shape)"]


@pytest.mark.slow
def test_rerunning_a_tune_after_editing_the_spec_tunes_the_new_one(tmp_path):
    """The study is named by workload, shapes, dtype and hardware: after an edit that changed the knobs'
    choices, the same command's first ask raised Optuna's ValueError "CategoricalDistribution does not
    support dynamic value space", a traceback (an upgrade that changes a knob's choices did the same)."""
    spec = tmp_path / "m.py"
    elementwise = "    return ax.exp(x) * 2.0\n"
    softmax = "    e = ax.exp(x - ax.max(x))\n    return e / ax.sum(e)\n"
    args = ("tune", "m.py:f", "--shape", "M=256,N=512", "--trials", "2", "--quiet", "--no-track", "--json")
    reports = []
    for body in (elementwise, softmax, elementwise):
        spec.write_text(f"import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef f(x):\n{body}")
        done = axon_in_process(*args, "--cpus", "1", "--workdir", "w", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-800:]
        reports.append(json.loads(done.stdout))
    first, edited, back = reports
    assert edited["study"].startswith(first["study"] + ":space-") and edited["measured"] == 2
    assert back["study"] == first["study"] and back["resumed"] == 2  # the earlier study goes on where it was


def test_a_spec_file_imports_the_files_beside_it_and_only_its_own(tmp_path):
    """`from helpers import scale` in a spec was "failed to import: No module named 'helpers'" (a kernel
    file imports its siblings as a script would; a spec file did not); two specs in two directories,
    each with its own helpers.py, each get theirs."""
    for name, factor in (("a", 2.0), ("b", 3.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "helpers.py").write_text(f"def scale(x):\n    return x * {factor}\n")
        (tmp_path / name / "model.py").write_text(
            "import axon.spec as ax\nfrom helpers import scale\n\n\n@ax.spec(x='M N')\ndef f(x):\n    return scale(x)\n"
        )
    shown = [axon_in_process("show", f"{tmp_path / n / 'model.py'}:f", "--shape", "M=4,N=8") for n in "ab"]
    assert [s.returncode for s in shown] == [0, 0], shown[0].stderr
    assert "mul(x, 2)" in shown[0].stdout and "mul(x, 3)" in shown[1].stdout, [s.stdout for s in shown]


def test_a_spec_whose_presets_lack_default_names_them_when_a_dimension_is_unbound(tmp_path):
    # it said only "unbound dimension 'K' (also M, N); bind with --shape K=...", as if it had no presets
    (tmp_path / "nodef.py").write_text(
        "import axon.spec as ax\n\nPRESETS = {'mm': {'small': {'M': 128, 'K': 256, 'N': 128}}}\n\n"
        "@ax.spec(x='M K', w='K N')\ndef mm(x, w):\n    return x @ w\n"
    )
    line = refused("show", str(tmp_path / "nodef.py:mm"))
    assert "unbound dimension 'K'" in line and "--preset (small; it has no 'default')" in line, line
    assert load_spec(f"{tmp_path / 'nodef.py'}:mm").graph("small").bindings  # the preset itself binds


def test_a_preset_binding_a_dimension_the_spec_lacks_names_the_preset(tmp_path):
    # it said "spec f has no dimension 'NN'; its dimensions are M, N": the user typed no NN, the
    # file's PRESETS did
    (tmp_path / "typo.py").write_text(
        "import axon.spec as ax\n\nPRESETS = {'f': {'default': {'M': 128, 'NN': 64}, 'small': {'M': 4, 'N': 4}}}\n\n"
        "@ax.spec(x='M N')\ndef f(x):\n    return x * 2.0\n"
    )
    refused(
        "show",
        str(tmp_path / "typo.py:f"),
        fragments=("typo.py:f: PRESETS['f']['default'] binds 'NN'", "spec f does not have (its dimensions are M, N)"),
    )
    assert load_spec(f"{tmp_path / 'typo.py'}:f").graph("small").bindings == {"M": 4, "N": 4}


def test_presets_not_keyed_by_function_name_say_how_they_are_keyed(tmp_path):
    # PRESETS = {"default": {...}} (no function name first) was read as no presets for `mm`, and the
    # user saw only "unbound dimension 'K' (also M, N); bind with --shape K=..."
    body = "\n\n@ax.spec(x='M K', w='K N')\ndef mm(x, w):\n    return x @ w\n"
    flat = "PRESETS = {'default': {'M': 256, 'K': 512, 'N': 1000}, 'small': {'M': 128, 'K': 128, 'N': 128}}"
    (tmp_path / "flat.py").write_text("import axon.spec as ax\n" + flat + body)
    line = refused("show", str(tmp_path / "flat.py:mm"))
    assert "PRESETS is keyed by function name first" in line and "{'mm': {'default': ..., 'small': ...}}" in line
    # presets of the file's other functions only: `mm` has none, the unbound dimension is the message
    (tmp_path / "other.py").write_text("import axon.spec as ax\nPRESETS = {'other': {}}" + body)
    assert "unbound dimension" in refused("show", str(tmp_path / "other.py:mm"))


def test_a_one_dimensional_result_says_what_the_lowering_needs_and_how_to_keep_it_2d(tmp_path):
    # it said "outputs must share batch and row axes, got [(100,)]" for a sum without keepdims
    (tmp_path / "s.py").write_text(
        "import axon.spec as ax\n\n@ax.spec(x='M N')\ndef sumsq(x):\n    return ax.sum(x * x, keepdims=False)\n"
    )
    line = refused("tune", f"{tmp_path / 's.py'}:sumsq", "--shape", "M=100,N=256", "--trials", "2", "--no-track")
    assert "[rows, columns]" in line and "got [[100]]" in line and "keepdims=True" in line, line
