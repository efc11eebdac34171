"""`axon ui` serves the working directory's runs over MLflow's REST API; `axon runs` lists them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from axon.track import Tracker
from tests.conftest import REPO, run_axon


@pytest.mark.slow
def test_axon_ui_serves_runs_over_rest(tmp_path):
    tracker = Tracker.for_workdir(tmp_path)
    with tracker.run("tune matmul", params={"workload": "matmul"}) as run:
        run.log_metrics({"best_latency_us": 42.0})
    proc = subprocess.Popen(
        [sys.executable, "-m", "axon.cli", "ui", "--workdir", str(tmp_path), "--port", "5917"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        line = proc.stdout.readline()  # printed once the server is healthy
        assert "http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = next(tok for tok in line.split() if tok.startswith("http://"))
        body = json.dumps({"experiment_ids": [tracker.experiment_id], "max_results": 10}).encode()
        req = urllib.request.Request(url + "/api/2.0/mlflow/runs/search", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            found = json.loads(resp.read())["runs"]
        assert [r["info"]["run_id"] for r in found] == [run.run_id]
        metrics = {m["key"]: m["value"] for m in found[0]["data"]["metrics"]}
        assert metrics["best_latency_us"] == 42.0
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=40)  # stop_ui escalates SIGINT, SIGTERM, SIGKILL 5 s apart
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("axon ui did not stop within 40 s of Ctrl-C")
    # the server and every process under it are gone: nothing answers on the port
    deadline = time.time() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
        except OSError:
            break
        assert time.time() < deadline, "the MLflow server still answers 20 s after axon ui was stopped"
        time.sleep(0.5)


def test_stop_ui_stops_children_that_left_the_session(tmp_path):
    """A grandchild in its own session, re-parented when the server exits, is stopped too."""
    from axon.track.cli import _alive, _descendants, stop_ui

    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(120)'],"
        " start_new_session=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.time() + 10
    while not _descendants(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    children = _descendants(proc.pid)
    assert len(children) == 1
    stop_ui(proc)
    assert proc.poll() is not None
    assert not any(_alive(pid) for pid in children)


def test_axon_runs_lists_runs_and_errors_without_store(tmp_path):
    tracker = Tracker.for_workdir(tmp_path)
    with tracker.run("tune rmsnorm", params={"workload": "rmsnorm", "hw": "trn1"}) as run:
        run.log_metrics({"best_latency_us": 7.5})
    result = run_axon("runs", "--workdir", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout.strip().splitlines()[0])
    assert row["workload"] == "rmsnorm" and row["best_latency_us"] == 7.5 and row["status"] == "FINISHED"
    empty = run_axon("runs", "--workdir", str(tmp_path / "nothing"))
    assert empty.returncode == 2 and "no tracking store" in empty.stderr


@pytest.mark.slow
def test_workers_on_one_study_record_into_one_tracking_server(tmp_path):
    """Two `axon tune` workers share an Optuna journal study and log to one MLflow server."""
    from axon.track.cli import start_ui, stop_ui, wait_healthy

    server_dir = tmp_path / "server"
    server_dir.mkdir()
    proc, url = start_ui(server_dir, 5931)
    try:
        wait_healthy(url, proc)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "axon.cli", "tune", "softmax", "--preset", "small", "--trials", "6", "--sampler", "random",
               "--workdir", str(tmp_path / "work"), "--study", "shared", "--tracking-uri", url, "--quiet", "--json"]
        workers = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [w.communicate(timeout=600) for w in workers]
        assert all(w.returncode == 0 for w in workers), [o[1][-800:] for o in outs]
        run_ids = {json.loads(o[0].strip().splitlines()[-1])["run_id"] for o in outs}
        tracker = Tracker(url)
        found = {r.info.run_id for r in tracker.recent_runs(10)}
        assert len(run_ids) == 2 and run_ids <= found
    finally:
        stop_ui(proc)
