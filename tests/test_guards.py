"""Resource guards before any work, failures that explain themselves, Ctrl-C, cost models of another machine."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from axon.search.guards import GiB, check_tune, estimate, host_memory, numerics_graph, trace_instructions
from axon.target import load_hw
from axon.target.hardware import CONFIG_DIR
from axon.workloads import all_workloads, get
from tests.conftest import REPO, axon_in_process, refused


def test_every_builtin_default_shape_passes_the_guards():
    for hw in ("trn1", "trn2"):
        spec = load_hw(hw)
        for w in all_workloads():
            check_tune(w.graph("default"), spec, w.name)


def test_guard_figures_scale_with_the_problem():
    small, big = get("rmsnorm_matmul").graph("default"), get("rmsnorm_matmul").graph("default", M=2**22)
    assert estimate(big).hbm_bytes > 500 * estimate(small).hbm_bytes
    assert trace_instructions(big) > 100 * trace_instructions(small)
    # above the numerics size the check runs at reduced sizes, so its memory does not grow with M
    assert numerics_graph(big).bindings["M"] == 512


def test_the_numerics_size_keeps_a_fixed_slice_inside_its_axis():
    # cut to 512 columns, x[:, 0:640] lies past the axis: the guards raised the slice error at sizes the
    # user never gave, for a spec valid at theirs
    import axon.spec as ax
    from axon.ir import trace

    @ax.spec(x="M N")
    def head(x):
        return x[:, 0:640] * 2.0

    g = trace(head, M=2**23, N=1024)
    assert numerics_graph(g).bindings["N"] == 1024
    assert estimate(g).hbm_bytes > 0


def test_tune_at_a_billion_rows_is_refused_with_the_figures(tmp_path):
    line = refused(
        "tune",
        "rmsnorm_matmul",
        "--shape",
        "M=1000000000",
        "--trials",
        "2",
        "--workdir",
        str(tmp_path / "w"),
        fragments=("GiB of HBM", "trn1 has 16.0 GiB", "--force"),
        in_process=False,  # end to end: a new process refuses within the CPU budget, imports and all
    )
    assert re.search(r"needs [\d,.]+ GiB", line)
    assert not (tmp_path / "w" / "optuna.log").exists()  # refused before any study or trace


def test_host_memory_and_time_guards(tmp_path):
    # fits trn1's HBM and is under the numerics check's 4 GFLOP, so the check would evaluate it whole
    softmax = get("softmax").graph("default", M=65536, N=8192)
    if estimate(softmax).host_bytes < host_memory() / 2:
        pytest.skip(f"this machine has {host_memory() / GiB:.0f} GiB: softmax at M=65536 fits")
    refused(
        "tune",
        "softmax",
        "--shape",
        "M=65536,N=8192",
        "--workdir",
        str(tmp_path / "w"),
        fragments=("GiB of host memory", "--force"),
    )


def test_a_trace_too_long_for_this_machine_is_refused():
    # 8 GiB of inputs fit trn1, but one trial would trace about 3 x 10^8 instructions (hours, and
    # about 1 KB of trace and timeline each)
    from axon.errors import SpecError

    long = get("attention").graph("default", H=4, S=2**20, D=128)
    assert estimate(long).trace_s > 3600
    with pytest.raises(SpecError, match="one trial would trace about|GiB of host memory"):
        check_tune(long, load_hw("trn1"), "attention")


def test_sweep_entry_beyond_the_hardware_is_refused_before_the_first_task(tmp_path):
    import yaml

    config = tmp_path / "huge.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "huge",
                "hw": "trn2",
                "trials": 2,
                "entries": [{"workload": "softmax", "preset": "small"}, {"workload": "matmul", "shape": {"M": 2**20}}],
            }
        )
    )
    line = refused(
        "sweep",
        str(config),
        "--workdir",
        str(tmp_path / "w"),
        fragments=("huge.yaml: entry matmul[default;M=1048576]:float32@trn2", "HBM", "trn2 has 12.0 GiB"),
    )
    assert not (tmp_path / "w" / "mlflow.db").exists()
    # it said "use a smaller --shape (or --force)", neither of which a sweep takes
    assert "give the entry a smaller shape" in line and "use a smaller --shape" not in line


def test_a_sweep_entry_with_an_unbound_dimension_is_told_of_its_fields_not_of_flags(tmp_path):
    """A spec entry without its shape said "bind with --shape M=..." and one whose PRESETS lacks the
    default "pick one of its presets with --preset": a sweep has neither flag."""
    (tmp_path / "s.py").write_text(
        'import axon.spec as ax\n\n@ax.spec(x="M N")\ndef f(x):\n    return x * 2.0\n\n'
        'PRESETS = {"f": {"big": {"M": 256, "N": 512}}}\n'
    )
    config = tmp_path / "c.yaml"
    config.write_text("name: c\nhw: [trn1]\ntrials: 2\nentries:\n  - {workload: s.py:f}\n")
    line = refused(
        "sweep",
        str(config),
        "--workdir",
        str(tmp_path / "w"),
        fragments=(
            "unbound dimension 'M'",
            "bind it in the entry's shape: {M: ...}",
            "in the entry's preset field (big",
        ),
    )
    assert "--shape" not in line and "--preset" not in line


def test_show_prints_a_huge_graph_but_check_refuses_to_evaluate_it():
    show = axon_in_process("show", "rmsnorm_matmul", "--shape", "M=1000000000")
    assert show.returncode == 0 and "M=1000000000" in show.stdout, show.stderr
    refused("check", "rmsnorm_matmul", "--shape", "M=1000000000", fragments=("GiB of host memory", "--force"))
    variants = axon_in_process("variants", "rmsnorm_matmul", "--shape", "M=1000000000", "--depth", "1")
    assert variants.returncode == 0 and "variants; steps proved" in variants.stdout, variants.stderr


def test_check_forced_past_its_guard_into_an_allocation_that_fails_is_one_line():
    # "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 291. TiB ..." as a traceback: 2.8 PiB
    # of inputs here, past any machine's address space, so the allocation fails whatever the overcommit
    args = ("check", "softmax", "--shape", "M=100000000000000,N=4", "--force")
    refused(*args, fragments=("out of memory: Unable to allocate", "use a smaller --shape"))


def test_a_shape_past_what_an_array_can_hold_is_refused_even_with_force(tmp_path):
    # check: numpy's "ValueError: Maximum allowed dimension exceeded" as a traceback; tune: every trial
    # failed with "OverflowError: Python int too large to convert to C ssize_t"
    huge = ("--shape", "M=100000000000000000000000,N=512", "--force")
    fragments = ("softmax at M=100000000000000000000000,N=512", "5.12e+25 elements", "more than any array can hold")
    refused("check", "softmax", *huge, fragments=fragments)
    refused("tune", "softmax", *huge, "--trials", "2", "--workdir", str(tmp_path / "w"), fragments=fragments)


def _tiny_sbuf(tmp_path):
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(
        re.sub(
            r"sbuf_bytes_per_partition: \d+", "sbuf_bytes_per_partition: 2048", (CONFIG_DIR / "trn1.yaml").read_text()
        )
    )
    return tiny


def test_failed_trials_are_counted_by_reason_and_printed_with_verbose(tmp_path):
    result = axon_in_process(
        "tune",
        "rmsnorm_matmul",
        "--preset",
        "small",
        "--trials",
        "3",
        "--sampler",
        "random",
        "--hw",
        str(_tiny_sbuf(tmp_path)),
        "--workdir",
        str(tmp_path / "w"),
        "--no-track",
        "--quiet",
        "--verbose",
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    trial_lines = [l for l in lines if l.startswith("trial ")]
    assert len(trial_lines) == 3 and all(" infeasible: " in l for l in trial_lines), lines
    error = lines[-1]
    assert error.startswith("axon: error: rmsnorm_matmul: no trial produced a valid measurement: 3 failed (")
    assert re.search(r'\(\d+x "[^"]+"', error) and "): first: " in error
    assert "sbuf:" in error


def test_seconds_zero_says_no_trial_ran(tmp_path):
    from axon.errors import SpecError
    from axon.search.api import TuneRequest, tune

    with pytest.raises(SpecError, match="seconds must be positive"):
        tune(TuneRequest.make("softmax", preset="small", seconds=0, workdir=tmp_path / "w", track=False))


@pytest.mark.slow
def _children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, ended and waiting for init to collect it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    "cpus, sig, flag",
    [("1", signal.SIGINT, "--json"), ("2", signal.SIGINT, "--quiet"), ("2", signal.SIGTERM, "--quiet")],
)
def test_ctrl_c_writes_the_best_kernel_so_far(tmp_path, cpus, sig, flag):
    """Also with a tune's second process (`axon.forked`): its forked children are gone with it. A
    SIGTERM (kill, a job runner's stop) stops it the same way, exit 143: it ended the process where it
    stood, with no kernel written. With --json, stdout has the interruption as JSON (it was empty)."""
    work = tmp_path / "w"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "axon.cli",
            "tune",
            "rmsnorm_matmul",
            "--preset",
            "small",
            "--trials",
            "500",
            "--workdir",
            str(work),
            "--no-track",
            flag,
            "--cpus",
            cpus,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # a hang below dumps every thread's stack
    )
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            time.sleep(0.1)
            try:
                with sqlite3.connect(f"file:{work / 'records.db'}?mode=ro", uri=True) as db:
                    if db.execute("SELECT count(*) FROM records WHERE status = 'ok'").fetchone()[0] >= 2:
                        break
            except sqlite3.OperationalError:  # not created yet, or its table not yet
                pass
        children = set()
        for _ in range(200):  # a moment when a forked child is at work, if the tune has any
            children |= _children(proc.pid)
            if children or cpus == "1":
                break
            time.sleep(0.05)
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit within 120 s of Ctrl-C; the stacks at SIGABRT:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert (cpus == "2") == bool(children)
    gone_by = time.time() + 0.5  # the children get 0.5 s to go (polled: most are gone already)
    while any(_running(c) for c in children) and time.time() < gone_by:
        time.sleep(0.02)
    assert not [c for c in children if _running(c)], "a forked child outlived the tune"
    match = re.search(r"interrupted; best so far [\d,.]+ us, kernel: (\S+)", err)
    assert match, err[-2000:]
    kernel = match.group(1)
    assert kernel.startswith(str(work / "kernels" / "rmsnorm_matmul_trn1_"))
    assert "def rmsnorm_matmul(" in open(kernel).read()
    if flag == "--json":
        stopped = json.loads(out)
        assert stopped["interrupted"] is True and stopped["kernel_path"] == kernel, out
        assert stopped["best_latency_ns"] > 0 and stopped["workload"] == "rmsnorm_matmul"
    else:
        assert out == ""


def test_cost_model_records_its_hardware(tmp_path):
    from axon.measure.records import Record
    from axon.search.costmodel import CostModel

    records = [
        Record(
            workload="softmax",
            shapes={"M": 256},
            dtype="float32",
            hw="trn2",
            hw_hash="h",
            backend="sim",
            variant_hash="v",
            point={"p": i},
            kernel_hash=f"{i:08x}" * 3,
            features={"a": float(i), "b": float(i % 3)},
            latency_ns=1000.0 + 10 * i,
            status="ok",
        )
        for i in range(12)
    ]
    model = CostModel(rounds=5)
    model.fit(records)
    path = model.save(tmp_path / "m.json")
    assert CostModel.load(path).hw == "trn2"


@pytest.mark.slow
def test_a_cost_model_of_another_machine_warns_once(tmp_path):
    result = axon_in_process(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        "2",
        "--hw",
        "trn2",
        "--cost-model",
        "models/axon-costmodel-trn1.json",
        "--workdir",
        str(tmp_path / "w"),
        "--no-track",
        "--quiet",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    warnings = [l for l in result.stderr.splitlines() if "warning" in l]
    assert len(warnings) == 1 and "trained on trn1, tuning on trn2" in warnings[0], result.stderr
    same = axon_in_process(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        "2",
        "--cost-model",
        "models/axon-costmodel-trn1.json",
        "--workdir",
        str(tmp_path / "w"),
        "--no-track",
        "--quiet",
    )
    assert same.returncode == 0 and "trained on" not in same.stderr, same.stderr[-2000:]


def test_a_corrupt_records_database_is_refused_before_the_variants(tmp_path, monkeypatch):
    """It was found only when the tuner opened it, after the variants were discovered and screened
    (13 s for rmsnorm_matmul at M=2048 here)."""
    (tmp_path / "records.db").write_bytes(b"\0" * 100 + b"not a database" * 400)

    def screened(*args, **kwargs):
        raise AssertionError("the variants were discovered before the records database was opened")

    monkeypatch.setattr("axon.search.tuning.verified_variants", screened)
    refused(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        "2",
        "--workdir",
        str(tmp_path),
        fragments=("record database", "records.db is corrupt", "move it aside"),
    )


@pytest.mark.slow
def test_a_registered_cost_model_is_read_from_the_workdirs_store(tmp_path, monkeypatch):
    """`--cost-model models:/NAME@champion` without --tracking-uri looked in MLflow's default store
    (creating ./mlflow.db in the current directory): the model a sweep registered in the workdir was
    'not found'."""
    from axon.search.costmodel import CostModel
    from axon.track import Tracker

    shipped = CostModel.load(REPO / "models" / "axon-costmodel-trn1.json").save(tmp_path / "m.json")
    workdir = tmp_path / "w"
    tracker = Tracker.for_workdir(workdir)
    with tracker.run("train") as run:
        tracker.log_cost_model(run, shipped, "axon-costmodel-trn1", accuracy=0.8)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    result = axon_in_process(
        "tune",
        "softmax",
        "--preset",
        "small",
        "--trials",
        "1",
        "--quiet",
        "--cost-model",
        "models:/axon-costmodel-trn1@champion",
        "--workdir",
        str(workdir),
        cwd=elsewhere,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list(elsewhere.iterdir())


@pytest.mark.slow
def test_a_resumed_tunes_progress_counts_the_trials_done_before(tmp_path):
    """The bar started at 0/3 and ended at 1/3 when 2 of the 3 trials were done by an earlier run."""
    workdir = str(tmp_path / "w")
    first = axon_in_process("tune", "softmax", "--preset", "small", "--trials", "2", "--workdir", workdir, "--no-track")
    assert first.returncode == 0, first.stderr[-2000:]
    again = axon_in_process("tune", "softmax", "--preset", "small", "--trials", "3", "--workdir", workdir, "--no-track")
    assert again.returncode == 0, again.stderr[-2000:]
    states = re.findall(r"\| (\d+)/3 \[", again.stderr)
    assert states and states[-1] == "3" and "1" not in states, states


def test_small_sizes_in_a_refusal_are_not_rounded_to_zero(tmp_path):
    # a hardware file with 1000 bytes of HBM refused a 1.3 MiB problem saying "needs 0.0 GiB ..., trn1 has 0.0 GiB"
    hw = (REPO / "configs/hw/trn1.yaml").read_text().replace("hbm_bytes: 17179869184", "hbm_bytes: 1000")
    (tmp_path / "tiny.yaml").write_text(hw)
    args = ("tune", "rmsnorm_matmul", "--preset", "small", "--trials", "1", "--hw", str(tmp_path / "tiny.yaml"))
    refused(*args, "--workdir", str(tmp_path / "w"), fragments=("needs 1.3 MiB of HBM", "trn1 has 1.0 KiB"))
