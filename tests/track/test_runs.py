"""`axon runs`: the recent runs of a working directory with hw, shape, dtype, best latency and speedup."""

from __future__ import annotations

import json

import pytest

from axon.track import Tracker
from tests.conftest import axon_in_process, refused


@pytest.fixture(scope="session")  # not rebuilt when another module's test runs between this module's
def tuned(tmp_path_factory):
    """A working directory after one tiny real tune, and the tune's JSON report."""
    workdir = tmp_path_factory.mktemp("runs")
    done = axon_in_process(
        "tune", "rmsnorm", "--preset", "small", "--trials", "2", "--workdir", str(workdir), "--quiet", "--json"
    )
    assert done.returncode == 0, done.stderr[-800:]
    return workdir, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_axon_runs_table_shows_hw_shape_dtype_latency_and_speedup(tuned):
    workdir, report = tuned
    done = axon_in_process("runs", "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()[:2]
    assert header.split() == ["run", "name", "status", "started", "hw", "shape", "dtype", "best", "us", "vs", "unfused"]
    best_us = report["best_latency_ns"] / 1e3
    speedup = report["unfused_ns"] / report["best_latency_ns"]
    shape = ",".join(f"{k}={v}" for k, v in report["shapes"].items())
    assert shape == "M=256,N=512"
    assert row.split()[:3] == [report["run_id"], "tune", "rmsnorm"]
    assert row.split()[-5:] == [report["hw"], shape, report["dtype"], f"{best_us:.2f}", f"{speedup:.2f}x"]
    # each value sits under its column's heading
    for heading, value in (("hw", report["hw"]), ("shape", shape), ("dtype", report["dtype"])):
        assert row.index(value) == header.index(heading)
    assert row.rstrip().endswith(f"{speedup:.2f}x") and header.rstrip().endswith("vs unfused")


@pytest.mark.slow
def test_axon_runs_json_has_the_same_fields(tuned):
    workdir, report = tuned
    done = axon_in_process("runs", "--workdir", str(workdir), "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout.splitlines()[0])
    assert row["run_id"] == report["run_id"] and row["workload"] == "rmsnorm" and row["status"] == "FINISHED"
    assert (row["hw"], row["shape"], row["dtype"]) == ("trn1", "M=256,N=512", "float32")
    assert row["best_latency_us"] == pytest.approx(report["best_latency_ns"] / 1e3)
    assert row["speedup_vs_unfused"] == pytest.approx(report["unfused_ns"] / report["best_latency_ns"])


def test_axon_runs_without_a_store_says_so(tmp_path):
    empty = axon_in_process("runs", "--workdir", str(tmp_path / "nothing"))
    assert empty.returncode == 2 and "no tracking store" in empty.stderr
    assert not (tmp_path / "nothing").exists()  # a mistyped --workdir was left behind as an empty directory


@pytest.mark.parametrize("count", ["0", "-3"])
def test_axon_runs_with_a_count_below_one_is_refused(tmp_path, count):
    """MLflow's search raised 'Invalid value 0 for parameter max_results' as a traceback."""
    Tracker.for_workdir(tmp_path)  # an empty store, so the count is what is wrong
    refused("runs", "--workdir", str(tmp_path), "-n", count, fragments=("'-n'", "x>=1"))


@pytest.mark.slow
def test_a_family_run_shows_its_shapes_in_axon_runs(tmp_path):
    """A family's run had no `shapes` param: its shape cell was empty, and a dimension the range does
    not vary (N=512 here) was recorded nowhere in the run."""
    done = axon_in_process(
        "tune", "rmsnorm", "--preset", "small", "--shape", "M=128..256:128", "--trials", "2", "--quiet",
        "--workdir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]
    listed = axon_in_process("runs", "--workdir", str(tmp_path), "--json")
    row = json.loads(listed.stdout.splitlines()[0])
    assert row["name"] == "family rmsnorm" and row["shape"] == "M=128,256,N=512", row


def test_a_shape_too_long_for_its_column_says_it_was_cut():
    """A family's shape cell was cut at 20 characters without a mark: `M=64,128,192,256,320,N=96,200`
    read as M=64,128,192,256,320, N gone. Evenly spaced sizes now read as the range given to --shape,
    and a cell still too long ends in "…"."""
    from axon.cli.track import _row_line, _shape_text

    assert _shape_text('{"M": [64, 128, 192, 256, 320], "N": [96, 200]}') == "M=64..320:64,N=96,200"
    assert _shape_text('{"M": [1, 100, 129], "N": 512}') == "M=1,100,129,N=512"
    row = {"run_id": "r", "name": "family e", "status": "FINISHED", "started": "", "hw": "trn1", "dtype": "float32"}
    row |= {"best_latency_us": None, "speedup_vs_unfused": None}
    line = _row_line({**row, "shape": "M=1,100,129,300,1000,1500,2000,N=96,200"})
    assert "M=1,100,129,300,1000,1500,200… float32" in line
    assert "M=64..320:64,N=96,200 " in _row_line({**row, "shape": "M=64..320:64,N=96,200"})
