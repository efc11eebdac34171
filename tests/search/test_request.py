"""The tune seam: one request object, callbacks after every trial, the working directory, currency."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from axon.errors import SpecError
from axon.measure.backend import SimBackend
from axon.measure.events import Callback
from axon.measure.records import RecordDB, code_version
from axon.measure.stores import records_location
from axon.search.api import OnTrial, TuneRequest, journal_storage, tune, verified_variants
from axon.search.callbacks import training_records
from axon.search.current import CurrentCode
from axon.search.problem import LoweredProblem
from axon.search.tuner import TuneConfig, Tuner
from axon.shipped import cost_model_ref
from axon.target import DEFAULT_HW, load_hw
from axon.workdir import Workdir
from axon.workloads import get


class Watch(Callback):
    """A user's callback: sees every trial after it was recorded, and the run's start and end."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ids: list[int | None] = []
        self.warnings: list[str] = []

    def on_start(self, context):
        self.events.append("start")

    def on_trial(self, trial):
        self.events.append(trial.status)
        self.ids.append(trial.record.id if trial.record is not None else None)

    def on_end(self, context):
        self.events.append("end")

    def on_warning(self, message):
        self.warnings.append(message)


def test_a_users_callback_sees_every_trial_already_recorded(tmp_path):
    watch = Watch()
    report = tune(TuneRequest.make("rmsnorm", preset="small", trials=4, workdir=tmp_path, track=False), [watch])
    assert watch.events[0] == "start" and watch.events[-1] == "end" and len(watch.events) == 6
    measured = [i for e, i in zip(watch.events[1:-1], watch.ids) if e == "measured"]
    assert len(measured) == report.measured and all(i is not None for i in measured)  # committed before the callback
    db = RecordDB(tmp_path / "records.db")
    assert {r.id for r in db.records() if r.kind == "kernel"} >= set(measured)


def test_a_cost_model_of_other_hardware_warns_through_the_callbacks(tmp_path):
    watch = Watch()
    request = TuneRequest.make(
        "rmsnorm", preset="small", trials=1, hw="trn2", cost_model="trn1", workdir=tmp_path, track=False, check=False
    )
    tune(request, [watch])
    assert watch.warnings and "trained on trn1, tuning on trn2" in watch.warnings[0]


def test_the_request_loads_the_hardware_once_and_reads_axon_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_HOME", str(tmp_path / "home"))
    r = TuneRequest.make("softmax", trials=2)
    assert r.workdir.root == (tmp_path / "home").resolve() and r.workdir.root.is_dir()
    assert r.hw is load_hw(DEFAULT_HW) and r.hw.name == DEFAULT_HW
    assert TuneRequest.make("softmax", hw=r.hw, workdir=r.workdir).hw is r.hw
    with pytest.raises(SpecError, match="trials must be at least 1"):
        TuneRequest.make("softmax", trials=0)
    with pytest.raises(SpecError, match="unknown sampler"):
        TuneRequest.make("softmax", sampler="grid")
    for backend in ("nueron", None):  # accepted, and refused only by tune()
        with pytest.raises(SpecError, match="unknown backend"):
            TuneRequest.make("softmax", backend=backend)
    with pytest.raises(TypeError):
        tune("softmax")  # type: ignore[arg-type]  # one request object, not keywords


def test_a_workdir_starting_with_a_tilde_is_in_the_home_directory(tmp_path, monkeypatch):
    # AXON_HOME=~/axon from an env file (and --workdir=~/axon, which the shell leaves as is) made a
    # directory named "~" in the current one
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AXON_HOME", "~/axon")
    assert TuneRequest.make("softmax").workdir.root == (tmp_path / "me" / "axon").resolve()
    assert TuneRequest.make("softmax", workdir="~/other").workdir.root == (tmp_path / "me" / "other").resolve()
    # and so were --records=~/r.db (a records database in "./~"), --out, --storage and --cost-model (refused)
    home = tmp_path / "me"
    assert TuneRequest.make("softmax", out="~/k.py").out == home / "k.py"
    assert records_location("~/r.db", None, home / "records.db") == home / "r.db"
    journal_storage(Workdir.resolve(), "~/j.log")
    assert (home / "j.log").exists()
    shutil.copy(cost_model_ref("trn1"), home / "cm.json")
    assert cost_model_ref("~/cm.json") == str(home / "cm.json")
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize(
    "option, fragment",
    [
        ({"seed": -1}, "seed must be an integer in 0..4294967295, got -1"),  # NumPy's ValueError, 2.6 s in
        ({"seed": 2**40}, "seed must be an integer in 0..4294967295"),  # a traceback from Optuna's sampler
        ({"seed": 1.5}, "seed must be an integer"),
        ({"patience": 0}, "patience must be at least 1, got 0"),  # tuned as if no patience were given
        ({"dtype": "float8_e4m3"}, "unknown kernel dtype 'float8_e4m3'; choose float32, bfloat16, float16"),
        # these were TypeErrors naming no field ("'<' not supported between instances of 'str' and 'int'"),
        # or taken and tuned: trials=2.5, depth=-1 (no variant discovered), shape="M=256" a ValueError
        ({"trials": "8"}, "trials must be an integer, got '8'"),
        ({"trials": 2.5}, "trials must be an integer, got 2.5"),
        ({"trials": True}, "trials must be an integer, got True"),
        ({"seconds": "10"}, "seconds must be a number, got '10'"),
        ({"patience": "3"}, "patience must be an integer, got '3'"),
        ({"workers": 2.0}, "workers must be an integer, got 2.0"),
        ({"depth": -1}, "depth must be at least 0, got -1"),
        ({"shape": "M=256"}, "shape must be a mapping of dimension names to sizes, like {'M': 256}, got 'M=256'"),
        ({"cost_model": 3}, "cost_model must be a string or a path, got 3"),
        ({"out": 5}, "out must be a string or a path, got 5"),
        ({"study": 5}, "study must be a string or a path, got 5"),
    ],
)
def test_the_request_refuses_what_the_command_line_refuses(tmp_path, option, fragment):
    """The API took a seed, patience or dtype `axon tune` refuses, and failed after (or during) the
    tuning: float8 tuned every trial, then every kernel failed its check."""
    with pytest.raises(SpecError, match=re.escape(fragment)):
        TuneRequest.make("softmax", preset="small", workdir=tmp_path, track=False, **({"trials": 1} | option))
    assert TuneRequest.make("softmax", workdir=tmp_path, seed=np.int64(3)).seed == 3
    assert TuneRequest.make("softmax", workdir=tmp_path, trials=np.int64(3), storage=tmp_path / "j.log").storage == str(
        tmp_path / "j.log"
    )


def _problem(name: str = "rmsnorm") -> LoweredProblem:
    graph = get(name).graph("small")
    return LoweredProblem(name, graph, load_hw(DEFAULT_HW), verified_variants(graph), "float32")


def test_currency_is_what_the_code_emits_and_training_recomputes_features(tmp_path):
    problem = _problem()
    db = RecordDB(tmp_path / "records.db")
    Tuner(problem, SimBackend(), db, TuneConfig(trials=3, sampler="random", seed=0)).run()
    mine = db.records(task=problem.task)
    current = CurrentCode(problem)
    assert mine and all(current(r) for r in mine)
    # the same point as another code version emitted it: not current, never the best, never trained on
    old = db.add(
        dataclasses.replace(
            mine[0], id=None, created=0.0, kernel_hash="0" * 24, latency_ns=1.0, features={"stale_feature": 1.0}
        )
    )
    assert not current(old) and current.best(db.records(task=problem.task)).kernel_hash != old.kernel_hash
    train = training_records(db, problem, "sim", current)
    assert old.id not in {r.id for r in train} and len(train) == len(mine)
    assert all(r.features == problem.features(r.point) for r in train)  # recomputed, not read back
    # another task's records count only when this code version wrote them
    other = _problem("softmax")
    Tuner(other, SimBackend(), db, TuneConfig(trials=2, sampler="random", seed=0)).run()
    assert {r.task for r in training_records(db, problem, "sim", current)} == {problem.task, other.task}
    db.add(
        dataclasses.replace(
            db.records(task=other.task)[0], id=None, created=0.0, code_version="0.0.1", kernel_hash="1" * 24
        )
    )
    assert all(r.code_version == code_version() for r in training_records(db, problem, "sim", current))
    # another hardware file that keeps the name (an edited copy of trn1.yaml): its latencies are not
    # this file's, whoever wrote them
    n = len(training_records(db, problem, "sim", current))
    db.add(dataclasses.replace(db.records(task=other.task)[0], id=None, created=0.0, hw_hash="f" * 16))
    assert len(training_records(db, problem, "sim", current)) == n


@pytest.mark.parametrize("callbacks", [[print], print, Watch(), [Watch(), "progress"]])
def test_callbacks_that_are_not_callbacks_are_refused_before_the_run(tmp_path, callbacks):
    # [fn] was AttributeError: 'function' object has no attribute 'on_start' once a run had begun (a
    # FAILED MLflow run left behind); a lone Callback was "'Watch' object is not iterable"
    request = TuneRequest.make("rmsnorm", preset="small", trials=1, workdir=tmp_path)
    with pytest.raises(TypeError, match=r"a list of axon.search.api.Callback objects .*\[OnTrial\(fn\)\]"):
        tune(request, callbacks)
    assert not (tmp_path / "mlflow.db").exists()


def test_a_callback_stops_the_tune_early_and_gets_the_report_and_kernel(tmp_path):
    # a callback could end a tune only by raising, which wrote no kernel: "stop once under X us" lost the run
    from axon.search.api import StopTuning

    seen = []

    def enough(trial):
        seen.append(trial.number)
        if trial.number == 1:
            raise StopTuning

    request = TuneRequest.make("rmsnorm", preset="small", trials=6, workdir=tmp_path, track=False)
    report = tune(request, [OnTrial(enough), OnTrial(lambda t: seen.append(-t.number))])
    assert seen == [0, 0, 1, -1] and report.measured == 2
    assert report.numerics.ok and Path(report.kernel_path).is_file()
