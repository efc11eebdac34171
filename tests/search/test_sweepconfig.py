"""Sweep configs: the shipped ones parse; mistakes name the file and field; regressions are found."""

import importlib
import json
import os
import signal
import warnings

import pytest

from axon.cli.fleet import show_report
from axon.errors import SpecError
from axon.measure.neuron import NeuronBackend
from axon.search.sweep import SweepReport
from axon.search.sweepconfig import compare, load_sweep
from tests.conftest import REPO, axon_in_process, refused


def test_a_directory_given_as_the_config_is_not_reported_missing(tmp_path):
    with pytest.raises(SpecError, match="is a directory, not a file"):
        load_sweep(tmp_path)


def test_shipped_configs_parse():
    nightly = load_sweep(REPO / "configs/sweeps/nightly.yaml")
    assert nightly.name == "nightly" and nightly.hw == ("trn1",)
    assert [e.workload for e in nightly.entries][:2] == ["rmsnorm_matmul", "layernorm_matmul"]
    demo = load_sweep(REPO / "configs/sweeps/demo.yaml")
    assert all(e.preset == "small" for e in demo.entries)
    assert len(demo.tasks()) == 2 and demo.digest != nightly.digest


@pytest.mark.parametrize(
    "text,message",
    [
        ("name: x\n", "missing field entries"),
        ("entries: []\n", "field entries is empty"),
        ("entries: [{preset: small}]\n", r"entries\[0\] needs a workload"),
        ("entries: [{workload: matmul, shape: {M: -1}}]\n", r"entries\[0\]\.shape"),
        ("entries: [{workload: matmul}]\nsampler: annealing\n", "field sampler must be one of"),
        ("entries: [{workload: matmul}]\ntrials: 0\n", "field trials must be positive"),
        ("entries: [{workload: matmul}]\ncolour: blue\n", r"unknown field colour \(a sweep's fields: backend, entries"),
        (
            "entries: [{workload: matmul, trials: 2}]\n",
            r"unknown field entries\[0\]\.trials \(an entry's fields: dtype, preset, shape, workload; trials is the "
            "whole sweep's, at the top level\\)",
        ),
        ("entries: [{workload: matmul}]\nregression_threshold: -0.1\n", "regression_threshold must be a number >= 0"),
        # .nan was taken, and then a sweep twice as slow was not flagged (--fail-on-regression passed)
        (
            "entries: [{workload: matmul}]\nregression_threshold: .nan\n",
            "regression_threshold must be a number >= 0, got nan",
        ),
        # a key given twice kept its last value: the first `entries` list was dropped without a word
        (
            "entries: [{workload: matmul}]\ntrials: 4\nentries: [{workload: softmax}]\n",
            r"key 'entries' given twice \(again at line 3\)",
        ),
        ("entries: [{workload: matmul, preset: small, preset: default}]\n", "key 'preset' given twice"),
    ],
)
def test_bad_configs_name_the_field(tmp_path, text, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_sweep(path)


def test_compare_flags_slowdowns_over_threshold_and_new_failures():
    changes, regressions = compare(
        {"a": 106.0, "b": 104.0, "c": None, "d": 50.0}, {"a": 100.0, "b": 100.0, "c": 10.0}, 0.05
    )
    assert {c.key for c in regressions} == {"a", "c"}
    assert next(c for c in changes if c.key == "d").ratio is None


@pytest.mark.parametrize(
    "text,message",
    [
        ("entries: [{workload: matmul}]\nbackend: simm\n", "field backend must be one of sim, neuron, got 'simm'"),
        ("entries: [{workload: matmul}]\nregistered_model: 'm-{foo}'\n", "field registered_model may use only {hw}"),
        ("entries: [{workload: matmul}]\nhw: []\n", "field hw is empty"),
        ("entries: [{workload: matmul}]\nhw: [trn1, trn1]\n", "field hw names a hardware file twice"),
        (
            "entries: [{workload: matmul}, {workload: softmax}, {workload: matmul}]\n",
            r"entries\[2\] repeats entries\[0\]",
        ),
    ],
)
def test_mistakes_found_at_load_not_after_tuning(tmp_path, text, message):
    """An unknown backend failed every task (exit 1), a registered_model placeholder other than {hw}
    raised KeyError after the last task, hw: [] was a sweep of 0 tasks, a repeated entry one task."""
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_sweep(path)


def test_the_same_spec_file_written_two_ways_is_a_repeated_entry(tmp_path):
    """`specs.py:f` and `./specs.py:f` (or its absolute path) were two tasks, the same problem tuned twice."""
    (tmp_path / "specs.py").write_text("import axon.spec as ax\n\n\n@ax.spec(x='M N')\ndef f(x):\n    return x * 2.0\n")
    path = tmp_path / "sweep.yaml"
    for other in ("./specs.py:f", f"{tmp_path}/specs.py:f", "../" + tmp_path.name + "/specs.py:f"):
        path.write_text(
            "entries:\n  - {workload: specs.py:f, shape: {M: 4, N: 8}}\n"
            f"  - {{workload: '{other}', shape: {{N: 8, M: 4}}}}\n"
        )
        with pytest.raises(SpecError, match=r"entries\[1\] repeats entries\[0\]"):
            load_sweep(path)
    path.write_text(
        "entries:\n  - {workload: specs.py:f, shape: {M: 4, N: 8}}\n"
        "  - {workload: ./specs.py:f, shape: {M: 4, N: 16}}\n"
    )
    assert len(load_sweep(path).entries) == 2


@pytest.mark.skipif(NeuronBackend.available() is None, reason="the Neuron SDK is installed here")
def test_sweep_on_neuron_without_the_sdk_is_refused_before_any_task(tmp_path):
    """It failed every task, exit 1, after a parent run was made."""
    path = tmp_path / "sweep.yaml"
    path.write_text("backend: neuron\nentries: [{workload: softmax, preset: small}]\n")
    refused("sweep", str(path), "--workdir", str(tmp_path / "w"), fragments=("backend 'neuron' cannot run here",))
    assert not (tmp_path / "w" / "mlflow.db").exists()


@pytest.mark.parametrize("command", ["sweep", "worker"])
def test_sweep_and_worker_stop_on_sigint_when_started_with_it_ignored(tmp_path, monkeypatch, command):
    """`axon sweep ... &` from a script starts with SIGINT ignored: kill -INT (Ctrl-C) ran the whole
    sweep to its end, exit 0. `axon tune` restores the handler; sweep and worker now do too."""
    seen = []

    def started(*args, **kwargs):
        seen.append(signal.getsignal(signal.SIGINT))
        raise KeyboardInterrupt

    # the modules, not the click commands of the same names on `axon.cli`
    monkeypatch.setattr(importlib.import_module("axon.cli.tune"), "run_sweep", started)
    monkeypatch.setattr(importlib.import_module("axon.cli.fleet"), "Fleet", started)
    argv = ["sweep", str(REPO / "configs/sweeps/demo.yaml")] if command == "sweep" else ["worker"]
    (tmp_path / "records.db").touch()  # a worker opens the store only where one is (else: nothing to do)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = axon_in_process(*argv, "--workdir", str(tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == [signal.default_int_handler] and result.returncode == 130, (seen, result.stderr)


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_a_sweep_interrupted_in_a_task_says_where_that_tasks_kernel_is(tmp_path, monkeypatch, flag):
    """The task's tune wrote its best kernel so far, and the sweep said only "axon: interrupted"
    (with --json, nothing on stdout)."""
    from axon.search.api import TuneInterrupted

    def interrupted(*args, **kwargs):
        raise TuneInterrupted(
            "softmax: interrupted; best so far 23.5 us, kernel: /k/softmax.py", "/k/softmax.py", 23500.0
        )

    monkeypatch.setattr(importlib.import_module("axon.cli.tune"), "run_sweep", interrupted)
    result = axon_in_process("sweep", str(REPO / "configs/sweeps/demo.yaml"), "--workdir", str(tmp_path), flag)
    assert result.returncode == 130
    assert result.stderr.strip() == (
        "axon: sweep demo: softmax: interrupted; best so far 23.5 us, kernel: /k/softmax.py; "
        "the same command resumes the sweep"
    )
    if flag == "--json":
        stopped = json.loads(result.stdout)
        assert stopped["sweep"] == "demo" and stopped["kernel_path"] == "/k/softmax.py", stopped
        assert stopped["interrupted"] is True and stopped["best_latency_ns"] == 23500.0
    else:
        assert result.stdout == ""


def test_a_missing_cost_model_is_refused_before_any_task(tmp_path):
    """`axon sweep --cost-model nothere.json` failed every task with the same reason, exit 1."""
    refused(
        "sweep",
        str(REPO / "configs/sweeps/demo.yaml"),
        "--workdir",
        str(tmp_path / "w"),
        "--cost-model",
        str(tmp_path / "nothere.json"),
        fragments=("cost model", "nothere.json not found"),
    )


def test_a_worker_with_nothing_to_do_says_so(tmp_path):
    """`axon worker` on a store without an unfinished sweep (a mistyped --workdir) exited 0 in silence."""
    result = axon_in_process("worker", "--workdir", str(tmp_path / "w"))
    assert result.returncode == 0 and result.stdout == "", result
    assert result.stderr.strip() == (
        f"axon worker: no unfinished sweep in {tmp_path / 'w' / 'records.db'}: nothing to do "
        "(axon sweep CONFIG starts one)"
    )
    assert not (tmp_path / "w").exists()  # the mistyped --workdir was left behind with an empty records.db


def test_a_worker_for_a_sweep_in_a_workdir_never_swept_leaves_nothing_behind(tmp_path):
    # it made the directory with an empty records.db, mlflow.db and its lock, then said "no sweep x"
    refused(
        "worker", "--workdir", str(tmp_path / "w"), "--sweep", "x",
        fragments=(f"no sweep x in {tmp_path / 'w' / 'records.db'}",),
    )  # fmt: skip
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    "text,message",
    [
        # MLflow refuses the model's name when the sweep registers it, after the last task: a traceback, exit 1
        ("entries: [{workload: matmul}]\nregistered_model: 'team/axon-{hw}'\n", "registered_model must be a name"),
        ("entries: [{workload: matmul}]\nregistered_model: 'a:{hw}'\n", "registered_model must be a name"),
        ("entries: [{workload: matmul}]\nregistered_model: ' '\n", "registered_model must be a name"),
        # the name names the state file: ../../x wrote it outside the workdir
        ("entries: [{workload: matmul}]\nname: ../../etc/x\n", r"field name must be a name without '/'"),
        ("entries: [{workload: matmul}]\nname: '..'\n", r"field name must be a name without '/'"),
        # quoted in the search for the previous sweep: an MLflow traceback after the last task, exit 1
        ('entries: [{workload: matmul}]\nname: "bob\'s"\n', r"field name must be a name without .* quotes"),
    ],
)
def test_names_that_cannot_be_used_are_refused_at_load(tmp_path, text, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_sweep(path)


@pytest.mark.parametrize("data", [b"\xff\xfe", b"# caf\xe9\nentries: [{workload: matmul}]\n"])
def test_a_config_that_is_not_utf8_is_one_line(tmp_path, data):
    # UnicodeDecodeError's traceback, exit 1
    (tmp_path / "sweep.yaml").write_bytes(data)
    refused("sweep", str(tmp_path / "sweep.yaml"), "--workdir", str(tmp_path / "w"), fragments=("is not UTF-8 text",))


def test_a_threshold_in_exponent_notation_is_a_number(tmp_path):
    # YAML 1.1 read `regression_threshold: 2e-2` as the string '2e-2' ("must be a number")
    path = tmp_path / "s.yaml"
    path.write_text("entries: [{workload: matmul}]\nregression_threshold: 2e-2\n")
    assert load_sweep(path).regression_threshold == 0.02


def test_a_shape_key_that_is_not_a_name_is_refused_at_load(tmp_path):
    """`shape: {1: 128}` (YAML reads the key as a number) reached the spec as a keyword: TypeError
    'keywords must be strings', a traceback, exit 1."""
    path = tmp_path / "sweep.yaml"
    path.write_text("entries: [{workload: softmax, shape: {1: 128}}]\n")
    with pytest.raises(SpecError, match=r"entries\[0\]\.shape must map dimension names to positive integers"):
        load_sweep(path)


@pytest.mark.parametrize("sizes", ["128..384", "[128, 256]"])
def test_a_range_of_sizes_in_an_entry_is_refused_saying_an_entry_is_one_shape(tmp_path, sizes):
    """`shape: {M: 128..384}` (how `axon tune --shape` takes a family) was refused as if the value
    were not a size at all."""
    path = tmp_path / "sweep.yaml"
    path.write_text(f"entries: [{{workload: softmax, shape: {{M: {sizes}, N: 512}}}}]\n")
    with pytest.raises(SpecError, match=r"entries\[0\]\.shape\.M is a range or list: a sweep entry tunes one shape"):
        load_sweep(path)


def test_two_files_of_one_machine_are_refused_before_any_task(tmp_path):
    """hw: [trn1, configs/hw/trn1.yaml] (or a recalibrated copy keeping `name: trn1`) ran one task and
    skipped the other as done, since tasks are keyed by the machine's name: '1 tasks', exit 0."""
    path = tmp_path / "sweep.yaml"
    path.write_text("hw: [trn1, configs/hw/trn1.yaml]\nentries: [{workload: softmax, preset: small}]\ntrials: 1\n")
    refused(
        "sweep",
        str(path),
        "--workdir",
        str(tmp_path / "w"),
        fragments=("field hw: 'trn1' and 'configs/hw/trn1.yaml' are both hardware 'trn1'",),
    )
    assert not (tmp_path / "w" / "mlflow.db").exists()


@pytest.mark.parametrize("accuracy, shown", [(None, "n/a: too few records to hold some out"), (0.8412, "0.841")])
def test_the_sweep_summary_prints_the_cost_models_accuracy_as_a_number_or_says_why_not(capsys, accuracy, shown):
    # a sweep of a few trials per task printed "(held-out pairwise accuracy None)"
    report = SweepReport("s", "run", (), (), {"trn1": 1}, {"trn1": accuracy}, 1.0)
    show_report(report, "w", as_json=False, fail_on_regression=False)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cost model for trn1"))
    assert line == f"cost model for trn1: registered version 1 (held-out pairwise accuracy {shown})"


def test_a_relative_hardware_file_is_taken_from_the_config_files_directory(tmp_path, monkeypatch):
    """`hw: [hw/mychip.yaml]` beside the config ran from the config's directory and, from any other,
    failed with 'hardware file hw/mychip.yaml not found', while its spec paths resolved from the config's."""
    from axon.search.guards import preflight_sweep
    from axon.target import load_hw
    from axon.workdir import Workdir

    (tmp_path / "cfg" / "hw").mkdir(parents=True)
    trn1 = (REPO / "configs" / "hw" / "trn1.yaml").read_text()
    (tmp_path / "cfg" / "hw" / "mychip.yaml").write_text(trn1.replace("name: trn1", "name: mychip", 1))
    (tmp_path / "cfg" / "s.yaml").write_text(
        "hw: [hw/mychip.yaml, trn2]\nentries:\n  - {workload: softmax, preset: small}\n"
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_sweep("../cfg/s.yaml")
    assert [load_hw(config.hw_file(hw)).name for hw in config.hw] == ["mychip", "trn2"]
    preflight_sweep(config, Workdir.resolve(str(tmp_path / "w")))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_with_workers_stops_its_workers(sig):
    """kill -INT (or -TERM) of `axon sweep --workers 2`: it exited 130 and its two workers tuned on
    to the sweep's end, unsupervised."""
    import subprocess
    import sys
    import threading

    from axon.cli.fleet import wait_workers

    worker = "import time, sys\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    sys.exit(130)"
    procs = [subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    threading.Timer(0.3, os.kill, (os.getpid(), sig)).start()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        wait_workers(procs, grace_s=5.0)
    assert [p.returncode for p in procs] == [130, 130]  # each stopped as by a Ctrl-C, none left running
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sweep_shows_its_tasks_warnings_and_resumed_trials_as_tune_does(tmp_path, monkeypatch):
    """A task's tune warned as a Python warning ('storage.py:94: UserWarning:' and the source line),
    and a resumed task's bar ended at 2/10 with 10 trials done: the sweep's callbacks saw trials only."""

    def tasks(*args, on_task, callbacks, **kwargs):
        on_task("softmax[small]:float32@trn1", 0, 1)
        callbacks[0].on_resume(9, 20_000.0)
        callbacks[0].on_warning("cost model trn1 was trained on trn1, tuning on trn1slow")
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("axon.cli.tune"), "run_sweep", tasks)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that reached Python's would fail here
        result = axon_in_process("sweep", str(REPO / "configs/sweeps/demo.yaml"), "--workdir", str(tmp_path))
    assert result.returncode == 130, result.stderr
    assert "axon: warning: cost model trn1 was trained on trn1, tuning on trn1slow" in result.stderr
    assert "9/12" in result.stderr and "best 20.0 us" in result.stderr


def test_a_workers_tasks_warn_as_tune_does(tmp_path, monkeypatch):
    """`axon sweep --workers 2`: each worker's tune warnings were Python warnings with a source line,
    and nothing said which task a worker was on."""
    fleet_cli = importlib.import_module("axon.cli.fleet")

    def work(fleet, sweep, *, cost_model, on_task, callbacks):
        if on_task:  # a sweep with workers printed nothing till its end (and nothing with --quiet)
            on_task("softmax[small]:float32@trn1slow", 1, 2)
        for c in callbacks:
            c.on_warning("cost model trn1 was trained on trn1, tuning on trn1slow")

    monkeypatch.setattr(fleet_cli, "Fleet", lambda *args: object())
    monkeypatch.setattr(fleet_cli, "work", work)
    (tmp_path / "records.db").touch()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = axon_in_process("worker", "--sweep", "s-1", "--workdir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"axon worker {os.getpid()}: task 2/2 softmax[small]:float32@trn1slow\n"
        "axon: warning: cost model trn1 was trained on trn1, tuning on trn1slow\n"
    )
    quiet = axon_in_process("worker", "--sweep", "s-1", "--workdir", str(tmp_path), "--quiet")
    assert quiet.stderr == "axon: warning: cost model trn1 was trained on trn1, tuning on trn1slow\n"
