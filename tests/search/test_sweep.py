"""Sweeps end to end into a temporary MLflow store, checked through the MLflow API."""

from __future__ import annotations

import importlib

import pytest
import yaml

from axon.search.sweep import run_sweep
from axon.target.hardware import CONFIG_DIR
from axon.track import Tracker
from tests.conftest import axon_in_process

pytestmark = pytest.mark.slow


TWO_ENTRIES = ({"workload": "softmax", "preset": "small"}, {"workload": "rmsnorm_matmul", "preset": "small"})


def _config(tmp_path, name="t", hw="trn1", trials=4, entries=TWO_ENTRIES):
    path = tmp_path / f"{name}-{trials}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "hw": [str(hw)],
                "trials": trials,
                "seed": 0,
                "sampler": "costmodel",
                "registered_model": "axon-costmodel-{hw}",
                "entries": list(entries),
            }
        )
    )
    return path


def test_two_workload_sweep_is_tracked_and_registers_a_champion(tmp_path):
    work = tmp_path / "work"
    report = run_sweep(_config(tmp_path), work)
    tracker = Tracker.for_workdir(work)
    parent = tracker.client.get_run(report.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["axon.sweep"] == "t"
    children = tracker.children(report.parent_run_id)
    assert sorted(c.data.params["workload"] for c in children) == ["rmsnorm_matmul", "softmax"]
    for child in children:
        history = tracker.client.get_metric_history(child.info.run_id, "best_latency_us")
        assert len(history) >= 4
        names = {a.path for a in tracker.client.list_artifacts(child.info.run_id)}
        assert {"kernel", "search_trace.csv", "proofs.json", "report.json", "plots"} <= names
    assert {a.path for a in tracker.client.list_artifacts(report.parent_run_id)} >= {"summary.md", "summary.csv"}
    champion = tracker.client.get_model_version_by_alias("axon-costmodel-trn1", "champion")
    assert int(champion.version) == report.model_versions["trn1"]
    assert not report.regressions


def test_a_slower_configuration_is_flagged_as_regression(tmp_path):
    work = tmp_path / "work"
    one = TWO_ENTRIES[:1]  # one workload: the comparison is per row, and every row must be flagged
    first = run_sweep(_config(tmp_path, trials=3, entries=one), work)
    assert not first.regressions
    # the same machine (its file says trn1) with the engines at half clock: every kernel is slower
    slow = yaml.safe_load((CONFIG_DIR / "trn1.yaml").read_text())
    for engine in slow["engines"].values():
        engine["clock_ghz"] /= 2
    slow["dma"]["bytes_per_ns_per_engine"] /= 2
    slow["memory"]["hbm_bandwidth_gbps"] /= 2
    slow_path = tmp_path / "trn1_slow.yaml"
    slow_path.write_text(yaml.safe_dump(slow))
    result = axon_in_process(
        "sweep",
        str(_config(tmp_path, hw=slow_path, trials=3, entries=one)),
        "--workdir",
        str(work),
        "--json",
        "--fail-on-regression",
    )
    assert result.returncode == 3, result.stderr[-2000:]
    import json

    second = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(second["regressions"]) == sorted(r["key"] for r in second["rows"])
    assert len(second["rows"]) == 1


def test_ctrl_c_in_a_sweep_says_what_its_task_wrote_and_that_the_sweep_resumes(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) during a sweep's task checked and wrote its best kernel so far, and printed
    "axon: interrupted" alone: neither the kernel's path nor that the same command resumes the sweep."""
    from axon.search import tuning

    config, work = _config(tmp_path, trials=2, entries=TWO_ENTRIES[:1]), tmp_path / "work"
    search = tuning.Tuner.run

    def search_then_ctrl_c(self):
        search(self)
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(tuning.Tuner, "run", search_then_ctrl_c)
        result = axon_in_process("sweep", str(config), "--workdir", str(work), "--quiet")
    assert result.returncode == 130, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("axon: sweep t: softmax: interrupted; best so far") and "kernel: " in line, line
    assert line.endswith("the same command resumes the sweep"), line
    assert axon_in_process("sweep", str(config), "--workdir", str(work), "--quiet").returncode == 0

    def ctrl_c(*args, **kwargs):  # before any task's tune: while a spec's variants are proved
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(importlib.import_module("axon.cli.tune"), "run_sweep", ctrl_c)
        result = axon_in_process("sweep", str(config), "--workdir", str(work), "--quiet")
    assert result.returncode == 130 and result.stderr.strip().splitlines()[-1] == (
        "axon: sweep t: interrupted; the same command resumes the sweep"
    ), result.stderr
