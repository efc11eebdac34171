"""Kernel families over a shape range: range parsing, the family's choices, its module, its refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from axon.errors import AxonError, SpecError
from axon.measure.backend import SimBackend
from axon.measure.records import RecordDB
from axon.options import parse_shape_range
from axon.search.api import verified_variants
from axon.search.family import FamilyBuilder, FamilyConfig, FamilyProblems, anchors, grid, span
from axon.search.familyout import boundary_checks, load_family, write_module
from axon.target import load_hw
from axon.workloads import get
from tests.conftest import REPO, axon_in_process, refused, run_axon


def test_range_list_and_step():
    assert parse_shape_range("M=128..512:128") == {"M": (128, 256, 384, 512)}
    assert parse_shape_range("M=256..512") == {"M": (256, 384, 512)}  # default step 128
    assert parse_shape_range("M=512,128,K=64") == {"M": (128, 512), "K": (64,)}
    assert parse_shape_range("M=1..5:2,S=3,4") == {"M": (1, 3, 5), "S": (3, 4)}


def test_a_range_whose_end_is_off_the_step_serves_its_end():
    """`--shape M=1..300` made a family of M=1, 129, 257, silently without the 300 asked for (the
    README's `M=1..1000` served up to 897)."""
    assert parse_shape_range("M=1..300") == {"M": (1, 129, 257, 300)}
    assert parse_shape_range("M=1..1000")["M"][-2:] == (897, 1000)
    assert parse_shape_range("M=2..11:4,K=64") == {"M": (2, 6, 10, 11), "K": (64,)}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("M=512..256", "is empty"),
        ("M=a..4", "malformed"),
        ("M=1..4:0", "malformed"),
        ("M=1..4,M=8", "repeated"),
        ("M=1..100000:1", "at most 256"),
        ("M=1..1000000000000:1", "at most 256"),  # refused before it is listed (it would exhaust memory)
        ("M=-3", "malformed"),
    ],
)
def test_bad_ranges(text, fragment):
    with pytest.raises(SpecError, match=fragment):
        parse_shape_range(text)


@pytest.mark.parametrize(
    "shape, fragment",
    [
        ("M=512..256", "--shape 'M=512..256': the range '512..256' is empty"),
        ("M=128..2048:x", "malformed --shape"),
        ("Q=128..256", "no dimension 'Q'"),
        ("M=128..80000128:40000000", "HBM"),  # beyond the hardware file's HBM at the range's end
    ],
)
def test_cli_refuses_bad_ranges(shape, fragment):
    refused("tune", "rmsnorm_matmul", "--preset", "small", "--shape", shape, "--no-track", fragments=(fragment,))


def test_cli_refuses_one_optuna_study_for_a_range(tmp_path):
    """A range runs one tuning per measured shape: one named study cannot hold them; refused, not ignored."""
    refused(
        "tune",
        "rmsnorm_matmul",
        "--preset",
        "small",
        "--shape",
        "M=128..256",
        "--study",
        "mine",
        "--workdir",
        str(tmp_path),
        "--no-track",
        fragments=("--storage/--study name one Optuna study",),
    )


def test_a_time_budget_stops_the_family_after_its_first_shape(tmp_path):
    hw = load_hw("trn1")
    g = get("rmsnorm_matmul").graph("small")
    problems = FamilyProblems("rmsnorm_matmul", g, hw, verified_variants(g, depth=0), "float32")
    shapes = [{**g.bindings, "M": m} for m in (128, 256, 384)]
    config = FamilyConfig(anchor_trials=50, anchors=3, probes=2, candidates_per_shape=1, seconds=1e-3)
    fam = FamilyBuilder(problems, shapes, SimBackend(), RecordDB(tmp_path / "r.db"), config).build()
    assert fam.out_of_time and len(fam.measured_shapes) == 1 and not fam.probe_shapes
    assert fam.measurements < 50 and len(fam.rows) == 3  # every shape still served
    assert "time budget reached" in fam.summary()


def test_a_family_says_when_its_variant_discovery_took_long(tmp_path, monkeypatch):
    """A 30-op spec's family sat 40 s before its first trial without a word, as its tune did."""
    import axon.search.familytune as familytune
    from axon.search.api import TuneRequest

    class Built(Exception):
        pass

    def slow(graph, depth, stopped):
        stopped.append("variant discovery took 36 s (7 proofs ran out their timeout, unproved)")
        return ["v0", "v1"]

    def problems(*args):
        raise Built

    monkeypatch.setattr(familytune, "verified_variants", slow)
    monkeypatch.setattr(familytune, "FamilyProblems", problems)
    told: list[str] = []
    request = TuneRequest.make("softmax", preset="small", workdir=tmp_path, track=False)
    with pytest.raises(Built):
        familytune.tune_family(request, {"M": (128, 256)}, warn=told.append)
    assert told == [
        "variant discovery took 36 s (7 proofs ran out their timeout, unproved); tuning its 2 variants "
        "(a spec of fewer ops proves faster)"
    ]


def test_anchors_are_ends_and_middle():
    shapes = grid({"M": tuple(range(128, 8193, 128))})
    assert [s["M"] for s in anchors(shapes, 3)] == [128, 1024, 8192]
    assert span(shapes[:3]) == "M=128..384"


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    hw = load_hw("trn1")
    g = get("rmsnorm_matmul").graph("small")
    problems = FamilyProblems("rmsnorm_matmul", g, hw, verified_variants(g, depth=0), "float32")
    shapes = [{**g.bindings, "M": m} for m in (128, 200, 384)]  # 200: a partial row tile
    tmp = tmp_path_factory.mktemp("family")
    db = RecordDB(tmp / "records.db")
    config = FamilyConfig(anchor_trials=3, probe_trials=2, anchors=2, probes=1, candidates_per_shape=2)
    fam = FamilyBuilder(problems, shapes, SimBackend(), db, config, holdout=[shapes[1]]).build()
    return fam, problems, tmp


def test_a_family_kernel_file_says_how_it_was_made_and_verifies(family):
    # a family's kernel files had no provenance block: `axon verify` refused them ("not a kernel file axon
    # tune wrote"); their variants are found once, at the range's largest shape, and bound to each shape
    from types import SimpleNamespace

    from axon.search.provenance import verify

    fam, problems, tmp = family
    request = SimpleNamespace(workload="rmsnorm_matmul", preset="small", depth=0)
    write_module(fam, problems, tmp / "verified", [], "trn1", request=request)
    path = tmp / "verified" / "kernels" / "rmsnorm_matmul_K256_M200_N512.py"  # a partial row tile
    assert '"variants_shape": {"K": 256, "M": 256, "N": 512}' in path.read_text()
    verdict = verify(path)
    assert verdict.ok, verdict
    assert verdict.lines[0] == "spec rmsnorm_matmul at {'K': 256, 'M': 200, 'N': 512} float32 on trn1"


def test_family_serves_every_shape_and_measures_none_held_out(family):
    fam, _, _ = family
    assert [r.dims["M"] for r in fam.rows] == [128, 200, 384]
    assert {r.schedule for r in fam.rows} == set(range(len(fam.schedules)))  # no schedule without shapes
    held = next(r for r in fam.rows if r.dims["M"] == 200)
    assert not held.measured and held.tuned_best_ns is None
    assert all(r.measured for r in fam.rows if r.dims["M"] != 200)
    assert np.isfinite(held.latency_ns) and held.latency_ns > held.roofline_ns  # predicted, above the roofline


def test_family_module_dispatches_to_checked_kernels(family):
    fam, problems, tmp = family
    checks = boundary_checks(fam, problems, tmp / "cache")
    assert checks and all(c.ok for c in checks), checks
    module = load_family(write_module(fam, problems, tmp / "out", checks, "trn1"))
    assert "Measured" in module.__doc__ and "predicted" in module.__doc__ and "no padding" in module.__doc__
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (200, 256)).astype(np.float32)
    g = rng.uniform(-1, 1, 256).astype(np.float32)
    w = rng.uniform(-1, 1, (256, 512)).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6) * g) @ w
    out = module.emulate(x, g, w)
    assert out.shape == (200, 512)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()
    with pytest.raises(KeyError, match="no kernel in this family"):
        module.kernel_file(x[:100], g, w)
    json.dumps(module.ROWS)


def test_load_family_refuses_a_file_that_is_not_a_family_module(tmp_path):
    """A spec file was imported and returned as if a family; a kernel file raised ModuleNotFoundError."""
    spec = tmp_path / "model.py"
    spec.write_text('import axon.spec as ax\n\n\n@ax.spec(x="M N")\ndef f(x):\n    return x\n')
    kernel = tmp_path / "k.py"
    kernel.write_text("import nki\n\n\n@nki.jit\ndef k(a):\n    return a\n")
    for path in (spec, kernel):
        with pytest.raises(AxonError, match="not a kernel family module"):
            load_family(path)


def test_load_family_refuses_a_missing_module():
    with pytest.raises(Exception, match="no \\*_family.py module"):
        load_family(tempfile.mkdtemp())


@pytest.mark.slow
def test_a_spec_family_from_another_directory_lands_in_the_workdir(tmp_path):
    """A spec's workload name is its path and function: the family's files are named by the kernel."""
    (tmp_path / "spec.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M K', w='K N')\ndef shifted(x, w):\n"
        "    return ax.exp(x - ax.max(x)) @ w\n"
    )
    result = axon_in_process(
        "tune", "spec.py:shifted", "--shape", "M=128..256:128,K=256,N=256", "--trials", "4", "--quiet",
        "--no-track", "--workdir", "w", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = tmp_path / "w" / "families" / "shifted_trn1"
    assert (out / "shifted_family.py").is_file() and (out / "shifted_family.png").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.py", "w"]  # nothing beside the spec
    assert load_family(out).__name__ == "shifted_family"


def test_a_bfloat16_family_keeps_the_float32_one_of_the_same_kernel(tmp_path):
    """Both went to families/<kernel>_<hw>/: the bfloat16 tune replaced the float32 family's module."""
    (tmp_path / "spec.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef e(x):\n    return ax.exp(x)\n"
    )
    for dtype in ("float32", "bfloat16"):
        result = axon_in_process(
            "tune", "spec.py:e", "--shape", "M=128,256", "--shape", "N=128", "--dtype", dtype, "--trials", "1",
            "--quiet", "--no-track", "--workdir", "w", cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    families = tmp_path / "w" / "families"
    assert load_family(families / "e_trn1").DTYPE == "float32"
    assert load_family(families / "e_trn1_bfloat16").DTYPE == "bfloat16"


def test_a_family_takes_its_cost_model_and_records_how_it_was_tuned(tmp_path):
    """`--cost-model` with a range was dropped without a word (a missing file tuned on from scratch),
    and the family's run had no seed, trials, sampler, backend, hw file hash or cost model to rerun it by."""
    import mlflow

    (tmp_path / "spec.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef e(x):\n    return ax.exp(x)\n"
    )
    common = ("tune", "spec.py:e", "--shape", "M=128,256", "--shape", "N=128", "--trials", "1", "--quiet")
    refused(
        *common, "--cost-model", "missing.json", "--no-track", cwd=tmp_path, fragments=("missing.json", "not found")
    )
    result = axon_in_process(
        *common, "--hw", "trn2", "--cost-model", "trn1", "--seed", "7", "--workdir", "w", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "was trained on trn1, tuning on trn2" in result.stderr
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/w/mlflow.db")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    params = run.data.params
    assert (params["seed"], params["trials"], params["sampler"], params["backend"]) == ("7", "1", "costmodel", "sim")
    assert params["cost_model"].endswith("axon-costmodel-trn1.json") and params["hw_file_hash"]


def test_the_same_family_command_again_measures_nothing_and_answers_the_same(tmp_path):
    """Each shape's tuning was a study in memory: the same command again (a finished family, or one
    resumed after Ctrl-C) tuned every shape with its whole budget again, from a model trained on the
    first run's records, and wrote another family."""
    (tmp_path / "spec.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef e(x):\n    return ax.exp(x - ax.max(x))\n"
    )
    args = ("tune", "spec.py:e", "--shape", "M=128,256,384", "--shape", "N=256", "--trials", "3", "--quiet")
    modules = []
    for _ in range(2):
        result = axon_in_process(*args, "--no-track", "--json", "--workdir", "w", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        modules.append(json.loads(result.stdout))
    assert modules[0]["measurements"] > 0 and modules[1]["measurements"] == 0
    assert modules[0]["schedules"] == modules[1]["schedules"] and modules[0]["rows"] == modules[1]["rows"]


def test_the_same_family_command_with_out_runs_again_into_its_directory(tmp_path):
    """The family's --out was checked as a single kernel's: a directory was refused ("is a directory:
    give a file path"), so the command that had made it failed when run again."""
    (tmp_path / "spec.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef t(x):\n    return ax.tanh(x)\n"
    )
    args = ("tune", "spec.py:t", "--shape", "M=128,256", "--shape", "N=128", "--trials", "1", "--quiet", "--no-track")
    for _ in range(2):
        result = axon_in_process(*args, "--workdir", "w", "--out", "fam", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "fam" / "t_family.py").is_file()
    os.mkfifo(tmp_path / "pipe")
    result = axon_in_process(*args, "--workdir", "w", "--out", "pipe", cwd=tmp_path)
    assert result.returncode == 2 and "--out pipe is a named pipe" in result.stderr, result.stderr


def test_a_family_out_on_a_read_only_mount_is_refused_before_tuning(tmp_path, monkeypatch):
    # "Read-only file system: ro/fam" came after every shape was tuned; as root (the tests) a 0o555
    # directory is writable, so the mount's answer to access(2) is given here
    folder = tmp_path / "ro"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr("axon.search.guards.os.access", lambda p, m: Path(p) != folder and real_access(p, m))
    args = ("tune", "softmax", "--preset", "small", "--shape", "M=128,256", "--trials", "1", "--no-track")
    refused(*args, "--workdir", str(tmp_path / "w"), "--out", str(folder / "fam"), fragments=("is not writable",))


def test_a_family_tuned_on_a_hardware_file_of_ones_own_emulates_on_it(tmp_path):
    """Its module had emulate(hw='mychip'), a name no file answers: 'hardware file .../mychip.yaml not found'."""
    trn1 = (REPO / "configs" / "hw" / "trn1.yaml").read_text()
    (tmp_path / "mychip.yaml").write_text(trn1.replace("name: trn1", "name: mychip", 1))
    (tmp_path / "spec.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef e(x):\n    return ax.exp(x)\n"
    )
    args = ("tune", "spec.py:e", "--shape", "M=128,256", "--shape", "N=128", "--trials", "1", "--quiet", "--no-track")
    result = axon_in_process(*args, "--hw", "mychip.yaml", "--workdir", "w", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    module = load_family(tmp_path / "w" / "families" / "e_mychip")
    x = np.random.default_rng(0).uniform(-1, 1, (256, 128)).astype(np.float32)
    assert np.abs(module.emulate(x) - np.exp(x.astype(np.float64))).max() < 1e-5 * np.e


@pytest.mark.slow
def test_ctrl_c_in_a_family_keeps_its_measurements_and_the_same_command_resumes(tmp_path):
    args = [sys.executable, "-m", "axon.cli", "tune", "rmsnorm_matmul", "--preset", "small", "--shape", "M=128..512"]
    args += ["--trials", "40", "--workdir", str(tmp_path), "--no-track", "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline, db = time.time() + 120, tmp_path / "records.db"
    try:
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
            if db.exists() and len(RecordDB(db).records()) >= 3:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted, no family written" in err and "Traceback" not in err, err[-2000:]
    assert json.loads(out) == {  # with --json, stdout says so too (it was empty)
        "interrupted": True,
        "workload": "rmsnorm_matmul",
        "family": None,
        "best_latency_ns": None,
        "kernel_path": None,
        "message": err.strip().removeprefix("axon: "),
    }
    kept = {r.kernel_hash for r in RecordDB(db).records()}
    assert len(kept) >= 3
    resumed = axon_in_process(*args[3:10], "4", *args[11:])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = {r.kernel_hash for r in RecordDB(db).records()}
    assert kept <= after  # nothing recorded before the interrupt was lost
    assert json.loads(resumed.stdout)["measurements"] < len(after)  # and what was measured is reused


@pytest.mark.parametrize(
    "shape,fragment",
    [
        ("M=1..4", "the range '1..4' holds one shape (1) at step 128 (the default step)"),
        ("M=128..130:128", "holds one shape (128) at step 128: give a smaller step, e.g. 128..130:2"),
        ("M=128,128", "M=128 is given twice"),
        ("M=128..512,256", "M=256 is given twice"),
    ],
)
def test_a_range_or_list_that_collapses_to_one_shape_says_so(shape, fragment):
    """They were 'malformed --shape ...: expected NAME=POSITIVE_INT', which named nothing wrong."""
    refused("tune", "rmsnorm", "--preset", "small", "--shape", shape, fragments=(fragment,))


def test_a_range_of_one_value_is_that_shape(tmp_path, monkeypatch):
    """M=128..128 is M=128 (it was refused as a malformed single shape)."""
    seen = []

    def preflight(request):
        seen.append(request.shape)
        raise SpecError("stop here")

    monkeypatch.setattr("axon.search.tuning.preflight", preflight)
    result = axon_in_process(
        "tune", "rmsnorm", "--preset", "small", "--shape", "M=128..128", "--workdir", str(tmp_path)
    )
    assert seen == [{"M": 128}] and "stop here" in result.stderr, result.stderr


def test_family_module_dispatches_composite_dimensions_and_names_mismatched_inputs(tmp_path):
    """An input shaped "KV*G S" (gqa's q) binds no dimension by itself: the module dispatched with
    KeyError 'G' on every call. Arrays that disagree (x of one shape, c of another) ran a kernel on
    the wrong data (a cryptic emulator error, garbage on a device); now a KeyError naming them."""
    from axon.search.family import Family, ShapeRow

    (tmp_path / "gq.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(q='KV*G S', c='KV S')\ndef gq(q, c):\n    return ax.exp(q) * 2.0\n"
    )
    g = get(f"{tmp_path}/gq.py:gq").graph(None, KV=2, G=64, S=128)
    problems = FamilyProblems("gq", g, load_hw("trn1"), verified_variants(g, depth=0), "float32")
    shapes = [{"G": 64, "KV": 2, "S": s} for s in (128, 256)]
    point = problems(shapes[0]).default_point()
    rows = [ShapeRow(d, 0, 1.0, True, 1.0, 1.0) for d in shapes]
    fam = Family("gq", {"S": (128, 256)}, [point], rows, 2, measured_shapes=shapes)
    module = load_family(write_module(fam, problems, tmp_path / "out", [], "trn1"))
    q = np.random.default_rng(0).uniform(-1, 1, (128, 256)).astype(np.float32)
    c = np.zeros((2, 256), np.float32)
    assert module.kernel_file(q, c)[0].name == "gq_G64_KV2_S256.py"
    assert np.abs(module.emulate(q, c) - 2 * np.exp(q.astype(np.float64))).max() < 1e-5 * 2 * np.e
    with pytest.raises(KeyError, match=r"inputs q\[128, 256\], c\[2, 128\] \(inputs q\[G\*KV, S\], c\[KV, S\]"):
        module.kernel_file(q, c[:, :128])
    with pytest.raises(KeyError, match="no kernel in this family"):
        module.kernel_file(q[0], c)
    with pytest.raises(TypeError, match=r"expected 2 arrays \(q, c\), got 1"):
        module.kernel_file(q)


def test_family_module_refuses_arrays_of_another_dtype(tmp_path):
    """A bfloat16 family called with float32 arrays (or a float32 one with float64 or int32) ran its
    kernels on the cast inputs and returned bfloat16 (float32) without a word; now a TypeError
    naming each array and its dtype."""
    import ml_dtypes

    from axon.search.family import Family, ShapeRow

    g = get("rmsnorm_matmul").graph("small")
    problems = FamilyProblems("rmsnorm_matmul", g, load_hw("trn1"), verified_variants(g, depth=0), "bfloat16")
    shapes = [{**g.bindings, "M": m} for m in (128, 256)]
    rows = [ShapeRow(d, 0, 1.0, True, 1.0, 1.0) for d in shapes]
    fam = Family("rmsnorm_matmul", {"M": (128, 256)}, [problems(shapes[0]).default_point()], rows, 2, shapes)
    module = load_family(write_module(fam, problems, tmp_path / "out", [], "trn1"))
    bf = ml_dtypes.bfloat16
    x, gv, w = np.ones((128, 256), bf), np.ones(256, bf), np.ones((256, 512), bf)
    assert module.DTYPE == "bfloat16" and "M128" in module.kernel_file(x, gv, w)[0].name
    with pytest.raises(TypeError, match=r"take bfloat16 arrays, but x is float32, w is float32$"):
        module.kernel_file(x.astype(np.float32), gv, w.astype(np.float32))
    with pytest.raises(TypeError, match=r"but g is list"):
        module.kernel_file(x, [1.0] * 256, w)


def test_a_shape_the_family_does_not_serve_is_named_against_the_sizes_it_does(tmp_path):
    """A family of M=1,100,129 refused M=50 saying "served: M=1..129", which holds 50."""
    from axon.search.family import Family, ShapeRow

    g = get("softmax").graph("small")
    problems = FamilyProblems("softmax", g, load_hw("trn1"), verified_variants(g, depth=0), "float32")
    shapes = [{**g.bindings, "M": m} for m in (1, 100, 129)]
    rows = [ShapeRow(d, 0, 1.0, True, 1.0, 1.0) for d in shapes]
    fam = Family("softmax", {"M": (1, 100, 129)}, [problems(shapes[0]).default_point()], rows, 3, shapes)
    module = load_family(write_module(fam, problems, tmp_path / "a", [], "trn1"))
    with pytest.raises(KeyError, match=r"served: M=1,100,129\)"):
        module.kernel_file(np.zeros((50, g.bindings["N"]), np.float32))
    rows = [ShapeRow({**g.bindings, "M": m}, 0, 1.0, True, 1.0, 1.0) for m in (128, 256, 384)]
    assert (
        "M=128..384:128"
        in write_module(Family("softmax", {}, fam.schedules, rows, 3), problems, tmp_path / "b", [], "trn1").read_text()
    )


def test_a_schedule_names_the_dimension_it_is_fixed_at_where_the_family_varies_it():
    # --shape M=128,256,N=128..384:128: schedules serving M=128 and M=256 were both "N=128..384"
    shapes = grid({"M": (128, 256), "N": (128, 256, 384)})
    assert span([s for s in shapes if s["M"] == 128], shapes) == "M=128,N=128..384"
    assert span(shapes, shapes) == span(shapes) == "M=128..256,N=128..384"
    assert span([{"M": 128, "N": 256}]) == "M=128,N=256"  # one shape, nothing varies: every dimension


def test_a_schedule_failing_its_numerics_check_is_turned_down_and_the_next_serves(tmp_path):
    # a single-shape tune turns a kernel down and reports the next; a family exited 2 with its module
    # marked FAILED ("schedule 0 fails the numerics check at {'N': 512, 'M': 1} ... offset(x)") while
    # other measured schedules passed: bn_stats moments of rows offset far from zero, at M=1
    (tmp_path / "odd.py").write_text(
        "import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef rowstd(x):\n    return ax.sqrt(ax.var(x) + 1e-6)\n"
    )
    args = (
        "tune",
        "odd.py:rowstd",
        "--shape",
        "M=1,2",
        "--shape",
        "N=512",
        "--trials",
        "4",
        "--no-track",
    )  # two --shape
    result = axon_in_process(*args, "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "turned down: " in result.stdout and "offset(x)" in result.stdout, result.stdout
    assert "numerics at the boundaries: 2/2 ok" in result.stdout
    module = load_family(tmp_path / "w" / "families" / "rowstd_trn1")
    x = (1e4 + np.random.default_rng(0).standard_normal((1, 512))).astype(np.float32)
    ref = np.sqrt(x.astype(np.float64).var(axis=-1) + 1e-6)
    assert np.abs(module.emulate(x).reshape(-1) - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.slow
def test_a_family_with_a_shape_no_kernel_can_be_built_at_is_one_line(tmp_path):
    """K=100,257: every trial at the prime K fails, and its row of the family's table divided inf by inf:
    "RuntimeWarning: invalid value encountered in divide" and its source line came above the error."""
    spec = tmp_path / "outer.py"
    spec.write_text('import axon.spec as ax\n\n\n@ax.spec(x="M K", w="K N")\ndef outer(x, w):\n    return x @ w\n')
    shape = "M=128,K=100,257,N=128"
    r = run_axon(
        "tune", f"{spec}:outer", "--shape", shape, "--trials", "2", "--quiet", "--workdir", str(tmp_path / "w")
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "contraction 257" in r.stderr and "pad it" in r.stderr and "Warning" not in r.stderr


@pytest.mark.parametrize("varied_last", [False, True], ids=["sorted-names", "varied-dimension-last"])
def test_a_rerun_over_other_shapes_replaces_the_kernel_files_it_no_longer_serves(tmp_path, varied_last):
    """M=128..384 then M=256..512 into one directory left the M=128 and M=384 kernels beside the module,
    which no longer dispatches to them; a file of the user's there stays, and so does a user's copy of one
    of the kernels under a name of theirs (it was removed with the kernels: it is Axon's text). A family
    names its files with the dimensions it varies last (`softmax_N512_M128.py`), not as the header's shape."""
    from axon.search.family import Family, ShapeRow

    g = get("softmax").graph("small")
    problems = FamilyProblems("softmax", g, load_hw("trn1"), verified_variants(g, depth=0), "float32")

    def family(ms: tuple[int, ...]) -> Family:
        fixed = {k: v for k, v in g.bindings.items() if k != "M"} if varied_last else dict(g.bindings)
        shapes = [{**fixed, "M": m} for m in ms]
        rows = [ShapeRow(d, 0, 1.0, True, 1.0, 1.0) for d in shapes]
        return Family("softmax", {"M": ms}, [problems(shapes[0]).default_point()], rows, 3, shapes)

    write_module(family((128, 256, 384)), problems, tmp_path, [], "trn1")
    (tmp_path / "kernels" / "softmax_notes.py").write_text("# mine\ndef softmax(x):\n    return x\n")
    copy = (tmp_path / "kernels").glob("*M128*.py").__next__().read_text()
    (tmp_path / "kernels" / "softmax_M128_mine.py").write_text(copy)
    assert any(p.name.endswith("_M128.py") for p in (tmp_path / "kernels").iterdir()) == varied_last
    module = load_family(write_module(family((256, 512)), problems, tmp_path, [], "trn1"))
    names = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    served = sorted(f.split("/")[-1] for f, _, _ in module.KERNELS.values())
    assert names == sorted([*served, "softmax_M128_mine.py", "softmax_notes.py"]) and len(served) == 2, names


def test_a_schedule_serving_sizes_apart_names_each_run_of_them():
    """Schedule 0 at M=128 and 384, schedule 1 at M=256: schedule 0 was labelled "M=128..384"."""
    shapes = [{"M": m} for m in (128, 256, 384, 512)]
    assert span([shapes[0], shapes[2], shapes[3]], shapes) == "M=128,384..512"
    assert span(shapes[1:3], shapes) == "M=256..384"
